"""Linearized trees (POS tags kept, or Vinyals et al.'s XX) and the repairing inverse, on the
real WSJ sample."""
import random

import nltk
import pytest

from pipelines.tasks.parsing import treebank
from pipelines.tasks.parsing.linearize import (
    PLACEHOLDER,
    delinearize,
    from_target_string,
    is_well_formed,
    linearize,
    to_target_string,
)

pytestmark = pytest.mark.xdist_group("test_linearize")  # its module fixtures: one worker

SAMPLE_FILES = {"train.mrg": 3396, "dev.mrg": 273}


@pytest.fixture(scope="module")
def sample(shared_data):
    path = shared_data / "ptb_sample"
    if not (path / "train.mrg").is_file():
        pytest.fail(f"Penn Treebank sample not found at {path}: set $KT_DATA_DIR")
    return {name: treebank.read_trees(path / name, preprocessed=True) for name in SAMPLE_FILES}


def with_placeholder_tags(tree):
    """A copy of `tree` with every POS tag replaced by XX: what delinearize can give back."""
    copy = tree.copy(deep=True)
    for node in copy.subtrees(treebank.is_preterminal):
        node.set_label(PLACEHOLDER)
    return copy


def tree(text):
    return nltk.Tree.fromstring(text)


@pytest.mark.quick
def test_linearize_example_from_vinyals():
    gold = tree("(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))")
    words, symbols = linearize(gold, "xx")
    assert words == ["John", "has", "a", "dog", "."]
    assert to_target_string(symbols) == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"
    assert from_target_string(" (S  (NP XX )NP\t)S \n") == ["(S", "(NP", "XX", ")NP", ")S"]


def test_linearize_keeps_pos_tags_by_default():
    gold = tree("(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))")
    words, symbols = linearize(gold)
    assert words == ["John", "has", "a", "dog", "."]
    assert to_target_string(symbols) == "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"
    assert delinearize(symbols, words) == (gold, 0)
    with pytest.raises(ValueError, match="target_form"):
        linearize(gold, "tagged")


def test_linearize_can_write_the_words_themselves():
    gold = tree("(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))")
    words, symbols = linearize(gold, "words")
    assert to_target_string(symbols) == "(S (NP John )NP (VP has (NP a dog )NP )VP . )S"
    assert delinearize(symbols, words, word_label="XX") == (with_placeholder_tags(gold), 0)


def test_linearize_without_top_root_writes_the_root():
    words, symbols = linearize(tree("(NP (DT the) (NN dog))"), "xx")
    assert (words, symbols) == (["the", "dog"], ["(NP", "XX", "XX", ")NP"])
    rebuilt, repairs = delinearize(symbols, words)
    assert rebuilt == tree("(TOP (NP (XX the) (XX dog)))") and repairs == 0


def test_linearize_rejects_unpreprocessed_trees():
    with pytest.raises(ValueError, match="mixes words"):
        linearize(tree("(TOP (S (NP the dog) (VP (VBD ran))))"))
    with pytest.raises(ValueError, match="not under a POS tag"):
        linearize(nltk.Tree("TOP", ["word", nltk.Tree("NN", ["dog"])]))
    with pytest.raises(ValueError, match="no words"):
        linearize(nltk.Tree("TOP", [nltk.Tree("S", [nltk.Tree("NP", [])])]))


@pytest.mark.parametrize("target_form", ["tags", "xx", "words"])
@pytest.mark.parametrize("name", sorted(SAMPLE_FILES))
def test_every_sample_tree_round_trips(sample, name, target_form):
    """With tags the gold tree comes back exactly; with XX or the words, with every tag
    replaced by XX."""
    trees = sample[name]
    assert len(trees) == SAMPLE_FILES[name]
    round_tripped = 0
    for gold in trees:
        words, symbols = linearize(gold, target_form)
        assert words == gold.leaves()
        assert len(symbols) == len(words) + 2 * (len(list(gold.subtrees())) - len(words) - 1)
        text = to_target_string(symbols)
        rebuilt, repairs = delinearize(from_target_string(text), words,
                                       word_label="XX" if target_form == "words" else None)
        assert repairs == 0, text
        expected = gold if target_form == "tags" else with_placeholder_tags(gold)
        assert rebuilt == expected, text
        round_tripped += 1
    assert round_tripped == SAMPLE_FILES[name]


@pytest.mark.quick
@pytest.mark.parametrize(
    "target, words, expected, repairs",
    [
        # extra closing bracket: dropped
        ("(S XX )S )NP", "a", "(TOP (S (XX a)))", 1),
        # missing closing brackets: the left-over word goes to the innermost open
        # constituent, then NP and S are closed
        ("(S (NP XX", "a b", "(TOP (S (NP (XX a) (XX b))))", 3),
        # mismatched closing label: the opener's label wins
        ("(S (NP XX )VP XX )S", "a b", "(TOP (S (NP (XX a)) (XX b)))", 1),
        # too many XX: the extra one is dropped
        ("(S XX XX XX )S", "a b", "(TOP (S (XX a) (XX b)))", 1),
        # too few XX: the missing word goes under the root (no constituent is open)
        ("(S XX )S", "a b", "(TOP (S (XX a)) (XX b))", 1),
        # unknown symbols: dropped
        ("(S <eos> XX ( ) foo ((NP )S", "a", "(TOP (S (XX a)))", 5),
        # a constituent over no word: dropped
        ("(S (NP )NP XX )S", "a", "(TOP (S (XX a)))", 1),
        # empty prediction: a flat tree
        ("", "a b c", "(TOP (XX a) (XX b) (XX c))", 3),
        ("", "", "(TOP )", 0),
        # several roots are kept under TOP
        ("(S XX )S (NP XX )NP", "a b", "(TOP (S (XX a)) (NP (XX b)))", 0),
    ],
)
def test_delinearize_repairs(target, words, expected, repairs):
    rebuilt, count = delinearize(from_target_string(target), words.split(), word_symbols={"XX"})
    assert rebuilt == tree(expected)
    assert count == repairs
    assert is_well_formed(rebuilt, words.split(), word_symbols={"XX"})


