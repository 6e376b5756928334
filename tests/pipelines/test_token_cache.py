"""The token cache: shards tokenized on several processes give the in-graph tokenizer's ids,
a build killed with SIGKILL resumes from its finished shards, and progress lines come with
a rate and an ETA."""
import gzip
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from pipelines.data import progress, text_io, token_cache, token_shards, vocab
from pipelines.errors import DataError
from pipelines.model_dir.files import count_lines

pytestmark = pytest.mark.xdist_group("test_token_cache")  # its module fixtures: one worker

ROOT = pathlib.Path(__file__).resolve().parents[2]
QUIET = lambda message: None  # noqa: E731
ODD_LINES = [  # what the cleaned text may hold besides plain sentences (dev keeps empty lines)
    "", "Ein Café über 3 Straßen, „zitiert“ — ja!", "emoji 🙂 and CJK 漢字 never seen",
    "tabs\tinside  and  double  spaces", "x" * 3000,
]


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    """A 1,000-piece vocabulary and 2,000 cleaned Multi30k pairs (plus odd lines)."""
    work = tmp_path_factory.mktemp("token_cache")
    sides = {}
    for lang in ("en", "de"):
        text = gzip.decompress((shared_data / "multi30k" / f"train.{lang}.gz").read_bytes())
        lines = text.decode("utf-8").splitlines()[:2000] + ODD_LINES
        (work / f"raw.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        sides[lang] = lines
    proto = vocab.train_sentencepiece(sides["en"] + sides["de"], 1000)
    clean = text_io.clean_parallel(work / "raw.en", work / "raw.de", work / "clean",
                                   drop_empty=False, log=QUIET)
    return work, proto, clean


def in_graph_ids(proto: bytes, path) -> list[list[int]]:
    """What the in-graph tokenizer (training's and the SavedModel's) gives for each line."""
    lines = text_io.read_lines(path)
    return vocab.load_tokenizer(proto).tokenize(tf.constant(lines)).to_list()


def cached_pairs(cache: token_cache.TokenCache) -> list[tuple[list[int], list[int]]]:
    return [(s.tolist(), t.tolist()) for s, t in cache.dataset().as_numpy_iterator()]


def test_shards_on_several_processes_give_the_in_graph_tokenizers_ids(corpus, tmp_path):
    work, proto, clean = corpus
    logs = []
    cache = token_cache.load_or_build_cache(clean.source_path, clean.target_path, proto,
                                            tmp_path / "cache", shard_pairs=300, workers=2,
                                            log=logs.append)
    assert "2,005 pairs in 7 shards on 2 processes" in logs[0]
    assert len(cache.shard_files()) == 7
    source = in_graph_ids(proto, clean.source_path)
    target = in_graph_ids(proto, clean.target_path)
    assert cached_pairs(cache) == list(zip(source, target))
    assert cache.lengths.tolist() == [[len(s), len(t)] for s, t in zip(source, target)]
    assert [] in source  # the empty line
    # The elements training reads are those of the cache format before shards (Dataset.save).
    spec = tf.RaggedTensorSpec(tf.TensorShape([None]), tf.int32, 0, tf.int64)
    assert cache.dataset().element_spec == (spec, spec)
    again = token_cache.load_or_build_cache(clean.source_path, clean.target_path, proto,
                                            tmp_path / "cache", log=logs.append)
    assert "cache: reusing" in logs[-1] and np.array_equal(again.lengths, cache.lengths)


@pytest.mark.quick
def test_shard_offsets_cut_where_lines_end(tmp_path):
    path = tmp_path / "f"
    for data, every, want in [
        (b"a\nbb\nccc\n", 2, ([0, 5, 9], 3)),
        (b"a\nbb\nccc\ndd\n", 2, ([0, 5, 12], 4)),  # no empty shard at the end
        (b"a\nbb\nccc", 2, ([0, 5, 8], 3)),  # a last line without a newline counts
        (b"", 2, ([0], 0)),
    ]:
        path.write_bytes(data)
        assert token_shards.shard_offsets(path, every) == want
        assert token_shards.shard_offsets(path, every, block=3) == want  # across blocks
        assert want[1] == count_lines(path)


def test_unequal_files_are_a_data_error(tmp_path, corpus):
    _, proto, _ = corpus
    (tmp_path / "s").write_text("a\nb\n")
    (tmp_path / "t").write_text("x\n")
    with pytest.raises(DataError, match="s has 2 lines but .*t has 1"):
        token_cache.load_or_build_cache(tmp_path / "s", tmp_path / "t", proto,
                                        tmp_path / "cache", log=QUIET)


KILLED_BUILD = """
import multiprocessing, os, pathlib, signal, sys
from pipelines.data import token_cache

def log(line):
    # Killed (SIGKILL, as by the OOM killer or kill -9) once 500 pairs are done, while the
    # other worker is in the middle of a shard.
    words = line.split()
    if words[2:3] == ["/"] and int(words[1].replace(",", "")) >= 500:
        pathlib.Path(sys.argv[5]).write_text(" ".join(
            str(p.pid) for p in multiprocessing.active_children()))
        os.kill(os.getpid(), signal.SIGKILL)

proto = pathlib.Path(sys.argv[3]).read_bytes()
token_cache.load_or_build_cache(sys.argv[1], sys.argv[2], proto, sys.argv[4],
                                shard_pairs=100, workers=2, progress_interval=0, log=log)
"""


def test_a_build_killed_mid_way_resumes_from_its_finished_shards(corpus, tmp_path):
    work, proto, clean = corpus
    (tmp_path / "spm.model").write_bytes(proto)
    cache_dir, pids = tmp_path / "cache" / "text-train-key", tmp_path / "pids"
    partial = cache_dir.parent / ".text-train-key.partial"
    with open(tmp_path / "stderr", "w+") as stderr:  # not a pipe: orphans would hold it
        killed = subprocess.run(
            [sys.executable, "-c", KILLED_BUILD, str(clean.source_path),
             str(clean.target_path), str(tmp_path / "spm.model"), str(cache_dir), str(pids)],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3"),
            stdout=stderr, stderr=stderr, timeout=300)
    assert killed.returncode == -signal.SIGKILL, (tmp_path / "stderr").read_text()[-3000:]
    assert not cache_dir.exists()  # readers see no cache, not half of one
    time.sleep(0.5)
    workers = [int(pid) for pid in pids.read_text().split()]
    orphans = [pid for pid in workers if _alive(pid)]
    for pid in orphans:  # do not leave them running if this fails
        os.kill(pid, signal.SIGKILL)
    assert workers and not orphans, "workers outlived the kill"
    # The finished shards; a shard being written when the kill came is a dot-named temporary
    # (pathlib's glob matches it too), which the resumed build deletes.
    left = {p.name: p.stat().st_mtime_ns for p in (partial / "shards").glob("*.ids")
            if not p.name.startswith(".")}
    assert 5 <= len(left) < 21, sorted(left)
    reused = sum(len(token_shards.read_lengths(partial / "shards" / name)) for name in left)

    logs = []
    cache = token_cache.load_or_build_cache(clean.source_path, clean.target_path, proto,
                                            cache_dir, shard_pairs=100, workers=2,
                                            log=logs.append)
    assert logs[0] == (f"cache: resuming {partial}: {len(left)} of 21 shards ({reused:,} "
                       "pairs) already tokenized")
    assert f"{2005 - reused:,} pairs in {21 - len(left)} shards" in logs[1]
    assert not partial.exists()
    shards = cache_dir / "shards"
    assert {name: (shards / name).stat().st_mtime_ns for name in left} == left  # not redone
    assert not [p.name for p in shards.iterdir() if p.name.startswith(".")]

    whole = token_cache.load_or_build_cache(clean.source_path, clean.target_path, proto,
                                            tmp_path / "whole", shard_pairs=100, log=QUIET)
    assert _files(cache.path) == _files(whole.path)  # as if never interrupted
    assert cached_pairs(cache) == cached_pairs(whole)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = pathlib.Path(f"/proc/{pid}/stat")
    return not (status.is_file() and status.read_text().split()[2] == "Z")  # a zombie is dead


def _files(path: pathlib.Path) -> dict:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != "meta.json"}


