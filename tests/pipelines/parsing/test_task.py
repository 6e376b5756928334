"""The ptb_parsing task: registry, split files from the WSJ sample, EVALB scoring, run.py prepare."""
import os
import pathlib
import shutil

import pytest

from pipelines import tasks
from pipelines.data.text_io import read_lines
from pipelines.errors import DataError
from pipelines.tasks import get_task
from pipelines.tasks.parsing import linearize, treebank
from pipelines.tasks.parsing.task import PtbParsingTask
from tests.pipelines.run_helpers import run_stages

pytestmark = pytest.mark.xdist_group("test_task")  # its module fixtures: one worker

TRAIN_TREES = 3_396  # ptb_sample/SOURCES.md
DEV_TREES = 273

# One WSJ-style tree with an empty element and function tags, for a hand-made WSJ layout.
WSJ_TREE = (
    "( (S (NP-SBJ-1 (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog)) (S (NP-SBJ (-NONE- *-1)))) "
    "(. .)) )\n"
)


@pytest.fixture(scope="module")
def sample(shared_data):
    path = shared_data / "ptb_sample"
    if not (path / "train.mrg").is_file():
        pytest.fail(f"Penn Treebank sample not found at {path}: set $KT_DATA_DIR")
    return path


@pytest.fixture(scope="module")
def task(sample):
    return get_task("ptb_parsing", train_trees=str(sample / "train.mrg"),
                    dev_trees=str(sample / "dev.mrg"), test_trees=str(sample / "dev.mrg"))


@pytest.fixture(scope="module")
def written(task, tmp_path_factory):
    """A work dir with the train and dev files written once; returns (work_dir, log lines)."""
    work_dir = tmp_path_factory.mktemp("ptb_work")
    lines = []
    for split in ("train", "dev"):
        task.split_files(split, work_dir, log=lines.append)
    return work_dir, lines


@pytest.fixture(scope="module")
def dev_text(task, written):
    src, tgt = task.split_files("dev", written[0], log=lambda _: None)
    return read_lines(src), read_lines(tgt)


def test_registry_builds_the_task_with_the_papers_defaults(task, sample):
    assert "ptb_parsing" in tasks.TASKS
    assert isinstance(task, PtbParsingTask)
    assert (task.name, task.source_lang, task.target_lang) == ("ptb_parsing", "en", "tree")
    assert (task.vocab_size, task.preset) == (16_000, "parsing_wsj")
    d = task.decoding
    assert (d.beam_size, d.alpha, d.extra_length) == (21, 0.3, 300)
    assert task.metric_name == "f1"
    assert (task.max_source_length, task.max_target_length) == (128, 512)
    assert dict(task.tree_files)["test"] == str(sample / "dev.mrg")
    small = get_task("ptb_parsing", train_trees=str(sample / "train.mrg"), vocab_size=1_000,
                     max_source_length=None)
    assert (small.vocab_size, small.max_source_length) == (1_000, 128)
    with pytest.raises(DataError, match="^task ptb_parsing takes no --train_src; its data "
                                        "flags are --data_dir, "):
        get_task("ptb_parsing", train_src="x.en")


def test_split_files_write_aligned_words_targets_and_gold_trees(task, written):
    work_dir, log = written
    out = work_dir / "data" / "ptb_parsing"
    for split, count in (("train", TRAIN_TREES), ("dev", DEV_TREES)):
        src, tgt = task.split_files(split, work_dir)
        assert (src, tgt) == (out / f"{split}.src", out / f"{split}.tgt")
        sources, targets = read_lines(src), read_lines(tgt)
        gold = task.gold_trees(split, work_dir)
        assert len(sources) == len(targets) == len(gold) == count
        for words, target, tree in zip(sources, targets, gold):
            word_symbols = [s for s in target.split() if linearize.is_word_symbol(s)]
            assert words and len(words.split()) == len(word_symbols)
            assert set(word_symbols) <= set(treebank.POS_TAGS)
            assert linearize.linearize(tree) == (words.split(), target.split())
        assert any(f"{split}: {count:,} trees from 1 file(s)" in line for line in log)
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*"))
    first = read_lines(out / "train.tgt")[0]
    assert first.startswith("(S (NP (NP NNP NNP )NP , (ADJP (NP CD NNS )NP JJ )ADJP , )NP")


