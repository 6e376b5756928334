"""Token-budget buckets: which padded lengths, how many sentences each, and what they cost.

The paper batches by tokens (Section 5.1: about 25,000 source and 25,000 target tokens per
batch): pairs are grouped into length buckets of boundary ``L`` holding ``floor(budget / L)``
sentences, so ``batch_size * L <= budget`` on each side. All of it is computed from per-pair
token counts (``lengths [N, 2]`` without EOS/BOS), so statistics and the bucket table need no
pass over the data.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

DEFAULT_BATCH_TOKENS = 25_000


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


def check_boundaries(boundaries: Sequence[int], max_length: int) -> None:
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


def format_bucket_table(rows: Sequence[dict], packed: dict | None = None) -> str:
    """The bucket table as aligned text (empty buckets omitted).

    With ``packed`` (``pipelines.packing.packing_table``), a last line gives what packed
    batches (``--pack``) hold instead: rows per batch, batches, sentences and padding.
    """
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
    if packed is not None:
        estimated = ", estimated on a sample" if packed["sampled"] else ""
        lines.append(
            f"{'packed':>7} {packed['rows_per_batch']:>6} {packed['batches']:>8,} "
            f"{packed['sentences']:>10,} {packed['padding']:>8.1%}  (--pack: rows of "
            f"{packed['rows'].source} source / {packed['rows'].target} target tokens, several "
            f"pairs each{estimated})"
        )
    return "\n".join(lines)
