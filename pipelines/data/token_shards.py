"""Shards of a token cache: where they start in the text, how one is tokenized and stored.

The token cache's "spawn" workers run this module, so it imports no TensorFlow or Keras. A shard
is consecutive lines of both cleaned files, tokenized with the ``sentencepiece`` module (the
in-graph tokenizer's very ids, faster: docs/data.md) and written atomically as one little-endian
int32 file::

    [n, source_lengths (n), target_lengths (n), source ids..., target ids...]
"""

import dataclasses
import itertools
import os
import pathlib
import signal
import sys

import numpy as np

from keras_transformer.atomic_files import write_atomic

SUFFIX = ".ids"
ENCODE_LINES = 8192
"""Lines per ``encode`` call: keeps a worker's Python id lists small, and call overhead low."""


def shard_offsets(path: os.PathLike | str, pairs_per_shard: int, *,
                  block: int = 1 << 24) -> tuple[list[int], int]:
    """Byte offsets where shards of ``pairs_per_shard`` lines start, then the file size; and the
    line count (as ``files.count_lines``). An empty file gives ``([0], 0)``: no shards."""
    starts, lines, size, last = [0], 0, 0, b"\n"
    with open(path, "rb") as f:
        while data := f.read(block):
            after_newline = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + size + 1
            # A shard ends after the newlines whose line count is a multiple of pairs_per_shard.
            first = (-(lines + 1)) % pairs_per_shard
            starts.extend(int(x) for x in after_newline[first::pairs_per_shard])
            lines += len(after_newline)
            size += len(data)
            last = data[-1:]
    if last != b"\n":
        lines += 1
    if starts[-1] == size:
        starts.pop()  # a shard boundary at the very end: no empty last shard
    return (starts + [size] if lines else [0]), lines


@dataclasses.dataclass(frozen=True)
class ShardJob:
    """What a worker needs to tokenize shard ``index`` (``first_line`` numbers error messages)."""

    index: int
    pairs: int
    source: str
    target: str
    source_range: tuple[int, int]
    target_range: tuple[int, int]
    first_line: int
    model_proto: bytes
    output: str


def shard_path(directory: os.PathLike | str, index: int) -> pathlib.Path:
    """``directory/000012.ids``: zero-padded, so that sorted names are corpus order."""
    return pathlib.Path(directory) / f"{index:06d}{SUFFIX}"


def _read_lines(path: str, byte_range: tuple[int, int], first_line: int) -> list[str]:
    """The lines of ``path`` between two byte offsets (line ends removed)."""
    start, end = byte_range
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        from pipelines.errors import DataError  # here: it imports Keras, which workers avoid

        line = first_line + data.count(b"\n", 0, e.start)
        raise DataError(f"{path}:{line}: invalid UTF-8; token caches are built from cleaned text: "
                        f"run it through pipelines.data.text_io.clean_parallel first") from None
    lines = text.split("\n")
    if text.endswith("\n") or not text:
        lines.pop()
    return lines


def _encode(processor, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of ``lines`` (no BOS/EOS) as one flat int32 array, and each line's length."""
    flat, lengths = [np.zeros(0, np.int32)], [np.zeros(0, np.int32)]
    for start in range(0, len(lines), ENCODE_LINES):
        ids = processor.encode(lines[start:start + ENCODE_LINES])
        lengths.append(np.fromiter(map(len, ids), np.int32, len(ids)))
        flat.append(np.fromiter(itertools.chain.from_iterable(ids), np.int32,
                                int(lengths[-1].sum())))
    return np.concatenate(flat), np.concatenate(lengths)


def tokenize_shard(job: ShardJob) -> tuple[int, int, int]:
    """Tokenize one shard and write its file atomically; return (index, pairs, tokens)."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=job.model_proto)
    source = _read_lines(job.source, job.source_range, job.first_line)
    target = _read_lines(job.target, job.target_range, job.first_line)
    if len(source) != len(target):  # the shard plan counted both files: a file changed
        raise RuntimeError(f"{job.source}, {job.target}: shard {job.index} has "
                           f"{len(source):,} and {len(target):,} lines; were they modified?")
    source_ids, source_lengths = _encode(processor, source)
    target_ids, target_lengths = _encode(processor, target)
    record = np.concatenate([np.array([len(source)], np.int32), source_lengths,
                             target_lengths, source_ids, target_ids]).astype("<i4")
    write_atomic(job.output, record.tobytes())
    return job.index, len(source), len(source_ids) + len(target_ids)


def read_lengths(path: os.PathLike | str) -> np.ndarray:
    """The ``[n, 2]`` (source, target) token counts stored at the head of a shard file."""
    with open(path, "rb") as f:
        n = int(np.fromfile(f, "<i4", 1)[0])
        lengths = np.fromfile(f, "<i4", 2 * n)
    return lengths.reshape(2, n).T.astype(np.int32)


def worker_init(parent_pid: int) -> None:
    """Make a worker die with its parent, so a SIGKILLed cache build leaves none writing shards
    (Linux: PR_SET_PDEATHSIG; elsewhere they stop after the shard in hand)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
