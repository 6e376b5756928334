"""The stages of a run, each usable alone against a model directory.

prepare -> train -> average -> evaluate -> export, plus translate. Every stage reads what
earlier ones wrote (config.json, settings.json, spm.model, checkpoints) from the model dir,
so `--mode evaluate --model_dir M` needs nothing else.
"""
from __future__ import annotations

import dataclasses
import pathlib
import sys
import time
from typing import Any, Callable

import keras
import tensorflow as tf

from keras_transformer import TransformerConfig
from pipelines import checkpoints, evaluate, prepare
from pipelines import model_dir as md
from pipelines import vocab as vocab_lib
from pipelines.tasks import Task, get_task

STAGES = ("prepare", "train", "average", "evaluate", "export", "translate")
DEFAULT_STAGES = ("prepare", "train", "average", "evaluate", "export")

# The paper's per-task departures from a preset (Section 6.1: "The Transformer (big) model
# trained for English-to-French used dropout rate P_drop = 0.1, instead of 0.3").
TASK_PRESET_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    ("wmt14_enfr", "big"): {"dropout": 0.1},
}


# The paper's training settings (Section 5): ~25,000 source and target tokens per batch,
# warm-up 4,000 steps, Eq. 3 unscaled; checkpoints every 1,000 steps (~10 min on 8 P100s).
PAPER_TRAINING = {"batch_tokens": 25000, "warmup_steps": 4000, "lr_scale": 1.0,
                  "checkpoint_every": 1000}

# Departures for corpora far smaller than WMT, so that a CPU run finishes in minutes: the
# default job (`python pipelines/run.py`) is Multi30k with these.
TASK_TRAINING_DEFAULTS: dict[str, dict[str, Any]] = {
    "multi30k_ende": {"train_steps": 1000, "batch_tokens": 2048, "warmup_steps": 1000,
                      "checkpoint_every": 100},
}


@dataclasses.dataclass
class RunOptions:
    """Everything a stage may need; `pipelines/run.py` fills it from flags."""

    task: str = "multi30k_ende"
    model_dir: str = "runs/multi30k_ende"
    task_options: dict = dataclasses.field(default_factory=dict)
    preset: str | None = None
    config_overrides: dict = dataclasses.field(default_factory=dict)
    vocab_size: int | None = None
    train_steps: int | None = None      # None: the task's default, else the preset's
    batch_tokens: int | None = None     # None: the task's default, else the paper's
    accumulate_steps: int = 1
    warmup_steps: int | None = None
    lr_scale: float | None = None
    checkpoint_every: int | None = None
    keep_checkpoints: int = 20
    average_last: int = 5
    seed: int = 0
    jit_compile: bool = False
    mixed_precision: bool | None = None  # None: bfloat16 where the CPU has it natively
    steps_per_execution: int = 1
    dev_bleu_every: int = 0
    dev_bleu_sentences: int = 200
    beam_size: int | None = None
    alpha: float | None = None
    extra_length: int | None = None
    eval_split: str = "test"
    eval_sentences: int | None = None
    decode_jit_compile: bool | None = None  # None: XLA unless decoding in bfloat16
    export_dir: str | None = None
    export_version: int | None = None
    overwrite_export: bool = False
    input_file: str | None = None
    output_file: str | None = None
    plot_attention: str | None = None
    verbose: int = 1


def make_task(options: RunOptions) -> Task:
    return get_task(options.task, **options.task_options)


def resolve_config(options: RunOptions, task: Task) -> TransformerConfig:
    """The model config: the saved one if the model dir has it, else preset + overrides.

    The vocabulary size always comes from the trained SentencePiece model.
    """
    path = pathlib.Path(options.model_dir) / md.CONFIG_FILE
    if path.is_file():
        return md.load_config(options.model_dir)
    preset = options.preset or task.preset
    overrides = dict(TASK_PRESET_OVERRIDES.get((task.name, preset), {}))
    overrides.update(options.config_overrides)
    proto = vocab_lib.read_model_proto(prepare.vocab_path(options.model_dir))
    overrides["vocab_size"] = vocab_lib.vocab_size_of(proto)
    overrides.setdefault("max_length", max(task.max_length, task.max_source_length
                                           + task.extra_length + 1))
    return TransformerConfig.preset(preset, **overrides)


def training_settings(options: RunOptions, task: Task, config: TransformerConfig | None = None
                      ) -> dict[str, Any]:
    """train_steps, batch_tokens, warmup_steps, lr_scale, checkpoint_every: each from its
    flag, else the task's default, else the paper's (train_steps: the preset's)."""
    defaults = dict(PAPER_TRAINING, **TASK_TRAINING_DEFAULTS.get(task.name, {}))
    if config is not None:
        defaults.setdefault("train_steps", config.train_steps)
    resolved = {}
    for name, default in defaults.items():
        value = getattr(options, name)
        resolved[name] = default if value is None else value
    return resolved


