"""Terminology constraints: target phrases every translation must contain (Post & Vilar, 2018),
by dynamic beam allocation (`candidates`); every output holds every phrase (the paper's may not).
A phrase is a 0-padded row of ids (no end token); phrases are met in any order, a repeated one
twice. A hypothesis works on one phrase at a time: a token that breaks it abandons it, one that
starts a lacking phrase begins that. State per hypothesis [batch, n, ...]: "met" bool [..,
phrases], "phrase" int32 (in progress; -1: none), "position" int32 (its tokens done).
"""
from keras_transformer.backend import require_tensorflow

require_tensorflow(__name__)
import tensorflow as tf  # noqa: E402  (TensorFlow is the backend: checked above)

from keras_transformer.constants import PAD_ID
from keras_transformer.decoding.core import NEG, log_softmax_parts, top_k


def phrase_lengths(terms):
    """int32 [batch, phrases], the tokens in each phrase of `terms` [batch, phrases, length]."""
    return tf.reduce_sum(tf.cast(tf.not_equal(terms, PAD_ID), tf.int32), axis=2)


def initial_state(lengths, hypotheses):
    """The state before any token of `hypotheses` (int or int32 scalar) per sentence: nothing
    met but the empty phrases (`lengths` from `phrase_lengths`)."""
    batch = tf.shape(lengths)[0]
    return {"met": tf.tile(tf.equal(lengths, 0)[:, None, :], [1, hypotheses, 1]),
            "phrase": tf.fill([batch, hypotheses], -1),
            "position": tf.zeros([batch, hypotheses], tf.int32)}


def _expected(state, terms):
    """int32 [batch, n]: the next token of each hypothesis's phrase in progress (0: none)."""
    length = tf.shape(terms)[2]
    flat = tf.reshape(terms, [tf.shape(terms)[0], -1])
    index = tf.maximum(state["phrase"], 0) * length + tf.minimum(state["position"], length - 1)
    return tf.where(state["phrase"] >= 0, tf.gather(flat, index, batch_dims=1), PAD_ID)


def _one_hot(index, depth):
    """bool [..., depth], True at `index` (nowhere where index is -1)."""
    return tf.equal(tf.range(depth), index[..., None])


def advance(state, tokens, terms, lengths):
    """The `state` (see the module docstring) after each hypothesis takes `tokens` int32 [batch,
    n], given `terms` int32 [batch, phrases, length] and their `phrase_lengths`."""
    phrases = tf.shape(terms)[1]
    met, phrase, position = state["met"], state["phrase"], state["position"]
    continues = (phrase >= 0) & tf.equal(tokens, _expected(state, terms))
    length = tf.gather(lengths, tf.maximum(phrase, 0), batch_dims=1)
    completes = continues & tf.equal(position + 1, length)
    met = met | (completes[..., None] & _one_hot(phrase, phrases))
    # A token that does not continue the phrase in progress may start the first unmet one.
    starts = (~continues[..., None] & ~met
              & tf.equal(terms[:, None, :, 0], tokens[..., None]))
    started = tf.reduce_any(starts, axis=-1)
    first = tf.argmax(tf.cast(starts, tf.int32), axis=-1, output_type=tf.int32)
    whole = started & tf.equal(tf.gather(lengths, first, batch_dims=1), 1)
    met = met | (whole[..., None] & _one_hot(first, phrases))
    goes_on, begins = continues & ~completes, started & ~whole
    return {"met": met,
            "phrase": tf.where(goes_on, phrase, tf.where(begins, first, -1)),
            "position": tf.where(goes_on, position + 1, tf.where(begins, 1, 0))}


def needed(state, lengths):
    """int32 [batch, n]: the phrase tokens each hypothesis still has to produce."""
    missing = tf.where(state["met"], 0, lengths[:, None, :])
    return tf.reduce_sum(missing, axis=-1) - state["position"]


def next_tokens(state, terms):
    """int32 [batch, n, phrases]: each hypothesis's next token in each phrase: the next of the one
    in progress, the first of the others it lacks, 0 for those met."""
    in_progress = _one_hot(state["phrase"], tf.shape(terms)[1])
    tokens = tf.where(in_progress, _expected(state, terms)[..., None], terms[:, None, :, 0])
    return tf.where(state["met"], PAD_ID, tokens)


def forced_token(state, terms):
    """int32 [batch, n]: the token a hypothesis with room only for its phrases takes: the next of
    the one in progress, else the first of the first it lacks (lowering `needed` by one)."""
    first_unmet = tf.argmax(tf.cast(~state["met"], tf.int32), axis=-1, output_type=tf.int32)
    first_token = tf.gather(terms[:, :, 0], first_unmet, batch_dims=1)
    return tf.where(state["phrase"] >= 0, _expected(state, terms), first_token)