def test_target_form_xx_writes_placeholders_and_scores(sample, tmp_path):
    """The "xx" form (Vinyals et al.): one XX per word; switching the form rewrites the files,
    and gold XX targets still score 100 (scoring uses the gold trees' tags)."""
    with pytest.raises(DataError, match="target_form"):
        get_task("ptb_parsing", target_form="tagged")
    tags = get_task("ptb_parsing", dev_trees=str(sample / "dev.mrg"))
    xx = get_task("ptb_parsing", dev_trees=str(sample / "dev.mrg"), target_form="xx")
    src, tgt = tags.split_files("dev", tmp_path, log=print)
    tagged = read_lines(tgt)  # before the xx form rewrites the same files
    assert "NN" in tagged[0].split()
    lines = []
    src, tgt = xx.split_files("dev", tmp_path, log=lines.append)
    sources, references = read_lines(src), read_lines(tgt)
    assert len(lines) == 1  # written again, not reused from the tags form
    assert {s for t in references for s in t.split() if linearize.is_word_symbol(s)} == {"XX"}
    scores = xx.score(sources, references, references)
    assert (scores["f1"], scores["repaired"]) == (100.0, 0)
    # A POS tag is not a word symbol of the xx form: dropped and repaired.
    assert xx.score(sources, tagged, references)["repaired"] == DEV_TREES - sum(
        not words for words in sources)


def test_vocab_symbols_hold_the_standard_label_inventory(sample, tmp_path):
    targets = tmp_path / "train.tgt"
    targets.write_text("(S (NP NNP )NP (VP VBZ )VP . )S\n")
    tags = set(get_task("ptb_parsing").vocab_symbols(targets))
    xx = set(get_task("ptb_parsing", target_form="xx").vocab_symbols(targets))
    brackets = {f"\u2581{b}{label}" for label in treebank.PHRASE_LABELS for b in "()"}
    assert brackets <= tags and brackets <= xx
    assert {"\u2581(WHADJP", "\u2581)WHADJP", "\u2581(FRAG"} <= tags
    assert {f"\u2581{tag}" for tag in treebank.POS_TAGS} <= tags
    assert "\u2581XX" in xx and "\u2581NN" not in xx and "\u2581XX" not in tags
    assert "\u2581NNP" in xx  # what the training targets hold is kept whatever the form