def decoding(options: RunOptions, task: Task) -> dict[str, Any]:
    """Beam size, alpha and extra length: flags, else the task's defaults (the paper's)."""
    return {"beam_size": options.beam_size or task.beam_size,
            "alpha": task.alpha if options.alpha is None else options.alpha,
            "extra_length": task.extra_length if options.extra_length is None
            else options.extra_length}


def make_translator(model, options: RunOptions, task: Task, jit_compile: bool = False):
    """The task's beam search over `model`: its decoding settings and constraint."""
    proto = vocab_lib.read_model_proto(prepare.vocab_path(options.model_dir))
    return evaluate.make_translator(model, jit_compile=jit_compile,
                                    constraint=task.decoding_constraint(proto),
                                    **decoding(options, task))


def use_bfloat16(options: RunOptions) -> bool:
    """`--mixed_precision`, else True where the CPU multiplies bfloat16 natively."""
    from pipelines.train import native_bfloat16

    return native_bfloat16() if options.mixed_precision is None else options.mixed_precision


def decoding_model(options: RunOptions, log=print):
    """The final model the evaluate and translate stages decode with, and whether to compile
    the search with XLA.

    With bfloat16 (`use_bfloat16`) the model gets bfloat16 weights and is not compiled:
    XLA's CPU backend does not use the bfloat16 hardware (`benchmarks/compare_peers.py`, base
    model, beam 4, batch 8: bfloat16 without XLA 8.4 sentences/s, with XLA 5.9; float32 with
    XLA 7.1). Otherwise float32 with XLA.
    """
    bf16 = use_bfloat16(options)
    jit = (not bf16) if options.decode_jit_compile is None else options.decode_jit_compile
    log(f"decode: {'bfloat16' if bf16 else 'float32'} weights, XLA {'on' if jit else 'off'}")
    return md.load_final_model(options.model_dir, "bfloat16" if bf16 else None), jit


def run_prepare(options: RunOptions, log=print) -> dict:
    task = make_task(options)
    return prepare.prepare(task, options.model_dir, vocab_size=options.vocab_size,
                           batch_tokens=training_settings(options, task)["batch_tokens"],
                           log=log)


def run_train(options: RunOptions, strategy, log=print):
    from pipelines import train as train_lib

    task = make_task(options)
    prepare.ensure_vocab(task, options.model_dir, options.vocab_size, log=log)
    config = resolve_config(options, task)
    md.save_config(options.model_dir, config)
    training = training_settings(options, task, config)
    settings = md.load_settings(options.model_dir)
    flags = {k: v for k, v in dataclasses.asdict(options).items() if k != "task_options"}
    settings.update(task=task.name, task_options=options.task_options, **decoding(options, task),
                    training=dict(flags, **training))
    mixed = use_bfloat16(options)
    settings["training"]["mixed_precision"] = mixed
    md.save_settings(options.model_dir, settings)
    if mixed:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    log(f"train: {'mixed_bfloat16' if mixed else 'float32'} compute"
        + (" (the CPU multiplies bfloat16 natively; --nomixed_precision for float32)"
           if mixed and options.mixed_precision is None else ""))
    log(f"train: config {config.to_dict()}")
    log(f"train: {training}")
    dev_bleu_fn = None
    if options.dev_bleu_every:
        dev_bleu_fn = dev_bleu_evaluator(options, task, log)
    model = train_lib.train(
        task, options.model_dir, config, strategy=strategy,
        accumulate_steps=options.accumulate_steps, keep_checkpoints=options.keep_checkpoints,
        seed=options.seed, jit_compile=options.jit_compile,
        steps_per_execution=options.steps_per_execution, dev_bleu_fn=dev_bleu_fn,
        dev_bleu_every=options.dev_bleu_every, verbose=options.verbose, log=log, **training)
    keras.mixed_precision.set_global_policy("float32")
    return model


def dev_bleu_evaluator(options: RunOptions, task: Task, log=print) -> Callable:
    """`model -> score` on the first `dev_bleu_sentences` dev sentences, beam search: the
    task's metric, sacreBLEU for translation and F1 for parsing."""
    data = prepare.eval_input(task, "dev", options.model_dir, log=log)
    keep = set(range(min(options.dev_bleu_sentences, len(data.sources))))
    batches = [b for b in data.batches if set(b.indices.tolist()) <= keep]
    references = [data.references[i] for b in batches for i in b.indices]
    sources = [data.sources[i] for b in batches for i in b.indices]
    tokenizer = vocab_lib.load_tokenizer(prepare.vocab_path(options.model_dir))

    def dev_bleu(model):
        translate = make_translator(model, options, task)
        texts = []
        for batch in batches:
            ids, _ = translate(tf.constant(batch.source_ids))
            pieces = tf.ragged.constant(evaluate.ids_to_pieces(ids.numpy()), dtype=tf.int32,
                                        ragged_rank=1)
            texts.extend(t.decode("utf-8") for t in tokenizer.detokenize(pieces).numpy())
        if hasattr(task, "score"):
            trees = task.gold_trees("dev", options.model_dir, log=lambda _: None)
            scores = task.score(sources, texts, references,
                                gold_trees=[trees[i] for b in batches for i in b.indices])
            log(f"\ndev F1 {scores['f1']:.2f} on {len(texts)} sentences")
            return scores["f1"]
        score, signature = evaluate.sacre_bleu(texts, references)
        log(f"\ndev BLEU {score:.2f} on {len(texts)} sentences ({signature})")
        return score

    dev_bleu.metric_name = "dev_f1" if hasattr(task, "score") else "dev_bleu"
    return dev_bleu


