"""Reading Penn Treebank files and the standard preprocessing, on the real WSJ sample."""
import nltk
import pytest

from pipelines.tasks.parsing import treebank
from pipelines.tasks.parsing.treebank import (
    TreebankFormatError,
    parse_trees,
    preprocess,
    read_trees,
    read_wsj_split,
    strip_label,
    wsj_split_files,
)

pytestmark = pytest.mark.xdist_group("test_treebank")  # its module fixtures: one worker

# Counts from ptb_sample/SOURCES.md: trees, and tokens without -NONE- elements.
SAMPLE_COUNTS = {"train.mrg": (3396, 81793), "dev.mrg": (273, 6327)}


@pytest.fixture(scope="module")
def sample_dir(shared_data):
    path = shared_data / "ptb_sample"
    if not (path / "train.mrg").is_file():
        pytest.fail(f"Penn Treebank sample not found at {path}: set $KT_DATA_DIR")
    return path


@pytest.fixture(scope="module")
def raw_sample(sample_dir):
    return {name: read_trees(sample_dir / name) for name in SAMPLE_COUNTS}


@pytest.mark.parametrize("name", sorted(SAMPLE_COUNTS))
def test_sample_files_read_with_documented_counts(raw_sample, name):
    trees = raw_sample[name]
    expected_trees, expected_tokens = SAMPLE_COUNTS[name]
    assert len(trees) == expected_trees
    assert sum(len(treebank.sentence(tree)) for tree in trees) == expected_tokens
    assert all(tree.label() == "" and len(tree) == 1 for tree in trees)


def test_first_sample_tree_preprocessed(raw_sample):
    tree = preprocess(raw_sample["train.mrg"][0])
    assert tree.label() == "TOP"
    assert tree[0].label() == "S"
    assert tree.leaves()[:4] == ["Pierre", "Vinken", ",", "61"]
    assert [child.label() for child in tree[0]] == ["NP", "VP", "."]


def test_preprocess_sample_is_clean(raw_sample):
    for raw in raw_sample["train.mrg"] + raw_sample["dev.mrg"]:
        before = raw.copy(deep=True)
        tree = preprocess(raw)
        assert raw == before, "preprocess must not modify its input"
        assert tree.label() == "TOP" and len(tree) >= 1
        assert tree.leaves() == treebank.sentence(raw)
        assert [tag for _, tag in tree.pos()] == treebank.pos_tags(raw)
        for node in tree.subtrees():
            assert len(node) > 0
            if node is tree or treebank.is_preterminal(node):
                continue
            label = node.label()
            assert label and "=" not in label and "|" not in label
            assert "-" not in label or label.startswith("-")


@pytest.mark.quick
def test_preprocess_rules_on_a_hand_made_tree():
    raw = nltk.Tree.fromstring(
        """( (S (NP-SBJ-1 (NNP Mr.) (NNP Smith))
                (VP (VBD gave)
                    (ADVP|PRT (RP up))
                    (NP (-NONE- *T*-2))
                    (PP-LOC=3 (IN in) (NP (NNP May)))
                    (S (NP-SBJ (-NONE- *-1)) (VP (TO to) (VP (VB go)))))
                (. .)) )"""
    )
    expected = nltk.Tree.fromstring(
        """(TOP (S (NP (NNP Mr.) (NNP Smith))
                  (VP (VBD gave)
                      (ADVP (RP up))
                      (PP (IN in) (NP (NNP May)))
                      (S (VP (TO to) (VP (VB go)))))
                  (. .)))"""
    )
    assert preprocess(raw) == expected


def test_preprocess_root_variants():
    bare = nltk.Tree.fromstring("(S (NP (PRP It)) (VP (VBZ works)))")
    assert preprocess(bare) == nltk.Tree("TOP", [bare])
    rooted = nltk.Tree.fromstring("(ROOT (S (NP (PRP It)) (VP (VBZ works))))")
    assert preprocess(rooted) == nltk.Tree("TOP", [bare])
    only_empty = nltk.Tree.fromstring("( (S (NP-SBJ (-NONE- *))) )")
    assert preprocess(only_empty) == nltk.Tree("TOP", [])
    with pytest.raises(ValueError, match="not the only child of a POS tag"):
        preprocess(nltk.Tree.fromstring("( (S (NP the dog) (VP (VBD ran))) )"))


