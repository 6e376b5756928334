"""EVALB (COLLINS.prm) labelled bracketing scores: hand-computed cases and the WSJ sample."""
import collections

import nltk
import pytest

from pipelines.tasks.parsing import treebank
from pipelines.tasks.parsing.evalb import (
    brackets,
    format_scores,
    score_corpus,
    score_sentence,
)
from pipelines.tasks.parsing.linearize import delinearize, linearize

pytestmark = pytest.mark.xdist_group("test_evalb")  # its module fixtures: one worker


@pytest.fixture(scope="module")
def dev_raw(shared_data):
    path = shared_data / "ptb_sample" / "dev.mrg"
    if not path.is_file():
        pytest.fail(f"Penn Treebank sample not found at {path}: set $KT_DATA_DIR")
    trees = treebank.read_trees(path)
    assert len(trees) == 273
    return trees


@pytest.fixture(scope="module")
def dev(dev_raw):
    return [treebank.preprocess(tree) for tree in dev_raw]


def gold(text):
    return nltk.Tree.fromstring(text)


def predicted(target, gold_tree):
    """The parser's output for the gold tree's sentence: a delinearized target string."""
    tree, repairs = delinearize(target.split(), gold_tree.leaves())
    assert repairs == 0, "the hand-made predictions are well-formed"
    return tree


# "The cat sat on the mat ." -- the final period is punctuation, so spans run over 6 words.
# Gold brackets: S[0,6] NP[0,2] VP[2,6] PP[3,6] NP[4,6] -> 5 (TOP and POS tags not counted).
CAT = (
    "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))"
)


@pytest.mark.quick
def test_gold_brackets_of_the_example():
    assert brackets(gold(CAT), deleted={6}) == collections.Counter(
        {("S", 0, 6): 1, ("NP", 0, 2): 1, ("VP", 2, 6): 1, ("PP", 3, 6): 1, ("NP", 4, 6): 1}
    )
    # Without deleting the period S spans 7 words.
    assert ("S", 0, 7) in brackets(gold(CAT))


def test_gold_against_itself_scores_100_on_dev(dev):
    scores = score_corpus(dev, dev)
    assert scores["f1"] == scores["precision"] == scores["recall"] == 100.0
    assert scores["sentences"] == 273 and scores["exact"] == 273
    assert scores["matched"] == scores["gold"] == scores["test"] > 273 * 10


def test_delinearized_gold_scores_100_on_dev(dev):
    predictions = []
    for tree in dev:
        words, symbols = linearize(tree)
        predictions.append(delinearize(symbols, words)[0])
    scores = score_corpus(dev, predictions)
    assert scores["f1"] == 100.0 and scores["exact"] == 273


def test_raw_gold_scores_like_preprocessed_gold(dev_raw, dev):
    """EVALB deletes -NONE- words and strips function tags itself: raw trees score the same."""
    assert score_corpus(dev_raw, dev) == score_corpus(dev, dev)
    assert score_corpus(dev, dev_raw)["f1"] == 100.0


@pytest.mark.quick
def test_missing_constituent():
    # The NP "the mat" inside the PP is missing: 4 of 5 gold brackets are found, and all 4
    # test brackets are right. P = 4/4, R = 4/5, F1 = 2 * 1.0 * 0.8 / 1.8.
    tree = gold(CAT)
    test = predicted("(S (NP XX XX )NP (VP XX (PP XX XX XX )PP )VP XX )S", tree)
    assert score_sentence(tree, test) == (4, 5, 4)
    scores = score_corpus([tree], [test])
    assert scores["precision"] == pytest.approx(100.0)
    assert scores["recall"] == pytest.approx(80.0)
    assert scores["f1"] == pytest.approx(200 * 0.8 / 1.8)
    assert scores["exact"] == 0


@pytest.mark.quick
def test_wrong_label():
    # "The cat" labelled ADJP instead of NP: 4 of 5 brackets match on each side.
    tree = gold(CAT)
    test = predicted("(S (ADJP XX XX )ADJP (VP XX (PP XX (NP XX XX )NP )PP )VP XX )S", tree)
    assert score_sentence(tree, test) == (4, 5, 5)
    scores = score_corpus([tree], [test])
    assert scores["precision"] == pytest.approx(80.0)
    assert scores["recall"] == pytest.approx(80.0)
    assert scores["f1"] == pytest.approx(80.0)


QUOTED = "(TOP (S (`` ``) (NP (PRP We)) (VP (VBD won)) (. .) ('' '')))"
# Only "We won" remain after deleting `` . '': gold S[0,2] NP[0,1] VP[1,2].


