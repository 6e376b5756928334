"""What token-budget buckets cost (prepare's bucket table), from per-pair token counts
``lengths [N, 2]`` (no EOS/BOS); the rules are the library's (`keras_transformer.data.buckets`)."""

import math
from typing import Sequence

import numpy as np


def model_lengths(lengths: np.ndarray, max_source_length: int | None = None,
                  max_target_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Raw token counts ``[N, 2]`` -> lengths with EOS / BOS added (within the limits if given)."""
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)
    src, tgt = lengths[:, 0] + 1, lengths[:, 1] + 1
    if max_source_length is None:
        return src, tgt
    keep = (src <= max_source_length) & (tgt <= max_target_length)
    return src[keep], tgt[keep]


def length_filter_counts(lengths: np.ndarray, max_source_length: int,
                         max_target_length: int) -> dict[str, int]:
    """How many pairs the length filter keeps and drops (by side), from cached lengths."""
    src, tgt = model_lengths(lengths)
    long_src, long_tgt = src > max_source_length, tgt > max_target_length
    return {"pairs": int(len(src)), "kept": int(np.sum(~(long_src | long_tgt))),
            "too_long": int(np.sum(long_src | long_tgt)),
            "too_long_source": int(np.sum(long_src)), "too_long_target": int(np.sum(long_tgt))}


def bucket_table(lengths: np.ndarray, boundaries: Sequence[int], batch_sizes: Sequence[int],
                 max_source_length: int, max_target_length: int) -> list[dict]:
    """Per bucket: boundary, batch size, batches, sentences and padding (both sides), exactly as
    one pass of ``training_batches`` (no repeat, remainders kept) makes them."""
    src, tgt = model_lengths(lengths, max_source_length, max_target_length)
    which = np.searchsorted(np.asarray(boundaries), np.maximum(src, tgt), side="left")
    rows = []
    for i, (bound, size) in enumerate(zip(boundaries, batch_sizes)):
        in_bucket = which == i
        n = int(np.sum(in_bucket))
        real = int(np.sum(src[in_bucket]) + np.sum(tgt[in_bucket]))
        rows.append({"boundary": int(bound), "batch_size": int(size),
                     "batches": int(math.ceil(n / size)), "sentences": n,
                     "padding": 1.0 - real / (2 * n * bound) if n else 0.0})
    return rows


def table_padding(rows: Sequence[dict]) -> float:
    """Overall padding fraction of a bucket table (token-weighted)."""
    padded = sum(2 * r["sentences"] * r["boundary"] for r in rows)
    real = sum((1 - r["padding"]) * 2 * r["sentences"] * r["boundary"] for r in rows)
    return 1.0 - real / padded if padded else 0.0


def format_bucket_table(rows: Sequence[dict], packed: dict | None = None) -> str:
    """The bucket table as aligned text (empty buckets omitted; ``packed``: a last line)."""
    lines = [f"{'bucket':>7} {'batch':>6} {'batches':>8} {'sentences':>10} {'padding':>8}"]
    for r in rows:
        if r["sentences"]:
            lines.append(f"{r['boundary']:>7} {r['batch_size']:>6} {r['batches']:>8,} "
                         f"{r['sentences']:>10,} {r['padding']:>8.1%}")
    total_batches = sum(r["batches"] for r in rows)
    total_sentences = sum(r["sentences"] for r in rows)
    lines.append(f"{'total':>7} {'':>6} {total_batches:>8,} {total_sentences:>10,} "
                 f"{table_padding(rows):>8.1%}")
    if packed is not None:
        estimated = ", estimated on a sample" if packed["sampled"] else ""
        lines.append(f"{'packed':>7} {packed['rows_per_batch']:>6} {packed['batches']:>8,} "
                     f"{packed['sentences']:>10,} {packed['padding']:>8.1%}  (--pack: rows of "
                     f"{packed['rows'].source} source / {packed['rows'].target} target tokens, "
                     f"several pairs each{estimated})")
    return "\n".join(lines)
