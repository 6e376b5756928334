"""The stages of a run, each usable alone against a model directory.

prepare -> train -> average -> evaluate -> export, plus translate. Every stage takes the
`RunOptions` that `pipelines.options.resolve` made from the flags and the model directory,
and asks the task for whatever differs between tasks (metric, constraint, in-graph pre- and
post-processing); none tests what kind of task it has.

prepare, train, average and evaluate run under every Keras backend (`ANY_BACKEND_STAGES`);
export, translate and score run TensorFlow's search and serving graph, imported where they
run, so that this module imports under JAX too.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import pathlib
import sys
import time
from typing import TYPE_CHECKING, Callable, Sequence, TextIO

import keras
import tensorflow as tf

from export import text
from pipelines import Log
from pipelines import checkpoints, evaluate, prepare
from pipelines import init_from as init_lib
from pipelines import model_dir as md
from pipelines import vocab as vocab_lib
from pipelines.errors import ConfigError, DataError, ModelDirError
from pipelines.files import atomic_files, input_identity, read_manifest, write_json_atomic
from pipelines.options import RunOptions, config_for
from pipelines.progress import Progress
from pipelines.tasks import Task
from pipelines.text_io import iter_lines

if TYPE_CHECKING:
    from export.translator import Translator

STAGES = ("prepare", "train", "average", "evaluate", "export", "translate", "score")
DEFAULT_STAGES = ("prepare", "train", "average", "evaluate", "export")
ANY_BACKEND_STAGES = ("prepare", "train", "average", "evaluate")
"""The stages that run under every Keras backend (`run.py --backend`; evaluate decodes with
`keras_transformer.decoding.decode` there too); the others serve TensorFlow's graph."""
TRANSLATE_CHUNK = 32
"""Sentences the translate stage decodes at a time (it streams its input in such chunks)."""
STARTS_MODEL_DIR = ("prepare", "train")
"""The stages that may start a new model directory; the others need an existing one."""


def writes(stage: str, options: RunOptions) -> bool:
    """Whether `stage` writes files, so that its run must hold the model dir's lock
    (`pipelines.lock`): every stage but score, and translate only with --output (or
    --plot_attention); translating to stdout reads the model dir and nothing else."""
    if stage == "score":
        return False
    if stage == "translate":
        return bool(options.io.output or options.io.plot_attention)
    return True


def model_dir_lock(modes: Sequence[str], options: RunOptions):
    """The context a run of the stages `modes` runs in: holding the model dir's lock
    (`pipelines.lock.hold`) when one of them writes and this process is the chief (the only
    one of a multi-worker cluster that writes the model dir), else nothing.

    Raises (on entering):
        ModelDirLocked: another run holds the lock.
    """
    from pipelines import lock
    from pipelines import train as train_lib

    if not (train_lib.is_chief() and any(writes(stage, options) for stage in modes)):
        return contextlib.nullcontext()
    return lock.hold(options.model_dir,
                     create=any(stage in STARTS_MODEL_DIR for stage in modes))


def _record_settings(options: RunOptions, *, trained: bool) -> None:
    """Writes what this run decided into settings.json (see `pipelines.options`), with the
    vocabulary's digest, which later stages check the model dir's spm.model against."""
    settings = md.load_settings(options.model_dir)
    settings.update(options.settings(trained=trained))
    proto = vocab_lib.read_model_proto(prepare.vocab_path(options.model_dir))
    settings["spm_sha256"] = vocab_lib.model_digest(proto)
    md.save_settings(options.model_dir, settings)


def run_prepare(options: RunOptions, log: Log = print) -> dict:
    task = options.make_task()
    if options.init is not None:  # fine-tuning: the source's vocabulary, never a new one
        init_lib.copy_vocabulary(options.init, options.model_dir, log)
    report = prepare.prepare(task, options.model_dir, vocab_size=options.data.vocab_size,
                             batch_tokens=options.training.batch_tokens, log=log)
    if options.init is not None:
        clean = prepare.clean_split(task, "train", options.model_dir, log=log)
        init_lib.report_coverage(options.init, prepare.vocab_path(options.model_dir).read_bytes(),
                                 [clean.source_path, clean.target_path], log)
    _record_settings(options, trained=md.has_weights(options.model_dir))
    return report


