"""Bad-input handling of the cleaning pass: every case fails clearly or is repaired and counted."""
import json
import re
import time

import pytest

from pipelines.data import text_io
from pipelines.data.text_io import clean_parallel
from pipelines.errors import DataError
from pipelines.model_dir.files import count_lines

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def clean(tmp_path, src: bytes, tgt: bytes, **kwargs):
    s = write(tmp_path / "in.src", src)
    t = write(tmp_path / "in.tgt", tgt)
    logs = []
    result = clean_parallel(s, t, tmp_path / "out", log=logs.append, **kwargs)
    return result, logs


def lines(path):
    return path.read_bytes().decode("utf-8").split("\n")[:-1]


def test_different_line_counts_name_both_files_and_counts(tmp_path):
    with pytest.raises(DataError) as e:
        clean(tmp_path, b"a\nb\nc\n", b"x\ny\n")
    message = str(e.value)
    assert "in.src has 3 lines" in message and "in.tgt has 2" in message
    assert "line is 3" in message
    with pytest.raises(DataError, match="in.src has 1 lines but .*in.tgt has 4"):
        clean(tmp_path, b"a\n", b"w\nx\ny\nz\n")


def test_empty_and_whitespace_lines_are_skipped_and_counted(tmp_path):
    src = b"one\n\ntwo\n  \t \nfive\n\n"
    tgt = b"eins\nzwei\n\ndrei\n\n  \n"
    result, logs = clean(tmp_path, src, tgt)
    assert lines(result.source_path) == ["one"]
    assert lines(result.target_path) == ["eins"]
    stats = result.stats
    assert stats.pairs_read == 6 and stats.kept == 1
    assert stats.skipped == {"empty source": 2, "empty target": 2, "empty both": 1}
    assert len(logs) == 1 and "pairs read 6, kept 1, skipped 5" in logs[0]
    assert "empty source 2" in logs[0] and "empty target 2" in logs[0]


def test_evaluation_split_keeps_empty_lines_aligned(tmp_path):
    result, logs = clean(tmp_path, b"a\n\nc\n", b"x\ny\n \n", drop_empty=False)
    assert lines(result.source_path) == ["a", "", "c"]
    assert lines(result.target_path) == ["x", "y", ""]
    assert result.stats.empty_kept == 2 and result.stats.skipped == {}


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = "fine\nstill fine\nGrüße\n".encode("latin-1")
    with pytest.raises(DataError) as e:
        clean(tmp_path, src, b"a\nb\nc\n")
    message = str(e.value)
    assert "in.src:3:" in message and "invalid UTF-8" in message and "iconv" in message
    assert e.value.__cause__ is None  # no chained decoder traceback


def test_nul_bytes_are_removed_and_counted(tmp_path):
    result, logs = clean(tmp_path, b"a\x00b\nc\n", b"x\ny\x00\x00z\n")
    assert lines(result.source_path) == ["ab", "c"]
    assert lines(result.target_path) == ["x", "yz"]
    assert result.stats.nul_lines == 2
    assert "2 lines with NUL bytes removed" in logs[0]


def test_crlf_endings_are_stripped(tmp_path):
    result, logs = clean(tmp_path, b"a b\r\nc\r\nlast", b"x\r\ny\r\nz\r\n")
    assert lines(result.source_path) == ["a b", "c", "last"]
    assert lines(result.target_path) == ["x", "y", "z"]
    assert result.stats.crlf_lines == 5


def test_inner_line_breaks_bom_and_outer_whitespace(tmp_path):
    src = "\ufeffa\u2028b\n c\x0bd \n".encode("utf-8")
    result, _ = clean(tmp_path, src, b"x\ny\n")
    assert lines(result.source_path) == ["a b", "c d"]
    assert result.stats.line_breaks_replaced == 2
    # every reader now sees the same two lines
    assert result.source_path.read_text(encoding="utf-8").splitlines() == ["a b", "c d"]


def test_a_10000_token_line_is_kept_for_the_length_filter(tmp_path):
    long_line = " ".join(["word"] * 10_000).encode()
    result, _ = clean(tmp_path, b"short\n" + long_line + b"\n", b"kurz\nlang\n")
    assert result.stats.kept == 2
    assert len(lines(result.source_path)[1].split()) == 10_000


def test_empty_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no usable sentence pairs"):
        clean(tmp_path, b"", b"")
    with pytest.raises(DataError, match=r"no usable sentence pairs \(pairs read 2, kept 0"):
        clean(tmp_path, b"\n \n", b"a\n\n")


def test_missing_file_is_a_clear_error(tmp_path):
    write(tmp_path / "a", b"x\n")
    with pytest.raises(DataError, match="nope.*file not found"):
        clean_parallel(tmp_path / "a", tmp_path / "nope", tmp_path / "out")


def test_result_is_reused_until_an_input_changes(tmp_path):
    first, _ = clean(tmp_path, b"a\nb\n", b"x\ny\n")
    logs = []
    second = clean_parallel(
        tmp_path / "in.src", tmp_path / "in.tgt", tmp_path / "out", log=logs.append
    )
    assert "reusing" in logs[0] and second.digest == first.digest
    time.sleep(0.01)
    third, logs = clean(tmp_path, b"a\nc\n", b"x\ny\n")  # rewritten: new mtime
    assert "reusing" not in logs[0] and third.digest != first.digest
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["digest"] == third.digest
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "manifest.json", "source.txt", "target.txt"
    ]


def test_iter_lines_and_count_lines_agree_with_tf_data_line_splitting(tmp_path):
    path = write(tmp_path / "f", "a\r\nb\n\nlast".encode())
    assert list(text_io.iter_lines(path)) == [(1, "a"), (2, "b"), (3, ""), (4, "last")]
    assert count_lines(path) == 4


def test_a_long_pass_reports_progress_with_rate_and_eta(tmp_path):
    """A WMT-sized corpus takes a while to clean: progress lines say how far and how fast
    (here every text_io.PROGRESS_EVERY pairs, the interval being 0 s)."""
    src = "".join(f"sentence {i}\n" for i in range(10_000)).encode()
    tgt = "".join(f"Satz {i}\n" for i in range(10_000)).encode()
    (tmp_path / "in.src").write_bytes(src)
    (tmp_path / "in.tgt").write_bytes(tgt)
    logs = []
    clean_parallel(tmp_path / "in.src", tmp_path / "in.tgt", tmp_path / "out",
                   log=logs.append, progress_interval=0)
    assert len(logs) == 3, logs
    size = (len(src) + len(tgt)) / 1e6
    for line in logs[:2]:  # done / total in bytes read, as MB
        assert re.fullmatch(rf"clean: [0-9.]+ / {size:.1f} MB \(\d+\.\d%\), "
                            r"[0-9,.M]+ MB/s, [0-9,.M]+ pairs/s, ETA \d+s", line), line
    assert logs[-1].startswith("clean: in.src / in.tgt: pairs read 10,000, kept 10,000")
    assert logs[-1].endswith("(in 0s)")
