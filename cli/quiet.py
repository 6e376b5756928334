"""Keeps the libraries' own log lines out of a run's output unless `--verbose` asks for them.

TensorFlow's C++ logging (glog/absl format, `I1126 07:11:30.600032 ... file.cc:12] ...`,
and its "All log messages before absl::InitializeLog()" preamble) and SentencePiece's
(`normalizer.cc(51) LOG(INFO) ...`, from the tensorflow-text op) write straight to file
descriptor 2, past Python and past TF_CPP_MIN_LOG_LEVEL, and so do the child processes a
run starts (the op check's probe). `filter_stderr` puts a pipe on descriptor 2 and a thread
that forwards every line except those. Imports only the standard library.
"""
import atexit
import os
import re
import sys
import threading

LIBRARY_LINE = re.compile(
    rb"^([IWEF]\d{4} [\d:.]+ +\d+ [\w.+/-]+:\d+\] "  # glog / absl C++ logging
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|To enable the following instructions: .* rebuild TensorFlow"  # cpu_feature_guard's 2nd
    rb"|[\w.+-]+\.cc\(\d+\) LOG\((INFO|WARNING)\) )")  # SentencePiece's own logging
"""The start of a line a library wrote, not the project."""
LINE_END = re.compile(rb"(?<=[\r\n])")


def filter_stderr() -> None:
    """From now on, lines on descriptor 2 that match `LIBRARY_LINE` are dropped (this
    process's and its children's). Undone at exit, after every line written before it has
    been forwarded."""
    sys.stderr.flush()
    target = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward():
        """Copies whole lines (ended by a newline, or a carriage return as progress bars
        end theirs) to the real stderr, dropping the libraries' ones."""
        pending = b""
        with os.fdopen(read_end, "rb", buffering=0) as pipe, \
                os.fdopen(target, "wb", buffering=0) as out:
            for chunk in iter(lambda: pipe.read(65536), b""):
                *lines, pending = LINE_END.split(pending + chunk)
                _write(out, b"".join(line for line in lines if not LIBRARY_LINE.match(line)))
            if pending and not LIBRARY_LINE.match(pending):
                _write(out, pending)

    saved = os.dup(target)
    thread = threading.Thread(target=forward, name="stderr-filter", daemon=True)
    thread.start()

    def close():
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer in this process is gone: EOF
        os.close(saved)
        thread.join(timeout=5)

    atexit.register(close)


def _write(out, data: bytes) -> None:
    """Writes to the real stderr; if that is gone (`2>&1 | head`), the pipe is still
    drained, so that no writer ever blocks on it."""
    try:
        out.write(data)
    except OSError:
        pass
