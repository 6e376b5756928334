"""Keeps the libraries' informational and warning lines out of a run's output unless
`--verbose` asks for them; their error and fatal lines always reach the user.

TensorFlow's and SentencePiece's C++ logging write straight to file descriptor 2, past Python
and TF_CPP_MIN_LOG_LEVEL. `filter_stderr` puts a pipe there and a filter process (not a thread,
so lines still in the pipe when the run aborts are forwarded) that drops those lines. Imports
only the standard library (the filter runs this file with `python -S`).
"""
import atexit
import os
import re
import signal
import subprocess
import sys

LIBRARY_LINE = re.compile(
    rb"^([IW]\d{4} [\d:.]+ +\d+ [\w.+/-]+:\d+\] "  # glog / absl C++ logging
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|To enable the following instructions: .* rebuild TensorFlow"  # cpu_feature_guard's 2nd
    rb"|[\w.+-]+\.cc\(\d+\) LOG\((INFO|WARNING)\) )")  # SentencePiece's own logging
"""The start of an informational or warning line a library wrote, not the project."""
LINE_END = re.compile(rb"(?<=[\r\n])")


def filter_stderr() -> None:
    """From now on, lines on descriptor 2 that match `LIBRARY_LINE` are dropped (children's
    too); undone at exit, after every earlier line is forwarded."""
    sys.stderr.flush()
    target = os.dup(2)
    read_end, write_end = os.pipe()
    process = subprocess.Popen([sys.executable, "-S", "-E", os.path.abspath(__file__)],
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


def forward(pipe, out) -> None:
    """Copies whole lines (newline- or CR-ended) from `pipe` to `out`, dropping the libraries'."""
    pending = b""
    for chunk in iter(lambda: pipe.read(65536), b""):
        *lines, pending = LINE_END.split(pending + chunk)
        _write(out, b"".join(line for line in lines if not LIBRARY_LINE.match(line)))
    if pending and not LIBRARY_LINE.match(pending):
        _write(out, pending)


def _write(out, data: bytes) -> None:
    """Writes to the real stderr; if that is gone, the pipe still drains so no writer blocks."""
    try:
        out.write(data)
    except OSError:
        pass


if __name__ == "__main__":  # the filter process: Ctrl-C and SIGTERM reach the run, which
    # closes the pipe as it ends; the filter ends on that EOF, after the last line.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with os.fdopen(0, "rb", buffering=0) as stdin, os.fdopen(1, "wb", buffering=0) as stdout:
        forward(stdin, stdout)
