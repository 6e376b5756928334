r"""The command line: prepare, train, average, evaluate and export a Transformer.

    python pipelines/run.py                          # Multi30k En->De on a CPU, minutes
    python pipelines/run.py --task wmt14_ende --config base --train_steps 100000 \
        --batch_tokens 25000 --model_dir runs/base   # the paper's base model
    python pipelines/run.py --task ptb_parsing --config parsing_wsj_sample \
        --train_trees $D/train.mrg --dev_trees $D/dev.mrg   # the preset's recipe
    python pipelines/run.py --mode evaluate --model_dir runs/base
    python pipelines/run.py --init_from runs/multi30k_ende --task text --train_src a.en \
        --train_tgt a.de --warmup_steps 100 --train_steps 300 --model_dir runs/tuned
    python pipelines/run.py --backend jax --model_dir runs/m30_jax   # ... average, evaluate
    python pipelines/run.py --mode export --model_dir runs/m30_jax   # TensorFlow

A front of the command line (`cli.main`); `--help` lists every flag, each a row of
`pipelines.settings.table`.
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
    main.main(main.RUN)