def run_train(options: RunOptions, strategy, log: Log = print):
    from pipelines import train as train_lib

    task = options.make_task()
    if options.training.dev_metric_every and not task.has_split("dev"):
        raise ConfigError("--dev_metric_every needs a dev split: give its files (e.g. "
                          "--dev_src/--dev_tgt, --dev_trees) or drop the flag")
    # Under MultiWorkerMirroredStrategy only the chief writes the model dir; the other
    # workers compute the same config and write only below workers/ (their checkpoints).
    chief = train_lib.is_chief(strategy)
    if not chief and not prepare.vocab_path(options.model_dir).is_file():
        raise ModelDirError(f"{options.model_dir} is not prepared: run --mode prepare once "
                            f"before starting the workers (only the chief writes it)")
    init = options.init if options.init is not None and options.init.pending else None
    if init is not None and chief:
        init_lib.copy_vocabulary(init, options.model_dir, log)
    proto = prepare.ensure_vocab(task, options.model_dir, options.data.vocab_size, log=log)
    if md.has_weights(options.model_dir):  # resuming: the config the weights were made with
        config = md.load_config(options.model_dir)
    elif init is not None:  # fine-tuning: the source's model, exactly
        config = init.config
        if chief:
            md.save_config(options.model_dir, config)
    else:
        config = config_for(options, task, vocab_lib.vocab_size_of(proto))
        if chief:
            md.save_config(options.model_dir, config)
    if chief:
        _record_settings(options, trained=True)
    training = options.training
    keras.mixed_precision.set_global_policy(training.precision_policy)
    log(f"train: config {config.to_dict()}")
    log(f"train: {training}")
    dev_metric = (dev_metric_evaluator(options, task, config.max_length, log)
                  if training.dev_metric_every else None)
    try:
        return train_lib.train(task, options.model_dir, config, training, strategy=strategy,
                               dev_metric_fn=dev_metric, verbose=options.verbose, log=log,
                               initialise=init and init_lib.initialiser(init, log),
                               initial_step=options.init.step if options.init else 0)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def dev_metric_evaluator(options: RunOptions, task: Task, max_length: int, log: Log = print
                         ) -> Callable:
    """`model -> score`: the task's metric (`task.metric_name`) on exactly the first
    `dev_metric_sentences` dev sentences (all for 0), decoded as the evaluate stage does."""
    count = options.training.dev_metric_sentences
    data = evaluate.first_sentences(
        prepare.eval_input(task, "dev", options.model_dir,
                           max_source_length=options.decoding.input_length(max_length), log=log),
        count)
    tokenizer = vocab_lib.load_tokenizer(prepare.vocab_path(options.model_dir))
    constraint = task.decoding_constraint(prepare.vocab_path(options.model_dir).read_bytes())
    # Training weights are float32 (bfloat16 compute under mixed precision): decode as is.
    settings = options.decoding

    def dev_metric(model):
        translate = evaluate.make_translator(model, settings, constraint=constraint)
        texts, _ = evaluate.translate_batches(translate, data.batches, tokenizer, verbose=0)
        scores = task.score(data.sources, texts, data.references, split="dev",
                            work_dir=options.model_dir)
        log(f"\ndev {task.metric_name} {scores[task.metric_name]:.2f} on {len(texts):,} "
            f"sentences")
        return scores[task.metric_name]

    dev_metric.metric_name = f"dev_{task.metric_name}"
    return dev_metric


RECORD_VERSION = 1
"""Format of `<model_dir>/made_from/<stage>.json`: what a stage's product was made from."""


def _record_path(options: RunOptions, name: str) -> pathlib.Path:
    return pathlib.Path(options.model_dir) / "made_from" / f"{name}.json"


def _up_to_date(options: RunOptions, name: str, inputs: dict) -> dict | None:
    """The record of stage `name`'s last product if it was made from `inputs` and still
    exists: a rerun with nothing changed then does not do the work again."""
    record = read_manifest(_record_path(options, name), RECORD_VERSION, inputs)
    return record if record is not None and pathlib.Path(record["product"]).exists() else None


def _record(options: RunOptions, name: str, inputs: dict, product, **extra) -> None:
    write_json_atomic(_record_path(options, name), {"version": RECORD_VERSION, "inputs": inputs,
                                                    "product": str(product), **extra})


