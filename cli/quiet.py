"""Keeps the libraries' informational and warning lines out of a run's output unless
`--verbose` asks for them; their error and fatal lines always reach the user.

TensorFlow's and SentencePiece's C++ logging write straight to file descriptor 2, past Python
and TF_CPP_MIN_LOG_LEVEL. `filter_stderr` puts a pipe there and a filter process (not a thread,
so lines still in the pipe when the run aborts are forwarded) that runs
`keras_transformer/native_logs.py`, which drops those lines.
"""
import atexit
import os
import subprocess
import sys

from keras_transformer import native_logs


def filter_stderr() -> None:
    """From now on, lines on descriptor 2 that match `native_logs.LIBRARY_LINE` are dropped
    (children's too); undone at exit, after every earlier line is forwarded."""
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
