"""Export a model directory's final model as a SavedModel for TensorFlow Serving.

    python export/run.py --model_dir M [--export_dir E] [--export_version N]
        [--overwrite_export] [--override_saved --beam_size 4 --alpha 0.6 --extra_length 50
        --max_input_length L --decode_precision float32] [--export_jit_compile]
        [--quantize int8]

The same code path as ``pipelines/run.py --mode export`` (`pipelines.stages.export.run_export`),
with the same flags (`pipelines/shared_flags.py`; this CLI's earlier names ``--version``,
``--precision`` and ``--overwrite`` remain aliases), the same defaults and the same model
dir lock: decoding settings and precision come from ``M/settings.json`` (flags that differ
need ``--override_saved``), else the task's, else the paper's (beam 4, alpha 0.6, input
length + 50). Writes ``E/<version>/`` (default version: one more than the largest
in E; default E: ``M/export``) with the signatures ``serving_default`` (strings in,
translations out), ``translate_ids`` and the options signatures (``--quantize int8``: the
matrices stored as int8, export/quantize.py), then checks that every op in it is one stock
TensorFlow Serving registers (``--nocheck_ops`` skips that). ``--format ctranslate2``
writes a CTranslate2 model to ``M/export_ct2`` (or ``E``) instead (export/ctranslate2.py).
A user error is one line on stderr and exit status 2; a failed op check exits 1. See
export/README.md for serving.
"""
import contextlib
import os
import pathlib
import sys

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
# The SavedModel is TensorFlow's graph, whatever backend trained the weights (Keras fixes its
# backend when first imported, which the imports below do).
os.environ["KERAS_BACKEND"] = "tensorflow"

from absl import app, flags  # noqa: E402

from pipelines import shared_flags, startup  # noqa: E402  (startup: before TensorFlow)

flags.DEFINE_string("model_dir", None, "Model directory (config.json, final.weights.h5, "
                    "spm.model, settings.json).")
# The names this CLI had before both CLIs shared pipelines/shared_flags.py.
flags.DEFINE_alias("version", "export_version")
flags.DEFINE_alias("precision", "decode_precision")
flags.DEFINE_alias("overwrite", "overwrite_export")
flags.adopt_module_key_flags(shared_flags)
flags.adopt_module_key_flags(startup)
FLAGS = flags.FLAGS


def main(argv):
    def log(message):
        print(message, file=sys.stderr, flush=True)

    if len(argv) > 1:
        log(f"export/run.py: error: unexpected arguments: {' '.join(argv[1:])}")
        return 2
    if not FLAGS.model_dir:
        log("export/run.py: error: --model_dir is required (the trained model's directory)")
        return 2
    startup.import_tensorflow(FLAGS.verbose)
    from pipelines import options as options_lib
    from pipelines import stages
    from pipelines.errors import ModelDirError, UserError

    given = {name: FLAGS[name].value for name in ("model_dir", *shared_flags.NAMES)
             if FLAGS[name].value is not None}
    try:
        if not pathlib.Path(FLAGS.model_dir).is_dir():
            raise ModelDirError(f"{FLAGS.model_dir}: no such model directory (train one with "
                                f"pipelines/run.py, or check the path)")
        options = options_lib.resolve(given)
        with stages.model_dir_lock(["export"], options), contextlib.redirect_stdout(sys.stderr):
            path = stages.run_export(options, log=log)
    except UserError as e:
        log(f"export/run.py: error: {e}")
        return 2
    except stages.OpCheckError as e:
        log(f"export/run.py: error: {e}")
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=startup.parse_flags)
