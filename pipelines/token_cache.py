"""Tokenized corpora saved once: in-graph SentencePiece over text files, kept on disk.

Tokenized ids are saved with ``tf.data.Dataset.save`` under a key of task, split, vocabulary
hash and cleaned-text hash (built in a temporary directory, then renamed), together with a
``lengths.npy`` of per-pair token counts from which length-filter counts and the bucket
table are computed without another pass.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib

import numpy as np
import tensorflow as tf

from pipelines import Log
from pipelines.files import atomic_directory



def tokenize_pair_batches(
    source_path: os.PathLike | str,
    target_path: os.PathLike | str,
    tokenizer,
    *,
    lines_per_call: int = 1024,
) -> tf.data.Dataset:
    """Read two aligned text files, tokenize in-graph ``lines_per_call`` lines per op call.

    Elements are ``(source_ids, target_ids)`` RaggedTensors ``[lines, None]``, int32, without
    BOS/EOS, in file order. One tokenizer call per batch of lines, not per line.
    """
    lines = tf.data.Dataset.zip(
        tf.data.TextLineDataset(str(source_path)), tf.data.TextLineDataset(str(target_path))
    )

    def tokenize(src: tf.Tensor, tgt: tf.Tensor):
        return tokenizer.tokenize(src), tokenizer.tokenize(tgt)

    return lines.batch(lines_per_call).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)


def tokenize_pairs(
    source_path: os.PathLike | str,
    target_path: os.PathLike | str,
    tokenizer,
    *,
    lines_per_call: int = 1024,
) -> tf.data.Dataset:
    """Like ``tokenize_pair_batches`` but one pair per element: ``(source_ids, target_ids)``."""
    return tokenize_pair_batches(
        source_path, target_path, tokenizer, lines_per_call=lines_per_call
    ).unbatch()


# Bumped whenever the saved element structure changes, so old caches are never misread.
CACHE_FORMAT_VERSION = "2"


def cache_key(*parts: str) -> str:
    """A directory name from the cache's inputs (task, split, vocabulary and text hashes)
    and the cache format version."""
    digest = hashlib.sha256("\0".join((CACHE_FORMAT_VERSION,) + parts).encode("utf-8")
                            ).hexdigest()[:16]
    readable = "-".join(p for p in parts[:2] if p)
    return f"{readable}-{digest}" if readable else digest


@dataclasses.dataclass(frozen=True)
class TokenCache:
    """Tokenized pairs saved with ``Dataset.save`` plus their token counts ``[N, 2]``.

    Saved in batches of ragged ids (one record per batch of lines, not per pair), which
    makes writing and reading the cache several times cheaper than per-pair records.
    """

    path: pathlib.Path
    lengths: np.ndarray

    def dataset(self) -> tf.data.Dataset:
        """The cached ``(source_ids, target_ids)`` pairs, one per element, in corpus order."""
        return tf.data.Dataset.load(str(self.path / "data")).unbatch()


def load_or_build_cache(
    source_path: os.PathLike | str,
    target_path: os.PathLike | str,
    tokenizer,
    cache_dir: os.PathLike | str,
    *,
    log: Log = print,
) -> TokenCache:
    """Return the token cache at ``cache_dir``; tokenize and save it first if absent.

    ``cache_dir`` must be unique to its inputs (see ``cache_key``): an existing complete cache
    is trusted. The cache is built in a temporary sibling directory and renamed into place.
    """
    cache_dir = pathlib.Path(cache_dir)
    if (cache_dir / "meta.json").is_file():
        lengths = np.load(cache_dir / "lengths.npy")
        log(f"cache: reusing {cache_dir} ({len(lengths):,} pairs)")
        return TokenCache(cache_dir, lengths)
    with atomic_directory(cache_dir) as tmp:
        log(f"cache: tokenizing {source_path} / {target_path}")
        tokenize_pair_batches(source_path, target_path, tokenizer).save(str(tmp / "data"))
        counts = tf.data.Dataset.load(str(tmp / "data")).map(
            lambda s, t: tf.stack([s.row_lengths(), t.row_lengths()], axis=1)
        )
        chunks = [c for c in counts.as_numpy_iterator()]
        lengths = np.concatenate(chunks).astype(np.int32) if chunks else np.zeros((0, 2), np.int32)
        np.save(tmp / "lengths.npy", lengths)
        meta = {"source": str(source_path), "target": str(target_path), "pairs": len(lengths)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    log(f"cache: wrote {cache_dir} ({len(lengths):,} pairs, {int(lengths.sum()):,} tokens)")
    return TokenCache(cache_dir, lengths)
