"""In-graph pre- and post-processing that makes the exported parser return bracketed trees,
`(TOP (S (NP (NNP John)) (VP (VBZ runs))))`: `linearize.delinearize` of the constrained search's
well-formed output in TensorFlow string ops, so that Serving needs no Python."""

import tensorflow as tf

from pipelines.tasks.parsing.linearize import CLOSE, OPEN
from pipelines.tasks.parsing.treebank import ROOT_LABEL


def normalize_sentences(sentences):
    """tf.string [batch]: words separated by single spaces, no leading or trailing space (the
    constraint counts words by their starting pieces, so extra spaces must not reach it)."""
    return tf.strings.reduce_join(tf.strings.split(sentences), axis=1, separator=" ")


def trees_from_linearized(sentences, linearized, word_label=None):
    """Bracketed trees (tf.string [batch]) from sentences and their linearized parses;
    `word_label` as in `linearize.delinearize`. Round brackets in words become `-LRB-`/`-RRB-`."""
    words = tf.strings.split(sentences)
    word_counts = tf.cast(words.row_lengths(), tf.int32)
    words = tf.strings.regex_replace(words, r"\(", "-LRB-")
    words = tf.strings.regex_replace(words, r"\)", "-RRB-")
    # One empty column more, so that a sentence without words still has one to gather from.
    words = tf.concat([words.to_tensor(""), tf.fill([tf.shape(sentences)[0], 1], "")], axis=1)

    symbols = tf.strings.split(linearized).to_tensor("")
    first = tf.strings.substr(symbols, 0, 1)
    is_close = tf.equal(first, CLOSE)
    is_word = tf.not_equal(symbols, "") & ~is_close & tf.not_equal(first, OPEN)
    word_index = tf.cumsum(tf.cast(is_word, tf.int32), axis=1) - 1
    has_word = is_word & (word_index < word_counts[:, None])
    labels = symbols if word_label is None else word_label
    leaves = tf.strings.join(
        ["(", labels, " ", tf.gather(words, tf.maximum(word_index, 0), batch_dims=1), ")"])
    parts = tf.where(has_word, leaves, tf.where(is_close, CLOSE, tf.where(is_word, "", symbols)))
    body = tf.strings.reduce_join(parts, axis=1, separator=" ")
    body = tf.strings.regex_replace(body, " +", " ")
    body = tf.strings.regex_replace(body, r" \)", ")")
    body = tf.strings.strip(body)
    return tf.strings.join([f"({ROOT_LABEL} ", body, ")"])
