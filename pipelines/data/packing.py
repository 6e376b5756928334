"""Packed training batches: several (source, target) pairs end to end in each fixed-length row,
so that almost no position is padding (docs/data.md#packed-batches). ``segments`` (1, 2, ... per
pair, 0 on padding) and ``positions`` (from 0 in each pair) keep attention within a pair, so each
pair's logits are those it gets alone (``keras_transformer.model.PACKED_INPUTS``).
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from keras_transformer.constants import PAD_ID
from keras_transformer.data.batches import global_batches, reshuffled
from keras_transformer.data.buckets import bucket_batch_sizes
from pipelines.data.buckets import model_lengths
from pipelines.data.dataset import padding_fraction as padding_fraction_of_pairs

PAIRS_PER_ROW = 4
"""Pairs of mean length a row holds (at least): more means less padding but longer attention."""
WINDOW = 4096
"""Pairs packed together: more fill rows better, at more packing time (docs/data.md)."""
ROW_MULTIPLE = 8


@dataclasses.dataclass(frozen=True)
class RowLengths:
    """The fixed length of a packed row's source side and target side (EOS/BOS included)."""

    source: int
    target: int


def row_lengths(lengths: np.ndarray, max_source_length: int, max_target_length: int) -> RowLengths:
    """One row shape for the whole run, so XLA compiles once, from the token cache's ``[N, 2]``
    counts of the pairs within the limits: the longer side's row holds the longest pair and
    ``PAIRS_PER_ROW`` pairs of mean length, rounded up to a multiple of 8; the other side's is in
    proportion to the corpus's token counts, so both sides fill alike."""
    source, target = model_lengths(lengths, max_source_length, max_target_length)
    if not len(source):
        return RowLengths(ROW_MULTIPLE, ROW_MULTIPLE)
    totals = (int(source.sum()), int(target.sum()))
    longer = max(totals)
    needed = max(int(source.max()) * longer / totals[0], int(target.max()) * longer / totals[1],
                 PAIRS_PER_ROW * longer / len(source))
    row = int(math.ceil(needed / ROW_MULTIPLE)) * ROW_MULTIPLE
    return RowLengths(max(int(source.max()), int(math.ceil(row * totals[0] / longer))),
                      max(int(target.max()), int(math.ceil(row * totals[1] / longer))))


def rows_per_batch(rows: RowLengths, batch_tokens: int, batch_multiple: int = 1) -> int:
    """As many rows as ``batch_tokens`` holds on the longer side (``bucket_batch_sizes``)."""
    return bucket_batch_sizes([max(rows.source, rows.target)], batch_tokens, batch_multiple)[0]


@tf.function(input_signature=[tf.TensorSpec([None], tf.int32)] * 2
             + [tf.TensorSpec([], tf.int32)] * 2, autograph=False)  # graph code already
def assign_rows(source_lengths, target_lengths, source_capacity, target_capacity):
    """Packs one window of pairs (int32 lengths ``[n]``) into rows of the capacities: fills rows
    one after another, each time with the pair that fits both sides and fills the most (each side
    as a fraction of its row) less how unevenly it leaves the sides; a row closes when nothing
    fits. Returns ``(row [n], rank [n])``: each pair's row, and the placement order (rows one
    after another). ``InvalidArgumentError`` if a pair is longer than a row."""
    n = tf.size(source_lengths)
    checks = [tf.debugging.assert_less_equal(source_lengths, source_capacity,
                                             message="a source is longer than a packed row"),
              tf.debugging.assert_less_equal(target_lengths, target_capacity,
                                             message="a target is longer than a packed row")]
    with tf.control_dependencies(checks):
        index = tf.range(n)
    source_scale = 1.0 / tf.cast(source_capacity, tf.float32)
    target_scale = 1.0 / tf.cast(target_capacity, tf.float32)
    source_fill = tf.cast(source_lengths, tf.float32) * source_scale
    target_fill = tf.cast(target_lengths, tf.float32) * target_scale

    def place(placed, rank, row, source_free, target_free, current):
        fits = (rank < 0) & (source_lengths <= source_free) & (target_lengths <= target_free)
        balance = tf.abs((tf.cast(source_free, tf.float32) * source_scale - source_fill)
                         - (tf.cast(target_free, tf.float32) * target_scale - target_fill))
        best = tf.argmax(tf.where(fits, source_fill + target_fill - balance, -np.inf),
                         output_type=tf.int32)
        found = tf.reduce_any(fits)
        chosen = found & tf.equal(index, best)
        rank = tf.where(chosen, placed, rank)
        row = tf.where(chosen, current, row)
        # Nothing fits: the next pair opens a new row.
        source_free = tf.where(found, source_free - source_lengths[best], source_capacity)
        target_free = tf.where(found, target_free - target_lengths[best], target_capacity)
        return (placed + tf.cast(found, tf.int32), rank, row, source_free, target_free,
                current + 1 - tf.cast(found, tf.int32))

    state = (tf.constant(0), -tf.ones_like(index), tf.zeros_like(index), source_capacity,
             target_capacity, tf.constant(0))
    _, rank, row, *_ = tf.while_loop(lambda placed, *_: placed < n, place, state)
    return row, rank