@pytest.mark.quick
@pytest.mark.parametrize(
    "label, expected",
    [
        ("NP-SBJ-1", "NP"),
        ("PP-LOC=2", "PP"),
        ("NP=3", "NP"),
        ("ADVP|PRT", "ADVP"),
        ("PRT|ADVP", "PRT"),
        ("-LRB-", "-LRB-"),
        ("-NONE-", "-NONE-"),
        ("S", "S"),
    ],
)
def test_strip_label(label, expected):
    assert strip_label(label) == expected


GOOD_TREE = "( (S (NP (DT The) (NN cat)) (VP (VBD sat))) )\n"


@pytest.mark.quick
@pytest.mark.parametrize(
    "text, where",
    [
        (GOOD_TREE + "( (S (NP (DT A) (NN dog)) (VP (VBD ran)) )\n", "tree 2 (line 2)"),
        (GOOD_TREE + GOOD_TREE + "( (S (NP (DT A)) ) ))\n", "line 3"),
        (GOOD_TREE + "garbage\n", "line 2"),
        (GOOD_TREE + "\n( (S (NP (DT the) cat) (VP (VBD sat))) )\n", "tree 2 (line 3)"),
        ("( (S (NP (DT)) (VP (VBD sat))) )\n", "tree 1 (line 1)"),
        (GOOD_TREE + "( (S (NP (DT the) (NN cat)) (VP sat ran)) )\n", "tree 2 (line 2)"),
    ],
    ids=["unclosed", "stray-close", "text-outside", "mixed-words", "empty-tag", "bare-words"],
)
def test_malformed_file_error_names_file_and_place(tmp_path, text, where):
    path = tmp_path / "broken.mrg"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TreebankFormatError) as info:
        read_trees(path)
    message = str(info.value)
    assert str(path) in message
    assert where in message


def test_parse_trees_reads_consecutive_trees_and_both_wrappers():
    trees = parse_trees("((S (NP (PRP I)) (VP (VBD ran)))) ( (FRAG (NP (NN Fire))) )")
    assert [preprocess(tree)[0].label() for tree in trees] == ["S", "FRAG"]


def test_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.mrg"):
        read_trees(tmp_path / "nothing.mrg")
    with pytest.raises(FileNotFoundError, match="no .mrg files"):
        read_trees(tmp_path)


def _write_wsj(root, sections):
    for section in sections:
        folder = root / f"{section:02d}"
        folder.mkdir(parents=True)
        for number in (section * 100 + 1, section * 100):  # written out of order on purpose
            (folder / f"wsj_{number:04d}.mrg").write_text(
                f"( (S (NP-SBJ (NNP File{number})) (VP (VBD ran)) (. .)) )\n", encoding="utf-8"
            )


def test_wsj_split_files_follow_the_standard_sections(tmp_path):
    _write_wsj(tmp_path, range(25))
    train = wsj_split_files(tmp_path, "train")
    assert [path.parent.name for path in train[::2]] == [f"{s:02d}" for s in range(2, 22)]
    assert train[0].name == "wsj_0200.mrg" and train[1].name == "wsj_0201.mrg"
    assert [path.name for path in wsj_split_files(tmp_path, "dev")] == [
        "wsj_2200.mrg",
        "wsj_2201.mrg",
    ]
    assert [path.parent.name for path in wsj_split_files(tmp_path, "test")] == ["23", "23"]
    test_trees = read_wsj_split(tmp_path, "test")
    assert [tree.leaves()[0] for tree in test_trees] == ["File2300", "File2301"]
    assert test_trees[0][0][0].label() == "NP"
    assert len(read_trees(tmp_path / "22")) == 2
    assert len(read_trees(tmp_path)) == 50


def test_wsj_split_errors(tmp_path):
    _write_wsj(tmp_path, [22])
    with pytest.raises(ValueError, match="unknown WSJ split"):
        wsj_split_files(tmp_path, "valid")
    with pytest.raises(FileNotFoundError, match="section 02"):
        wsj_split_files(tmp_path, "train")
    (tmp_path / "23").mkdir()
    with pytest.raises(FileNotFoundError, match="no wsj_"):
        wsj_split_files(tmp_path, "test")