def test_split_files_are_reused_until_an_input_changes(sample, tmp_path):
    trees = tmp_path / "dev.mrg"
    shutil.copyfile(sample / "dev.mrg", trees)
    task = get_task("ptb_parsing", dev_trees=str(trees))
    lines = []
    src, _ = task.split_files("dev", tmp_path / "work", log=lines.append)
    written_at = src.stat().st_mtime_ns
    assert task.split_files("dev", tmp_path / "work", log=lines.append)[0] == src
    assert len(lines) == 1 and src.stat().st_mtime_ns == written_at
    stat = trees.stat()
    os.utime(trees, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    task.split_files("dev", tmp_path / "work", log=lines.append)
    assert len(lines) == 2 and len(read_lines(src)) == DEV_TREES


def test_gold_trees_as_hypotheses_score_100(task, written, dev_text):
    sources, references = dev_text
    expected = {"f1": 100.0, "precision": 100.0, "recall": 100.0, "exact": DEV_TREES,
                "sentences": DEV_TREES, "repaired": 0}
    # Found by content (how pipelines.stages calls it), by split and work dir, and directly.
    assert task.score(sources, references, references) == expected
    assert task.score(sources, references, references, split="dev",
                      work_dir=written[0]) == expected
    gold = task.gold_trees("dev", written[0])
    assert task.score(sources, references, references, gold_trees=gold) == expected
    head = task.score(sources[:10], references[:10], references[:10])
    assert (head["f1"], head["sentences"], head["repaired"]) == (100.0, 10, 0)


def test_corrupted_hypotheses_are_repaired_and_score_lower(task, written, dev_text):
    sources, references = dev_text
    hypotheses = list(references)
    corrupted = 0
    for index, target in enumerate(references[:40]):
        symbols = target.split()
        if ")NP" in symbols:  # the first NP now swallows the rest of its parent
            symbols.remove(")NP")
            hypotheses[index] = " ".join(symbols)
            corrupted += 1
    hypotheses[50] = ""  # nothing decoded: a flat tree
    hypotheses[51] = "NN )S (BOGUS"  # unmatched close, an unclosed bracket, missing words
    scores = task.score(sources, hypotheses, references, split="dev", work_dir=written[0])
    assert corrupted > 30
    assert scores["repaired"] == corrupted + 2
    assert scores["sentences"] == DEV_TREES
    assert scores["f1"] < 100.0 and scores["recall"] < 100.0
    assert scores["exact"] < DEV_TREES


def test_score_uses_gold_pos_tags_for_punctuation(task, dev_text):
    """Moving a final period in or out of a constituent is not an error (COLLINS.prm)."""
    sources, references = dev_text
    index = next(i for i, t in enumerate(references) if t.endswith(". )S"))
    moved = references[index].split()
    moved[-2:] = [")S", "."]  # the period attached to the root instead of S
    hypotheses = list(references)
    hypotheses[index] = " ".join(moved)
    scores = task.score(sources, hypotheses, references)
    assert (scores["f1"], scores["exact"], scores["repaired"]) == (100.0, DEV_TREES, 0)


def test_score_refuses_sentences_that_are_not_a_split(task, dev_text):
    sources, references = dev_text
    shuffled = sources[1:2] + sources[:1]
    with pytest.raises(DataError, match="cannot find the gold trees"):
        task.score(shuffled, references[:2], references[:2])
    with pytest.raises(ValueError, match="one hypothesis per sentence"):
        task.score(sources, references[:-1], references)


def test_the_task_owns_its_metric(task, dev_text):
    sources, references = dev_text
    scores = task.score(sources, references, references)
    assert scores[task.metric_name] == scores["f1"] == 100.0 and "sacrebleu" not in scores
    translation = get_task("multi30k_ende")
    bleu = translation.score(sources[:5], references[:5], references[:5])
    assert bleu[translation.metric_name] == bleu["sacrebleu"] == pytest.approx(100.0)


@pytest.mark.quick
def test_wsj_sections_below_data_dir(tmp_path):
    root = tmp_path / "treebank_3"
    for section in range(0, 25):
        folder = root / "parsed" / "mrg" / "wsj" / f"{section:02d}"
        folder.mkdir(parents=True)
        (folder / f"wsj_{section:02d}01.mrg").write_text(WSJ_TREE * (2 if section == 2 else 1))
    task = get_task("ptb_parsing", data_dir=str(root))
    assert task.wsj_root() == root / "parsed" / "mrg" / "wsj"
    counts = {split: len(read_lines(task.split_files(split, tmp_path / "w", log=print)[0]))
              for split in ("train", "dev", "test")}
    assert counts == {"train": 21, "dev": 1, "test": 1}
    src, tgt = task.split_files("test", tmp_path / "w")
    assert read_lines(src) == ["John has a dog ."]
    assert read_lines(tgt) == ["(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"]
    # An explicit file wins over the sections for its split.
    mixed = get_task("ptb_parsing", data_dir=str(root), test_trees=str(root / "x.mrg"))
    with pytest.raises(DataError, match="--test_trees"):
        mixed.split_files("test", tmp_path / "w2")


@pytest.mark.quick
def test_missing_or_malformed_trees_are_reported(tmp_path):
    with pytest.raises(DataError, match="--test_trees FILE"):
        get_task("ptb_parsing").split_files("test", tmp_path)
    with pytest.raises(DataError, match="no WSJ section folders"):
        get_task("ptb_parsing", data_dir=str(tmp_path)).split_files("dev", tmp_path)
    bad = tmp_path / "bad.mrg"
    bad.write_text(WSJ_TREE + "( (S (NP (NN x)) )\n")
    with pytest.raises(DataError, match=r"bad\.mrg: tree 2 \(line 2\)"):
        get_task("ptb_parsing", dev_trees=str(bad)).split_files("dev", tmp_path / "w")
    assert not (tmp_path / "w" / "data" / "ptb_parsing" / "dev.src").exists()


def test_trees_round_trip_through_the_trees_file(task, written):
    gold = task.gold_trees("dev", written[0])
    direct = task.read_split("dev")
    assert gold == direct
    assert all(tree.label() == treebank.ROOT_LABEL for tree in gold)


def test_run_prepare_on_the_sample(sample, tmp_path, shared_data):
    model_dir = tmp_path / "model"
    log = run_stages("prepare", shared_data, task="ptb_parsing",
                     train_trees=str(sample / "train.mrg"), dev_trees=str(sample / "dev.mrg"),
                     test_trees=str(sample / "dev.mrg"), model_dir=str(model_dir),
                     vocab_size=1000).log
    assert (model_dir / "spm.model").is_file()
    data = pathlib.Path(model_dir) / "data" / "ptb_parsing"
    assert len(read_lines(data / "train.src")) == TRAIN_TREES
    assert len(read_lines(data / "test.tgt")) == DEV_TREES
    assert "train: 3,396 trees from 1 file(s)" in log
    assert "pairs read 3,396" in log
