"""Task registry: defaults, Multi30k files and download, text files, WMT14 via tfds offline."""
import gzip
import io
import socket
import time

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from pipelines import tasks
from pipelines.data.text_io import read_lines
from pipelines.errors import DataError
from pipelines.model_dir.files import count_lines
from pipelines.tasks import downloads, multi30k
from pipelines.tasks import get_task


def no_network(monkeypatch):
    """Every probe fails at once, as on an offline machine (never touch the real network)."""
    calls = []

    def unreachable(host, port, timeout=downloads.PROBE_TIMEOUT_S):
        calls.append((host, port))
        return False, "[Errno -3] Temporary failure in name resolution"

    monkeypatch.setattr(downloads, "host_reachable", unreachable)
    return calls


# --------------------------------------------------------------------------- registry


@pytest.mark.quick
def test_registry_defaults():
    assert set(tasks.TASKS) >= {"wmt14_ende", "wmt14_enfr", "multi30k_ende", "text"}
    ende, enfr = get_task("wmt14_ende"), get_task("wmt14_enfr")
    m30k, text = get_task("multi30k_ende"), get_task("text")
    assert (ende.source_lang, ende.target_lang, ende.vocab_size, ende.preset) == ("en", "de", 37_000, "base")
    assert (enfr.source_lang, enfr.target_lang, enfr.vocab_size, enfr.preset) == ("en", "fr", 32_000, "base")
    assert (m30k.source_lang, m30k.target_lang, m30k.vocab_size) == ("en", "de", 8_000)
    assert m30k.preset == "multi30k_small"
    for task in (ende, enfr, m30k, text):
        d = task.decoding
        assert (d.beam_size, d.alpha, d.extra_length) == (4, 0.6, 50)  # the paper's
        assert task.max_source_length > 0 and task.max_target_length > 0
        assert task.max_length == max(task.max_source_length, task.max_target_length)
    with pytest.raises(dataclasses_frozen_error()):
        ende.vocab_size = 1


def dataclasses_frozen_error():
    import dataclasses

    return dataclasses.FrozenInstanceError


@pytest.mark.quick
def test_get_task_overrides_ignores_none_and_rejects_unknown():
    task = get_task("multi30k_ende", vocab_size=4000, max_source_length=None, data_dir=None)
    assert task.vocab_size == 4000 and task.max_source_length == 128
    with pytest.raises(DataError, match="unknown task 'nope'; choose one of: wmt14_ende"):
        get_task("nope")
    with pytest.raises(DataError, match="^task wmt14_ende takes no --train_src; its data "
                                        "flags are --data_dir, --manual_dir$"):
        get_task("wmt14_ende", train_src="a.txt")


# --------------------------------------------------------------------------- multi30k


def test_multi30k_reads_local_gz_and_plain_files(shared_data, tmp_path):
    task = get_task("multi30k_ende", data_dir=str(shared_data))
    logs = []
    for split, n in (("train", 29_000), ("dev", 1_014), ("test", 1_000)):
        src, tgt = task.split_files(split, tmp_path, log=logs.append)
        assert (src.suffix, tgt.suffix) == (".en", ".de")
        assert count_lines(src) == count_lines(tgt) == n
    train_src, _ = task.split_files("train", tmp_path)
    assert train_src.parent == tmp_path / "data" / "multi30k_ende"  # decompressed once
    assert read_lines(train_src)[0].startswith("Two young, White males")
    assert sum("decompressed" in m for m in logs) == 2
    # the multi30k directory itself is accepted as data_dir too
    direct = get_task("multi30k_ende", data_dir=str(shared_data / "multi30k"))
    assert direct.split_files("dev", tmp_path)[0] == shared_data / "multi30k" / "val.en"


