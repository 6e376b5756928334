"""cli/quiet.py: the libraries' informational and warning lines leave stderr; their error
and fatal lines and the project's stay, in order, from the process and its children, all of
them written before it exits or dies. The library's own calls do the same while they run
(`keras_transformer.native_logs.quiet`)."""
import subprocess
import sys

import pytest
from tests.pipelines.run_helpers import ROOT

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)

CHILD = r"""
import os, subprocess, sys
from cli import quiet
quiet.filter_stderr()
os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are ...\n")
os.write(2, b"I0000 00:00:1795677112.494882    5020 port.cc:153] oneDNN custom operations\n")
os.write(2, b"E0000 00:00:1796554176.451067   10851 cuda_platform.cc:52] failed call to cuInit: "
            b"INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
os.write(2, b"E0000 00:00:1796554176.451067   10851 cuda_platform.cc:52] failed call to cuInit: "
            b"INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (999)\n")
os.write(2, b"E0000 00:00:1796554176.451067   10851 util.cc:131] oneDNN supports DT_INT64 only "
            b"on platforms with AVX-512. Falling back to the default Eigen-based implementation "
            b"if present.\n")
print("project line 1", file=sys.stderr)
subprocess.run([sys.executable, "-c", "import os; os.write(2, b'normalizer.cc(51) LOG(INFO) "
                "precompiled_charsmap is empty.\\nchild line\\n')"], check=True)
os.write(2, b"I1126 07:11:30.600032 139972162820992 signature_serialization.py:156] Function\n")
os.write(2, b"progress 1/2\rprogress 2/2\r")
print("project line 2" * 5000, file=sys.stderr)
print("last line", file=sys.stderr)
"""


def test_library_lines_are_dropped_and_the_rest_kept_in_order():
    result = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True,
                            timeout=60)
    assert result.returncode == 0
    assert result.stderr.decode() == ("E0000 00:00:1796554176.451067   10851 cuda_platform.cc:52] "
                                      "failed call to cuInit: INTERNAL: CUDA error: Failed "
                                      "call to cuInit: UNKNOWN ERROR (999)\n"
                                      "project line 1\nchild line\nprogress 1/2\rprogress 2/2\r"
                                      + "project line 2" * 5000 + "\nlast line\n")


DYING = r"""
import os, sys
from cli import quiet
quiet.filter_stderr()
os.write(2, b"I0000 00:00:1795677112.494882    5020 port.cc:153] oneDNN custom operations\n")
print("project line", file=sys.stderr, flush=True)
os.write(2, b"E0000 00:00:1795812586.941546    8987 kernel.cc:52] an error line\n")
os.write(2, b"F0000 00:00:1795812586.941546    8987 tensor.cc:7] Check failed: dims 2 vs. 3\n")
os.abort()  # as a failed CHECK ends the process: no exit function runs
"""


def test_error_and_fatal_lines_reach_the_user_even_when_the_process_dies():
    result = subprocess.run([sys.executable, "-c", DYING], cwd=ROOT, capture_output=True,
                            timeout=60)
    assert result.returncode < 0  # SIGABRT
    assert result.stderr.decode().splitlines() == [
        "project line", "E0000 00:00:1795812586.941546    8987 kernel.cc:52] an error line",
        "F0000 00:00:1795812586.941546    8987 tensor.cc:7] Check failed: dims 2 vs. 3"]


LIBRARY_CALL = r"""
import os, sys
from keras_transformer import native_logs

os.write(2, b"before\n")
with native_logs.quiet():
    os.write(2, b"I0000 00:00:1795677112.494882    5020 port.cc:153] oneDNN custom operations\n")
    os.write(2, b"normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty.\n")
    with native_logs.quiet():  # re-entrant: the outer block filters
        print("project line", file=sys.stderr)
    os.write(2, b"E0000 00:00:1795812586.941546    8987 kernel.cc:52] an error line\n")
os.write(2, b"I0000 00:00:1795677112.494882    5020 port.cc:153] after the block: kept\n")
"""


def test_a_library_call_drops_library_lines_for_its_duration_only():
    """`keras_transformer.native_logs.quiet`, which `load` and the `Translator` run under."""
    result = subprocess.run([sys.executable, "-c", LIBRARY_CALL], cwd=ROOT, capture_output=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.decode().splitlines() == [
        "before", "project line", "E0000 00:00:1795812586.941546    8987 kernel.cc:52] an error "
        "line", "I0000 00:00:1795677112.494882    5020 port.cc:153] after the block: kept"]
