"""Labelled bracketing precision, recall and F1, as EVALB computes them with COLLINS.prm (the
metric of the paper's Section 6.3, Table 4, and of Vinyals & Kaiser et al. 2014):

- a bracket is `(label, start, end)` for every constituent above the POS level;
- words whose *gold* POS is punctuation (`PUNCTUATION_TAGS`) and empty elements (`-NONE-`)
  are deleted before spans are computed, so where punctuation is attached does not matter, and
  a constituent left with no words is not counted;
- labels are compared without function tags (`strip_label`), with ADVP = PRT (`EQ_LABEL`);
- the root bracket is ignored (`DELETE_LABEL TOP`; an unlabelled `( ...)` or `ROOT` root too);
- brackets are a multiset per sentence: unary chains and repeated brackets each count;
- corpus scores sum matched/gold/test counts over sentences: P = matched/test,
  R = matched/gold, F1 = 2PR/(P+R), in percent, as EVALB prints them.

One difference from running EVALB on two files: the gold tree's tags decide which positions
are punctuation in both trees (EVALB uses each tree's own), since the test trees from
`delinearize` carry predicted tags (or `XX`). With gold tags in the test trees the two agree.
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
    """The multiset of labelled brackets `(label, start, end)` of a tree, EVALB style: spans
    over the words left after deleting the positions `deleted` (0-based among the non-`-NONE-`
    words; usually the gold punctuation), `end` exclusive, labels as `evalb_label`; root labels
    (`IGNORED_LABELS`) and constituents over no remaining word are left out.

    Raises:
        ValueError: a word that is not the only child of a POS tag.
    """
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
    """Matched, gold and test bracket counts of one sentence.

    Raises:
        ValueError: the two trees do not have the same words in the same order.
    """
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
    """Corpus-level scores, as EVALB's summary with COLLINS.prm, of `test_trees` (predicted,
    over the same words in the same order; their POS tags are not used) against `gold_trees`
    (raw or preprocessed). `max_length`: score only sentences of at most this many words
    (EVALB's `CUTOFF_LEN`: punctuation counts, empty elements do not).

    Returns:
        `precision`, `recall`, `f1` (percent), `matched`, `gold`, `test` (bracket counts),
        `sentences` (scored), `exact` (sentences with matched = gold = test) and `skipped`
        (sentences without words, which EVALB skips too).

    Raises:
        ValueError: the two lists differ in length, or a pair of trees differs in its words
            (the message gives the 0-based sentence index).
    """
    if len(gold_trees) != len(test_trees):
        raise ValueError(
            f"{len(gold_trees)} gold trees but {len(test_trees)} test trees; "
            f"score one prediction per gold sentence")
    matched = gold = test = sentences = exact = skipped = 0
    for index, (gold_tree, test_tree) in enumerate(zip(gold_trees, test_trees)):
        length = len(tagged_words(gold_tree))
        if max_length is not None and length > max_length:
            continue
        if length == 0:
            skipped += 1
            continue
        try:
            score = score_sentence(gold_tree, test_tree)
        except ValueError as error:
            raise ValueError(f"sentence {index}: {error}") from None
        matched += score.matched
        gold += score.gold
        test += score.test
        sentences += 1
        exact += score.matched == score.gold == score.test
    precision = 100.0 * matched / test if test else 0.0
    recall = 100.0 * matched / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "matched": matched,
            "gold": gold, "test": test, "sentences": sentences, "exact": exact,
            "skipped": skipped}


def format_scores(scores: dict) -> str:
    """One line for logs: `F1 91.23 (P 91.50, R 90.96; 2416 sentences, 1050 exact)`."""
    return (
        f"F1 {scores['f1']:.2f} (P {scores['precision']:.2f}, R {scores['recall']:.2f}; "
        f"{scores['sentences']} sentences, {scores['exact']} exact)")
