"""Training batches for `model.fit`: tokenized pairs in, token-budget batches of
``((source, target_in), target_out)`` out (``ids + [EOS]``, ``[BOS] + ids``, ``ids + [EOS]``),
0-padded and grouped by length (`keras_transformer.data.buckets`)."""

from typing import Sequence

import tensorflow as tf

from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.data.buckets import (bucket_batch_sizes, check_boundaries,
                                            default_boundaries)
from keras_transformer.learning_rate import BATCH_TOKENS


def text_pairs(source_path, target_path, tokenizer) -> tf.data.Dataset:
    """``(source_ids, target_ids)`` of two parallel text files (one sentence a line, .gz
    read as gzip), tokenized in the graph by `tokenizer` (`tokenizer.load_tokenizer`)."""
    def lines(path):
        compression = "GZIP" if str(path).endswith(".gz") else ""
        return tf.data.TextLineDataset(str(path), compression_type=compression)

    return tf.data.Dataset.zip((lines(source_path), lines(target_path))).map(
        lambda source, target: (tokenizer.tokenize(source), tokenizer.tokenize(target)),
        num_parallel_calls=tf.data.AUTOTUNE)


def to_model_example(source: tf.Tensor, target: tf.Tensor):
    """``(ids, ids) -> ((ids + [EOS], [BOS] + ids), ids + [EOS])``: teacher forcing pairs."""
    eos, bos = tf.constant([EOS_ID], tf.int32), tf.constant([BOS_ID], tf.int32)
    source, target = tf.cast(source, tf.int32), tf.cast(target, tf.int32)
    return (tf.concat([source, eos], 0), tf.concat([bos, target], 0)), tf.concat([target, eos], 0)


def reshuffled(ds: tf.data.Dataset, buffer: int, seed: int, *, repeat: bool = False
               ) -> tf.data.Dataset:
    """``ds`` shuffled (and ``repeat``-ed, each pass in a new order), in the same orders in every
    iterator made of it (tf.distribute's workers make theirs concurrently): made inside
    ``flat_map``, the shuffle's seed generator is new for each iterator, not shared."""
    def make(_):
        shuffled = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
        return shuffled.repeat() if repeat else shuffled

    return tf.data.Dataset.range(1).flat_map(make)


def training_examples(pairs: tf.data.Dataset, *, max_source_length: int, max_target_length: int,
                      shuffle: bool = True, shuffle_buffer: int = 100_000, seed: int = 0,
                      repeat: bool = True, teacher_inputs=None) -> tf.data.Dataset:
    """``training_batches``' examples (same args) before bucketing or packing, unbatched."""
    def within_limits(source, target):
        return tf.logical_and(tf.size(source) + 1 <= max_source_length,
                              tf.size(target) + 1 <= max_target_length)

    ds = pairs.filter(within_limits)
    if shuffle:
        ds = reshuffled(ds, shuffle_buffer, seed, repeat=repeat)
    elif repeat:
        ds = ds.repeat()
    ds = ds.map(to_model_example, num_parallel_calls=tf.data.AUTOTUNE)
    if teacher_inputs is not None:
        ds = ds.map(lambda inputs, target_out: ((inputs[0], teacher_inputs(*inputs)),
                                                target_out),
                    num_parallel_calls=tf.data.AUTOTUNE)
    return ds


def training_batches(pairs: tf.data.Dataset, *, max_source_length: int, max_target_length: int,
                     batch_tokens: int = BATCH_TOKENS,
                     boundaries: Sequence[int] | None = None, batch_multiple: int = 1,
                     shuffle: bool = True, shuffle_buffer: int = 100_000, seed: int = 0,
                     repeat: bool = True, drop_remainder: bool | None = None,
                     pad_to_bucket: bool = True, teacher_inputs=None) -> tf.data.Dataset:
    """Token-budget batches of ``((source, target_in), target_out)`` from tokenized pairs,
    prefetched, 0-padded; global batches under ``tf.distribute`` (``global_batches``).

    Args:
      pairs: ``(source_ids, target_ids)``, no specials (``text_pairs``, ``TokenCache.dataset``).
      max_source_length, max_target_length: limits including EOS/BOS; longer pairs are dropped.
      batch_tokens: GLOBAL token budget per side and batch (all replicas together).
      boundaries: padded bucket lengths; ``default_boundaries(max length)`` if None.
      batch_multiple: every batch size is a multiple of this (the number of replicas).
      shuffle, shuffle_buffer, seed: seeded example shuffle (each epoch) and a batch shuffle.
      repeat: repeat forever (use ``steps_per_epoch``); False gives one pass.
      drop_remainder: drop each bucket's last partial batch; defaults to ``batch_multiple > 1``.
      pad_to_bucket: pad to the bucket boundary (few XLA shapes), else to each side's longest.
      teacher_inputs: optional ``f(source, target_in) -> target_in`` (``Task.teacher_inputs``).
    """
    max_length = max(max_source_length, max_target_length)
    boundaries = default_boundaries(max_length) if boundaries is None else list(boundaries)
    check_boundaries(boundaries, max_length)
    sizes = bucket_batch_sizes(boundaries, batch_tokens, batch_multiple)
    drop_remainder = batch_multiple > 1 if drop_remainder is None else drop_remainder

    def example_length(inputs, target_out):  # inputs: (source, target_in)
        return tf.maximum(tf.shape(inputs[0])[0], tf.shape(inputs[1])[0])

    ds = training_examples(pairs, max_source_length=max_source_length,
                           max_target_length=max_target_length, shuffle=shuffle,
                           shuffle_buffer=shuffle_buffer, seed=seed, repeat=repeat,
                           teacher_inputs=teacher_inputs)
    # tf buckets are [b_{i-1}, b_i) and pad to b_i - 1: shift by one so bucket i pads to
    # boundaries[i]. The extra last bucket (> the limit) is never used after the filter.
    ds = ds.bucket_by_sequence_length(
        example_length, bucket_boundaries=[b + 1 for b in boundaries],
        bucket_batch_sizes=sizes + [sizes[-1]], padding_values=((PAD_ID, PAD_ID), PAD_ID),
        pad_to_bucket_boundary=pad_to_bucket, drop_remainder=drop_remainder)
    if shuffle:
        ds = reshuffled(ds, 64, seed + 1)
    return global_batches(ds).prefetch(tf.data.AUTOTUNE)


def global_batches(batches: tf.data.Dataset) -> tf.data.Dataset:
    """``batches`` as GLOBAL batches under ``tf.distribute``: every worker builds the same stream
    and keeps its replicas' parts (the DATA auto-shard policy; AUTO would shard by file)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return batches.with_options(options)
