"""The stages of a run, each usable alone against a model directory.

prepare -> train -> average -> evaluate -> export, plus translate. Every stage takes the
`Recipe` that `pipelines.settings.resolver.resolve` made from the flags and the model directory,
and asks the task for whatever differs between tasks (metric, constraint, in-graph pre- and
post-processing); none tests what kind of task it has.

prepare, train, average and evaluate run under every Keras backend (`ANY_BACKEND_STAGES`)
and are here; export (`pipelines.stages.export`), translate and score
(`pipelines.stages.translate`) run TensorFlow's search and serving graph and are imported
here under their names. What average, evaluate and export made, and from what, is
`pipelines.model_dir.made_from`'s.
"""

import contextlib
import dataclasses
import json
import pathlib
import sys
import time
from typing import Callable, Sequence, TextIO

import keras

from pipelines import Log
from pipelines.data import prepare
from pipelines.data import vocab as vocab_lib
from pipelines.errors import ConfigError, ModelDirError
from pipelines.evaluation import evaluate, results
from pipelines.model_dir import checkpoints
from pipelines.model_dir import init_from as init_lib
from pipelines.model_dir import layout as md
from pipelines.model_dir import made_from
from pipelines.settings import describe
from pipelines.settings.options import Recipe, config_for
from pipelines.stages.export import (OpCheckError, make_translator, run_export,  # noqa: F401
                                     run_export_ctranslate2)
from pipelines.stages.translate import chunk_seed, run_score, run_translate  # noqa: F401
from pipelines.tasks import Task

STAGES = ("prepare", "train", "average", "evaluate", "export", "translate", "score")
ANY_BACKEND_STAGES = ("prepare", "train", "average", "evaluate")
"""The stages that run under every Keras backend (`run.py --backend`; evaluate decodes with
`keras_transformer.decoding.decode` there too); the others serve TensorFlow's graph."""
STARTS_MODEL_DIR = ("prepare", "train")
"""The stages that may start a new model directory; the others need an existing one."""


def check_modes(modes: Sequence[str], given: dict, backend: str, asked: bool) -> list[str]:
    """The stages to run for --mode `modes` (`asked`: given, not the default) under
    `backend`; ConfigError for an unknown stage, one this backend cannot run, or a
    translate-only flag (sampling, --terms), --quantize, --format or an averaging flag without
    its stage."""
    from pipelines.settings.options import SAMPLING_FLAGS

    unknown = [m for m in modes if m not in STAGES]
    if unknown:
        raise ConfigError(f"--mode {','.join(unknown)}: choose from {', '.join(STAGES)}")
    run = list(modes)
    if backend != "tensorflow":
        if not asked:  # the default job: the stages this backend runs
            run = [m for m in run if m in ANY_BACKEND_STAGES]
        later = [m for m in run if m not in ANY_BACKEND_STAGES]
        if later:
            raise ConfigError(f"--mode {later[0]}: runs TensorFlow's serving graph; under "
                              f"--backend {backend} run {','.join(ANY_BACKEND_STAGES)}, then "
                              f"--mode {','.join(later)} without --backend")
    sampling = [name for name in SAMPLING_FLAGS if name in given]
    if sampling and "translate" not in modes:
        raise ConfigError(f"--{sampling[0]}: only --mode translate samples")
    if "terms" in given and "translate" not in modes:
        raise ConfigError("--terms: only --mode translate takes required phrases")
    if "terms" in given and sampling:
        raise ConfigError(f"--terms: beam search only; drop --{sampling[0]} (sampling does "
                          "not take required phrases)")
    if "quantize" in given and not {"export", "translate"} & set(modes):
        raise ConfigError("--quantize: only --mode export and translate use it (evaluate "
                          "decodes the weights as trained)")
    if "format" in given and "export" not in modes:
        raise ConfigError("--format: only --mode export writes one")
    averaging = [name for name in ("average_checkpoints", "average_output") if name in given]
    if averaging and "average" not in modes:
        raise ConfigError(f"--{averaging[0]}: only --mode average writes an average (then "
                          f"decode it with --checkpoint FILE.weights.h5)")
    output = given.get("average_output")
    if output is not None and not output.endswith(md.WEIGHTS_SUFFIX):
        raise ConfigError(f"--average_output {output}: name a {md.WEIGHTS_SUFFIX} file (Keras "
                          f"writes weights only there)")
    return run


