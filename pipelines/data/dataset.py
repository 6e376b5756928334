"""tf.data input: id batches for decoding, tokenized as the exported model does (training batches
are the library's, `keras_transformer.data.batches`)."""

import dataclasses
import itertools
from typing import Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.data import text
from keras_transformer.constants import PAD_ID
from keras_transformer.data.buckets import (bucket_batch_sizes, check_boundaries,
                                            default_boundaries)
from pipelines import Log


def padding_fraction(batch) -> float:
    """Fraction of pad positions over both sides of one ``((source, target_in), target_out)``."""
    (source, target_in), _ = batch
    source, target_in = np.asarray(source), np.asarray(target_in)
    real = np.count_nonzero(source != PAD_ID) + np.count_nonzero(target_in != PAD_ID)
    return 1.0 - real / (source.size + target_in.size)


@dataclasses.dataclass(frozen=True)
class EvalBatch:
    """Source ids ``[batch, length]`` (EOS added, 0-padded) and their sentence indices."""

    source_ids: np.ndarray
    indices: np.ndarray


def eval_batches(lines: Sequence[str], tokenizer, *, max_source_length: int,
                 batch_tokens: int = 4096, boundaries: Sequence[int] | None = None,
                 log: Log = print) -> list[EvalBatch]:
    """Decoding batches, shortest first, padded to bucket boundaries (``restore_order``); every
    line is kept (empty: ``[EOS]``), one over ``max_source_length`` truncated, EOS kept."""
    boundaries = (list(boundaries) if boundaries is not None
                  else default_boundaries(max_source_length))
    check_boundaries(boundaries, max_source_length)
    sizes = bucket_batch_sizes(boundaries, batch_tokens)
    ids: list[list[int]] = []
    truncated = 0
    for start in range(0, len(lines), 1024):
        chunk = tf.constant(list(lines[start : start + 1024]), dtype=tf.string)
        rows = text.sentences_to_ids(tokenizer, chunk, max_source_length).numpy()
        lengths = np.count_nonzero(rows != PAD_ID, axis=1)
        truncated += int(np.sum(tokenizer.tokenize(chunk).row_lengths().numpy()
                                >= max_source_length))
        ids.extend(row[:n].tolist() for row, n in zip(rows, lengths))
    if truncated:
        log(f"eval: truncated {truncated:,} of {len(ids):,} sources to {max_source_length} tokens")
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    bucket_of = np.searchsorted(np.asarray(boundaries), [len(row) for row in ids], side="left")
    batches = []
    for b, group in itertools.groupby(order, key=lambda i: bucket_of[i]):
        group = list(group)
        for start in range(0, len(group), sizes[b]):
            chunk = group[start:start + sizes[b]]
            array = np.full((len(chunk), boundaries[b]), PAD_ID, np.int32)
            for row, i in enumerate(chunk):
                array[row, : len(ids[i])] = ids[i]
            batches.append(EvalBatch(array, np.asarray(chunk, np.int64)))
    return batches


def restore_order(batches: Sequence[EvalBatch], outputs: Sequence[Sequence]) -> list:
    """Put per-batch outputs (one item per row, batches in order) back in corpus order."""
    result: list = [None] * sum(len(b.indices) for b in batches)
    for batch, out in zip(batches, outputs, strict=True):
        if len(out) != len(batch.indices):
            raise ValueError(f"a batch of {len(batch.indices)} sources got {len(out)} outputs")
        for i, item in zip(batch.indices, out):
            result[int(i)] = item
    return result
