"""Export a model directory's final model as a SavedModel for TensorFlow Serving.

    python export/run.py --model_dir M [--export_dir E] [--version N] [--overwrite]
        [--override_saved --beam_size 4 --alpha 0.6 --extra_length 50 --max_input_length L]

The same code path as ``pipelines/run.py --mode export`` (`pipelines.stages.run_export`),
with the same defaults: decoding settings and precision come from ``M/settings.json`` (flags
that differ need ``--override_saved``), else the task's, else the paper's (beam 4, alpha
0.6, input length + 50). Writes ``E/<version>/`` (default version: one more than the largest
in E; default E: ``M/export``) with the signatures ``serving_default`` (strings in,
translations out) and ``translate_ids``, then checks that every op in it is one stock
TensorFlow Serving registers (``--nocheck_ops`` skips that). A user error is one line on
stderr and exit status 2; a failed op check exits 1. See export/README.md for serving.
"""
import contextlib
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
                     "the largest existing version (1 if none).")
flags.DEFINE_integer("beam_size", None, "Beam size (default: settings.json). Fixed in the "
                     "exported graph.")
flags.DEFINE_float("alpha", None, "Length-penalty exponent (default: settings.json).")
flags.DEFINE_integer("extra_length", None, "Translations have at most source length + this "
                     "many tokens (default: settings.json).")
flags.DEFINE_integer("max_input_length", None, "Longest source in tokens (EOS included); "
                     "longer inputs keep their first pieces. Default: settings.json, else "
                     "the task's limit; at most the model's max_length.")
flags.DEFINE_enum("precision", None, ["float32", "bfloat16"], "Weights and compute of the "
                  "exported graph (default: settings.json's decoding precision).")
flags.DEFINE_boolean("override_saved", False, "Let decoding flags differ from settings.json.")
flags.DEFINE_boolean("overwrite", False, "Replace an existing version directory.")
flags.DEFINE_boolean("jit_compile", False, "XLA-compile the beam search (TensorFlow "
                     "Serving then needs --xla_cpu_compilation_enabled on CPU).")
flags.DEFINE_boolean("check_ops", True, "After writing, check that every op is registered "
                     "by core TensorFlow or tensorflow-text; exit 1 if not.")
FLAGS = flags.FLAGS

# This CLI's flag -> the name pipelines/run.py (and pipelines.options.resolve) uses.
FLAG_NAMES = {"model_dir": "model_dir", "export_dir": "export_dir", "version": "export_version",
              "beam_size": "beam_size", "alpha": "alpha", "extra_length": "extra_length",
              "max_input_length": "max_input_length", "precision": "decode_precision",
              "override_saved": "override_saved", "overwrite": "overwrite_export",
              "jit_compile": "export_jit_compile", "check_ops": "check_ops"}


def _own_flag_names(message: str) -> str:
    """A message of the shared code with this CLI's flag names (--version, not
    --export_version)."""
    for name, shared in FLAG_NAMES.items():
        if name != shared:
            message = message.replace(f"--{shared}", f"--{name}")
    return message


def main(argv):
    def log(message):
        print(message, file=sys.stderr, flush=True)

    if len(argv) > 1:
        log(f"export/run.py: error: unexpected arguments: {' '.join(argv[1:])}")
        return 2
    if not FLAGS.model_dir:
        log("export/run.py: error: --model_dir is required (the trained model's directory)")
        return 2
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from export.translator import ExportError
    from pipelines import options as options_lib
    from pipelines import stages
    from pipelines.errors import ModelDirError, UserError

    given = {FLAG_NAMES[name]: FLAGS[name].value for name in FLAG_NAMES
             if FLAGS[name].value is not None}
    try:
        if not pathlib.Path(FLAGS.model_dir).is_dir():
            raise ModelDirError(f"{FLAGS.model_dir}: no such model directory (train one with "
                                f"pipelines/run.py, or check the path)")
        with contextlib.redirect_stdout(sys.stderr):
            path = stages.run_export(options_lib.resolve(given), log=log)
    except (UserError, ExportError) as e:
        log(f"export/run.py: error: {_own_flag_names(str(e))}")
        return 2
    except stages.OpCheckError as e:
        log(f"export/run.py: error: {e}")
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    from pipelines.errors import parse_flags

    app.run(main, flags_parser=parse_flags)