def writes(stage: str, options: Recipe) -> bool:
    """Whether `stage` writes files, so that its run must hold the model dir's lock
    (`pipelines.model_dir.lock`): every stage but score, and translate only with --output (or
    --plot_attention); translating to stdout reads the model dir and nothing else."""
    if stage == "score":
        return False
    if stage == "translate":
        return bool(options.io.output or options.io.plot_attention)
    return True


def model_dir_lock(modes: Sequence[str], options: Recipe):
    """The context a run of the stages `modes` runs in: holding the model dir's lock
    (`pipelines.model_dir.lock.hold`) when one of them writes and this process is the chief (the
    only one of a multi-worker cluster that writes the model dir), else nothing.

    Raises (on entering):
        ModelDirLocked: another run holds the lock.
    """
    from pipelines.model_dir import lock
    from pipelines.training import devices

    if not (devices.is_chief() and any(writes(stage, options) for stage in modes)):
        return contextlib.nullcontext()
    return lock.hold(options.model_dir,
                     create=any(stage in STARTS_MODEL_DIR for stage in modes))


def _record_settings(options: Recipe, *, trained: bool) -> None:
    """Writes what this run decided into settings.json (see `pipelines.settings.options`), with the
    vocabulary's digest, which later stages check the model dir's spm.model against."""
    settings = md.load_settings(options.model_dir)
    kept = settings.get("decoding")  # a trained model's defaults; a flag decodes its run only
    settings.update(options.settings(trained=trained))
    if kept and "decoding" in settings:
        settings["decoding"] = {**settings["decoding"], **kept}
    proto = vocab_lib.read_model_proto(prepare.vocab_path(options.model_dir))
    settings["spm_sha256"] = vocab_lib.model_digest(proto)
    md.save_settings(options.model_dir, settings)


def run_prepare(options: Recipe, log: Log = print) -> dict:
    task = options.make_task()
    log(describe.describe_task(options, task))
    if options.init is not None:  # fine-tuning: the source's vocabulary, never a new one
        init_lib.copy_vocabulary(options.init, options.model_dir, log)
    # Training files, vocabulary and batch budget are bound once trained: a resumed run's
    # tables are the ones its first run printed.
    resumed = md.has_weights(options.model_dir)
    report = prepare.prepare(task, options.model_dir, vocab_size=options.data.vocab_size,
                             batch_tokens=options.training.batch_tokens, tables=not resumed,
                             log=log)
    if resumed:
        log(f"prepare: the corpus and bucket tables are the ones the model's first run "
            f"printed ({report['batches_per_epoch']:,} batches per pass over the data)")
    if options.init is not None:
        clean = prepare.clean_split(task, "train", options.model_dir, log=log)
        init_lib.report_coverage(options.init, prepare.vocab_path(options.model_dir).read_bytes(),
                                 [clean.source_path, clean.target_path], log)
    _record_settings(options, trained=resumed)
    return report


