"""The `ptb_parsing` task: English constituency parsing on the WSJ Penn Treebank (Section 6.3):
each split's trees and files (`splits`), the hooks through which the stages see trees, and
`score`, EVALB F1 in place of BLEU."""

import dataclasses
import os
import pathlib
from typing import ClassVar, Sequence

import nltk

from keras_transformer.decoding import BeamSearch
from pipelines.errors import DataError
from pipelines.tasks.base import Task
from pipelines.tasks.parsing import constraint, evalb, linearize, serving, treebank
from pipelines.tasks.parsing.splits import TreebankSplits

SCORE_SPLITS = ("test", "dev")
"""Splits searched for matching gold trees when `score` is not told the split."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PtbParsingTask(TreebankSplits, Task):
    """Penn Treebank parsing as translation, words -> linearized tree: a split's trees come from
    `tree_files` (`.mrg` file or directory), else from the WSJ sections below `data_dir`."""

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

    def vocab_symbols(self, train_target: pathlib.Path) -> list[str]:
        """Every tree symbol as one `▁` piece, so the constrained search tells them apart by id:
        the targets', every `treebank.PHRASE_LABELS` bracket and, in "tags" forms, `POS_TAGS`."""
        words = {"tags": treebank.POS_TAGS, "xx": (linearize.PLACEHOLDER,), "words": ()}
        symbols = set(words[linearize.symbol_form(self.target_form)])
        symbols.update(bracket + label for label in treebank.PHRASE_LABELS
                       for bracket in (linearize.OPEN, linearize.CLOSE))
        with open(train_target, encoding="utf-8") as handle:
            for line in handle:  # the "words" form's words stay ordinary text
                symbols.update(symbol for symbol in line.split() if self.target_form != "words"
                               or not linearize.is_word_symbol(symbol))
        return [constraint.WORD_START + symbol for symbol in sorted(symbols)]

    def word_symbols(self) -> frozenset[str] | None:
        """The word symbols `score` accepts: `{XX}` for "xx", any non-bracket for "tags"."""
        xx = linearize.symbol_form(self.target_form) == "xx"
        return frozenset([linearize.PLACEHOLDER]) if xx else None

    def word_label(self) -> str | None:
        """The preterminal of a predicted word: `XX` for "words", else its word symbol."""
        return linearize.PLACEHOLDER if self.target_form == "words" else None

    def decoding_constraint(self, spm_proto: bytes) -> constraint.TreeConstraint:
        """Beam search that only builds well-formed trees over the sentence's words."""
        return constraint.TreeConstraint.from_proto(
            spm_proto, copy_words=self.target_form == "words",
            read_words=linearize.reads_words(self.target_form))

    def teacher_inputs(self, spm_proto: bytes):
        """In the "read" forms `constraint.TreeConstraint.teacher_inputs`, else None."""
        return (self.decoding_constraint(spm_proto).teacher_inputs
                if linearize.reads_words(self.target_form) else None)

    def serving_input(self, sentences):
        return serving.normalize_sentences(sentences)

    def serving_output(self, sentences, outputs):
        """The exported parser answers with bracketed trees over the words."""
        return serving.trees_from_linearized(sentences, outputs, word_label=self.word_label())

    def find_gold_trees(self, sources: Sequence[str], references: Sequence[str], *,
                        split: str | None = None,
                        work_dir: os.PathLike | str | None = None) -> list[nltk.Tree]:
        """The gold trees of `sources`/`references`: the first `len(sources)` of `split` (from
        `work_dir`'s `.trees` when given, else the input files), or of the first `SCORE_SPLITS`
        whose trees linearize to exactly them; DataError when none matches."""
        candidates = (split,) if split else SCORE_SPLITS
        reasons = []
        for candidate in candidates:
            try:
                trees = (self.gold_trees(candidate, work_dir, log=lambda _: None)
                         if work_dir is not None else self.read_split(candidate))
            except DataError as error:
                if split:
                    raise
                reasons.append(f"{candidate}: {error}")
                continue
            mismatch = _first_mismatch(trees, sources, references, self.target_form)
            if mismatch is None:
                return trees[: len(sources)]
            reasons.append(f"{candidate}: {mismatch}")
        raise DataError(f"task {self.name}: cannot find the gold trees of the {len(sources):,} "
                        f"sentences being scored ({'; '.join(reasons)}). Score a split of this "
                        "task in corpus order, or pass gold_trees.")

    def score(self, sources: Sequence[str], hypotheses: Sequence[str],
              references: Sequence[str], *, split: str | None = None,
              work_dir: os.PathLike | str | None = None,
              gold_trees: Sequence[nltk.Tree] | None = None) -> dict:
        """EVALB (COLLINS.prm) scores of decoded target strings against the gold trees: `f1`,
        `precision`, `recall` (percent), `exact` (sentences with every bracket right),
        `sentences` (those with words), `repaired` (ill-formed hypotheses, which `delinearize`
        repairs). Gold trees come from `<split>.trees` (`find_gold_trees`, unless `gold_trees`
        are given), not the references, which may lack the POS tags EVALB needs."""
        if not len(sources) == len(hypotheses) == len(references):
            raise ValueError(f"{len(sources)} sources, {len(hypotheses)} hypotheses and "
                             f"{len(references)} references; score one hypothesis per sentence")
        if gold_trees is None:
            gold_trees = self.find_gold_trees(sources, references, split=split, work_dir=work_dir)
        else:
            mismatch = _first_mismatch(gold_trees, sources, references, self.target_form)
            if mismatch is not None or len(gold_trees) != len(sources):
                raise DataError(
                    f"task {self.name}: the gold trees do not match the sentences scored: "
                    f"{mismatch or f'{len(gold_trees)} trees for {len(sources)} sentences'}")
        parses = [linearize.delinearize(linearize.from_target_string(hypothesis), source.split(),
                                        word_symbols=self.word_symbols(),
                                        word_label=self.word_label())
                  for source, hypothesis in zip(sources, hypotheses)]
        scores = evalb.score_corpus(gold_trees, [tree for tree, _ in parses])
        kept = ("f1", "precision", "recall", "exact", "sentences")
        return ({key: scores[key] for key in kept}
                | {"repaired": sum(repairs > 0 for _, repairs in parses)})