def _weights_identity(options: RunOptions) -> list:
    """What the model decoded with is made from: the final weights (or the named checkpoint)
    and the checkpoint state (a newer checkpoint may be used where no final weights are)."""
    name, state = options.evaluation.checkpoint, md.checkpoint_dir(options.model_dir)
    weights = md.final_weights(options.model_dir) if name is None else state / f"{name}.index"
    return input_identity([p for p in (weights, state / "checkpoint") if p.exists()])


def run_average(options: RunOptions, log: Log = print):
    t, state = options.training, md.checkpoint_dir(options.model_dir)
    inputs = {"checkpoints": input_identity(
        [p for p in (state / "checkpoint", state / checkpoints.METRIC_LOG) if p.exists()]),
        "average_last": t.average_last, "keep_best_by": t.keep_best_by}
    final = md.final_weights(options.model_dir)
    if _up_to_date(options, "average", inputs):
        log(f"average: {final} is up to date (no checkpoint since); nothing to do")
        return
    model = md.build_model(md.load_config(options.model_dir))
    checkpoints.average_checkpoints(model, state, final, t.average_last,
                                    keep_best_by=t.keep_best_by, log=log)
    _record(options, "average", inputs, final)


def run_evaluate(options: RunOptions, log: Log = print, out: TextIO | None = None) -> dict:
    """Translates the eval split with beam search; writes hypotheses and scores, and prints
    the scores to `out` (default stdout)."""
    task = options.make_task()
    split, decoding = options.evaluation.split, options.decoding
    # Under another backend the search is always compiled (jax.jit).
    jit = options.evaluation.jit_compile or keras.backend.backend() != "tensorflow"
    inputs = {"weights": _weights_identity(options), "decoding": dataclasses.asdict(decoding),
              "split": split, "sentences": options.evaluation.sentences, "jit_compile": jit,
              "data": json.loads(json.dumps(dataclasses.asdict(options.data), default=str))}
    done = _up_to_date(options, f"evaluate_{split}", inputs)
    if done:
        log(f"evaluate: {done['product']} is up to date (the same weights and decoding "
            f"settings); its scores:")
        print("".join(done["printed"]), end="", file=out or sys.stdout, flush=True)
        return done["scores"]
    model = md.load_final_model(options.model_dir, decoding.precision,
                                options.evaluation.checkpoint, log=log)
    log(f"evaluate: {decoding}, XLA {'on' if jit else 'off'}")
    data = evaluate.first_sentences(
        prepare.eval_input(task, split, options.model_dir,
                           max_source_length=decoding.input_length(model.config.max_length),
                           log=log),
        options.evaluation.sentences)
    tokenizer = vocab_lib.load_tokenizer(prepare.vocab_path(options.model_dir))
    translate = evaluate.make_translator(
        model, decoding, jit_compile=jit,
        constraint=task.decoding_constraint(prepare.vocab_path(options.model_dir).read_bytes()))
    start = time.perf_counter()
    hypotheses, _ = evaluate.translate_batches(translate, data.batches, tokenizer,
                                               verbose=options.verbose)
    seconds = time.perf_counter() - start
    scores = task.score(data.sources, hypotheses, data.references, split=split,
                        work_dir=options.model_dir)
    extra = {"split": split, "sentences": len(hypotheses), "decode_seconds": round(seconds, 2),
             "decoding": dataclasses.asdict(decoding)}
    written = evaluate.write_results(options.model_dir, split, hypotheses, scores, extra)
    printed = []
    for name, value in scores.items():
        if not name.endswith("signature"):
            signature = scores.get(f"{name}_signature")
            shown = f"{value:,}" if isinstance(value, int) else f"{value:.2f}"
            printed.append(f"{split} {name}: {shown}" + (f"  ({signature})" if signature else "")
                           + "\n")
    print("".join(printed), end="", file=out or sys.stdout, flush=True)
    _record(options, f"evaluate_{split}", inputs, written / f"{split}.json", scores=scores,
            printed=printed)
    log(f"evaluate: {len(hypotheses):,} sentences in {seconds:.1f}s; wrote {written}")
    return scores


