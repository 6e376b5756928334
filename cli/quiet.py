"""Keeps the libraries' informational and warning lines out of a run's output unless
`--verbose` asks for them; their error and fatal lines always reach the user.

TensorFlow's C++ logging (glog/absl format, `I1126 07:11:30.600032 ... file.cc:12] ...`,
and its "All log messages before absl::InitializeLog()" preamble) and SentencePiece's
(`normalizer.cc(51) LOG(INFO) ...`, from the tensorflow-text op) write straight to file
descriptor 2, past Python and past TF_CPP_MIN_LOG_LEVEL, and so do the child processes a
run starts (the op check's probe). `filter_stderr` puts a pipe on descriptor 2 and a filter
process that forwards every line except those: a process, not a thread, so that the lines
still in the pipe when the run dies (a fatal check failure aborts it) are forwarded too.
Imports only the standard library (the filter runs this file with `python -S`).
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
    """From now on, lines on descriptor 2 that match `LIBRARY_LINE` are dropped (this
    process's and its children's). Undone at exit, after every line written before it has
    been forwarded."""
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
    """Copies whole lines from `pipe` (ended by a newline, or a carriage return as progress
    bars end theirs) to `out` until every writer has closed it, dropping the libraries'."""
    pending = b""
    for chunk in iter(lambda: pipe.read(65536), b""):
        *lines, pending = LINE_END.split(pending + chunk)
        _write(out, b"".join(line for line in lines if not LIBRARY_LINE.match(line)))
    if pending and not LIBRARY_LINE.match(pending):
        _write(out, pending)


def _write(out, data: bytes) -> None:
    """Writes to the real stderr; if that is gone (`2>&1 | head`), the pipe is still
    drained, so that no writer ever blocks on it."""
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
