"""Keeps the libraries' C++ informational and warning lines (written straight to descriptor 2)
out of a run's output unless `--verbose`; their error lines always reach the user. A filter
process, not a thread, so that lines still in the pipe when the run aborts are forwarded."""
import atexit
import os
import subprocess
import sys

from keras_transformer import native_logs


def filter_stderr() -> None:
    """Drops lines on descriptor 2 (children's too) that match `native_logs.LIBRARY_LINE`."""
    sys.stderr.flush()
    target = os.dup(2)
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-S", "-E", os.path.abspath(native_logs.__file__)],
        stdin=read_end, stdout=target, stderr=target)
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)

    def close():
        sys.stderr.flush()
        os.dup2(target, 2)  # the pipe's last writer in this process is gone: EOF
        os.close(target)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a child still holds the pipe: it drains later
            pass

    atexit.register(close)
