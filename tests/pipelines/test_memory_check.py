"""The memory check's own measurements (the check itself runs in tests/pipelines/test_run.py)."""
import os

import pytest
from pipelines.training import memory_check


@pytest.mark.quick
def test_resident_memory_counts_the_kernel_s_page_size(tmp_path, monkeypatch):
    """/proc/self/statm counts pages, whose size is the kernel's (64 KiB on some ARM
    machines), not an assumed 4 KiB."""
    statm = tmp_path / "statm"
    statm.write_text("1000 25 3 1 0 40 0\n")
    monkeypatch.setattr(memory_check, "STATM", statm)
    real_sysconf = os.sysconf
    for page in (4096, 65536):
        monkeypatch.setattr(os, "sysconf", lambda name, page=page: (
            page if name == "SC_PAGE_SIZE" else real_sysconf(name)))
        assert memory_check.rss_bytes() == 25 * page
