"""The pipeline's SentencePiece vocabulary (settings: `keras_transformer.data.tokenizer`),
trained on a sample of the training files and stored as ``<model_dir>/spm.model``."""

import hashlib
import os
import pathlib
import random
import time
from typing import Iterable, Sequence

from keras_transformer.atomic_files import write_atomic
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.data import tokenizer
from keras_transformer.data.tokenizer import train_sentencepiece
from keras_transformer.model_dir import VOCAB_FILE
from pipelines import Log, report
from pipelines.data.progress import DEFAULT_INTERVAL, Progress, heartbeat
from pipelines.durations import format_duration
from pipelines.data.text_io import PROGRESS_EVERY, iter_lines
from pipelines.errors import DataError


def sample_lines(paths: Sequence[os.PathLike | str], num_lines: int, *, seed: int = 0,
                 total_lines: int | None = None, log: Log = print,
                 progress_interval: float = DEFAULT_INTERVAL) -> list[str]:
    """Uniformly sample up to ``num_lines`` non-empty lines from several files, in one pass
    (seeded reservoir sampling); ``total_lines`` (all files), if known, gives progress an ETA."""
    if num_lines <= 0:
        raise ValueError(f"num_lines must be positive, got {num_lines}")
    rng = random.Random(seed)
    reservoir: list[str] = []
    seen = read = 0
    progress = Progress("vocab: sampling", total_lines, "lines", log, interval=progress_interval)
    for path in paths:
        for _, line in iter_lines(path):
            read += 1
            if read % PROGRESS_EVERY == 0:
                progress.update(read)
            if not line.strip():
                continue
            seen += 1
            if len(reservoir) < num_lines:
                reservoir.append(line)
            elif (slot := rng.randrange(seen)) < num_lines:
                reservoir[slot] = line
    log(f"vocab: read {seen:,} lines in total, sampled {len(reservoir):,} for training "
        f"(in {format_duration(progress.elapsed())})")
    return reservoir


def build_vocab(train_files: Sequence[os.PathLike | str], model_dir: os.PathLike | str,
                vocab_size: int, *, max_sentences: int = 1_000_000, seed: int = 0,
                user_defined_symbols: Sequence[str] = (), total_lines: int | None = None,
                log: Log = print, progress_interval: float = DEFAULT_INTERVAL) -> pathlib.Path:
    """Train the shared vocabulary on ``max_sentences`` lines sampled from ``train_files`` (both
    sides pooled) and write ``<model_dir>/spm.model`` atomically; return its path. ``vocab_size``
    counts the 4 reserved ids and 256 byte pieces."""
    sample = sample_lines(train_files, max_sentences, seed=seed, total_lines=total_lines,
                          log=log, progress_interval=progress_interval)
    log(f"vocab: training BPE, vocab_size={vocab_size:,} on {len(sample):,} lines")
    start = time.monotonic()
    try:
        with heartbeat("vocab: training BPE", log, interval=progress_interval):
            proto = train_sentencepiece(sample, vocab_size,
                                        user_defined_symbols=user_defined_symbols)
    except (RuntimeError, ValueError) as e:
        hint = (" Choose a smaller vocab_size for this corpus." if "Vocabulary size" in str(e)
                else "")
        raise DataError(
            f"SentencePiece training failed for vocab_size={vocab_size} on {len(sample):,} lines "
            f"from {', '.join(map(str, train_files))}: {e}.{hint}") from e
    path = pathlib.Path(model_dir) / VOCAB_FILE
    write_atomic(path, proto)
    report(log, path, f"vocab: wrote {path} ({vocab_size:,} pieces, sha256 "
           f"{model_digest(proto)[:12]}; trained in {format_duration(time.monotonic() - start)})")
    return path


def read_model_proto(path: os.PathLike | str) -> bytes:
    """The serialized SentencePiece model at ``path`` (a file, or a dir with spm.model);
    `DataError` if it is missing, unreadable, or its pad/unk/bos/eos ids are not 0-3."""
    import sentencepiece as spm

    path = pathlib.Path(path)
    if path.is_dir():
        path = path / VOCAB_FILE
    if not path.is_file():
        raise DataError(f"{path}: SentencePiece model not found. Build it first "
                        "(pipelines/run.py --mode prepare) or point to an existing spm.model.")
    proto = path.read_bytes()
    try:
        processor = spm.SentencePieceProcessor(model_proto=proto)
    except (RuntimeError, OSError) as e:
        raise DataError(f"{path}: not a SentencePiece model ({e}); restore it, or delete it "
                        f"to train a new vocabulary (which needs a new model dir)") from None
    ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
    if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
        raise DataError(f"{path}: special ids pad/unk/bos/eos are {ids}, the model needs "
                        f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; train the vocabulary with pipelines/"
                        f"run.py --mode prepare")
    return proto


def model_digest(proto: bytes) -> str:
    """sha256 of the model proto: keys caches so a new vocabulary never reuses old token ids."""
    return hashlib.sha256(proto).hexdigest()


def vocab_size_of(proto: bytes) -> int:
    """Number of pieces in the serialized model."""
    return python_processor(proto).get_piece_size()


def fallback_rate(proto: bytes, lines: Iterable[str]) -> tuple[float, int]:
    """The share of `lines`' pieces that are ``<unk>`` or byte fallback, and the pieces counted:
    how badly a vocabulary reused from another corpus (`init_from`) covers this text."""
    processor = python_processor(proto)
    unknown = [processor.is_unknown(i) or processor.is_byte(i)
               for i in range(processor.get_piece_size())]
    pieces = misses = 0
    for line in lines:
        ids = processor.encode(line)
        pieces += len(ids)
        misses += sum(unknown[i] for i in ids)
    return (misses / pieces if pieces else 0.0), pieces


def load_tokenizer(path_or_proto: os.PathLike | str | bytes):
    """`keras_transformer.data.tokenizer.load_tokenizer` of a model dir's spm.model, or a proto."""
    proto = path_or_proto if isinstance(path_or_proto, bytes) else read_model_proto(path_or_proto)
    return tokenizer.load_tokenizer(proto)


def python_processor(path_or_proto: os.PathLike | str | bytes):
    """A ``sentencepiece.SentencePieceProcessor`` of the same model (pure Python use)."""
    import sentencepiece as spm

    proto = path_or_proto if isinstance(path_or_proto, bytes) else read_model_proto(path_or_proto)
    return spm.SentencePieceProcessor(model_proto=proto)