def ptb_parsing(data_dir: str | None = None, train_trees: str | None = None,
                dev_trees: str | None = None, test_trees: str | None = None,
                **options) -> PtbParsingTask:
    """WSJ constituency parsing with the paper's settings (Section 6.3): 16,000 BPE pieces,
    preset `parsing_wsj`, beam 21, alpha 0.3, output up to input length + 300; `target_form`
    "read_tags" unless `options` set it (each form's dev F1: docs/parsing.md)."""
    return PtbParsingTask(
        name="ptb_parsing", source_lang="en", target_lang="tree", vocab_size=16_000,
        max_source_length=128, max_target_length=512, preset="parsing_wsj",
        decoding=BeamSearch(beam_size=21, alpha=0.3, extra_length=300), data_dir=data_dir,
        tree_files=(("train", train_trees), ("dev", dev_trees), ("test", test_trees)), **options)


def _first_mismatch(trees: Sequence[nltk.Tree], sources: Sequence[str],
                    references: Sequence[str], target_form: str) -> str | None:
    """None if `trees` start with the trees of `sources`/`references`, else what differs."""
    if len(trees) < len(sources):
        return f"{len(trees):,} gold trees for {len(sources):,} sentences"
    for index, (tree, source, reference) in enumerate(zip(trees, sources, references)):
        words, symbols = linearize.linearize(tree, target_form)
        if words != source.split():
            return f"sentence {index}: the words differ from the gold tree's"
        if symbols != linearize.from_target_string(reference):
            return f"sentence {index}: the reference differs from the gold tree's linearization"
    return None
