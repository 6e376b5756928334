"""Validate and clean parallel text once, in Python, before tf.data reads it: tf.data reports bad
input as an opaque op error deep in training; this pass names the file, line and fix first.

Unequal line counts, invalid UTF-8 (guessing an encoding would corrupt text) or nothing left are
`DataError`s naming the file, line and byte. A pair with an empty side is skipped and counted
(``drop_empty=False`` keeps it, so line i still matches reference i). NUL bytes are removed, CRLF,
a lone trailing CR and a line-1 byte-order mark stripped, whitespace trimmed (the detokenizer does
not restore leading spaces), and other characters that some readers take for line breaks
(``_LINE_BREAKS``) made spaces, so tf.data and ``str.splitlines`` see the same lines.
"""

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import pathlib
import sys
import tempfile
from typing import Iterator

from keras_transformer.atomic_files import atomic_files
from pipelines import Log, report
from pipelines.data.progress import DEFAULT_INTERVAL, Progress
from pipelines.durations import format_duration
from pipelines.errors import DataError
from pipelines.model_dir.files import input_identity, read_json, read_manifest
from pipelines.model_dir.layout import CLEAN_FILES

_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK_TABLE = str.maketrans({c: " " for c in _LINE_BREAKS})
_FORMAT_VERSION = 3
PROGRESS_EVERY = 4096
"""Lines between looks at the clock in a long pass, so that it costs little (docs/data.md)."""


@dataclasses.dataclass
class CleanStats:
    """Counts from one cleaning pass over a parallel corpus."""

    pairs_read: int = 0
    kept: int = 0
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    nul_lines: int = 0
    crlf_lines: int = 0
    line_breaks_replaced: int = 0
    empty_kept: int = 0

    def skip(self, reason: str) -> None:
        """Count one skipped pair under ``reason``."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def summary(self) -> str:
        """One line: pairs read, kept, skipped by reason, and repairs made."""
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(self.skipped.items()))
        line = (f"pairs read {self.pairs_read:,}, kept {self.kept:,}, "
                f"skipped {sum(self.skipped.values()):,}" + (f" ({reasons})" if reasons else ""))
        repairs = [(self.nul_lines, "lines with NUL bytes removed"),
                   (self.crlf_lines, "CRLF endings stripped"),
                   (self.line_breaks_replaced, "inner line-break characters replaced"),
                   (self.empty_kept, "empty lines kept (evaluation split)")]
        extra = "; ".join(f"{n:,} {what}" for n, what in repairs if n)
        return line + (f"; {extra}" if extra else "")


@dataclasses.dataclass(frozen=True)
class CleanResult:
    """Cleaned parallel files, their stats and a content digest (keys downstream caches)."""

    source_path: pathlib.Path
    target_path: pathlib.Path
    stats: CleanStats
    digest: str


def iter_lines(path: os.PathLike | str | None) -> Iterator[tuple[int, str]]:
    """Yield 1-based ``(line_number, text)`` of a UTF-8 file (None: stdin), split on ``\\n``
    only; LF, CRLF and a leading byte-order mark removed. `DataError` on invalid UTF-8 (``_decode``)
    or an unopenable file."""
    if path is None:
        name, f = pathlib.Path("<stdin>"), sys.stdin.buffer
    else:
        name = pathlib.Path(path)
        try:
            f = open(name, "rb")
        except OSError as e:
            raise DataError(f"{name}: cannot open ({e.strerror}); check the path") from e
    with contextlib.nullcontext(f) if path is None else f:
        for number, raw in enumerate(f, start=1):
            yield number, _decode(name, number, _strip_ending(raw)[0])


def read_lines(path: os.PathLike | str) -> list[str]:
    """All lines of a UTF-8 text file (see ``iter_lines``)."""
    return [text for _, text in iter_lines(path)]


def _strip_ending(raw: bytes) -> tuple[bytes, bool]:
    """Remove LF / CRLF; return the line and whether a CR was stripped."""
    raw = raw.removesuffix(b"\n")
    return (raw[:-1], True) if raw.endswith(b"\r") else (raw, False)


def _decode(path: pathlib.Path, number: int, raw: bytes) -> str:
    """Decode one line as UTF-8 or raise a ``DataError`` that says where and how to fix it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = raw[e.start : e.start + 4]
        raise DataError(f"{path}:{number}: invalid UTF-8 at byte {e.start} of the line (bytes "
                        f"{bad!r}). Convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8 "
                        f"{path} > fixed.txt`, or fix that line.") from None
    return text.removeprefix("\ufeff") if number == 1 else text


def _load_reusable(out_dir: pathlib.Path, inputs: dict) -> CleanResult | None:
    """The previous cleaning result in ``out_dir`` if its inputs are unchanged."""
    data = read_manifest(out_dir / CLEAN_FILES[2], _FORMAT_VERSION, inputs)
    if data is None or not all((out_dir / data[side]).is_file() for side in ("source", "target")):
        return None
    return CleanResult(out_dir / data["source"], out_dir / data["target"],
                       CleanStats(**data["stats"]), data["digest"])


