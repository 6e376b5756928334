"""Token-budget buckets (the paper batches by tokens, Section 5.1): which padded lengths, and
how many sentences each: a bucket of boundary ``L`` holds ``floor(budget / L)`` sentences."""

import math
from typing import Sequence

from keras_transformer.errors import UserError


def default_boundaries(max_length: int, *, min_length: int = 8, step: int = 4,
                       growth: float = 1.1) -> list[int]:
    """Padded lengths of the buckets: ``step`` apart while short, then growing ``growth``x; all
    multiples of ``step``, the last ``max_length``, so every pair within the limits has one."""
    if max_length < 1:
        raise ValueError(f"max_length must be positive, got {max_length}")
    boundaries, b = [], min_length
    while b < max_length:
        boundaries.append(b)
        b = max(b + step, int(math.ceil(b * growth / step)) * step)
    boundaries.append(max_length)
    return boundaries


def bucket_batch_sizes(boundaries: Sequence[int], batch_tokens: int,
                       batch_multiple: int = 1) -> list[int]:
    """Sentences per batch of each bucket: ``batch_tokens // L``, a multiple of ``batch_multiple``;
    `UserError` if a bucket cannot hold even ``batch_multiple`` sentences within the budget."""
    if batch_multiple < 1:
        raise ValueError(f"batch_multiple must be >= 1, got {batch_multiple}")
    sizes = [(batch_tokens // length) // batch_multiple * batch_multiple for length in boundaries]
    if min(sizes) < 1:
        length = max(boundaries)  # the budget that holds the largest bucket holds them all
        raise UserError(
            f"a batch of {batch_tokens:,} tokens cannot hold {batch_multiple} sentence(s) of "
            f"{length} tokens (bucket {length}). Raise batch_tokens to at least "
            f"{length * batch_multiple:,} or lower the task's max length.")
    return sizes


def check_boundaries(boundaries: Sequence[int], max_length: int) -> None:
    """Refuses boundaries that are not increasing positive ints or miss the length limit."""
    if list(boundaries) != sorted(set(boundaries)) or boundaries[0] < 1:
        raise ValueError(f"bucket boundaries must be increasing positive ints: {boundaries}")
    if boundaries[-1] < max_length:
        raise ValueError(
            f"the largest bucket ({boundaries[-1]}) is below the length limit ({max_length}); "
            "add a boundary at the limit")
