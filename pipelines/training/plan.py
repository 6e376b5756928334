"""The plan of a run given a time budget (`--time_budget 30m`): the steps that fit, from a short
probe's times, so that the whole run ends within the budget (docs/data.md). Made again once
prepared and recorded in the model dir, so a resumed run and a copied dir train the same steps.
"""

import dataclasses
import pathlib
import statistics
import time

import keras
import numpy as np

from keras_transformer.constants import BOS_ID, EOS_ID
from keras_transformer.decoding import BeamSearch
from keras_transformer.model_dir import VOCAB_FILE
from pipelines import Log
from pipelines.data.packing import PAIRS_PER_ROW, ROW_MULTIPLE
from pipelines.durations import format_duration
from pipelines.errors import ConfigError
from pipelines.model_dir import layout as md
from pipelines.model_dir.files import count_lines
from pipelines.settings.options import Recipe, config_for

PROBE_STEPS, PROBE_WARMUP_STEPS, PROBE_SENTENCES = 12, 3, 32
MIN_CHECKPOINT_STEPS = 10
"""The smallest run: each of the family's checkpoints at least this many steps apart."""
DEV_DECODES = 8
"""The dev choice's decodes (pipelines/stages/choose.py), in decodes of the recipe's beam."""
FIXED_SECONDS = 45.0
"""Averaging, the export and its op check, and the decodes' start-up (docs/data.md)."""
STEP_OVERHEAD = 1.12
"""The training loop's steps against the probe's: callbacks, the real input pipeline, the
validation passes (docs/data.md)."""
PREPARE_SECONDS_PER_PAIR = 1e-3
"""The prepare stage's time for the refusal, before it has run (generous)."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """Seconds a training step, the first step (compiling) and a decoded sentence."""

    step: float
    first_step: float
    sentence: float


def probe(options: Recipe, task, strategy, log: Log = print) -> Probe:
    """Times the recipe's training step and decoding on a fresh model (discarded)."""
    from pipelines.evaluation import evaluate
    from pipelines.training import train as train_lib

    t = options.training
    config = config_for(options, options.data.vocab_size)
    keras.mixed_precision.set_global_policy(t.precision_policy)
    try:
        model = train_lib.compile_model(config, strategy, dataclasses.replace(
            t, accumulate_steps=1, steps_per_execution=1, clip_norm=0.0))
        times = []
        timer = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda *_, **__: times.append(time.perf_counter()))
        start = time.perf_counter()
        model.fit(_batches(task, t, config.vocab_size), epochs=1, verbose=0, callbacks=[timer],
                  steps_per_epoch=PROBE_WARMUP_STEPS + PROBE_STEPS)
        steps = np.diff(times)[PROBE_WARMUP_STEPS - 1:]
        length = _pair_tokens(task)
        search = BeamSearch(beam_size=options.decoding.beam.beam_size, extra_length=0)
        decode_model = md.build_model(config, dtype=options.decoding.precision)
        translate = evaluate.make_translator(decode_model, search,
                                             jit_compile=options.evaluation.jit_compile)
        sources = _ids(PROBE_SENTENCES, length, config.vocab_size)
        translate(sources)  # traced and compiled
        began = time.perf_counter()
        translate(sources)
        sentence = (time.perf_counter() - began) / PROBE_SENTENCES
    finally:
        keras.mixed_precision.set_global_policy("float32")
    measured = Probe(float(statistics.median(steps)), times[0] - start, sentence)
    log(f"plan: probe: {measured.step:.3f} s a training step ({measured.first_step:.1f} s "
        f"the first), {1000 * measured.sentence:.1f} ms a decoded sentence")
    keras.utils.set_random_seed(t.seed)  # the run draws as if no probe had run
    return measured


def _pair_tokens(task) -> int:
    """A typical sentence's tokens on the longer side, EOS included."""
    from pipelines.tasks.corpus_recipe import PIECES_PER_WORD

    return max(2, int(round(PIECES_PER_WORD * task.size.words_per_line + 1)))


def _ids(rows: int, length: int, vocab_size: int) -> np.ndarray:
    ids = np.random.default_rng(0).integers(4, vocab_size, (rows, length)).astype("int32")
    ids[:, -1] = EOS_ID
    return ids