def run_average(options: RunOptions, log=print):
    model = md.build_model(md.load_config(options.model_dir))
    checkpoints.average_checkpoints(model, options.model_dir, options.average_last, log=log)
    return model


def run_evaluate(options: RunOptions, log=print) -> dict:
    """Translates the eval split with beam search; writes hypotheses and scores."""
    task = make_task(options)
    model, jit = decoding_model(options, log)
    settings = decoding(options, task)
    data = prepare.eval_input(task, options.eval_split, options.model_dir, log=log)
    if options.eval_sentences:
        data = evaluate.first_sentences(data, options.eval_sentences)
    tokenizer = vocab_lib.load_tokenizer(prepare.vocab_path(options.model_dir))
    translate = make_translator(model, options, task, jit_compile=jit)
    start = time.perf_counter()
    hypotheses, _ = evaluate.translate_batches(translate, data.batches, tokenizer,
                                               verbose=options.verbose)
    seconds = time.perf_counter() - start
    scores = task_scores(task, data.sources, hypotheses, data.references,
                         split=options.eval_split, work_dir=options.model_dir)
    extra = {"split": options.eval_split, "sentences": len(hypotheses),
             "decode_seconds": round(seconds, 2), **settings}
    out = evaluate.write_results(options.model_dir, options.eval_split, hypotheses, scores, extra)
    for name, value in scores.items():
        if not name.endswith("signature"):
            signature = scores.get(f"{name}_signature")
            shown = f"{value:,}" if isinstance(value, int) else f"{value:.2f}"
            log(f"{options.eval_split} {name}: {shown}" + (f"  ({signature})"
                                                          if signature else ""))
    log(f"evaluate: {len(hypotheses):,} sentences in {seconds:.1f}s; wrote {out}")
    return scores


def task_scores(task: Task, sources, hypotheses, references, *, split=None,
                work_dir=None) -> dict:
    """The task's metric: its own `score` if it has one (parsing F1), else BLEU.

    `split` and `work_dir` tell a task's `score` where its gold data is (ptb_parsing reads the
    gold trees, with their POS tags, from `<work_dir>/data/ptb_parsing/<split>.trees`).
    """
    if hasattr(task, "score"):
        return task.score(sources, hypotheses, references, split=split, work_dir=work_dir)
    return evaluate.score_translations(hypotheses, references, task.target_lang)


def run_export(options: RunOptions, log=print) -> pathlib.Path:
    from export.saved_model import export_saved_model

    task = make_task(options)
    model = md.load_final_model(options.model_dir)
    proto = vocab_lib.read_model_proto(prepare.vocab_path(options.model_dir))
    export_dir = options.export_dir or str(pathlib.Path(options.model_dir) / md.EXPORT_DIR)
    path = export_saved_model(model, proto, export_dir, version=options.export_version,
                              overwrite=options.overwrite_export, task=task,
                              **decoding(options, task))
    return path


def run_translate(options: RunOptions, log=print) -> list[str]:
    """Translates lines of --input (or stdin) to --output (or stdout), answering as the exported
    model does (a parser writes bracketed trees)."""
    task = make_task(options)
    model, jit = decoding_model(options, log)
    proto = vocab_lib.read_model_proto(prepare.vocab_path(options.model_dir))
    tokenizer = vocab_lib.load_tokenizer(proto)
    source = (pathlib.Path(options.input_file).read_text(encoding="utf-8").splitlines()
              if options.input_file else sys.stdin.read().splitlines())
    from pipelines.dataset import eval_batches

    def strings(tensor) -> list[str]:
        return [t.decode("utf-8") for t in tf.convert_to_tensor(tensor).numpy()]

    source = strings(task.serving_input(tf.constant(source, tf.string)))
    batches = eval_batches(source, tokenizer, max_source_length=task.max_source_length, log=log)
    translate = make_translator(model, options, task, jit_compile=jit)
    hypotheses, _ = evaluate.translate_batches(translate, batches, tokenizer, verbose=0)
    hypotheses = strings(task.serving_output(tf.constant(source, tf.string),
                                             tf.constant(hypotheses, tf.string)))
    text = "".join(h + "\n" for h in hypotheses)
    if options.output_file:
        md.write_text_atomic(options.output_file, text)
    else:
        sys.stdout.write(text)
    if options.plot_attention and source:
        from pipelines.attention_plot import plot_attention

        plot_attention(md.load_final_model(options.model_dir), tokenizer, source[0],
                       options.plot_attention,
                       **decoding(options, task))
        log(f"translate: attention of the first sentence -> {options.plot_attention}")
    return hypotheses

