r"""Export a model directory's final model as a SavedModel for TensorFlow Serving.

    python export/run.py --model_dir M [--export_dir E] [--export_version N]
        [--overwrite_export] [--override_saved --beam_size 4 --alpha 0.6 --extra_length 50
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from cli import main  # noqa: E402

if __name__ == "__main__":
    main.main(main.EXPORT)