def _batches(task, t, vocab_size: int):
    """A repeated synthetic batch of the recipe's shape within `t.batch_tokens` a side."""
    import tensorflow as tf

    pair = _pair_tokens(task)
    if not t.pack:
        length = -(-pair // ROW_MULTIPLE) * ROW_MULTIPLE
        source = _ids(max(1, t.batch_tokens // length), length, vocab_size)
        target_in = np.concatenate([np.full((len(source), 1), BOS_ID, "int32"), source[:, :-1]], 1)
        return tf.data.Dataset.from_tensors(((source, target_in), source)).repeat()
    row = -(-PAIRS_PER_ROW * pair // ROW_MULTIPLE) * ROW_MULTIPLE
    rows = max(1, t.batch_tokens // row)
    positions = np.tile(np.arange(row) % pair, (rows, 1)).astype("int32")
    segments = np.tile(np.minimum(np.arange(row) // pair + 1, PAIRS_PER_ROW), (rows, 1))
    ids = _ids(rows, row, vocab_size)
    inputs = {"source_ids": ids, "target_in_ids": ids, "source_segments": segments,
              "target_segments": segments, "source_positions": positions,
              "target_positions": positions}
    return tf.data.Dataset.from_tensors((inputs, ids)).repeat()


@dataclasses.dataclass(frozen=True)
class Plan:
    """The steps that fit a budget, and the settings that follow them (seconds from the start)."""

    budget: float
    settings: dict         # train_steps, warmup_steps, checkpoint_every (and lr_scale)
    eta: float
    capped: bool           # the corpus's passes, not the budget, set the steps
    probe: Probe

    def describe(self, family: str) -> str:
        s = self.settings
        cap = " (as many passes as any measured run: it stops before the budget)" \
            if self.capped else ""
        return (f"plan: {format_duration(self.budget)} budget: the {family} recipe, "
                f"{s['train_steps']:,} steps of {self.probe.step:.3f} s{cap}, warm-up "
                f"{s['warmup_steps']:,}, a checkpoint every {s['checkpoint_every']:,}; ETA "
                f"{format_duration(self.eta)} for the whole run")


def make_plan(task, probe_: Probe, elapsed: float, sentences: tuple[int, int]) -> Plan:
    """The plan for `task`, `elapsed` seconds into the run, decoding `sentences` (dev, test)
    after training; ConfigError if the smallest run does not fit."""
    family, budget = task.family, task.budget
    dev, test = sentences
    step = probe_.step * STEP_OVERHEAD
    after = FIXED_SECONDS + probe_.sentence * (dev * DEV_DECODES + test)
    # Each checkpoint: a validation pass (about a third of a step's time a batch), the save.
    per_checkpoint = 1.0 + step * dev * _pair_tokens(task) / family.fixed["batch_tokens"] / 3
    fixed = elapsed + probe_.first_step + after + family.checkpoints * per_checkpoint
    smallest = family.checkpoints * MIN_CHECKPOINT_STEPS
    steps = (budget - fixed) / step
    if steps < smallest:
        needed = fixed + smallest * step
        raise ConfigError(
            f"--time_budget {format_duration(budget)}: too short for the {family.name} recipe "
            f"here ({step:.2f} s a step, {family.checkpoints} checkpoints of at least "
            f"{MIN_CHECKPOINT_STEPS} steps, about {format_duration(fixed)} for the rest of the "
            f"run); the shortest budget that works is about {format_duration(needed * 1.05)}")
    capped = steps > task.max_steps
    settings = family.for_steps(min(steps, task.max_steps))
    if settings["train_steps"] > steps:  # rounding to whole checkpoints: never past the budget
        settings = family.for_steps(steps - family.checkpoints * family.checkpoint_round)
    eta = fixed + settings["train_steps"] * step
    return Plan(budget, settings, eta, capped, probe_)


def dev_and_test_sentences(task) -> tuple[int, int]:
    """The lines the dev choice and the evaluation decode (0 for a split the task lacks)."""
    counts = []
    for split in ("dev", "test"):
        files = [tgt for name, src, tgt in task.files if name == split and src and tgt]
        try:
            counts.append(count_lines(files[0]) if files else 0)
        except OSError:
            counts.append(0)
    return counts[0], counts[1]


def needs_plan(options: Recipe, modes) -> bool:
    """Whether this run trains a --time_budget model dir that has no plan (and no weights) yet."""
    return bool(options.data.task_options.get("time_budget") and "train" in modes
                and not md.load_plan(options.model_dir) and not md.has_weights(options.model_dir))


def check_budget(options: Recipe, modes, elapsed: float, log: Log = print) -> Probe:
    """Probes (nothing written) and refuses a budget the smallest run does not fit, `elapsed`
    seconds and the prepare stage still to come counted; returns the probe."""
    from pipelines.training import devices

    task = options.task
    measured = probe(options, task, devices.make_strategy(options.training.jit_compile), log)
    if "prepare" in modes:  # little once prepared
        prepared = (pathlib.Path(options.model_dir) / VOCAB_FILE).is_file()
        elapsed += 5.0 if prepared else PREPARE_SECONDS_PER_PAIR * task.size.pairs
    make_plan(task, measured, elapsed, dev_and_test_sentences(task))  # raises if too short
    return measured


def plan_training(options: Recipe, measured: Probe, elapsed: float, log: Log = print) -> Plan:
    """The plan `elapsed` seconds into the run, recorded (the resolver reads it back) and logged."""
    task = options.task
    plan = make_plan(task, measured, elapsed, dev_and_test_sentences(task))
    md.save_plan(options.model_dir, {
        "budget": plan.budget, "settings": plan.settings, "eta": plan.eta, "capped": plan.capped,
        "probe": dataclasses.asdict(plan.probe), "planned_at": elapsed})
    log(plan.describe(task.family.name))
    return plan
