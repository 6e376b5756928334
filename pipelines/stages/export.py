"""The export stage: a SavedModel of the serving functions (op-checked), or a CTranslate2 model."""
from __future__ import annotations

import hashlib
import pathlib
from typing import TYPE_CHECKING

from pipelines import Log
from pipelines.data import prepare
from pipelines.model_dir import layout as md
from pipelines.stages import made_from
from pipelines.settings.options import Recipe
from pipelines.tasks import Task

if TYPE_CHECKING:
    from keras_transformer.serving import Translator


def make_translator(options: Recipe, task: Task, log: Log = print) -> Translator:
    """The final model's `Translator`, as export writes and translate runs it."""
    from keras_transformer.serving import Int8Weights, Translator

    def load(precision):
        return md.load_final_model(options.model_dir, precision, options.evaluation.checkpoint,
                                   log=log)

    model = load(options.decoding.precision)
    weights = None
    if options.export.quantize:  # rounded once, from the float32 weights
        source = model if options.decoding.precision == "float32" else load("float32")
        weights = Int8Weights(model, source)
    proto = prepare.vocab_path(options.model_dir).read_bytes()
    return Translator(model, proto, options.decoding.beam, jit_compile=options.export.jit_compile,
                      max_input_length=options.decoding.max_input_length, weights=weights,
                      constraint=task.decoding_constraint(proto), preprocess=task.serving_input,
                      postprocess=task.serving_output)


class OpCheckError(RuntimeError):
    """The exported graph uses an op stock TensorFlow Serving does not register."""


def run_export(options: Recipe, log: Log = print, ops_table: bool = False) -> pathlib.Path:
    """Writes `<export_dir>/<version>/` and checks its ops, logging their table with `ops_table`
    or on failure (export/README.md)."""
    from export.op_check import check_ops
    from keras_transformer.serving import ExportError, library_versions

    export = options.export
    if export.format == "ctranslate2":
        return run_export_ctranslate2(options, log)
    export_dir = pathlib.Path(export.export_dir or pathlib.Path(options.model_dir) / md.EXPORT_DIR)
    if export.version is not None and (export_dir / str(export.version)).exists() \
            and not export.overwrite:
        raise ExportError(f"{export_dir / str(export.version)} already exists: pass "
                          f"--overwrite_export to replace it, or leave the version unset")
    inputs = {"weights": made_from.weights_identity(options),
              "decoding": options.decoding.record(), "quantize": export.quantize,
              "jit_compile": export.jit_compile, "versions": library_versions(),
              "export_dir": made_from.relative(options, export_dir)}
    # One record per export dir: exporting elsewhere keeps the model dir's export/ up to date.
    record = "export" if inputs["export_dir"] == md.EXPORT_DIR else \
        f"export-{hashlib.sha256(inputs['export_dir'].encode()).hexdigest()[:12]}"
    done = made_from.up_to_date(options, record, inputs) if export.version is None else None
    if done:
        log(f"export: {done['product']} is up to date (the same weights, decoding settings "
            f"and library versions); --export_version N writes another version")
        return pathlib.Path(done["product"])
    translator = make_translator(options, options.task, log)
    path = translator.export(export_dir, version=export.version, overwrite=export.overwrite,
                             log=log)
    if export.check_ops:
        report = check_ops(path)
        log(report.format() if ops_table or not report.ok else report.summary())
        if not report.ok:
            raise OpCheckError(f"{path}: uses ops stock TensorFlow Serving lacks (above)")
    made_from.record(options, record, inputs, path)
    return path


def run_export_ctranslate2(options: Recipe, log: Log = print) -> pathlib.Path:
    """Writes the final model as a float32 CTranslate2 model, with spm.model and its decoding."""
    from export import ctranslate2
    from keras_transformer.serving import ExportError

    export = options.export
    output = pathlib.Path(export.export_dir or pathlib.Path(options.model_dir) / md.CT2_EXPORT_DIR)
    if output.exists() and not export.overwrite:
        raise ExportError(f"{output} already exists: pass --overwrite_export to replace it")
    task = options.task
    proto = prepare.vocab_path(options.model_dir).read_bytes()
    if task.decoding_constraint(proto) is not None:
        raise ExportError(f"--format ctranslate2: task {options.data.task} constrains its "
                          f"decoding, which CTranslate2 cannot; export a SavedModel")
    model = md.load_final_model(options.model_dir, "float32", options.evaluation.checkpoint,
                                log=log)
    try:
        settings = ctranslate2.decoding_settings(
            options.decoding.beam, options.decoding.input_length(model.config.max_length))
        path = ctranslate2.write_ctranslate2(model, proto, output, settings, export.overwrite)
    except ctranslate2.ConversionError as e:
        raise ExportError(f"--format ctranslate2: {e}") from None
    except FileExistsError:
        raise ExportError(f"{output} appeared while converting: pass --overwrite_export to "
                          f"replace it") from None
    log(f"export: wrote {path} (CTranslate2 float32; beam {settings['beam_size']}, alpha "
        f"{settings['alpha']}: export/ct2_decoding.py translate)")
    return path