def run_train(options: Recipe, strategy, log: Log = print):
    from pipelines.training import devices
    from pipelines.training import train as train_lib

    task = options.make_task()
    if options.training.dev_metric_every and not task.has_split("dev"):
        raise ConfigError("--dev_metric_every needs a dev split: give its files (e.g. "
                          "--dev_src/--dev_tgt, --dev_trees) or drop the flag")
    # Under MultiWorkerMirroredStrategy only the chief writes the model dir; the other
    # workers compute the same config and write only below workers/ (their checkpoints).
    chief = devices.is_chief(strategy)
    if not chief and not prepare.vocab_path(options.model_dir).is_file():
        raise ModelDirError(f"{options.model_dir} is not prepared: run --mode prepare once "
                            f"before starting the workers (only the chief writes it)")
    init = options.init if options.init is not None and options.init.pending else None
    if init is not None and chief:
        init_lib.copy_vocabulary(init, options.model_dir, log)
    proto = prepare.ensure_vocab(task, options.model_dir, options.data.vocab_size, log=log)
    if md.has_weights(options.model_dir):  # resuming: the config the weights were made with
        config = md.load_config(options.model_dir)
    else:  # fine-tuning: the source's model, exactly; else the recipe's
        config = (init.config if init is not None
                  else config_for(options, task, vocab_lib.vocab_size_of(proto)))
        if chief:
            md.save_config(options.model_dir, config)
    if chief:
        _record_settings(options, trained=True)
    training = options.training
    keras.mixed_precision.set_global_policy(training.precision_policy)
    log(describe.describe_model(options, config))
    short = describe.describe_short_run(options)
    if short:
        log(short)
    dev_metric = (dev_metric_evaluator(options, task, config.max_length, log)
                  if training.dev_metric_every else None)
    try:
        return train_lib.train(task, options.model_dir, config, training, strategy=strategy,
                               dev_metric_fn=dev_metric, verbose=options.verbose, log=log,
                               initialise=init and init_lib.initialiser(init, log),
                               initial_step=options.init.step if options.init else 0)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def dev_metric_evaluator(options: Recipe, task: Task, max_length: int, log: Log = print
                         ) -> Callable:
    """`model -> score`: the task's metric (`task.metric_name`) on exactly the first
    `dev_metric_sentences` dev sentences (all for 0), decoded as the evaluate stage does."""
    data, tokenizer, constraint = _eval_inputs(
        options, task, "dev", max_length, options.training.dev_metric_sentences, log)

    def dev_metric(model):  # float32 weights (bfloat16 compute when mixed): decoded as is
        translate = evaluate.make_translator(model, options.decoding.beam, constraint=constraint)
        texts, _ = evaluate.translate_batches(translate, data.batches, tokenizer, verbose=0)
        scores = task.score(data.sources, texts, data.references, split="dev",
                            work_dir=options.model_dir)
        log(f"\ndev {task.metric_name} {scores[task.metric_name]:.2f} on {len(texts):,} "
            f"sentences")
        return scores[task.metric_name]

    dev_metric.metric_name = f"dev_{task.metric_name}"
    return dev_metric


def _eval_inputs(options: Recipe, task: Task, split: str, max_length: int, count: int,
                 log: Log):
    """(the first `count` sentences of `split`, 0: all; the tokenizer; the task's decoding
    constraint) for a model of `max_length` positions."""
    vocab = prepare.vocab_path(options.model_dir)
    data = prepare.eval_input(task, split, options.model_dir,
                              max_source_length=options.decoding.input_length(max_length),
                              log=log)
    return (evaluate.first_sentences(data, count), vocab_lib.load_tokenizer(vocab),
            task.decoding_constraint(vocab.read_bytes()))