def test_multi30k_uses_kt_data_dir(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("KT_DATA_DIR", str(shared_data))
    task = get_task("multi30k_ende")
    assert task.split_files("test", tmp_path)[1] == shared_data / "multi30k" / "test_2016_flickr.de"


@pytest.mark.quick
def test_multi30k_truncated_file_is_reported(tmp_path):
    (tmp_path / "multi30k").mkdir()
    for lang in ("en", "de"):
        (tmp_path / "multi30k" / f"val.{lang}").write_text("a\nb\n", encoding="utf-8")
    task = get_task("multi30k_ende", data_dir=str(tmp_path))
    with pytest.raises(DataError, match="val.en has 2 lines, Multi30k val has 1,014"):
        task.split_files("dev", tmp_path / "work")


def test_multi30k_downloads_with_sha256_check(shared_data, tmp_path, monkeypatch):
    blobs = {
        name: (shared_data / "multi30k" / f"{name}.gz").read_bytes()
        for name in ("train.en", "train.de")
    }
    requested = []

    def fake_urlopen(url, timeout):
        requested.append(url)
        name = url.rsplit("/", 1)[1][: -len(".gz")]
        return io.BytesIO(blobs[name])

    monkeypatch.setattr(downloads, "host_reachable", lambda host, port, timeout=3: (True, ""))
    monkeypatch.setattr(downloads.urllib.request, "urlopen", fake_urlopen)
    task = get_task("multi30k_ende", data_dir=str(tmp_path / "empty"))
    src, tgt = task.split_files("train", tmp_path / "work", log=lambda m: None)
    assert requested == [
        "https://github.com/multi30k/dataset/raw/a3d2e0d26b56f3846f66a952536ffed4e401d05a/"
        f"data/task1/raw/train.{lang}.gz"
        for lang in ("en", "de")
    ]
    assert (tmp_path / "work" / "downloads" / "multi30k" / "train.en.gz").is_file()
    assert count_lines(src) == count_lines(tgt) == 29_000

    blobs["train.en"] = gzip.compress(b"tampered\n")
    (tmp_path / "work" / "downloads" / "multi30k" / "train.en.gz").unlink()
    with pytest.raises(DataError, match="sha256 .* differs from the expected d79cfa99"):
        task.split_files("train", tmp_path / "work2", log=lambda m: None)
    assert list((tmp_path / "work2" / "downloads" / "multi30k").iterdir()) == []


def test_multi30k_offline_fails_fast_with_instructions(tmp_path, monkeypatch):
    calls = no_network(monkeypatch)
    task = get_task("multi30k_ende", data_dir=str(tmp_path / "data"))
    start = time.monotonic()
    with pytest.raises(DataError) as e:
        task.split_files("dev", tmp_path / "work")
    assert time.monotonic() - start < 3
    message = str(e.value)
    assert "data/task1/raw/val.en.gz" in message and "unreachable" in message
    assert f"{tmp_path / 'data' / 'multi30k'}" in message
    assert calls == [("github.com", 443)]


# --------------------------------------------------------------------------- text files


@pytest.mark.quick
def test_text_task_returns_given_files_and_explains_missing_ones(tmp_path):
    task = get_task(
        "text", train_src="a.src", train_tgt="a.tgt", source_lang="en", target_lang="cs"
    )
    assert task.split_files("train", tmp_path) == (multi30k.pathlib.Path("a.src"), multi30k.pathlib.Path("a.tgt"))
    assert (task.source_lang, task.target_lang) == ("en", "cs")
    with pytest.raises(DataError, match="--dev_src and --dev_tgt"):
        task.split_files("dev", tmp_path)
    with pytest.raises(ValueError, match="split must be one of"):
        task.split_files("valid", tmp_path)


# --------------------------------------------------------------------------- WMT14 (tfds)


def fake_wmt(requested):
    """A tfds ``_as_dataset`` replacement recording what was asked for; 3,003 test pairs."""

    def as_dataset(builder, split, **kwargs):
        requested.append((builder.name, builder.builder_config.name, str(split)))
        n = 3003 if str(split) == "test" else 3
        return tf.data.Dataset.from_tensor_slices(
            {
                "de": [f"Satz {i} ({split})" for i in range(n)],
                "en": [f"sentence {i} ({split})\nsecond line" for i in range(n)],
            }
        )

    return as_dataset


def test_wmt14_ende_builder_splits_and_direction(tmp_path, monkeypatch):
    monkeypatch.setattr(downloads, "host_reachable", lambda host, port, timeout=3: (True, ""))
    task = get_task("wmt14_ende", data_dir=str(tmp_path / "tfds"))
    assert task.tfds_name == "wmt14_translate/de-en"
    assert [task.tfds_split(s) for s in ("train", "dev", "test")] == ["train", "validation", "test"]
    builder = task.builder()
    assert builder.subsets[tfds.Split.VALIDATION] == ["newstest2013"]
    assert builder.subsets[tfds.Split.TEST] == ["newstest2014"]
    requested = []
    with tfds.testing.mock_data(as_dataset_fn=fake_wmt(requested)):
        files = {s: task.split_files(s, tmp_path / "work", log=lambda m: None) for s in tasks.SPLITS}
    assert requested == [
        ("wmt14_translate", "de-en", "train"),
        ("wmt14_translate", "de-en", "validation"),
        ("wmt14_translate", "de-en", "test"),
    ]
    src, tgt = files["test"]
    assert (src.name, tgt.name) == ("test.en", "test.de")
    assert count_lines(src) == count_lines(tgt) == 3003
    assert read_lines(src)[5] == "sentence 5 (test) second line"  # English is the source
    assert read_lines(tgt)[5] == "Satz 5 (test)"
    assert read_lines(files["dev"][0])[0] == "sentence 0 (validation) second line"
    # written once: a second call does not touch tfds
    assert task.split_files("test", tmp_path / "work") == files["test"]


def test_wmt14_test_split_must_be_the_full_newstest2014(tmp_path, monkeypatch):
    monkeypatch.setattr(downloads, "host_reachable", lambda host, port, timeout=3: (True, ""))
    task = get_task("wmt14_ende", data_dir=str(tmp_path / "tfds"))
    with tfds.testing.mock_data(num_examples=2737):
        with pytest.raises(DataError, match="has 2,737 pairs, expected 3,003"):
            task.split_files("test", tmp_path / "work", log=lambda m: None)
    assert list((tmp_path / "work" / "data" / "wmt14_ende").iterdir()) == []


def test_wmt14_offline_fails_fast_saying_what_to_download_and_where(tmp_path, monkeypatch):
    calls = no_network(monkeypatch)
    task = get_task("wmt14_ende", data_dir=str(tmp_path / "tfds"))
    start = time.monotonic()
    with pytest.raises(DataError) as e:
        task.split_files("train", tmp_path / "work")
    assert time.monotonic() - start < 5
    message = str(e.value)
    manual = tmp_path / "tfds" / "downloads" / "manual"
    assert f"http://data.statmt.org/wmt19/translation-task/dev.tgz  ->  {manual / 'dev.tgz'}" in message
    assert "training-parallel-europarl-v7.tgz" in message
    assert "--manual_dir" in message and "--task text" in message
    assert sorted(calls) == [("data.statmt.org", 80), ("www.statmt.org", 80)]
    # a different manual_dir is honoured in the instructions
    other = get_task("wmt14_enfr", data_dir=str(tmp_path / "tfds"), manual_dir=str(tmp_path / "m"))
    with pytest.raises(DataError, match=f"in {tmp_path / 'm'} "):
        other.split_files("dev", tmp_path / "work")


def test_wmt14_uses_manual_files_without_probing(tmp_path, monkeypatch):
    def must_not_probe(*args, **kwargs):
        raise AssertionError("no network probe expected when every file is in manual_dir")

    monkeypatch.setattr(downloads, "host_reachable", must_not_probe)
    manual = tmp_path / "manual"
    manual.mkdir()
    task = get_task("wmt14_ende", data_dir=str(tmp_path / "tfds"), manual_dir=str(manual))
    for _, fname in task.required_downloads(task.builder()):
        (manual / fname).write_bytes(b"")
    prepared = []
    with tfds.testing.mock_data(as_dataset_fn=fake_wmt([])):
        original = tfds.core.DatasetBuilder.download_and_prepare

        def record(builder, *args, download_config=None, **kwargs):
            prepared.append(download_config.manual_dir)
            return original(builder, *args, download_config=download_config, **kwargs)

        monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", record)
        task.split_files("dev", tmp_path / "work", log=lambda m: None)
    assert [str(p) for p in prepared] == [str(manual)]


def test_host_probe_is_bounded_and_real(tmp_path):
    start = time.monotonic()
    ok, reason = downloads.host_reachable("unreachable.invalid", 80, timeout=2.0)
    assert not ok and reason and time.monotonic() - start < 2.5
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert downloads.host_reachable("127.0.0.1", server.getsockname()[1]) == (True, "")


def test_text_task_prepares_without_a_test_split(tmp_path):
    """prepare and train need only train (and dev); only evaluate needs a test split."""
    from pipelines.data import prepare

    lines = {"src": [f"the house number {i} is red" for i in range(300)],
             "tgt": [f"das haus nummer {i} ist rot" for i in range(300)]}
    paths = {}
    for split in ("train", "dev"):
        for side, text in lines.items():
            paths[f"{split}_{side}"] = tmp_path / f"{split}.{side}"
            paths[f"{split}_{side}"].write_text("\n".join(text) + "\n", encoding="utf-8")
    task = get_task("text", **{k: str(v) for k, v in paths.items()})
    assert task.has_split("dev") and not task.has_split("test")
    report = prepare.prepare(task, tmp_path / "work", vocab_size=400, batch_tokens=1024,
                             log=lambda _: None)
    assert sorted(report["splits"]) == ["dev", "train"]
    assert report["splits"]["train"]["pairs_kept"] == 300
    with pytest.raises(DataError, match="no files for split 'test'; pass --test_src"):
        task.split_files("test", tmp_path / "work")