def make_translator(options: RunOptions, task: Task, log: Log = print) -> Translator:
    """The serving functions of the model dir's final model: what the export stage writes,
    and what the translate stage runs, with the same settings, precision and weights (with
    --quantize int8: int8 matrices quantized from the float32 weights)."""
    from export.quantize import Int8Weights
    from export.translator import Translator

    def load(precision):
        return md.load_final_model(options.model_dir, precision, options.evaluation.checkpoint,
                                   log=log)

    model = load(options.decoding.precision)
    weights = None
    if options.export.quantize:  # rounded once, from the float32 weights
        source = model if options.decoding.precision == "float32" else load("float32")
        weights = Int8Weights(model, source)
    proto = prepare.vocab_path(options.model_dir).read_bytes()
    return Translator(model, proto, options.decoding, jit_compile=options.export.jit_compile,
                      constraint=task.decoding_constraint(proto),
                      preprocess=task.serving_input, postprocess=task.serving_output,
                      weights=weights)


class OpCheckError(RuntimeError):
    """The exported graph uses an op stock TensorFlow Serving does not register."""


def run_export(options: RunOptions, log: Log = print) -> pathlib.Path:
    """Writes `<export_dir>/<version>/` and checks its ops (see export/README.md)."""
    from export.op_check import check_ops
    from export.saved_model import write_translator
    from export.translator import ExportError

    export = options.export
    if export.format == "ctranslate2":
        return run_export_ctranslate2(options, log)
    export_dir = pathlib.Path(export.export_dir or pathlib.Path(options.model_dir) / md.EXPORT_DIR)
    if export.version is not None and (export_dir / str(export.version)).exists() \
            and not export.overwrite:
        raise ExportError(f"{export_dir / str(export.version)} already exists: pass "
                          f"--overwrite_export to replace it, or leave the version unset")
    inputs = {"weights": _weights_identity(options), "decoding": dataclasses.asdict(
        options.decoding), "quantize": export.quantize, "jit_compile": export.jit_compile,
        "export_dir": str(export_dir.resolve())}
    done = _up_to_date(options, "export", inputs) if export.version is None else None
    if done:
        log(f"export: {done['product']} is up to date (the same weights and decoding "
            f"settings); --export_version N writes another version")
        return pathlib.Path(done["product"])
    translator = make_translator(options, options.make_task(), log)
    path = write_translator(translator, export_dir, version=export.version,
                            overwrite=export.overwrite, log=log)
    if export.check_ops:
        report = check_ops(path)
        log(report.format())
        if not report.ok:
            raise OpCheckError(f"{path}: uses ops stock TensorFlow Serving lacks (above)")
    _record(options, "export", inputs, path)
    return path


def run_export_ctranslate2(options: RunOptions, log: Log = print) -> pathlib.Path:
    """Writes the final model, float32, as a CTranslate2 model in --export_dir (default
    `<model_dir>/export_ct2`) with spm.model and the decoding settings (export/ctranslate2.py)."""
    from export import ctranslate2
    from export.translator import ExportError

    export = options.export
    output = pathlib.Path(export.export_dir or pathlib.Path(options.model_dir) / md.CT2_EXPORT_DIR)
    if output.exists() and not export.overwrite:
        raise ExportError(f"{output} already exists: pass --overwrite_export to replace it")
    task = options.make_task()
    proto = prepare.vocab_path(options.model_dir).read_bytes()
    if task.decoding_constraint(proto) is not None:
        raise ExportError(f"--format ctranslate2: task {options.data.task} constrains its "
                          f"decoding, which CTranslate2 cannot; export a SavedModel")
    model = md.load_final_model(options.model_dir, "float32", options.evaluation.checkpoint,
                                log=log)
    settings = ctranslate2.decoding_settings(options.decoding, model.config.max_length)
    try:
        path = ctranslate2.write_ctranslate2(model, proto, output, settings, export.overwrite)
    except ctranslate2.ConversionError as e:
        raise ExportError(f"--format ctranslate2: {e}") from None
    except FileExistsError:
        raise ExportError(f"{output} appeared while converting: pass --overwrite_export to "
                          f"replace it") from None
    log(f"export: wrote {path} (CTranslate2 float32; beam {settings['beam_size']}, alpha "
        f"{settings['alpha']}: export/ctranslate2.py translate)")
    return path


