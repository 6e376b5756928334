"""cli/quiet.py: the libraries' log lines leave stderr, the project's stay, in order, from
the process and its children, all of them written before it exits."""
import subprocess
import sys

from tests.pipelines.run_helpers import ROOT

CHILD = r"""
import os, subprocess, sys
from cli import quiet
quiet.filter_stderr()
os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are ...\n")
os.write(2, b"I0000 00:00:1795677112.494882    5020 port.cc:153] oneDNN custom operations\n")
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
    assert result.stderr.decode() == ("project line 1\nchild line\nprogress 1/2\rprogress 2/2\r"
                                      + "project line 2" * 5000 + "\nlast line\n")