def changed_since(source_path: os.PathLike | str, target_path: os.PathLike | str,
                  out_dir: os.PathLike | str) -> bool:
    """Whether the files' cleaned text differs from the one ``clean_parallel`` wrote to
    ``out_dir`` (False where it wrote none); files only touched or moved have not changed."""
    out_dir = pathlib.Path(out_dir)
    data = read_json(out_dir / CLEAN_FILES[2])
    if not data or "digest" not in data:
        return False
    inputs = {"files": input_identity([source_path, target_path]),
              "drop_empty": data.get("inputs", {}).get("drop_empty", True)}
    if data.get("inputs") == inputs:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        again = clean_parallel(source_path, target_path, tmp, drop_empty=inputs["drop_empty"],
                               log=lambda _: None)
    return again.digest != data["digest"]


def clean_parallel(source_path: os.PathLike | str, target_path: os.PathLike | str,
                   out_dir: os.PathLike | str, *, drop_empty: bool = True, log: Log = print,
                   progress_interval: float = DEFAULT_INTERVAL) -> CleanResult:
    """Validate a parallel corpus and write cleaned copies (``CLEAN_FILES``) to ``out_dir``,
    atomically; a later call with unchanged inputs (path, size, mtime) returns the stored result.
    ``drop_empty`` skips pairs with an empty side. `DataError` for a missing file and the cases of
    the module docstring."""
    source_path, target_path, out_dir = map(pathlib.Path, (source_path, target_path, out_dir))
    for path in (source_path, target_path):
        if not path.is_file():
            raise DataError(f"{path}: file not found; check the path or the task's data flags")
    inputs = {"files": input_identity([source_path, target_path]), "drop_empty": drop_empty}
    previous = _load_reusable(out_dir, inputs)
    if previous is not None:
        report(log, out_dir, f"clean: reusing {out_dir}: {previous.stats.summary()}")
        return previous

    stats, digest = CleanStats(), hashlib.sha256()
    megabytes = (source_path.stat().st_size + target_path.stat().st_size) / 1e6
    progress = Progress("clean", megabytes, "MB", log, interval=progress_interval)
    src_out, tgt_out, manifest_out = (out_dir / name for name in CLEAN_FILES)
    manifest_out.unlink(missing_ok=True)  # never pair an old manifest with new files
    with atomic_files(src_out, tgt_out, manifest_out) as (src_tmp, tgt_tmp, manifest_tmp):
        with open(src_tmp, "wb") as out_s, open(tgt_tmp, "wb") as out_t:
            for text_s, text_t in _cleaned_pairs(source_path, target_path, stats, progress):
                empty_s, empty_t = not text_s, not text_t
                if empty_s or empty_t:
                    if drop_empty:
                        stats.skip("empty both" if empty_s and empty_t
                                   else "empty source" if empty_s else "empty target")
                        continue
                    stats.empty_kept += 1
                enc_s, enc_t = ((text + "\n").encode("utf-8") for text in (text_s, text_t))
                out_s.write(enc_s)
                out_t.write(enc_t)
                digest.update(len(enc_s).to_bytes(8, "little") + enc_s + enc_t)
                stats.kept += 1
        if stats.kept == 0:
            raise DataError(f"{source_path} and {target_path}: no usable sentence pairs ("
                            f"{stats.summary()}). Check that these are the right, non-empty files.")
        result = CleanResult(src_out, tgt_out, stats, digest.hexdigest())
        manifest = {"version": _FORMAT_VERSION, "inputs": inputs, "source": src_out.name,
                    "target": tgt_out.name, "stats": dataclasses.asdict(stats),
                    "digest": result.digest}
        manifest_tmp.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    report(log, out_dir, f"clean: {source_path.name} / {target_path.name}: {stats.summary()} "
           f"(in {format_duration(progress.elapsed())})")
    return result


def _cleaned_pairs(source_path: pathlib.Path, target_path: pathlib.Path, stats: CleanStats,
                   progress: Progress):
    """Each line pair, cleaned and counted in `stats`; DataError if the line counts differ."""
    read = 0
    with open(source_path, "rb") as fs, open(target_path, "rb") as ft:
        for number, (raw_s, raw_t) in enumerate(itertools.zip_longest(fs, ft), start=1):
            if raw_s is None or raw_t is None:
                n_src = number - 1 + (raw_s is not None) + sum(1 for _ in fs)
                n_tgt = number - 1 + (raw_t is not None) + sum(1 for _ in ft)
                raise DataError(
                    f"{source_path} has {n_src:,} lines but {target_path} has {n_tgt:,}: "
                    "parallel files must have one line per sentence on both sides. "
                    f"The first unmatched line is {number:,}; check for a truncated "
                    "download or embedded newlines.")
            stats.pairs_read += 1
            read += len(raw_s) + len(raw_t)
            if stats.pairs_read % PROGRESS_EVERY == 0:
                progress.update(read / 1e6, {"pairs": stats.pairs_read})
            yield (_clean_line(source_path, number, raw_s, stats),
                   _clean_line(target_path, number, raw_t, stats))


def _clean_line(path: pathlib.Path, number: int, raw: bytes, stats: CleanStats) -> str:
    """Strip the line ending, drop NUL bytes, decode, replace inner line breaks, trim."""
    raw, had_cr = _strip_ending(raw)
    stats.crlf_lines += had_cr
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", b"")
        stats.nul_lines += 1
    text = _decode(path, number, raw)
    if any(c in text for c in _LINE_BREAKS):
        text = text.translate(_LINE_BREAK_TABLE)
        stats.line_breaks_replaced += 1
    return text.strip()
