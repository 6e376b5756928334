"""Export a model directory's final model as a SavedModel for TensorFlow Serving.

    python export/run.py --model_dir M --export_dir E [--version N]
        [--beam_size 4 --alpha 0.6 --extra_length 50] [--max_length L] [--overwrite]

Writes ``E/<version>/`` (default version: one more than the largest in E; default E:
``M/export``) with the signatures ``serving_default`` (strings in, translations out) and
``translate_ids``, then checks that every op in it is one stock TensorFlow Serving registers
(``--nocheck_ops`` skips that). Decoding settings not given come from ``M/settings.json``,
else the paper's (beam 4, alpha 0.6, input length + 50). See export/README.md for serving.
"""
import os
import pathlib
import sys

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags  # noqa: E402

flags.DEFINE_string("model_dir", None, "Model directory (config.json, final.weights.h5, "
                    "spm.model, settings.json).")
flags.DEFINE_string("export_dir", None, "Model base path served by TensorFlow Serving; "
                    "versions are written as <export_dir>/<version>/. Default: "
                    "<model_dir>/export.")
flags.DEFINE_integer("version", None, "Version number to write; default: one more than "
                     "the largest existing version (1 if none).", lower_bound=0)
flags.DEFINE_integer("beam_size", None, "Beam size (default: settings.json, else 4). Fixed "
                     "in the exported graph.", lower_bound=1)
flags.DEFINE_float("alpha", None, "Length-penalty exponent (default: settings.json, else "
                   "0.6).", lower_bound=0.0)
flags.DEFINE_integer("extra_length", None, "Translations have at most source length + this "
                     "many tokens (default: settings.json, else 50).", lower_bound=0)
flags.DEFINE_integer("max_length", None, "Longest source in tokens (EOS included); longer "
                     "inputs are truncated. Default and maximum: the model's max_length.",
                     lower_bound=1)
flags.DEFINE_boolean("overwrite", False, "Replace an existing version directory.")
flags.DEFINE_boolean("jit_compile", False, "XLA-compile the beam search (TensorFlow "
                     "Serving then needs --xla_cpu_compilation_enabled on CPU).")
flags.DEFINE_boolean("check_ops", True, "After writing, check that every op is registered "
                     "by core TensorFlow or tensorflow-text; exit 1 if not.")
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from export.op_check import check_ops
    from export.saved_model import ExportError, export_model_dir
    from pipelines.model_dir import ModelDirError
    from pipelines.text_io import DataError

    try:
        path = export_model_dir(
            FLAGS.model_dir, FLAGS.export_dir, version=FLAGS.version,
            beam_size=FLAGS.beam_size, alpha=FLAGS.alpha, extra_length=FLAGS.extra_length,
            max_length=FLAGS.max_length, overwrite=FLAGS.overwrite,
            jit_compile=FLAGS.jit_compile)
    except (ExportError, ModelDirError, DataError) as e:
        print(f"export/run.py: error: {e}", file=sys.stderr)
        return 1
    if FLAGS.check_ops:
        report = check_ops(path)
        print(report.format())
        if not report.ok:
            return 1
    print(path)
    return 0


if __name__ == "__main__":
    app.run(main)