def _pack_side(sides, order, item_rows, item_segments, num_rows, length):
    """One side of a window's pairs, ragged ``[n, None]``, laid out in rows ``[rows, length]``:
    returns (a list of ids, one per ragged input; segments; positions)."""
    sides = [tf.gather(side, order) for side in sides]
    lengths = sides[0].row_lengths()
    token_rows = tf.repeat(item_rows, lengths)

    def lay_out(values):
        return tf.RaggedTensor.from_value_rowids(values, token_rows, num_rows).to_tensor(
            default_value=PAD_ID, shape=[None, length])

    positions = tf.ragged.range(tf.cast(lengths, tf.int32)).values
    return ([lay_out(side.values) for side in sides], lay_out(tf.repeat(item_segments, lengths)),
            lay_out(positions))


def pack_window(inputs, target_out, rows: RowLengths):
    """A window of model examples (ragged int32 ``[n, None]``) -> packed rows, 0-padded:
    (dict of ``PACKED_INPUTS`` ``[rows, length]``, target_out ``[rows, target length]``)."""
    source, target_in = inputs
    item_rows, rank = assign_rows(tf.cast(source.row_lengths(), tf.int32),
                                  tf.cast(target_in.row_lengths(), tf.int32),
                                  tf.constant(rows.source), tf.constant(rows.target))
    order = tf.argsort(rank)  # pairs in placement order: row after row
    item_rows = tf.gather(item_rows, order)
    num_rows = tf.reduce_max(item_rows) + 1
    # A pair's segment: 1 + how many pairs were placed in its row before it.
    first_of_row = tf.searchsorted(item_rows, item_rows, side="left")
    item_segments = tf.range(tf.size(item_rows)) - first_of_row + 1
    (source_ids,), source_segments, source_positions = _pack_side(
        [source], order, item_rows, item_segments, num_rows, rows.source)
    (target_in_ids, target_out_ids), target_segments, target_positions = _pack_side(
        [target_in, target_out], order, item_rows, item_segments, num_rows, rows.target)
    return {"source_ids": source_ids, "target_in_ids": target_in_ids,
            "source_segments": source_segments, "target_segments": target_segments,
            "source_positions": source_positions,
            "target_positions": target_positions}, target_out_ids


def packed_batches(examples: tf.data.Dataset, rows: RowLengths, *, batch_tokens: int,
                   batch_multiple: int = 1, shuffle: bool = True, seed: int = 0,
                   drop_remainder: bool | None = None, window: int = WINDOW) -> tf.data.Dataset:
    """Prefetched global ``(dict of PACKED_INPUTS, target_out)`` batches of one shape from model
    examples (``batches.training_examples``), ``batch_tokens`` a side (GLOBAL); ``shuffle``
    shuffles the rows, which the packer emits longest pairs first."""
    if drop_remainder is None:
        drop_remainder = batch_multiple > 1
    ds = examples.ragged_batch(window).map(
        lambda inputs, target_out: pack_window(inputs, target_out, rows),
        num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    if shuffle:
        ds = reshuffled(ds, window, seed + 2)
    ds = ds.batch(rows_per_batch(rows, batch_tokens, batch_multiple), drop_remainder=drop_remainder)
    return global_batches(ds).prefetch(tf.data.AUTOTUNE)


def padding_fraction(batch) -> float:
    """``dataset.padding_fraction`` of one packed batch."""
    inputs, target_out = batch
    return padding_fraction_of_pairs(((inputs["source_ids"], inputs["target_in_ids"]), target_out))


def packing_table(lengths: np.ndarray, max_source_length: int, max_target_length: int,
                  batch_tokens: int, batch_multiple: int = 1, *, window: int = WINDOW,
                  seed: int = 0, max_pairs: int = 100 * WINDOW) -> dict:
    """What one pass of packed batches holds (remainders kept; padding over both sides),
    packing the cached lengths in a seeded random order, as training does; corpora over
    ``max_pairs`` are estimated on that many."""
    rows = row_lengths(lengths, max_source_length, max_target_length)
    source, target = model_lengths(lengths, max_source_length, max_target_length)
    order = np.random.default_rng(seed).permutation(len(source))[:max_pairs]
    packed_rows = real = 0
    for start in range(0, len(order), window):
        chosen = order[start:start + window]
        row, _ = assign_rows(source[chosen].astype(np.int32), target[chosen].astype(np.int32),
                             np.int32(rows.source), np.int32(rows.target))
        packed_rows += int(np.max(row.numpy())) + 1
        real += int(source[chosen].sum() + target[chosen].sum())
    padded = packed_rows * (rows.source + rows.target)
    if len(order) < len(source):  # a sample: scale to the whole corpus
        packed_rows = int(round(packed_rows * len(source) / len(order)))
    per_batch = rows_per_batch(rows, batch_tokens, batch_multiple)
    return {"rows": rows, "rows_per_batch": per_batch, "rows_per_pass": packed_rows,
            "batches": int(math.ceil(packed_rows / per_batch)), "sentences": int(len(source)),
            "padding": 1.0 - real / padded if padded else 0.0,
            "sampled": bool(len(order) < len(source))}