@pytest.mark.parametrize(
    "target",
    [
        "(S XX (NP XX )NP (VP XX )VP XX XX )S",  # as in gold
        "(S (NP XX XX )NP (VP XX XX XX )VP )S",  # `` in the NP, . and '' in the VP
        "(S (X XX )X (NP XX )NP (VP XX XX XX )VP )S",  # `` alone in a constituent
    ],
)
def test_punctuation_attachment_does_not_change_the_score(target):
    tree = gold(QUOTED)
    test = predicted(target, tree)
    assert score_sentence(tree, test) == (3, 3, 3)
    assert score_corpus([tree], [test])["f1"] == 100.0


def test_punctuation_is_decided_by_the_gold_tags():
    # The same words, but "." tagged as a noun in gold: now it is a word and counts.
    tree = gold("(TOP (S (NP (PRP We)) (VP (VBD won) (NP (NN .)))))")
    test = predicted("(S (NP XX )NP (VP XX )VP XX )S", tree)
    # gold S[0,3] NP[0,1] VP[1,3] NP[2,3]; test S[0,3] NP[0,1] VP[1,2]
    assert score_sentence(tree, test) == (2, 4, 3)


def test_advp_and_prt_are_equal():
    # "He gave up ." -- gold S[0,3] NP[0,1] VP[1,3] PRT[2,3].
    tree = gold("(TOP (S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))) (. .)))")
    as_advp = predicted("(S (NP XX )NP (VP XX (ADVP XX )ADVP )VP XX )S", tree)
    assert score_sentence(tree, as_advp) == (4, 4, 4)
    as_adjp = predicted("(S (NP XX )NP (VP XX (ADJP XX )ADJP )VP XX )S", tree)
    assert score_sentence(tree, as_adjp) == (3, 4, 4)


def test_function_tags_and_indices_are_ignored():
    tree = gold("(TOP (S (NP-SBJ-1 (PRP He)) (VP=2 (VBD left)) (. .)))")
    test = predicted("(S (NP XX )NP (VP XX )VP XX )S", tree)
    assert score_sentence(tree, test) == (3, 3, 3)


def test_unary_chains_and_duplicates_count_as_a_multiset():
    # "Go ." -- gold S[0,1] and VP[0,1]: the unary chain counts twice.
    go = gold("(TOP (S (VP (VB Go)) (. .)))")
    assert score_sentence(go, predicted("(S XX XX )S", go)) == (1, 2, 1)
    # gold NP[0,1] twice; test NP[0,1] three times: only two can match.
    np = gold("(TOP (NP (NP (NN x))))")
    assert score_sentence(np, predicted("(NP (NP (NP XX )NP )NP )NP", np)) == (2, 2, 3)


def test_root_bracket_is_ignored():
    tree = gold("(TOP (S (NP (PRP It)) (VP (VBZ works))))")
    assert all(label != "TOP" for label, _, _ in brackets(tree))
    unlabelled = gold("( (S (NP (PRP It)) (VP (VBZ works))) )")
    assert brackets(unlabelled) == brackets(tree)
    # A flat prediction (root only) has no brackets at all.
    flat, _ = delinearize([], tree.leaves())
    assert score_sentence(tree, flat) == (0, 3, 0)
    assert score_corpus([tree], [flat])["f1"] == 0.0


def test_corpus_scores_sum_counts_over_sentences():
    cat, go = gold(CAT), gold("(TOP (S (VP (VB Go)) (. .)))")
    tests = [
        predicted("(S (NP XX XX )NP (VP XX (PP XX XX XX )PP )VP XX )S", cat),  # 4, 5, 4
        predicted("(S XX XX )S", go),  # 1, 2, 1
    ]
    scores = score_corpus([cat, go], tests)
    assert (scores["matched"], scores["gold"], scores["test"]) == (5, 7, 5)
    # micro-averaged: R = 5/7, not the mean of 80% and 50%
    assert scores["recall"] == pytest.approx(100 * 5 / 7)
    assert scores["precision"] == pytest.approx(100.0)
    assert scores["sentences"] == 2 and scores["exact"] == 0
    assert format_scores(scores).startswith("F1 83.33 (P 100.00, R 71.43; 2 sentences")


def test_max_length_keeps_short_sentences(dev):
    short = score_corpus(dev, dev, max_length=10)
    lengths = [len(tree.leaves()) for tree in dev]
    assert short["sentences"] == sum(length <= 10 for length in lengths)
    assert 0 < short["sentences"] < len(dev)


@pytest.mark.quick
def test_mismatched_inputs_are_errors():
    cat = gold(CAT)
    other = gold("(TOP (S (NP (PRP It)) (VP (VBZ works))))")
    with pytest.raises(ValueError, match="sentence 1: the test tree's words differ"):
        score_corpus([cat, cat], [cat, other])
    with pytest.raises(ValueError, match="1 gold trees but 2 test trees"):
        score_corpus([cat], [cat, cat])
