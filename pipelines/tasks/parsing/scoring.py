"""EVALB scores for `ptb_parsing`: the gold trees of the sentences scored, and the scores.

Gold trees come from `<split>.trees`, not the references: those may lack POS tags ("xx"), and
EVALB (COLLINS.prm) needs gold tags to delete punctuation. Predicted tags are not scored.
"""

import os
from typing import Sequence

import nltk

from pipelines.errors import DataError
from pipelines.tasks.parsing import evalb, linearize

SCORE_SPLITS = ("test", "dev")
"""Splits searched for matching gold trees when `score` is not told the split."""


class EvalbScoring:
    """`score` (EVALB, COLLINS.prm) and the search for its gold trees; part of `PtbParsingTask`."""

    def find_gold_trees(self, sources: Sequence[str], references: Sequence[str], *,
                        split: str | None = None,
                        work_dir: os.PathLike | str | None = None) -> list[nltk.Tree]:
        """The gold trees of `sources`/`references`: the first `len(sources)` of `split` (from
        `work_dir`'s `.trees` when given, else the input files), or else of the first of
        `SCORE_SPLITS` whose trees linearize to exactly them. Raises `DataError` when no split
        matches, or `split`'s trees differ from the sentences."""
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
        raise DataError(
            f"task {self.name}: cannot find the gold trees of the {len(sources):,} sentences "
            f"being scored ({'; '.join(reasons)}). Score a split of this task in corpus order, "
            f"or pass gold_trees.")

    def score(self, sources: Sequence[str], hypotheses: Sequence[str],
              references: Sequence[str], *, split: str | None = None,
              work_dir: os.PathLike | str | None = None,
              gold_trees: Sequence[nltk.Tree] | None = None) -> dict:
        """EVALB (COLLINS.prm) scores of decoded target strings against the gold trees.

        Hypotheses are repaired by `delinearize` over their source's words. `references` (the
        `.tgt` lines) find and check the gold trees (`find_gold_trees`), unless `gold_trees`.

        Returns:
            `f1`, `precision`, `recall` (percent), `exact` (sentences with every bracket right),
            `sentences` (those with words) and `repaired` (ill-formed hypotheses).

        Raises `ValueError` if the three lists differ in length, `DataError` if the gold trees
        are not found or do not match the sentences.
        """
        if not len(sources) == len(hypotheses) == len(references):
            raise ValueError(
                f"{len(sources)} sources, {len(hypotheses)} hypotheses and {len(references)} "
                f"references; score one hypothesis per sentence")
        if gold_trees is None:
            gold_trees = self.find_gold_trees(sources, references, split=split,
                                              work_dir=work_dir)
        else:
            mismatch = _first_mismatch(gold_trees, sources, references, self.target_form)
            if mismatch is not None or len(gold_trees) != len(sources):
                raise DataError(
                    f"task {self.name}: the gold trees do not match the sentences scored: "
                    f"{mismatch or f'{len(gold_trees)} trees for {len(sources)} sentences'}")
        test_trees = []
        repaired = 0
        for source, hypothesis in zip(sources, hypotheses):
            tree, repairs = linearize.delinearize(
                linearize.from_target_string(hypothesis), source.split(),
                word_symbols=self.word_symbols(), word_label=self.word_label())
            test_trees.append(tree)
            repaired += repairs > 0
        scores = evalb.score_corpus(gold_trees, test_trees)
        kept = ("f1", "precision", "recall", "exact", "sentences")
        return {key: scores[key] for key in kept} | {"repaired": repaired}


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
