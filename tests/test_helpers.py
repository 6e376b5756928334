"""Where the tests find real data: the decision, and the checked download (no network)."""
import gzip

import pytest
from tests import helpers

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)

MISSING = "real test data not found at {}: set $KT_DATA_DIR"


def _fake_fetch(calls, succeed=True):
    def fetch(root):
        calls.append(root)
        if succeed:
            for name in helpers.multi30k_files():
                for ext in ("", ".gz"):
                    path = root / "multi30k" / f"{name}{ext}"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text("x")
        return succeed
    return fetch


def test_local_copies_come_first_and_the_network_last(tmp_path):
    shared, cache = tmp_path / "shared", tmp_path / "cache"
    calls = []
    # Nothing local: Multi30k is fetched into the cache, once; the next session reuses it.
    for _ in range(2):
        assert helpers.find_test_data({}, shared, cache, _fake_fetch(calls)) == (cache, None)
    assert calls == [cache]
    # ../shared/data, when present, wins over the cache; $KT_DATA_DIR over both.
    (shared / "multi30k").mkdir(parents=True)
    assert helpers.find_test_data({}, shared, cache, _fake_fetch(calls)) == (shared, None)
    given = tmp_path / "given"
    (given / "multi30k").mkdir(parents=True)
    assert helpers.find_test_data({"KT_DATA_DIR": str(given)}, shared, cache,
                                  _fake_fetch(calls)) == (given, None)
    assert calls == [cache]


def test_offline_or_a_wrong_kt_data_dir_fails_with_one_line(tmp_path):
    shared, cache = tmp_path / "shared", tmp_path / "cache"
    calls = []
    assert helpers.find_test_data({}, shared, cache, _fake_fetch(calls, succeed=False)) == (
        None, MISSING.format(shared))
    assert calls == [cache]
    wrong = tmp_path / "wrong"
    assert helpers.find_test_data({"KT_DATA_DIR": str(wrong)}, shared, cache,
                                  _fake_fetch(calls)) == (None, MISSING.format(wrong))
    assert calls == [cache]  # an explicit $KT_DATA_DIR is never replaced by a download


def test_fetch_uses_the_product_s_checked_downloader(tmp_path, monkeypatch):
    from pipelines.tasks import downloads
    from pipelines.tasks.multi30k import MULTI30K_SHA256, MULTI30K_URL

    monkeypatch.setattr(downloads, "unreachable", lambda urls, timeout: {"github.com": "down"})
    monkeypatch.setattr(downloads, "download_verified", None)  # must not be reached
    assert not helpers.fetch_multi30k(tmp_path)
    assert not (tmp_path / "multi30k").exists()

    downloaded = []

    def download_verified(url, target, sha256, where):
        downloaded.append((url, target.name, sha256))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.compress(f"{target.name}\n".encode()))
        return target

    monkeypatch.setattr(downloads, "unreachable", lambda urls, timeout: {})
    monkeypatch.setattr(downloads, "download_verified", download_verified)
    assert helpers.fetch_multi30k(tmp_path)
    assert sorted(downloaded) == sorted((MULTI30K_URL.format(name=name), f"{name}.gz", sha)
                                        for name, sha in MULTI30K_SHA256.items())
    assert (tmp_path / "multi30k" / "val.en").read_text() == "val.en.gz\n"  # a plain copy
    assert helpers.has_multi30k(tmp_path)
    assert helpers.fetch_multi30k(tmp_path) and len(downloaded) == 6  # nothing fetched twice
