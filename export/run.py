r"""Export a model directory's final model as a SavedModel for TensorFlow Serving.

    python export/run.py --model_dir M [--export_dir E] [--export_version N]
        [--overwrite_export] [--beam_size 4 --alpha 0.6 --extra_length 50
        --max_input_length L --decode_precision float32] [--export_jit_compile]
        [--quantize int8] [--format ctranslate2]

The same as ``pipelines/run.py --mode export``: the same flags (the export rows of
`pipelines.settings.table`), defaults and model dir lock. Writes ``E/<version>/``
(default: one more than the largest in E; default E: ``M/export``) and prints its path;
export/README.md lists the signatures and how to serve them. A front of the command line
(`cli.main`), which sits above this package: the package itself imports only the library.
"""
import pathlib
import sys

# The checkout's root replaces this script's own folder on sys.path: that folder's
# modules would shadow packages of the same name (export/ctranslate2.py hid the
# `ctranslate2` package from `--format ctranslate2`).
HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [str(HERE.parent)] + [p for p in sys.path
                                    if pathlib.Path(p or ".").resolve() != HERE]

from cli import main  # noqa: E402

if __name__ == "__main__":
    main.main(main.EXPORT)
