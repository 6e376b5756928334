"""tf.data input: read parallel text, tokenize in-graph, filter by length, batch by tokens.

Training examples are ``((source, target_in), target_out)`` with ``source = ids + [EOS]``,
``target_in = [BOS] + ids`` and ``target_out = ids + [EOS]``, padded with 0 (``PAD_ID``).

Batches follow the paper's token budget (Section 5.1: about 25,000 source and 25,000 target
tokens per batch): pairs are grouped into length buckets of boundary ``L`` holding
``floor(budget / L)`` sentences, so ``batch_size * L <= budget`` on each side. Batches are
padded to ``L`` when few distinct shapes matter (XLA), else each side to its longest. The budget is the GLOBAL batch under
``tf.distribute``; ``batch_multiple`` makes every batch size divisible by the replica count.

Tokenized ids are cached with ``tf.data.Dataset.save`` under a key of task, split, vocabulary
hash and cleaned-text hash (written to a temporary directory, then renamed), together with a
``lengths.npy`` of per-pair token counts from which length-filter counts and the bucket
table are computed without another pass.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import shutil
import tempfile
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from pipelines.vocab import BOS_ID, EOS_ID, PAD_ID

Log = Callable[[str], None]
DEFAULT_BATCH_TOKENS = 25_000


# --------------------------------------------------------------------------- buckets


def default_boundaries(
    max_length: int, *, min_length: int = 8, step: int = 4, growth: float = 1.1
) -> list[int]:
    """Padded lengths of the buckets: ``step`` apart while short, then growing ``growth``x.

    Every boundary is a multiple of ``step`` and the last one is ``max_length``, so any
    pair within the length limits has a bucket. Step 4 rather than 8 matters for short
    sentences: on Multi30k (mean ~15 subwords) padding over both sides is ~14% with step 4
    and ~23% with step 8; a 256-token limit still needs only ~26 shapes.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be positive, got {max_length}")
    boundaries, b = [], min_length
    while b < max_length:
        boundaries.append(b)
        b = max(b + step, int(math.ceil(b * growth / step)) * step)
    boundaries.append(max_length)
    return boundaries