def chunk_seed(seed: int, index: int) -> int:
    """The sampling seed of the translate stage's chunk `index` (lines 32 * index + 1 on):
    `seed + index * 2**32`, wrapped to int64. Chunks draw independent noise; the first is
    sampled with `seed` itself, as the SavedModel's options signature samples with it."""
    return (seed + index * 2 ** 32 + 2 ** 63) % 2 ** 64 - 2 ** 63


def _terms_tensor(lines: list[str]) -> tf.Tensor:
    """string [lines, phrases]: the tab-separated phrases of each --terms line, ""-padded
    (blank phrases dropped)."""
    rows = [[p for p in line.split("\t") if p.strip()] for line in lines]
    width = max(map(len, rows), default=0)
    return tf.constant([row + [""] * (width - len(row)) for row in rows] if width else
                       [[]] * max(len(rows), 1), tf.string)


def _translate_lines(translator: Translator, options: RunOptions, chunk: list[str],
                     prefixes: list[str] | None, index: int = 0,
                     terms: list[str] | None = None) -> list[str]:
    """Output lines for `chunk` (the `index`-th): the translations (sampled with
    `options.sampling`, or each containing its line of `terms`), or with n-best, scores,
    alignments or prefixes asked for, one JSON object per line (the
    `translate_with_all_options` signature's outputs for that input line, padding dropped)."""
    from export.translator import BEAM_SEARCH, SAMPLING_SPECS

    sources = tf.constant(chunk, tf.string)
    sampling = options.sampling
    if not options.io.detailed and sampling is None and terms is None:
        return [t.decode("utf-8") for t in translator.translate(sources)["translation"].numpy()]
    io, decoding = options.io, options.decoding
    sampling = (BEAM_SEARCH if sampling is None else
                (sampling.topk, sampling.topp, sampling.temperature,
                 chunk_seed(sampling.seed, index)))
    out = translator.translate_with_all_options(
        sources, tf.constant(max(decoding.beam_size, io.n_best)), tf.constant(decoding.alpha),
        tf.constant(io.n_best), tf.constant(decoding.extra_length),
        tf.constant(prefixes or [""] * len(chunk), tf.string),
        *[tf.constant(value, spec.dtype) for value, spec in zip(sampling, SAMPLING_SPECS)],
        _terms_tensor(terms or []))
    out = {name: value.numpy() for name, value in out.items()}
    if not io.detailed:
        return [t.decode("utf-8") for t in out["translations"][:, 0]]
    lines = []
    for row in range(len(chunk)):
        record = {"translations": [t.decode("utf-8") for t in out["translations"][row]],
                  "scores": [round(float(v), 6) for v in out["scores"][row]]}
        lengths = [int((pieces != b"").sum()) for pieces in out["tokens"][row]]

        def unpadded(name, convert):
            """Output `name` of this row, each hypothesis cut to its pieces."""
            return [[convert(v) for v in values[:n]] for values, n in zip(out[name][row],
                                                                          lengths)]

        if io.with_scores:
            record["tokens"] = unpadded("tokens", lambda p: p.decode("utf-8"))
            record["token_log_probs"] = unpadded("token_log_probs", lambda v: round(float(v), 6))
        if io.with_alignment:
            record["alignment"] = unpadded("alignment", int)
        lines.append(json.dumps(record, ensure_ascii=False))
    return lines