def test_a_changed_shard_size_starts_the_partial_build_anew(corpus, tmp_path):
    _, proto, clean = corpus
    partial = tmp_path / ".c.partial"
    (partial / "shards").mkdir(parents=True)
    (partial / "plan.json").write_text('{"format": "3", "shard_pairs": 7, "pairs": 2005}')
    (partial / "shards" / "000000.ids").write_bytes(b"stale")
    logs = []
    cache = token_cache.load_or_build_cache(clean.source_path, clean.target_path, proto,
                                            tmp_path / "c", shard_pairs=1000, log=logs.append)
    assert not any("resuming" in line for line in logs)
    assert len(cache.shard_files()) == 3 and len(cached_pairs(cache)) == 2005


@pytest.mark.quick
def test_progress_lines_give_done_total_rate_and_eta():
    now = [100.0]
    logs = []
    report = progress.Progress("cache", 4_500_000, "pairs", logs.append, already=500_000,
                               interval=15, clock=lambda: now[0])
    now[0] += 10
    report.update(700_000, {"tokens": 10_400_000})
    assert logs == []  # not yet 15 s
    now[0] += 10
    report.update(1_000_000, {"tokens": 26_000_000})
    assert logs == ["cache: 1.00M / 4.50M pairs (22.2%), 25,000 pairs/s, 1.30M tokens/s, "
                    "ETA 2m 20s"]  # the rate counts this run's pairs, not the 500,000 reused
    assert report.seconds_to_next() == 15
    now[0] += 160
    report.update(4_500_000, {"tokens": 208_000_000})
    assert len(logs) == 1  # the end is finish's to say
    report.finish({"tokens": 208_000_000})
    assert logs[-1] == ("cache: 4.50M / 4.50M pairs (100.0%), 22,222 pairs/s, 1.16M tokens/s, "
                        "in 3m 00s")


def test_a_long_build_reports_progress(corpus, tmp_path):
    """A line per interval (here 0 s: whenever the build looks) with pairs done, the rates
    in pairs and tokens and an ETA once a shard is done, then a final line."""
    _, proto, clean = corpus
    logs = []
    token_cache.load_or_build_cache(clean.source_path, clean.target_path, proto,
                                    tmp_path / "cache", shard_pairs=500, workers=2,
                                    progress_interval=0, log=logs.append)
    lines = [line for line in logs if line.startswith("cache: ") and " pairs/s" in line]
    pattern = r"cache: [0-9,]+ / 2,005 pairs \([0-9.]+%\), [0-9,.M]+ pairs/s, [0-9,.M]+ tokens/s"
    assert all(re.fullmatch(pattern + r"(, ETA \d+s)?", line) for line in lines[:-1]), lines
    assert any(", ETA " in line for line in lines)
    assert re.fullmatch(pattern.replace("[0-9,]+ /", "2,005 /") + r", in \d+s", lines[-1])