def bucket_batch_sizes(
    boundaries: Sequence[int], batch_tokens: int, batch_multiple: int = 1
) -> list[int]:
    """Sentences per batch for each bucket: ``floor(batch_tokens / L)``, a multiple of N.

    Raises:
      ValueError: a bucket cannot hold even ``batch_multiple`` sentences within the budget
        (checked for the largest bucket up front, not hours into training).
    """
    if batch_multiple < 1:
        raise ValueError(f"batch_multiple must be >= 1, got {batch_multiple}")
    sizes = []
    for length in boundaries:
        size = (batch_tokens // length) // batch_multiple * batch_multiple
        if size < 1:
            raise ValueError(
                f"a batch of {batch_tokens:,} tokens cannot hold {batch_multiple} sentence(s) of "
                f"{length} tokens (bucket {length}). Raise batch_tokens to at least "
                f"{length * batch_multiple:,} or lower the task's max length."
            )
        sizes.append(size)
    return sizes


def _check_boundaries(boundaries: Sequence[int], max_length: int) -> None:
    if list(boundaries) != sorted(set(boundaries)) or boundaries[0] < 1:
        raise ValueError(f"bucket boundaries must be increasing positive ints: {boundaries}")
    if boundaries[-1] < max_length:
        raise ValueError(
            f"the largest bucket ({boundaries[-1]}) is below the length limit ({max_length}); "
            "add a boundary at the limit"
        )


def model_lengths(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Raw token counts ``[N, 2]`` -> source and target lengths with EOS / BOS added."""
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)
    return lengths[:, 0] + 1, lengths[:, 1] + 1


def length_filter_counts(
    lengths: np.ndarray, max_source_length: int, max_target_length: int
) -> dict[str, int]:
    """How many pairs the length filter keeps and drops (by side), from cached lengths."""
    src, tgt = model_lengths(lengths)
    long_src, long_tgt = src > max_source_length, tgt > max_target_length
    return {
        "pairs": int(len(src)),
        "kept": int(np.sum(~(long_src | long_tgt))),
        "too_long": int(np.sum(long_src | long_tgt)),
        "too_long_source": int(np.sum(long_src)),
        "too_long_target": int(np.sum(long_tgt)),
    }


def bucket_table(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    batch_sizes: Sequence[int],
    max_source_length: int,
    max_target_length: int,
) -> list[dict]:
    """Per bucket: boundary, batch size, batches, sentences and padding fraction (both sides).

    Computed from cached lengths, it predicts exactly what one pass of ``training_batches``
    (no repeat, remainders kept) produces.
    """
    src, tgt = model_lengths(lengths)
    keep = (src <= max_source_length) & (tgt <= max_target_length)
    src, tgt = src[keep], tgt[keep]
    which = np.searchsorted(np.asarray(boundaries), np.maximum(src, tgt), side="left")
    rows = []
    for i, (bound, size) in enumerate(zip(boundaries, batch_sizes)):
        in_bucket = which == i
        n = int(np.sum(in_bucket))
        real = int(np.sum(src[in_bucket]) + np.sum(tgt[in_bucket]))
        rows.append(
            {
                "boundary": int(bound),
                "batch_size": int(size),
                "batches": int(math.ceil(n / size)),
                "sentences": n,
                "padding": 1.0 - real / (2 * n * bound) if n else 0.0,
            }
        )
    return rows


def table_padding(rows: Sequence[dict]) -> float:
    """Overall padding fraction of a bucket table (token-weighted)."""
    padded = sum(2 * r["sentences"] * r["boundary"] for r in rows)
    real = sum((1 - r["padding"]) * 2 * r["sentences"] * r["boundary"] for r in rows)
    return 1.0 - real / padded if padded else 0.0


def format_bucket_table(rows: Sequence[dict]) -> str:
    """The bucket table as aligned text (empty buckets omitted)."""
    lines = [f"{'bucket':>7} {'batch':>6} {'batches':>8} {'sentences':>10} {'padding':>8}"]
    for r in rows:
        if r["sentences"]:
            lines.append(
                f"{r['boundary']:>7} {r['batch_size']:>6} {r['batches']:>8,} "
                f"{r['sentences']:>10,} {r['padding']:>8.1%}"
            )
    total_batches = sum(r["batches"] for r in rows)
    total_sentences = sum(r["sentences"] for r in rows)
    lines.append(
        f"{'total':>7} {'':>6} {total_batches:>8,} {total_sentences:>10,} "
        f"{table_padding(rows):>8.1%}"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- tokenization


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
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=cache_dir.parent, prefix=f".{cache_dir.name}."))
    try:
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
        try:
            os.replace(tmp, cache_dir)
        except OSError:
            if not (cache_dir / "meta.json").is_file():  # not a concurrent writer: real error
                raise
            shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"cache: wrote {cache_dir} ({len(lengths):,} pairs, {int(lengths.sum()):,} tokens)")
    return TokenCache(cache_dir, lengths)


# --------------------------------------------------------------------------- training input


def to_model_example(source: tf.Tensor, target: tf.Tensor):
    """``(ids, ids) -> ((ids + [EOS], [BOS] + ids), ids + [EOS])``: teacher forcing pairs."""
    eos = tf.constant([EOS_ID], tf.int32)
    bos = tf.constant([BOS_ID], tf.int32)
    source = tf.cast(source, tf.int32)
    target = tf.cast(target, tf.int32)
    return (tf.concat([source, eos], 0), tf.concat([bos, target], 0)), tf.concat([target, eos], 0)


def training_batches(
    pairs: tf.data.Dataset,
    *,
    max_source_length: int,
    max_target_length: int,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    boundaries: Sequence[int] | None = None,
    batch_multiple: int = 1,
    shuffle: bool = True,
    shuffle_buffer: int = 100_000,
    seed: int = 0,
    repeat: bool = True,
    drop_remainder: bool | None = None,
    pad_to_bucket: bool = True,
) -> tf.data.Dataset:
    """Token-budget batches of ``((source, target_in), target_out)`` from tokenized pairs.

    Args:
      pairs: ``(source_ids, target_ids)`` without specials (``tokenize_pairs`` or a cache).
      max_source_length, max_target_length: limits including EOS/BOS; longer pairs are
        dropped (count them with ``length_filter_counts``).
      batch_tokens: GLOBAL token budget per side and batch (all replicas together).
      boundaries: padded bucket lengths; ``default_boundaries(max length)`` if None.
      batch_multiple: every batch size is a multiple of this (the number of replicas).
      shuffle, shuffle_buffer, seed: seeded example shuffle (reshuffled each epoch) and a small
        batch shuffle, so that buckets are not drawn in corpus order.
      repeat: repeat forever (use ``steps_per_epoch``); False gives one pass.
      drop_remainder: drop each bucket's last partial batch; defaults to
        ``batch_multiple > 1`` so every batch splits evenly across replicas.
      pad_to_bucket: pad both sides to the bucket boundary, so that batches have few distinct
        shapes (each new shape is a new XLA compilation); False pads each side to its own
        longest sentence, which saves the most where sources and targets differ in length
        (parsing: targets are about twice as long).
    Returns:
      A prefetched dataset whose batches are padded with ``PAD_ID``; auto-sharding is by
      DATA for multi-worker training.
    """
    max_length = max(max_source_length, max_target_length)
    boundaries = list(boundaries) if boundaries is not None else default_boundaries(max_length)
    _check_boundaries(boundaries, max_length)
    sizes = bucket_batch_sizes(boundaries, batch_tokens, batch_multiple)
    if drop_remainder is None:
        drop_remainder = batch_multiple > 1

    def within_limits(source, target):
        return tf.logical_and(
            tf.size(source) + 1 <= max_source_length, tf.size(target) + 1 <= max_target_length
        )

    def example_length(inputs, target_out):
        source, target_in = inputs
        return tf.maximum(tf.shape(source)[0], tf.shape(target_in)[0])

    ds = pairs.filter(within_limits)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.map(to_model_example, num_parallel_calls=tf.data.AUTOTUNE)
    # tf buckets are [b_{i-1}, b_i) and pad to b_i - 1: shift by one so bucket i pads to
    # boundaries[i]. The extra last bucket (> the limit) is never used after the filter.
    ds = ds.bucket_by_sequence_length(
        example_length,
        bucket_boundaries=[b + 1 for b in boundaries],
        bucket_batch_sizes=sizes + [sizes[-1]],
        padding_values=((PAD_ID, PAD_ID), PAD_ID),
        pad_to_bucket_boundary=pad_to_bucket,
        drop_remainder=drop_remainder,
    )
    if shuffle:
        ds = ds.shuffle(64, seed=seed + 1, reshuffle_each_iteration=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def padding_fraction(batch) -> float:
    """Fraction of pad positions over both sides of one ``((source, target_in), target_out)``."""
    (source, target_in), _ = batch
    source, target_in = np.asarray(source), np.asarray(target_in)
    real = np.count_nonzero(source != PAD_ID) + np.count_nonzero(target_in != PAD_ID)
    return 1.0 - real / (source.size + target_in.size)


# --------------------------------------------------------------------------- evaluation input


@dataclasses.dataclass(frozen=True)
class EvalBatch:
    """Source ids ``[batch, length]`` (EOS added, 0-padded) and their sentence indices."""

    source_ids: np.ndarray
    indices: np.ndarray


def eval_batches(
    lines: Sequence[str],
    tokenizer,
    *,
    max_source_length: int,
    batch_tokens: int = 4096,
    boundaries: Sequence[int] | None = None,
    log: Log = print,
) -> list[EvalBatch]:
    """Batches of source sentences for decoding, shortest first; see ``restore_order``.

    Sorting by length keeps padding (and wasted decoding) low; each batch is padded to a
    bucket boundary so a compiled decoder sees few shapes. Every line is kept (empty ones
    become ``[EOS]``) so output i matches reference i. Sources longer than
    ``max_source_length`` are truncated to it (EOS kept) and counted in the log.
    """
    boundaries = (
        list(boundaries) if boundaries is not None else default_boundaries(max_source_length)
    )
    _check_boundaries(boundaries, max_source_length)
    sizes = bucket_batch_sizes(boundaries, batch_tokens)
    ids: list[list[int]] = []
    for start in range(0, len(lines), 1024):
        chunk = tf.constant(list(lines[start : start + 1024]), dtype=tf.string)
        ids.extend(tokenizer.tokenize(chunk).to_list())
    truncated = sum(len(x) + 1 > max_source_length for x in ids)
    ids = [x[: max_source_length - 1] + [EOS_ID] for x in ids]
    if truncated:
        log(f"eval: truncated {truncated:,} of {len(ids):,} sources to {max_source_length} tokens")
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    bucket_of = np.searchsorted(np.asarray(boundaries), [len(ids[i]) for i in order], side="left")
    batches = []
    start = 0
    while start < len(order):
        b = bucket_of[start]
        end = start
        while end < len(order) and bucket_of[end] == b and end - start < sizes[b]:
            end += 1
        chunk = order[start:end]
        array = np.full((len(chunk), boundaries[b]), PAD_ID, np.int32)
        for row, i in enumerate(chunk):
            array[row, : len(ids[i])] = ids[i]
        batches.append(EvalBatch(array, np.asarray(chunk, np.int64)))
        start = end
    return batches


def restore_order(batches: Sequence[EvalBatch], outputs: Sequence[Sequence]) -> list:
    """Put per-batch outputs (one item per row, batches in order) back in corpus order."""
    total = sum(len(b.indices) for b in batches)
    result: list = [None] * total
    for batch, out in zip(batches, outputs, strict=True):
        if len(out) != len(batch.indices):
            raise ValueError(f"a batch of {len(batch.indices)} sources got {len(out)} outputs")
        for i, item in zip(batch.indices, out):
            result[int(i)] = item
    return result
