"""The `ptb_parsing` task: English constituency parsing on the WSJ Penn Treebank (Section 6.3).

"Attention Is All You Need", Section 6.3: a 4-layer Transformer with d_model = 1024 trained on
the WSJ part of the Penn Treebank (about 40K sentences, sections 02-21; dev 22, test 23) with a
16K-token vocabulary, decoding with beam size 21, alpha = 0.3 and a maximum output length of
input length + 300, scored with EVALB F1.

The task plugs parsing into the translation pipeline like any corpus. Its parts live in their
modules: `splits` (where the trees of a split come from, and the `.src`, `.tgt` and `.trees`
files written from them), `hooks` (the vocabulary's tree symbols, the constrained search and
the serving hooks) and `scoring` (EVALB F1, which replaces BLEU for this task).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from keras_transformer.decoding import DecodingSettings
from pipelines.errors import DataError
from pipelines.tasks.base import Task
from pipelines.tasks.parsing import linearize
from pipelines.tasks.parsing.hooks import ParsingHooks
from pipelines.tasks.parsing.scoring import EvalbScoring
from pipelines.tasks.parsing.splits import TreebankSplits


@dataclasses.dataclass(frozen=True, kw_only=True)
class PtbParsingTask(TreebankSplits, ParsingHooks, EvalbScoring, Task):
    """Penn Treebank constituency parsing as translation: words -> linearized tree.

    Trees of a split come from its explicit file or directory in `tree_files` (any `.mrg`
    bracketed file, or a directory searched recursively for `*.mrg`), else from the standard
    WSJ sections below `data_dir` (train 02-21, dev 22, test 23; `treebank.wsj_split_files`).
    `target_form` is how words appear in the target (`linearize.TARGET_FORMS`): "tags", each
    word's POS tag (the paper's code), "xx", one placeholder for every word (Vinyals et al.),
    or "words", the word itself, which the constrained search copies from the source;
    "read_tags" and "read_xx" predict tags or `XX` and read each word after its symbol
    (`forms`).
    """

    data_dir: str | None = None
    tree_files: tuple[tuple[str, str | None], ...] = ()
    target_form: str = "read_tags"

    def __post_init__(self):
        if self.target_form not in linearize.TARGET_FORMS:
            raise DataError(f"--target_form must be one of {linearize.TARGET_FORMS}, got "
                            f"{self.target_form!r}")

    metric_name: ClassVar[str] = "f1"

    def content_options(self) -> dict:
        return {"target_form": self.target_form}


def ptb_parsing(
    data_dir: str | None = None,
    train_trees: str | None = None,
    dev_trees: str | None = None,
    test_trees: str | None = None,
    **options,
) -> PtbParsingTask:
    """WSJ constituency parsing with the paper's settings (Section 6.3).

    Defaults: 16,000 shared BPE pieces (the paper's WSJ-only vocabulary; SentencePiece reaches
    that size on the 10% nltk sample too), preset `parsing_wsj` (4 layers, d_model 1024), beam
    21, alpha 0.3, output up to input length + 300. Length limits in tokens: 128 source
    pieces, 512 target symbols (every tree symbol is one piece, `vocab_symbols`: on the WSJ
    sample a tree averages 62 symbols for 34 source pieces); on the sample they drop 6 of
    3,396 training pairs. `options` may set `target_form` (`forms.TARGET_FORMS`; the default,
    "read_tags", predicts POS tags and reads each word; README.md has each form's dev F1).
    """
    return PtbParsingTask(
        name="ptb_parsing",
        source_lang="en",
        target_lang="tree",
        vocab_size=16_000,
        max_source_length=128,
        max_target_length=512,
        preset="parsing_wsj",
        decoding=DecodingSettings(beam_size=21, alpha=0.3, extra_length=300),
        data_dir=data_dir,
        tree_files=(("train", train_trees), ("dev", dev_trees), ("test", test_trees)),
        **options,
    )