def run_average(options: Recipe, log: Log = print):
    """Averages the --average_last checkpoints (or the best by dev metric) into
    final.weights.h5, or the chosen ones (--average_checkpoints) into a file of their own."""
    t, chosen, state = options.training, options.average.checkpoints, md.checkpoint_dir(
        options.model_dir)
    out = pathlib.Path(options.average.output or (
        md.average_weights(options.model_dir, chosen) if chosen
        else md.final_weights(options.model_dir)))
    final = out == md.final_weights(options.model_dir)
    inputs = {"checkpoints": made_from.content_identity(options,
        [p for p in (state / "checkpoint", state / checkpoints.METRIC_LOG) if p.exists()]),
        "average_last": t.average_last, "keep_best_by": t.keep_best_by,
        **({} if final else {"chosen": list(chosen), "output": made_from.relative(options, out)})}
    record = "average" if final else f"average_{out.name}"
    if made_from.up_to_date(options, record, inputs):
        log(f"average: {out} is up to date (no checkpoint since); nothing to do")
        return
    model = md.build_model(md.load_config(options.model_dir))
    checkpoints.average_checkpoints(model, state, out, t.average_last,
                                    keep_best_by=t.keep_best_by, log=log, chosen=chosen)
    made_from.record(options, record, inputs, out)


def run_evaluate(options: Recipe, log: Log = print, out: TextIO | None = None) -> dict:
    """Translates the eval split with beam search; writes hypotheses and scores, and prints
    the scores to `out` (default stdout)."""
    task, evaluation = options.eval_task(), options.evaluation
    split, decoding = evaluation.split, options.decoding
    # Under another backend the search is always compiled (jax.jit).
    jit = options.evaluation.jit_compile or keras.backend.backend() != "tensorflow"
    inputs = {"weights": made_from.weights_identity(options),
              "decoding": decoding.record(), "split": split,
              "sentences": options.evaluation.sentences, "jit_compile": jit,
              "data": json.loads(json.dumps(dataclasses.asdict(options.data), default=str))}
    result = results.result_name(
        split, inputs["decoding"], md.load_settings(options.model_dir).get("decoding"),
        sentences=evaluation.sentences, checkpoint=evaluation.checkpoint,
        files=[path for _, path in sorted(evaluation.test_files.items())
               if split == "test"])
    done = made_from.up_to_date(options, f"evaluate_{result}", inputs)
    if done:
        log(f"evaluate: {done['product']} is up to date (the same weights and decoding "
            f"settings); its scores:")
        print("".join(done["printed"]), end="", file=out or sys.stdout, flush=True)
        return done["scores"]
    model = md.load_final_model(options.model_dir, decoding.precision,
                                options.evaluation.checkpoint, log=log)
    log(f"evaluate: {describe.describe_decoding(options)}, XLA {'on' if jit else 'off'}")
    data, tokenizer, constraint = _eval_inputs(options, task, split, model.config.max_length,
                                               options.evaluation.sentences, log)
    translate = evaluate.make_translator(model, decoding.beam, jit_compile=jit,
                                         constraint=constraint)
    start = time.perf_counter()
    hypotheses, _ = evaluate.translate_batches(translate, data.batches, tokenizer,
                                               verbose=options.verbose)
    seconds = time.perf_counter() - start
    scores = task.score(data.sources, hypotheses, data.references, split=split,
                        work_dir=options.model_dir)
    extra = {"split": split, "sentences": len(hypotheses), "decode_seconds": round(seconds, 2),
             "decoding": decoding.record()}
    written = evaluate.write_results(options.model_dir, result, hypotheses, scores, extra)
    printed = []
    for name, value in scores.items():
        if not name.endswith("signature"):
            signature = scores.get(f"{name}_signature")
            shown = f"{value:,}" if isinstance(value, int) else f"{value:.2f}"
            printed.append(f"{split} {name}: {shown}" + (f"  ({signature})" if signature else "")
                           + "\n")
    print("".join(printed), end="", file=out or sys.stdout, flush=True)
    index = results.update_index(options.model_dir, result, {
        k: v for k, v in extra.items() if k != "decode_seconds"} | {"scores": scores})
    made_from.record(options, f"evaluate_{result}", inputs, written / f"{result}.json",
                     scores=scores, printed=printed)  # last: marks the result complete
    log(f"evaluate: {len(hypotheses):,} sentences in {seconds:.1f}s; wrote "
        f"{written / result}.json and .hyp (every result: {index})")
    return scores


