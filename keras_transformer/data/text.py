"""Sentences <-> ids, one rule for training, evaluation and serving, around any tokenizer with
tensorflow-text's `tokenize(strings) -> RaggedTensor` and `detokenize(RaggedTensor) -> strings`
(`tensorflow_text.SentencepieceTokenizer`). An empty or all-space line translates to an empty
line with score 0 (`blank_rows`)."""
import tensorflow as tf

from keras_transformer.constants import EOS_ID, PAD_ID


def sentences_to_ids(tokenizer, sentences, max_length):
    """tf.string [batch] -> int32 [batch, <= max_length]: pieces (cut to fit), EOS, 0-padding."""
    sentences = tf.convert_to_tensor(sentences, tf.string)
    # An all-space line is an empty one: no piece (`blank_rows`), whatever the vocabulary.
    sentences = tf.where(tf.equal(tf.strings.strip(sentences), ""), "", sentences)
    pieces = tf.cast(tokenizer.tokenize(sentences), tf.int32)[:, :max_length - 1]
    eos = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(sentences)[0], 1], EOS_ID))
    return tf.concat([pieces, eos], axis=1).to_tensor(default_value=PAD_ID)


def truncate_ids(ids, max_length):
    """int32 [batch, length] source ids (pieces, EOS, 0-padding) -> [batch, <= max_length], cut as
    `sentences_to_ids` cuts sentences: a longer row keeps its first pieces and its EOS."""
    ids = tf.convert_to_tensor(ids, tf.int32)
    kept = ids[:, :max_length]
    cut = tf.reduce_any(tf.not_equal(ids[:, max_length:], PAD_ID), axis=1, keepdims=True)
    last = tf.equal(tf.range(tf.shape(kept)[1]), max_length - 1)[None, :]
    return tf.where(cut & last, EOS_ID, kept)


def blank_rows(source_ids):
    """bool [batch]: the sources without a piece (EOS and padding only), from an empty or
    all-space line; their translation is empty with score 0 (`empty_where_blank`)."""
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    return tf.reduce_all(tf.equal(source_ids, EOS_ID) | tf.equal(source_ids, PAD_ID), axis=-1)


def empty_where_blank(blank, ids, *values):
    """`ids` [batch, ..., length] with each blank source's rows an empty translation (EOS, then
    padding), and each of `values` ([batch, ...]: scores, log-probabilities...) 0 there."""
    def rows(value):
        return tf.reshape(blank, tf.concat([[-1], tf.ones([tf.rank(value) - 1], tf.int32)], 0))

    empty = tf.where(tf.equal(tf.range(tf.shape(ids)[-1]), 0), EOS_ID, PAD_ID)
    return (tf.where(rows(ids), empty, ids),
            *(tf.where(rows(value), tf.zeros_like(value), value) for value in values))


def ids_to_sentences(tokenizer, ids):
    """int32 [batch, length] -> tf.string [batch]: the tokens before the first EOS or padding."""
    ids = tf.convert_to_tensor(ids, tf.int32)
    keep = tf.math.cumprod(
        tf.cast(tf.not_equal(ids, EOS_ID) & tf.not_equal(ids, PAD_ID), tf.int32), axis=1)
    return tokenizer.detokenize(tf.RaggedTensor.from_tensor(ids, lengths=tf.reduce_sum(keep, 1)))
