"""Keeps the C++ libraries' informational and warning lines (TensorFlow's start-up lines,
SentencePiece's per-model line) out of a user's output; error lines pass but for two harmless
ones (`LIBRARY_LINE`). The libraries write straight to descriptor 2, past Python and
TF_CPP_MIN_LOG_LEVEL: `quiet()` filters it during a library call, and the command line runs
this file as a filter process (`cli/quiet.py`, with `python -S`: standard library only)."""
import contextlib
import os
import re
import signal
import sys
import threading

LIBRARY_LINE = re.compile(
    rb"^([IW]\d{4} [\d:.]+ +\d+ [\w.+/-]+:\d+\] "  # glog / absl C++ logging
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|To enable the following instructions: .* rebuild TensorFlow"  # cpu_feature_guard's 2nd
    rb"|[\w.+-]+\.cc\(\d+\) LOG\((INFO|WARNING)\) "  # SentencePiece's own logging
    rb"|E\d{4} [\d:.]+ +\d+ (cuda_platform\.cc:\d+\] failed call to cuInit: .*\(303\)"
    rb"|util\.cc:\d+\] oneDNN supports DT_INT64 only on platforms with AVX-512\. Falling "
    rb"back to the default Eigen-based implementation))")
"""The start of an informational or warning line a library wrote; or of one of two error lines
that report no failure: the CUDA build's cuInit error where no CUDA driver is installed (303;
any other cuInit failure passes), and oneDNN's note that an int64 op runs on Eigen."""
LINE_END = re.compile(rb"(?<=[\r\n])")
_depth = 0
_lock = threading.Lock()


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
    with contextlib.suppress(OSError):
        out.write(data)
        out.flush()


@contextlib.contextmanager
def quiet():
    """Drops `LIBRARY_LINE`s from descriptor 2 inside the block, passing the rest; re-entrant."""
    global _depth
    with _lock:
        _depth += 1
        outermost = _depth == 1
    try:
        with _filtered_stderr() if outermost else contextlib.nullcontext():
            yield
    finally:
        with _lock:
            _depth -= 1


@contextlib.contextmanager
def _filtered_stderr():
    """Descriptor 2 through a pipe and a forwarding thread, restored at the end."""
    sys.stderr.flush()
    target = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    reader = open(read_end, "rb", buffering=0)
    thread = threading.Thread(target=forward, daemon=True, args=(
        reader, open(target, "wb", buffering=0, closefd=False)))
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(target, 2)  # the pipe's last writer here is gone: the thread reads EOF
        thread.join(timeout=5)  # unless a child still holds the pipe: it drains later
        os.close(target)


if __name__ == "__main__":  # the filter process: Ctrl-C and SIGTERM are the run's; EOF ends it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with os.fdopen(0, "rb", buffering=0) as stdin, os.fdopen(1, "wb", buffering=0) as stdout:
        forward(stdin, stdout)
