"""Labelled bracketing precision, recall and F1, as EVALB computes them with COLLINS.prm:

- brackets are a multiset of `(label, start, end)`, one per constituent above the POS level;
- empty elements and words with a *gold* punctuation tag (`PUNCTUATION_TAGS`) are deleted first;
  a constituent left with no words is not counted;
- labels are compared without function tags, with ADVP = PRT; the root is ignored;
- corpus scores sum the counts over sentences, in percent;
- unlike EVALB on two files, the gold tree's tags decide the punctuation in both trees, since
  `delinearize`'s test trees carry predicted tags (or `XX`).
"""

import collections
from typing import Collection, NamedTuple, Sequence

import nltk

from pipelines.tasks.parsing.treebank import EMPTY_ELEMENT_TAG, is_preterminal, strip_label

PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
"""Gold POS tags whose words COLLINS.prm deletes (`DELETE_LABEL`)."""

IGNORED_LABELS = frozenset({"TOP", "ROOT", ""})
"""Constituent labels that are never brackets: the root (`DELETE_LABEL TOP`)."""

EQUIVALENT_LABELS = {"PRT": "ADVP"}
"""Labels scored as another (`EQ_LABEL ADVP PRT`), mapped to one representative."""

Bracket = tuple[str, int, int]


class SentenceScore(NamedTuple):
    """Bracket counts of one sentence: matched, in the gold tree, in the test tree."""

    matched: int
    gold: int
    test: int


def evalb_label(label: str) -> str:
    """The label EVALB compares: function tags stripped, PRT mapped to ADVP."""
    label = strip_label(label)
    return EQUIVALENT_LABELS.get(label, label)


def tagged_words(tree: nltk.Tree) -> list[tuple[str, str]]:
    """`(word, POS)` pairs of a tree in order, without empty elements."""
    return [(word, tag) for word, tag in tree.pos() if tag != EMPTY_ELEMENT_TAG]


def brackets(tree: nltk.Tree,
             deleted: Collection[int] = frozenset()) -> collections.Counter[Bracket]:
    """The multiset of a tree's labelled brackets `(label, start, end)`, `end` exclusive, over the
    words left after deleting the positions `deleted` (among the non-`-NONE-` words)."""
    counts: collections.Counter = collections.Counter()
    kept = 0  # words kept so far: the span coordinate
    token = 0  # non-empty words seen so far: the index into `deleted`
    # Iterative walk: (node, None) enters a node, (node, start) leaves it.
    stack: list[tuple[object, int | None]] = [(tree, None)]
    while stack:
        node, start = stack.pop()
        if not isinstance(node, nltk.Tree):
            raise ValueError(f"word {node!r} is not the only child of a POS tag")
        if start is not None:
            label = evalb_label(node.label())
            if kept > start and label not in IGNORED_LABELS:
                counts[(label, start, kept)] += 1
        elif is_preterminal(node):
            if node.label() != EMPTY_ELEMENT_TAG:
                if token not in deleted:
                    kept += 1
                token += 1
        else:
            stack.append((node, kept))
            stack.extend((child, None) for child in reversed(node))
    return counts


def score_sentence(gold: nltk.Tree, test: nltk.Tree) -> SentenceScore:
    """Matched, gold and test bracket counts of one sentence; ValueError if the words differ."""
    gold_words = tagged_words(gold)
    test_words = [word for word, _ in tagged_words(test)]
    if [word for word, _ in gold_words] != test_words:
        raise ValueError(
            f"the test tree's words differ from the gold tree's: "
            f"{' '.join(test_words)!r} vs {' '.join(word for word, _ in gold_words)!r}")
    deleted = {index for index, (_, tag) in enumerate(gold_words) if tag in PUNCTUATION_TAGS}
    gold_brackets = brackets(gold, deleted)
    test_brackets = brackets(test, deleted)
    matched = sum((gold_brackets & test_brackets).values())
    return SentenceScore(matched, sum(gold_brackets.values()), sum(test_brackets.values()))


def score_corpus(gold_trees: Sequence[nltk.Tree], test_trees: Sequence[nltk.Tree], *,
                 max_length: int | None = None) -> dict:
    """EVALB's summary (COLLINS.prm) of `test_trees` against `gold_trees` (raw or preprocessed)
    over the same words: `precision`, `recall`, `f1` (percent), `matched`, `gold`, `test`
    (brackets), `sentences`, `exact`, `skipped` (no words). `max_length`: EVALB's `CUTOFF_LEN`."""
    if len(gold_trees) != len(test_trees):
        raise ValueError(f"{len(gold_trees)} gold trees but {len(test_trees)} test trees; score "
                         "one prediction per gold sentence")
    counts: collections.Counter = collections.Counter()
    for index, (gold_tree, test_tree) in enumerate(zip(gold_trees, test_trees)):
        length = len(tagged_words(gold_tree))
        if max_length is not None and length > max_length:
            continue
        if length == 0:
            counts["skipped"] += 1
            continue
        try:
            score = score_sentence(gold_tree, test_tree)
        except ValueError as error:
            raise ValueError(f"sentence {index}: {error}") from None
        counts.update(score._asdict(), sentences=1,
                      exact=int(score.matched == score.gold == score.test))
    matched, gold, test = counts["matched"], counts["gold"], counts["test"]
    precision = 100.0 * matched / test if test else 0.0
    recall = 100.0 * matched / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1} | {
        key: counts[key] for key in ("matched", "gold", "test", "sentences", "exact", "skipped")}


def format_scores(scores: dict) -> str:
    """One line for logs: `F1 91.23 (P 91.50, R 90.96; 2416 sentences, 1050 exact)`."""
    return (f"F1 {scores['f1']:.2f} (P {scores['precision']:.2f}, R {scores['recall']:.2f}; "
            f"{scores['sentences']} sentences, {scores['exact']} exact)")