def round_robin(scores, banks, valid, k):
    """int32 [batch, k]: the `k` of m candidates dynamic beam allocation keeps (round-robin, as in
    fairseq), valid ones first: the best by `scores` (float32 [batch, m]) of every bank (`banks`
    int32: candidates with as many phrase tokens met; fullest first) among the `valid` (bool),
    then the second best of every bank, and so on; invalid ones only where fewer are valid."""
    m = tf.shape(scores)[1]
    order = tf.range(m)
    ahead = (scores[:, None, :] > scores[:, :, None]) | (
        tf.equal(scores[:, None, :], scores[:, :, None]) & (order[None, None, :]
                                                             < order[None, :, None]))
    same_bank = tf.equal(banks[:, None, :], banks[:, :, None]) & valid[:, None, :]
    rank = tf.reduce_sum(tf.cast(ahead & same_bank, tf.int32), axis=2)
    most = tf.reduce_max(banks) + 1
    turn = tf.cast(rank * most + (most - 1 - banks), tf.float32)
    _, picks = tf.math.top_k(tf.where(valid, -turn, -1e9), k=k)
    return picks


def candidates(logits, alive_log_probs, k, eos_id, forced, room_left, phrases, first=False):
    """`core.candidates` (the arguments but `k`, `room_left`, `phrases` as there) with required
    phrases, width 2k: the k live picks by dynamic beam allocation, then the k best endings
    (`NEG` sums where fewer).

    Each hypothesis offers its 2k + 1 best tokens, the `next_tokens` and the end token, each once.
    The end token needs every phrase met; where the `needed` tokens just fill `room_left` (int32
    [batch], max_lengths - 1 - step: the tokens left before the end token, this one included),
    only the `forced_token` is allowed; a prefix token (`forced` > 0) wins. Live picks:
    `round_robin` over banks counted after the token. A sentence without phrases gets
    `core.candidates`' candidates. `phrases`: (terms int32 [batch, phrases, length], their
    `phrase_lengths`, the live hypotheses' phrase state); `k`: the beam size.
    """
    batch, beams = tf.shape(logits)[0], tf.shape(logits)[1]
    (terms, lengths, state), last = phrases, tf.equal(room_left, 0)
    rows, row_max, normaliser = log_softmax_parts(logits)
    _, best = top_k(rows, tf.minimum(2 * k + 1, tf.shape(rows)[1]), wide=True)
    offered = [best, tf.reshape(next_tokens(state, terms), [batch * beams, -1]),
               tf.fill([batch * beams, 1], eos_id)]
    if forced is not None:
        offered.append(tf.repeat(forced, beams)[:, None])
    tokens = tf.concat(offered, axis=1)
    width = tf.shape(tokens)[1]
    token_log_probs = (tf.gather(rows, tokens, batch_dims=1) - row_max) - normaliser

    def per_row(x):  # [batch, beam] -> [batch * beam, 1]
        return tf.reshape(x, [-1, 1])

    earlier = tf.range(width)[None, :] < tf.range(width)[:, None]
    once = ~tf.reduce_any(tf.equal(tokens[:, :, None], tokens[:, None, :]) & earlier, axis=2)
    is_end = tf.equal(tokens, eos_id)
    still = per_row(needed(state, lengths))
    allowed = tf.not_equal(tokens, PAD_ID) & (~is_end | (tf.equal(still, 0) & ~first))
    only_phrases = (still > 0) & (still >= tf.repeat(room_left, beams)[:, None])
    allowed = tf.where(only_phrases, tf.equal(tokens, per_row(forced_token(state, terms))),
                       allowed)
    allowed = tf.where(tf.repeat(last, beams)[:, None], is_end & tf.equal(still, 0), allowed)
    if forced is not None:
        prefix = tf.repeat(forced, beams)[:, None]
        allowed = tf.where(prefix > 0, tf.equal(tokens, prefix), allowed)
    valid = allowed & once & (per_row(alive_log_probs) > NEG / 2)
    sums = tf.where(valid, per_row(alive_log_probs) + token_log_probs, NEG)

    def per_sentence(x):  # [batch * beam, width] -> [batch, beam * width]
        return tf.reshape(x, [batch, beams * width])

    sums, tokens, token_log_probs, valid, is_end = map(
        per_sentence, (sums, tokens, token_log_probs, valid, is_end))
    after = advance(tf.nest.map_structure(lambda x: tf.repeat(x, width, axis=1), state),
                    tokens, terms, lengths)
    banks = tf.reduce_sum(lengths, axis=1)[:, None] - needed(after, lengths)
    lives = round_robin(sums, banks, valid & ~is_end, k)
    # A sentence without phrases ends as the search without terms lets it: only endings
    # among its k best candidates count; with phrases, every allowed ending does.
    no_phrases = tf.equal(tf.reduce_sum(lengths, axis=1), 0)[:, None]
    kth_best = tf.math.top_k(sums, k=k).values[:, -1:]
    valid &= ~is_end | ~no_phrases | (sums >= kth_best)
    _, ends = tf.math.top_k(tf.where(valid & is_end, sums, NEG), k=k)
    picks = tf.concat([lives, ends], axis=1)
    kind = tf.concat([tf.zeros_like(lives, tf.bool), tf.ones_like(ends, tf.bool)], axis=1)
    taken = (tf.gather(valid, picks, batch_dims=1)
             & tf.equal(tf.gather(is_end, picks, batch_dims=1), kind))
    source_beam = tf.tile(tf.repeat(tf.range(beams), width)[None, :], [batch, 1])
    return (tf.where(taken, tf.gather(sums, picks, batch_dims=1), NEG),
            tf.gather(source_beam, picks, batch_dims=1), tf.gather(tokens, picks, batch_dims=1),
            tf.gather(token_log_probs, picks, batch_dims=1))