def run_translate(options: RunOptions, log: Log = print, out: TextIO | None = None) -> int:
    """Translates the lines of --input (or stdin) to --output (or `out`, default stdout),
    one output line per input line, streamed in chunks, exactly as the exported model
    answers: the translation, or a JSON object with the n-best hypotheses, their scores,
    pieces and log-probabilities, and alignments when asked for (`IOOptions.detailed`).
    With `options.sampling`, translations are sampled (`keras_transformer.decoding.sampling`;
    chunk seeds from `chunk_seed`) instead of found by beam search."""
    translator = make_translator(options, options.make_task(), log)
    if options.sampling is not None:
        log(f"translate: sampling instead of beam search, {options.sampling}")
    lines = (line for _, line in iter_lines(options.io.input))
    # Files read line by line with the input: (path, lines, what one line holds).
    beside = {name: (path, (line for _, line in iter_lines(path)), what)
              for name, path, what in (("prefixes", options.io.prefix_file, "prefix"),
                                       ("terms", options.io.terms_file, "line of terms"))
              if path is not None}
    count, first, cut = 0, None, 0
    pieces = vocab_lib.python_processor(translator.spm_proto)
    progress = Progress("translate", None, "lines", log)

    def warn_if_cut(chunk: list[str]) -> None:
        """One stderr line per source longer than the model reads (EOS included)."""
        nonlocal cut
        for offset, ids in enumerate(pieces.encode(chunk)):
            if len(ids) + 1 > translator.max_length:
                cut += 1
                log(f"translate: line {count + offset + 1}: {len(ids) + 1:,} tokens (EOS "
                    f"included), more than the {translator.max_length} the model reads "
                    f"(--max_input_length): translated from its first "
                    f"{translator.max_length - 1} pieces")

    def lines_beside(name: str, chunk: list[str]) -> list[str] | None:
        if name not in beside:
            return None
        path, source, what = beside[name]
        taken = list(itertools.islice(source, len(chunk)))
        if len(taken) != len(chunk):
            raise DataError(f"{path} has fewer lines than the input ({count + len(taken)} "
                            f"for at least {count + len(chunk)}); give one {what} per input "
                            "line")
        return taken

    def translations():
        nonlocal count, first
        while chunk := list(itertools.islice(lines, TRANSLATE_CHUNK)):
            chunk_prefixes, chunk_terms = (lines_beside(name, chunk)
                                           for name in ("prefixes", "terms"))
            first = chunk[0] if first is None else first
            warn_if_cut(chunk)
            count += len(chunk)
            index = (count - len(chunk)) // TRANSLATE_CHUNK
            for line in _translate_lines(translator, options, chunk, chunk_prefixes, index,
                                         chunk_terms):
                yield line + "\n"
            progress.update(count)

    if options.io.output:
        with atomic_files(options.io.output) as (tmp,):
            with open(tmp, "w", encoding="utf-8", newline="\n") as file:
                file.writelines(translations())
    else:
        out = out or sys.stdout
        for line in translations():
            out.write(line)
            out.flush()
    log(f"translate: {count:,} lines" + (f"; {cut:,} cut to the first "
                                         f"{translator.max_length - 1} pieces" if cut else ""))
    if options.io.plot_attention and first is not None:
        from pipelines.attention_plot import plot_attention

        tokenizer = vocab_lib.load_tokenizer(translator.spm_proto)
        plot_attention(translator.model, tokenizer, first, options.io.plot_attention,
                       options.decoding)
        log(f"translate: attention of the first sentence -> {options.io.plot_attention}")
    return count


def run_score(options: RunOptions, log: Log = print, out: TextIO | None = None) -> int:
    """Prints the length-penalised log-probability (the beam search's score,
    `keras_transformer.decoding.score_ids`) of each --target line as the translation of the
    same --input line, one score a line, streamed in chunks."""
    if not options.io.input or not options.io.target:
        raise ConfigError("--mode score needs --input SOURCES and --target TRANSLATIONS "
                          "(one sentence a line, the same number of lines)")
    from keras_transformer.decoding import score_ids

    model = md.load_final_model(options.model_dir, options.decoding.precision,
                                options.evaluation.checkpoint, log=log)
    proto = prepare.vocab_path(options.model_dir).read_bytes()
    tokenizer = vocab_lib.load_tokenizer(proto)
    teacher_inputs = options.make_task().teacher_inputs(proto)
    source_length = options.decoding.input_length(model.config.max_length)
    sources, targets = iter_lines(options.io.input), iter_lines(options.io.target)
    out, count = out or sys.stdout, 0
    while chunk := list(itertools.islice(itertools.zip_longest(sources, targets),
                                         TRANSLATE_CHUNK)):
        if any(s is None or t is None for s, t in chunk):
            raise DataError(f"{options.io.input} and {options.io.target} have different "
                            f"numbers of lines (from line {count + 1}); score one "
                            f"translation per source line")
        source_ids = text.sentences_to_ids(tokenizer, [s for (_, s), _ in chunk], source_length)
        target_ids = text.sentences_to_ids(tokenizer, [t for _, (_, t) in chunk],
                                           model.config.max_length)
        scores = score_ids(model, source_ids, target_ids, alpha=options.decoding.alpha,
                           teacher_inputs=teacher_inputs)
        out.writelines(f"{float(v):.6f}\n" for v in scores.numpy())
        out.flush()
        count += len(chunk)
    log(f"score: {count:,} lines")
    return count
