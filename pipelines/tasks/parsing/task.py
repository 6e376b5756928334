"""The `ptb_parsing` task: English constituency parsing on the WSJ Penn Treebank (Section 6.3).

Its parts: `splits` (each split's trees and files), `hooks` (tree symbols, constrained search,
serving) and `scoring` (EVALB F1, which replaces BLEU).
"""

import dataclasses
from typing import ClassVar

from keras_transformer.decoding import BeamSearch
from pipelines.errors import DataError
from pipelines.tasks.base import Task
from pipelines.tasks.parsing import linearize
from pipelines.tasks.parsing.hooks import ParsingHooks
from pipelines.tasks.parsing.scoring import EvalbScoring
from pipelines.tasks.parsing.splits import TreebankSplits


@dataclasses.dataclass(frozen=True, kw_only=True)
class PtbParsingTask(TreebankSplits, ParsingHooks, EvalbScoring, Task):
    """Penn Treebank constituency parsing as translation: words -> linearized tree.

    A split's trees come from its `.mrg` file or directory in `tree_files`, else from the WSJ
    sections below `data_dir`. `target_form`: one of `forms.TARGET_FORMS`.
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


def ptb_parsing(data_dir: str | None = None, train_trees: str | None = None,
                dev_trees: str | None = None, test_trees: str | None = None,
                **options) -> PtbParsingTask:
    """WSJ constituency parsing with the paper's settings (Section 6.3): 16,000 BPE pieces,
    preset `parsing_wsj`, beam 21, alpha 0.3, output up to input length + 300. `options` may set
    `target_form` (default "read_tags"; each form's dev F1: docs/parsing.md).
    """
    return PtbParsingTask(
        name="ptb_parsing", source_lang="en", target_lang="tree", vocab_size=16_000,
        max_source_length=128, max_target_length=512, preset="parsing_wsj",
        decoding=BeamSearch(beam_size=21, alpha=0.3, extra_length=300), data_dir=data_dir,
        tree_files=(("train", train_trees), ("dev", dev_trees), ("test", test_trees)),
        **options)