def test_delinearize_takes_any_non_bracket_symbol_as_a_word_by_default():
    rebuilt, count = delinearize("(S (NP DT NN )NP foo VBZ )S".split(), "a b c".split())
    assert rebuilt == tree("(TOP (S (NP (DT a) (NN b)) (foo c)))")
    assert count == 1  # VBZ has no word left
    rebuilt, count = delinearize("(S DT NN VBZ )S".split(), "a b".split(), word_symbols={"XX"})
    # Tags are unknown symbols when only XX is a word: S closes with no word and is dropped,
    # and the words left over go to the root.
    assert rebuilt == tree("(TOP (XX a) (XX b))")
    assert count == 3 + 1 + 2  # three unknown symbols, an empty S, two words left over


def test_delinearize_with_a_label_set_drops_unknown_labels():
    rebuilt, count = delinearize("(S (FOO XX )FOO )S".split(), ["a"], labels={"S", "NP"})
    assert rebuilt == tree("(TOP (S (XX a)))")
    assert count == 2


def corrupt(symbols, rng, vocabulary):
    """One to three random edits of a target sequence: delete, insert, swap, duplicate,
    truncate."""
    symbols = list(symbols)
    for _ in range(rng.randint(1, 3)):
        operation = rng.choice(["delete", "insert", "swap", "duplicate", "truncate"])
        if operation == "insert" or not symbols:
            symbols.insert(rng.randint(0, len(symbols)), rng.choice(vocabulary))
            continue
        index = rng.randrange(len(symbols))
        if operation == "delete":
            del symbols[index]
        elif operation == "swap":
            other = rng.randrange(len(symbols))
            symbols[index], symbols[other] = symbols[other], symbols[index]
        elif operation == "duplicate":
            symbols.insert(index, symbols[index])
        else:
            symbols = symbols[:index]
    return symbols


def check_valid(rebuilt, words):
    """The promise of delinearize, checked without is_well_formed."""
    assert rebuilt.label() == "TOP"
    assert rebuilt.leaves() == words
    for node in rebuilt.subtrees():
        assert len(node) > 0
        if node is rebuilt:
            continue
        if any(isinstance(child, str) for child in node):
            assert node.label() == PLACEHOLDER and len(node) == 1
        else:
            assert node.label() and all(isinstance(child, nltk.Tree) for child in node)


def test_random_corruptions_always_give_a_tree_over_the_words(sample):
    rng = random.Random(20240611)
    trees = sample["dev.mrg"]
    vocabulary = ["XX", "(NP", ")NP", "(VP", ")VP", "(S", ")S", "(PP", ")SBAR", "<unk>", ")", "("]
    count = repaired = 0
    for _ in range(400):
        gold = rng.choice(trees)
        words, symbols = linearize(gold, "xx")
        corrupted = corrupt(symbols, rng, vocabulary)
        rebuilt, repairs = delinearize(corrupted, words, word_symbols={"XX"})
        check_valid(rebuilt, words)
        assert is_well_formed(rebuilt, words, word_symbols={"XX"})
        _, clean = linearize(rebuilt, "xx")
        if repairs == 0:
            # no repair means the corrupted sequence was itself a well-formed tree
            assert clean == corrupted
        else:
            repaired += 1
        # the repaired tree is a fixed point
        assert delinearize(clean, words, word_symbols={"XX"}) == (rebuilt, 0)
        count += 1
    assert count == 400
    assert repaired > 300  # almost every corruption needs a repair


def test_truncation_at_every_position_gives_the_words(sample):
    gold = sample["dev.mrg"][0]
    words, symbols = linearize(gold)
    for end in range(len(symbols) + 1):
        rebuilt, repairs = delinearize(symbols[:end], words)
        assert rebuilt.leaves() == words
        assert is_well_formed(rebuilt, words)
        assert (repairs == 0) == (end == len(symbols))


@pytest.mark.quick
def test_is_well_formed_rejects_bad_trees():
    words = ["a", "b"]
    assert is_well_formed(tree("(TOP (S (XX a) (XX b)))"), words)
    assert not is_well_formed(tree("(TOP (S (XX a) (XX b)))"), ["b", "a"])
    assert not is_well_formed(tree("(S (XX a) (XX b))"), words)
    assert is_well_formed(tree("(TOP (S (NN a) (XX b)))"), words)
    assert not is_well_formed(tree("(TOP (S (NN a) (XX b)))"), words, word_symbols={"XX"})
    assert not is_well_formed(tree("(TOP (S (XX a) (XX b) (NP )))"), words)
    assert not is_well_formed(tree("(TOP (S a (XX b)))"), words)
