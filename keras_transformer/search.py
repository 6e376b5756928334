"""Beam search with the GNMT length penalty, early finish and a key/value cache (Section 6.1).

Pure TensorFlow (`tf.while_loop`), so it runs inside `tf.function`, under XLA and inside an
exported SavedModel, with dynamic batch size and source length. The model is reached only
through a `symbols_to_logits_fn(ids, step, cache) -> (logits, cache)` callable, the contract
of the TensorFlow Model Garden's beam search, so the search knows nothing about layers:

  * `ids` [batch, beam] are the tokens at position `step` (position 0 holds the start id);
  * `logits` [batch, beam, vocab] predict position `step + 1`;
  * `cache` is any nest of per-hypothesis tensors shaped [batch, beam, ...]. The search
    reorders their axis 1 when hypotheses are re-ranked. State that is the same for every
    hypothesis of a sentence (encoder output, cross-attention keys/values) is never copied
    per beam nor reordered: it goes in `sentence_state` (passed as a 4th argument, for the
    sentences still searched: finished sentences leave the batch) or in the closure.

Scores are log-probabilities divided by the length penalty ((5 + length) / 6) ** alpha of
Wu et al. (2016), length counting the end token. The paper decodes with beam 4, alpha 0.6
and at most input length + 50 tokens.
"""
import abc

from keras_transformer.backend import require_tensorflow

require_tensorflow(__name__)
import tensorflow as tf  # noqa: E402  (TensorFlow is the backend: checked above)

from keras_transformer import terms as terms_lib
from keras_transformer.beam_ops import NEG as _NEG
from keras_transformer.beam_ops import length_penalty  # noqa: F401 (re-exported)
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import PRECISIONS, DecodingSettings  # noqa: F401 (re-exported)


def _gather_beams(nest, beam_indices, sentences=None):
    """Picks hypotheses along axis 1 of every tensor of `nest` ([batch, beam, ...]).

    With `sentences` (int32 [b]), only those sentences along axis 0, `beam_indices` then
    [b, beams]: one gather both drops sentences and reorders beams. One gather of rows of
    the [batch * beam, ...] view with flat indices: without XLA this is about 1.5x faster
    than `tf.gather(..., batch_dims=1)` on a decoder cache.
    """
    batch, beams = tf.shape(beam_indices)[0], tf.shape(beam_indices)[1]
    picked = tf.range(batch) if sentences is None else sentences

    def gather(x):
        shape = tf.shape(x)
        rows = tf.reshape(x, tf.concat([[-1], shape[2:]], 0))
        flat = tf.reshape(beam_indices + picked[:, None] * shape[1], [-1])
        return tf.reshape(tf.gather(rows, flat), tf.concat([[batch, beams], shape[2:]], 0))

    return tf.nest.map_structure(gather, nest)


TOP_K_BLOCK = 128
"""About how many values `top_k` takes the maximum of at a time (see there)."""


def _block_size(n):
    """A block size for `top_k` over rows of static length `n`: the divisor of n nearest
    TOP_K_BLOCK within a factor of 2 (no padding copy), else TOP_K_BLOCK."""
    if n is None:
        return TOP_K_BLOCK
    divisors = [d for d in range(TOP_K_BLOCK // 2, 2 * TOP_K_BLOCK + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - TOP_K_BLOCK)) if divisors else TOP_K_BLOCK


def top_k(values, k):
    """`tf.math.top_k(values, k)` over the last axis of a [rows, n] tensor, faster for large n.

    TensorFlow's CPU TopKV2 kernel keeps a heap per row: over beam x vocabulary candidates it
    took 13-16% of a beam-search step (`benchmarks/profile_ops.py --mode decode`). Here each
    row is cut into blocks of about `TOP_K_BLOCK`; the k largest values lie in the k blocks
    with the largest maxima (a value outside them is beaten by the maximum of each of those
    k blocks), so one vectorised maximum per block, a top-k over the block maxima and one
    over the chosen blocks give the same values and indices. The chosen blocks are taken in
    index order, so ties go to the lower index, as in `tf.math.top_k`.

    Args:
        values: float [rows, n]; n may be dynamic.
        k: int or int32 scalar tensor, 1 <= k <= n.
    Returns:
        (values [rows, k], int32 indices [rows, k]), largest first.
    """
    block = _block_size(values.shape[-1])
    rows, n = tf.shape(values)[0], tf.shape(values)[1]
    blocks = (n + block - 1) // block
    if values.shape[-1] is None or values.shape[-1] % block:
        lowest = tf.fill([rows, blocks * block - n], tf.constant(-float("inf"), values.dtype))
        values = tf.concat([values, lowest], axis=1)
    blocked = tf.reshape(values, [rows, blocks, block])
    _, chosen = tf.math.top_k(tf.reduce_max(blocked, axis=2), k=tf.minimum(k, blocks))
    chosen = tf.sort(chosen, axis=1)
    candidates = tf.reshape(tf.gather(blocked, chosen, batch_dims=1), [rows, -1])
    top_values, positions = tf.math.top_k(candidates, k=k)
    indices = tf.gather(chosen, positions // block, batch_dims=1) * block + positions % block
    return top_values, indices


def _rows(logits):
    """(float32 [batch * beam, vocab] rows of `logits`, their maxima and log-softmax
    normalisers [rows, 1]), the normaliser as tf.nn.log_softmax computes it: max + log sum
    exp(x - max). A token's log-probability is (logit - max) - normaliser."""
    logits = tf.cast(logits, tf.float32)
    rows = tf.reshape(logits, [-1, tf.shape(logits)[2]])
    if logits.shape[-1] is not None:
        rows.set_shape([None, logits.shape[-1]])
    row_max = tf.reduce_max(rows, axis=1, keepdims=True)
    normaliser = tf.math.log(tf.reduce_sum(tf.exp(rows - row_max), axis=1, keepdims=True))
    return rows, row_max, normaliser


def _candidates(logits, alive_log_probs, width, eos_id, last, forced):
    """The `width` best one-token continuations of each sentence's live hypotheses.

    Equal to ranking all beam x vocabulary sums of a hypothesis's log-probability and the
    next token's (log-softmax of `logits`), with padding never chosen, only the end token
    at a sentence's `last` position and only the `forced` token where one is forced
    (masking restricts the choice; scores stay those of the unmasked distribution). But
    each hypothesis adds one constant to all its tokens, so a sentence's best `width`
    continuations are among the best `width` tokens of each hypothesis: the search ranks
    beam x (width + 2) candidates, not beam x vocabulary, and takes one log-sum-exp per
    hypothesis instead of a full log-softmax (the full-vocabulary ops, log-softmax, masks
    and top-k, took over a third of a beam step).

    Args:
        logits: [batch, beam, vocab] (any float dtype).
        alive_log_probs: float32 [batch, beam].
        width: int or int32 scalar tensor, the candidates to return (2 x beam).
        last: bool [batch], the next token is the sentence's last allowed one.
        forced: None or int32 [batch], the token forced next where > 0.
    Returns:
        (sums float32 [batch, width] best first, beams int32 [batch, width], tokens int32
        [batch, width], the tokens' log-probabilities float32 [batch, width]); disallowed
        candidates (only where fewer than `width` are allowed) have log-probability `_NEG`.
    """
    batch, beams, vocab = tf.shape(logits)[0], tf.shape(logits)[1], tf.shape(logits)[2]
    rows, row_max, normaliser = _rows(logits)
    # One more than `width` per hypothesis: padding, never chosen, may be among them. The
    # end (or forced) token is appended as its own column, the only one allowed where the
    # sentence must end (or take the forced token) and never allowed elsewhere.
    values, tokens = top_k(rows, tf.minimum(width + 1, vocab))
    special = tf.fill([batch], eos_id)
    only_special = last
    if forced is not None:
        special = tf.where(forced > 0, forced, special)
        only_special = last | (forced > 0)
    special = tf.repeat(special, beams)
    values = tf.concat([values, tf.gather(rows, special, batch_dims=1)[:, None]], axis=1)
    tokens = tf.concat([tokens, special[:, None]], axis=1)
    is_special = tf.range(tf.shape(tokens)[1]) == tf.shape(tokens)[1] - 1
    allowed = tf.where(tf.repeat(only_special, beams)[:, None], is_special[None, :],
                       ~is_special[None, :] & tf.not_equal(tokens, PAD_ID))
    token_log_probs = tf.where(allowed, (values - row_max) - normaliser, _NEG)
    columns = tf.shape(tokens)[1]
    sums = tf.reshape(alive_log_probs, [-1, 1]) + token_log_probs
    top_sums, picks = tf.math.top_k(tf.reshape(sums, [batch, -1]), k=width)
    flat_tokens = tf.reshape(tokens, [batch, -1])
    flat_log_probs = tf.reshape(token_log_probs, [batch, -1])
    return (top_sums, picks // columns, tf.gather(flat_tokens, picks, batch_dims=1),
            tf.gather(flat_log_probs, picks, batch_dims=1))


def _term_candidates(logits, alive_log_probs, k, eos_id, last, forced, room, state, terms,
                     lengths):
    """`_candidates` for a search with required phrases (`keras_transformer.terms`): 2k
    candidates, the k live ones chosen by dynamic beam allocation, then the k best endings.

    Each hypothesis offers its 2k + 1 best tokens, the next token of every phrase it lacks
    (`terms.next_tokens`) and the end token, each once. The end token is allowed only once
    every phrase is met; where the phrase tokens still `needed` just fill the `room` left,
    only the `terms.forced_token` is; a target prefix token (`forced` > 0) comes first.
    The live candidates are picked by `terms.round_robin` over banks of equal phrase
    tokens met after the candidate's token; every allowed ending is offered. A sentence
    without phrases gets exactly the candidates `_candidates` gives it.

    Args:
        logits, alive_log_probs, eos_id, last, forced: as for `_candidates`.
        k: the beam size.
        room: int32 [batch], tokens a hypothesis may still take before its end token, the
            one chosen now included (max_lengths - 1 - step).
        state: the `terms` state of the live hypotheses [batch, beam, ...].
        terms, lengths: int32 [batch, phrases, length] and their `terms.phrase_lengths`.
    Returns:
        (sums, beams, tokens, token log-probabilities) as `_candidates` returns them, width
        2k: the k live picks first (`_NEG` sums where fewer are allowed), then k endings
        (`_NEG` sums where fewer ended).
    """
    batch, beams = tf.shape(logits)[0], tf.shape(logits)[1]
    rows, row_max, normaliser = _rows(logits)
    _, best = top_k(rows, tf.minimum(2 * k + 1, tf.shape(rows)[1]))
    offered = [best, tf.reshape(terms_lib.next_tokens(state, terms), [batch * beams, -1]),
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
    still = per_row(terms_lib.needed(state, lengths))
    allowed = tf.not_equal(tokens, PAD_ID) & (~is_end | tf.equal(still, 0))
    only_phrases = (still > 0) & (still >= tf.repeat(room, beams)[:, None])
    allowed = tf.where(only_phrases,
                       tf.equal(tokens, per_row(terms_lib.forced_token(state, terms))),
                       allowed)
    allowed = tf.where(tf.repeat(last, beams)[:, None], is_end & tf.equal(still, 0), allowed)
    if forced is not None:
        prefix = tf.repeat(forced, beams)[:, None]
        allowed = tf.where(prefix > 0, tf.equal(tokens, prefix), allowed)
    valid = allowed & once & (per_row(alive_log_probs) > _NEG / 2)
    sums = tf.where(valid, per_row(alive_log_probs) + token_log_probs, _NEG)

    def per_sentence(x):  # [batch * beam, width] -> [batch, beam * width]
        return tf.reshape(x, [batch, beams * width])

    sums, tokens, token_log_probs, valid, is_end = map(
        per_sentence, (sums, tokens, token_log_probs, valid, is_end))
    after = terms_lib.advance(tf.nest.map_structure(lambda x: tf.repeat(x, width, axis=1), state),
                              tokens, terms, lengths)
    banks = tf.reduce_sum(lengths, axis=1)[:, None] - terms_lib.needed(after, lengths)
    lives = terms_lib.round_robin(sums, banks, valid & ~is_end, k)
    # A sentence without phrases ends as `beam_search` without terms lets it: only endings
    # among its k best candidates count; with phrases, every allowed ending does.
    no_phrases = tf.equal(tf.reduce_sum(lengths, axis=1), 0)[:, None]
    kth_best = tf.math.top_k(sums, k=k).values[:, -1:]
    valid &= ~is_end | ~no_phrases | (sums >= kth_best)
    _, ends = tf.math.top_k(tf.where(valid & is_end, sums, _NEG), k=k)
    picks = tf.concat([lives, ends], axis=1)
    kind = tf.concat([tf.zeros_like(lives, tf.bool), tf.ones_like(ends, tf.bool)], axis=1)
    taken = (tf.gather(valid, picks, batch_dims=1)
             & tf.equal(tf.gather(is_end, picks, batch_dims=1), kind))
    source_beam = tf.tile(tf.repeat(tf.range(beams), width)[None, :], [batch, 1])
    return (tf.where(taken, tf.gather(sums, picks, batch_dims=1), _NEG),
            tf.gather(source_beam, picks, batch_dims=1), tf.gather(tokens, picks, batch_dims=1),
            tf.gather(token_log_probs, picks, batch_dims=1))


def compiling_with_xla():
    """Whether the graph being traced is XLA-compiled (inside `tf.function(jit_compile=True)`,
    at any depth). XLA needs loop-invariant shapes, so decoding then keeps the decoder cache
    in fixed slots; elsewhere the cache grows a position a step (`cache_length`)."""
    if tf.executing_eagerly():
        return False
    try:  # not public API: where it is gone, assume XLA (fixed slots are always correct)
        from tensorflow.python.ops import control_flow_util
    except ImportError:
        return True
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def cache_length(max_steps):
    """The `max_length` to give `Transformer.initial_decode_state` for a search of at most
    `max_steps` steps: fixed slots under XLA, else None (a cache that grows)."""
    return max_steps if compiling_with_xla() else None


def loop_shape_invariants(loop_vars):
    """`tf.while_loop` shape invariants for `loop_vars`: every tensor keeps its static shape
    except dimensions of size 0 at the start, which may grow (a growing decoder cache's
    length axis); TensorArrays are left free."""
    def invariant(value):
        if isinstance(value, tf.TensorArray):
            return tf.TensorShape(None)
        return tf.TensorShape([None if size == 0 else size for size in value.shape.as_list()])

    return tf.nest.map_structure(invariant, loop_vars)


def _is_static(value):
    return isinstance(value, int) and not isinstance(value, bool)


def beam_search(symbols_to_logits_fn, initial_ids, initial_cache, beam_size, max_lengths,
                eos_id, alpha, num_results=1, early_finish=True, max_steps=None,
                forced_ids=None, return_token_scores=False, return_alignment=False,
                sentence_state=None, terms=None):
    """Finds high-scoring continuations of `initial_ids` for every sentence of a batch.

    Args:
        symbols_to_logits_fn: see the module docstring. With `return_alignment` it returns a
            third value, int32 [batch, beam]: the source position each hypothesis's next
            token is aligned to.
        initial_ids: int32 [batch], the start token of every sentence.
        initial_cache: nest of [batch, beam_size, ...] tensors (e.g. empty self-attention
            key/value caches with room for max(max_lengths) positions, or growing ones:
            a dimension of size 0 at the start may grow, see `loop_shape_invariants`).
        beam_size: k; 1 with alpha 0 is greedy decoding. A Python int (static shapes, the
            exported ``serving_default``), or an int32 scalar tensor: a dynamic beam, the
            hypotheses axis then has unknown static size (graph mode, no XLA needed).
            Tensor values are not checked here: the caller asserts 1 <= num_results <= k.
        max_lengths: int32 [batch] (or scalar), the most tokens to generate per sentence,
            end token included; at that length the end token is forced.
        eos_id: the end token.
        alpha: length-penalty exponent (0.6 in the paper; 0 scores by log-probability); a
            float or a float32 scalar tensor.
        num_results: how many hypotheses to return per sentence (n-best, <= beam_size); an
            int or an int32 scalar tensor.
        early_finish: stop a batch as soon as no live hypothesis of any sentence can beat
            its finished ones; False always runs all `max_steps` steps (for benchmarks).
        max_steps: the loop and storage bound (>= max(max_lengths); default that maximum).
            Under XLA pass one that depends on input shapes only, so that a compiled
            search is reused for every batch of the same shape.
        forced_ids: optional int32 [batch, width]: generated token i must be forced_ids[:, i]
            where that is not 0 (a target prefix). Unlike a `DecodingConstraint` the
            distribution is not renormalised: forced tokens keep their model
            log-probabilities, which count in the score. max_lengths must leave room for
            the forced tokens and the end token (`translate_ids` sees to it).
        return_token_scores: also return every token's log-probability.
        return_alignment: also return every token's alignment (see symbols_to_logits_fn).
        sentence_state: optional nest of per-sentence tensors [batch, ...] (the encoder's
            output, cross-attention keys/values, anything else a sentence's steps read):
            `symbols_to_logits_fn(ids, step, cache, sentence_state)` then gets it as a 4th
            argument, holding the sentences still searched. Given it (and early_finish, and
            outside XLA, whose shapes are fixed), a sentence leaves the batch as soon as no
            live hypothesis can beat its finished ones, so later steps compute only the
            sentences still searched: on Multi30k val in batches of 32, 45% of the steps'
            sentence rows. Results are the same: a sentence that cannot improve never
            changes its finished hypotheses again.
        terms: optional int32 [batch, phrases, length]: target phrases (0-padded rows of
            token ids, no end token; a row of zeros is none) every returned hypothesis
            contains (`keras_transformer.terms`: dynamic beam allocation, Post & Vilar
            2018). max_lengths must leave room for them and the end token (after any
            forced tokens; `translate_ids` sees to it).
    Returns:
        (sequences int32 [batch, num_results, max_steps], 0-padded after the end token;
        scores float32 [batch, num_results], best first). With `return_token_scores` or
        `return_alignment`, a dict instead: "ids", "scores", and "token_log_probs" float32
        (0 at padding; their sum is score * length_penalty) and/or "alignment" int32 (-1 at
        padding), both [batch, num_results, max_steps].
    """
    if _is_static(beam_size) and _is_static(num_results):
        if not 1 <= num_results <= beam_size:
            raise ValueError(
                f"num_results must be in [1, beam_size={beam_size}], got {num_results}")
    initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)
    batch = tf.shape(initial_ids)[0]
    max_lengths = tf.broadcast_to(tf.cast(max_lengths, tf.int32), [batch])
    steps = tf.reduce_max(max_lengths) if max_steps is None else tf.cast(max_steps, tf.int32)
    k = beam_size if _is_static(beam_size) else tf.convert_to_tensor(beam_size, tf.int32)
    if not _is_static(num_results):
        num_results = tf.convert_to_tensor(num_results, tf.int32)
    alpha = tf.cast(alpha, tf.float32) if tf.is_tensor(alpha) else float(alpha)
    if forced_ids is not None:
        # One column per loop step: forced_ids[:, step] is always defined.
        forced_ids = tf.convert_to_tensor(forced_ids, tf.int32)
        forced_ids = tf.concat([forced_ids, tf.zeros([batch, steps], tf.int32)], 1)[:, :steps]

    # Per-hypothesis storage, reordered together: the tokens (the start token at position 0
    # and generated tokens after it) and, if asked, what each token cost and attends to.
    def storage(first, dtype):
        first = tf.tile(tf.cast(first, dtype)[:, None, None], [1, k, 1])
        return tf.concat([first, tf.zeros([batch, k, steps], dtype)], axis=2)

    initial_alive = {"ids": storage(initial_ids, tf.int32)}
    if return_token_scores:
        initial_alive["token_log_probs"] = storage(tf.zeros([batch]), tf.float32)
    if return_alignment:
        initial_alive["alignment"] = storage(tf.fill([batch], -1), tf.int32)
    # Only the first beam is live at the start, or the k beams would be k copies.
    if _is_static(k):
        alive_log_probs = tf.tile(tf.constant([[0.0] + [_NEG] * (k - 1)]), [batch, 1])
    else:
        alive_log_probs = tf.tile(tf.where(tf.range(k) == 0, 0.0, _NEG)[None], [batch, 1])
    finished = tf.nest.map_structure(tf.zeros_like, initial_alive)
    finished_scores = tf.fill([batch, k], _NEG)
    positions = tf.range(steps + 1)
    # What the search knows of each sentence it still searches (with `compact`, those that
    # can still improve; else all): its index in the batch, its length limit, its forced
    # tokens and the caller's per-sentence state. Live hypotheses and the cache hold the
    # same sentences; the finished ones are kept for the whole batch.
    sentences = {"index": tf.range(batch), "max_lengths": max_lengths}
    if forced_ids is not None:
        sentences["forced"] = forced_ids
    if sentence_state is not None:
        sentences["state"] = sentence_state
    if terms is not None:
        # The phrase state is per hypothesis, kept and reordered with the decoder cache.
        sentences["terms"] = tf.convert_to_tensor(terms, tf.int32)
        sentences["term_lengths"] = terms_lib.phrase_lengths(sentences["terms"])
        initial_cache = {"model": initial_cache,
                         "terms": terms_lib.initial_state(sentences["term_lengths"], k)}
    compact = sentence_state is not None and early_finish and not compiling_with_xla()

    def can_improve(step, alive_log_probs, finished_scores, max_lengths):
        # The best a live beam can still reach: its log-probability only falls, and the
        # penalty is largest at the sentence's maximum length. Once False, it stays False.
        best_alive = alive_log_probs[:, 0] / length_penalty(max_lengths, alpha)
        worst_kept_finished = finished_scores[:, num_results - 1]
        return (best_alive > worst_kept_finished) & (step < max_lengths)

    def not_done(step, sentences, alive, alive_log_probs, cache, finished, finished_scores):
        if compact:  # the sentences that could not improve have left
            return (step < steps) & (tf.size(sentences["index"]) > 0)
        if not early_finish:
            return step < steps
        return (step < steps) & tf.reduce_any(
            can_improve(step, alive_log_probs, finished_scores, sentences["max_lengths"]))

    def body(step, sentences, alive, alive_log_probs, cache, finished, finished_scores):
        index, lengths = sentences["index"], sentences["max_lengths"]
        kept, kept_scores = finished, finished_scores
        if compact:
            kept, kept_scores = tf.nest.map_structure(lambda x: tf.gather(x, index),
                                                      (finished, finished_scores))
        state = (sentences["state"],) if sentence_state is not None else ()
        if terms is not None:  # the phrases met with the tokens just chosen
            term_state = terms_lib.advance(cache["terms"], alive["ids"][:, :, step],
                                           sentences["terms"], sentences["term_lengths"])
            cache = cache["model"]
        out = symbols_to_logits_fn(alive["ids"][:, :, step], step, cache, *state)
        logits, cache = out[0], out[1]
        last = tf.equal(step + 1, lengths)
        forced = sentences["forced"][:, step] if forced_ids is not None else None
        if terms is None:
            top_log_probs, top_beams, top_tokens, top_token_log_probs = _candidates(
                logits, alive_log_probs, 2 * k, eos_id, last, forced)
        else:
            top_log_probs, top_beams, top_tokens, top_token_log_probs = _term_candidates(
                logits, alive_log_probs, k, eos_id, last, forced, lengths - 1 - step,
                term_state, sentences["terms"], sentences["term_lengths"])
            cache = {"model": cache, "terms": term_state}
        new_values = {"ids": top_tokens}
        if return_token_scores:
            new_values["token_log_probs"] = top_token_log_probs
        if return_alignment:
            new_values["alignment"] = _gather_beams(out[2], top_beams)
        write = tf.equal(positions, step + 1)[None, None, :]
        top = {name: tf.where(write, new_values[name][:, :, None], old)
               for name, old in _gather_beams(alive, top_beams).items()}
        top_is_eos = tf.equal(top_tokens, eos_id)

        # Live beams: the k best candidates that did not end.
        alive_scores = tf.where(top_is_eos, _NEG, top_log_probs)
        alive_log_probs, alive_pick = tf.math.top_k(alive_scores, k=k)
        alive = _gather_beams(top, alive_pick)
        parents = _gather_beams(top_beams, alive_pick)  # the cache rows they continue

        # Finished: the k best of the old finished and the candidates that ended now. As in
        # fairseq, an ending counts only if it ranks among the k best candidates, so that
        # beam size 1 is exactly greedy decoding (with phrases, every allowed ending counts).
        ended = top_is_eos & (top_log_probs > _NEG / 2)
        if terms is None:
            ended &= (tf.range(2 * k) < k)[None, :]
        ended_scores = tf.where(ended, top_log_probs / length_penalty(step + 1, alpha), _NEG)
        pool_scores = tf.concat([kept_scores, ended_scores], axis=1)
        pool = tf.nest.map_structure(lambda f, t: tf.concat([f, t], axis=1), kept, top)
        kept_scores, finished_pick = tf.math.top_k(pool_scores, k=k)
        kept = _gather_beams(pool, finished_pick)
        if not compact:
            cache = _gather_beams(cache, parents)
            new_vars = (step + 1, sentences, alive, alive_log_probs, cache, kept, kept_scores)
            # Reshapes with a dynamic batch lose static dimensions; the loop needs them back.
            tf.nest.map_structure(lambda new, shape: new.set_shape(shape), new_vars,
                                  invariants)
            return new_vars
        # The finished hypotheses go back to their sentences; the sentences that can no
        # longer improve leave the batch (exact: their results cannot change any more).
        rows = index[:, None]
        whole = tf.nest.map_structure(lambda f, new: tf.tensor_scatter_nd_update(f, rows, new),
                                      (finished, finished_scores), (kept, kept_scores))
        still = tf.where(can_improve(step + 1, alive_log_probs, kept_scores, lengths))[:, 0]
        still = tf.cast(still, tf.int32)
        cache = _gather_beams(cache, tf.gather(parents, still), sentences=still)
        alive, alive_log_probs = tf.nest.map_structure(lambda x: tf.gather(x, still),
                                                       (alive, alive_log_probs))
        sentences = tf.cond(tf.size(still) < tf.size(index),
                            lambda: tf.nest.map_structure(lambda x: tf.gather(x, still),
                                                          sentences),
                            lambda: sentences)
        return (step + 1, sentences, alive, alive_log_probs, cache) + whole

    loop_vars = (tf.constant(0), sentences, initial_alive, alive_log_probs, initial_cache,
                 finished, finished_scores)
    invariants = loop_shape_invariants(loop_vars)
    if compact:  # the searched sentences' axis shrinks
        invariants = invariants[:1] + tf.nest.map_structure(
            lambda shape: tf.TensorShape([None] + shape.as_list()[1:]), invariants[1:5]
        ) + invariants[5:]
    _, sentences, alive, alive_log_probs, _, finished, finished_scores = tf.while_loop(
        not_done, body, loop_vars, maximum_iterations=steps, shape_invariants=invariants)
    if compact:  # the sentences searched to the last step: their live beams, in place
        rows = sentences["index"][:, None]
        alive, alive_log_probs = tf.nest.map_structure(
            lambda whole, part: tf.tensor_scatter_nd_update(whole, rows, part),
            (initial_alive, tf.fill([batch, k], _NEG)), (alive, alive_log_probs))

    # A sentence with no finished hypothesis (only when early_finish is off and decoding
    # stopped at max(max_lengths) before its own end) returns its live beams instead.
    has_finished = finished_scores[:, :1] > _NEG / 2
    alive_scores = alive_log_probs / length_penalty(steps, alpha)
    outputs = {name: tf.where(has_finished[:, :, None], finished[name],
                              alive[name])[:, :num_results, 1:]
               for name in alive}
    scores = tf.where(has_finished, finished_scores, alive_scores)[:, :num_results]
    if not (return_token_scores or return_alignment):
        return outputs["ids"], scores
    padding = tf.equal(outputs["ids"], PAD_ID)
    if return_token_scores:
        outputs["token_log_probs"] = tf.where(padding, 0.0, outputs["token_log_probs"])
    if return_alignment:
        outputs["alignment"] = tf.where(padding, -1, outputs["alignment"])
    return dict(outputs, scores=scores)


class DecodingConstraint(abc.ABC):
    """Restricts which tokens beam search may choose, e.g. to well-formed parse trees.

    A constraint keeps its own per-hypothesis state in the search cache (so it is reordered
    with the hypotheses) and, before every step, says which tokens are allowed next.
    Disallowed tokens get a probability of zero: the model's distribution is renormalised
    over the allowed ones. A constraint must always allow at least one token, and the end
    token at a sentence's last allowed position.
    """

    @abc.abstractmethod
    def initial_state(self, source_ids, beam_size, max_steps):
        """Nest of [batch, beam_size, ...] tensors: the state before the first step."""

    @abc.abstractmethod
    def allowed(self, ids, step, state, max_lengths, vocab_size):
        """`ids` [batch, beam] were just chosen at position `step`; returns (bool [batch,
        beam, vocab_size] of the tokens allowed at position `step + 1`, the new state)."""

    def decoder_inputs(self, ids, state):
        """The tokens the model reads for the tokens `ids` [batch, beam] just chosen, given
        the state before them: the tokens themselves unless the decoder was trained to read
        something else there (a parser reads the word a word symbol stands for)."""
        return ids

    def logits(self, logits, state):
        """The logits [batch, beam, vocab] the allowed tokens are ranked by, given the model's
        and the new state: the model's own unless a constraint pools them (a token that
        stands for a class of tokens takes the class's probability)."""
        return logits


PAPER_DECODING = DecodingSettings()


def alignment_layer(num_layers):
    """The decoder layer whose cross-attention gives word alignments: the penultimate one.

    Garg et al. (2019, "Jointly Learning to Align and Translate with Transformer Models",
    Section 4) extract alignments from the attention probabilities averaged over all heads of
    one layer and find the penultimate layer (layer 5 of 6) clearly best (lower alignment
    error rate than the last layer or any single head); Alkhouli et al. (2018) likewise use
    the attention weights of a head average rather than a single head. The last layer's
    attention is less aligned because its output is already shaped for predicting the next
    token. A 1-layer decoder has only its last layer.
    """
    return max(num_layers - 2, 0)


def output_lengths(source_ids, extra_length, cap, prefix_ids=None, terms_ids=None):
    """How many tokens a translation of each source may have, and the search's bound.

    Args:
        source_ids: int32 [batch, source_len], 0-padded.
        extra_length: a translation has at most source length + this many tokens.
        cap: the most tokens any translation may have.
        prefix_ids: optional int [batch, width] forced first tokens, 0-padded: cut to
            `cap - 1` (room for the end token); each sentence then has room for its prefix
            and the end token (within `cap`).
        terms_ids: optional int [batch, phrases, length] required target phrases,
            0-padded: each sentence then has room for its prefix, its phrases and the end
            token.
    Returns:
        (max_lengths int32 [batch], max_steps int32 scalar, the cut prefix int32 or None).
        max_steps comes from the padded width, not the lengths: a value-independent bound
        keeps one compiled (XLA) search per input shape.
    Raises:
        InvalidArgumentError: a sentence's prefix, phrases and end token need more than
            `cap` tokens (only with `terms_ids`: a prefix alone is cut to fit).
    """
    if prefix_ids is not None:
        prefix_ids = tf.convert_to_tensor(prefix_ids, tf.int32)[:, :cap - 1]
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    max_lengths = tf.minimum(source_lengths + extra_length, cap)
    max_steps = tf.minimum(tf.shape(source_ids)[1] + extra_length, cap)
    if prefix_ids is not None:
        width = tf.shape(prefix_ids)[1]
        # Up to the last non-padding column: the forced tokens plus the end token must fit.
        # (0 for a prefix of width 0, whose maximum over no columns is the lowest int32.)
        prefix_lengths = tf.maximum(tf.reduce_max(
            tf.where(tf.not_equal(prefix_ids, PAD_ID), tf.range(1, width + 1)[None, :], 0),
            axis=1), 0)
    else:
        prefix_lengths, width = 0, 0
    needed, bound = prefix_lengths + 1, width + 1
    if terms_ids is not None:
        terms_ids = tf.convert_to_tensor(terms_ids, tf.int32)
        needed += tf.reduce_sum(tf.cast(tf.not_equal(terms_ids, PAD_ID), tf.int32), [1, 2])
        bound += tf.shape(terms_ids)[1] * tf.shape(terms_ids)[2]
        check = tf.debugging.assert_less_equal(
            needed, cap, message=f"the required phrases do not fit: with the target prefix "
            f"and the end token, a translation may have at most {cap} tokens")
        with tf.control_dependencies([check]):
            needed = tf.identity(needed)
    if prefix_ids is not None or terms_ids is not None:
        max_lengths = tf.minimum(tf.maximum(max_lengths, needed), cap)
        max_steps = tf.minimum(tf.maximum(max_steps, bound), cap)
    return max_lengths, max_steps, prefix_ids


def translate_ids(model, source_ids, beam_size=PAPER_DECODING.beam_size,
                  alpha=PAPER_DECODING.alpha, extra_length=PAPER_DECODING.extra_length,
                  max_length=None, bos_id=BOS_ID, eos_id=EOS_ID, num_results=1,
                  early_finish=True, constraint=None, return_token_scores=False,
                  return_alignment=False, target_prefix_ids=None, terms_ids=None):
    """Beam search over a `Transformer`: source ids in, target ids and scores out.

    Encodes once; cross-attention keys/values are computed once per sentence and shared by
    its beams; every step runs `model.decode_step` on one new position with the cache.

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: int [batch, source_len], 0-padded.
        beam_size, alpha, num_results, early_finish: see `beam_search` (beam size, alpha and
            num_results may be scalar tensors: a dynamic beam).
        extra_length: each sentence may produce up to its source length + this many tokens
            (int or int32 scalar tensor).
        max_length: a cap on generated tokens (default: the model's `max_length`).
        bos_id, eos_id: start and end tokens of the target vocabulary.
        constraint: an optional `DecodingConstraint` on the generated tokens.
        return_token_scores: also return each token's log-probability.
        return_alignment: also return, for each target token, the source position it attends
            to most: the argmax of the cross-attention weights of `alignment_layer`
            averaged over heads, taken at the step that predicts the token.
        target_prefix_ids: optional int [batch, width], 0-padded: the first tokens of every
            output are forced to these (no end token; an all-0 row means no prefix) and the
            search continues from them. Their log-probabilities count in the score. Each
            sentence may then produce at least its prefix and the end token (within
            `max_length`; longer prefixes are cut to `max_length - 1`).
        terms_ids: optional int [batch, phrases, length]: target phrases every output of a
            sentence contains (0-padded rows of ids, no end token; a row of zeros is none),
            found by lexically constrained beam search with dynamic beam allocation
            (`keras_transformer.terms`). Each sentence may then produce at least its
            prefix, its phrases and the end token; InvalidArgumentError where they need
            more than `max_length` tokens.
    Returns:
        (ids int32 [batch, num_results, length] 0-padded, scores float32 [batch, num_results])
        as before when neither `return_token_scores` nor `return_alignment` is set;
        otherwise a dict as `beam_search` returns ("ids", "scores", "token_log_probs",
        "alignment"; without a constraint the length axis is cut to the longest hypothesis).
    """
    if not model.built:
        model.build()
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    cap = model.config.max_length if max_length is None else max_length
    max_lengths, max_steps, prefix = output_lengths(source_ids, extra_length, cap,
                                                    target_prefix_ids, terms_ids)
    if terms_ids is not None:  # nothing runs before the phrases are known to fit
        with tf.control_dependencies([max_lengths]):
            source_ids = tf.identity(source_ids)
    memory, mask = model.encode(source_ids, training=False)
    cache, memory_state = model.initial_decode_state(
        memory, mask, num_rows=beam_size, max_length=cache_length(max_steps))
    layer = alignment_layer(model.config.num_layers)
    # Without a constraint, per-token scores and alignments come from one teacher-forced
    # pass over the final hypotheses (`_token_details`): the search itself then runs exactly
    # as without them, which keeps per-step work (and time) unchanged. A constraint
    # renormalises the distribution step by step, which only the search sees: it tracks them.
    track = constraint is not None
    post_pass = (return_token_scores or return_alignment) and not track

    # Per sentence, for the sentences still searched (see `beam_search`).
    sentences = {"memory": memory_state, "max_lengths": max_lengths}
    if return_alignment and track:
        def symbols_to_logits_fn(ids, step, cache, sentences):
            logits, cache, weights = model.decode_step(
                ids, step, cache, sentences["memory"], return_attention_scores=True,
                attention_layer=layer)
            # weights [batch, heads, rows, source_len]: head average, then the argmax.
            average = tf.reduce_mean(tf.cast(weights, tf.float32), axis=1)
            return logits, cache, tf.argmax(average, axis=-1, output_type=tf.int32)
    else:
        def symbols_to_logits_fn(ids, step, cache, sentences):
            return model.decode_step(ids, step, cache, sentences["memory"])

    if constraint is not None:
        cache = {"model": cache,
                 "constraint": constraint.initial_state(source_ids, beam_size, max_steps)}
        unconstrained = symbols_to_logits_fn

        def symbols_to_logits_fn(ids, step, cache, sentences):
            out = unconstrained(constraint.decoder_inputs(ids, cache["constraint"]), step,
                                cache["model"], sentences)
            allowed, state = constraint.allowed(ids, step, cache["constraint"],
                                                sentences["max_lengths"],
                                                model.config.vocab_size)
            logits = tf.where(allowed, constraint.logits(out[0], state), _NEG)
            return (logits, {"model": out[1], "constraint": state}) + tuple(out[2:])

    start = tf.fill([tf.shape(source_ids)[0]], bos_id)
    result = beam_search(symbols_to_logits_fn, start, cache, beam_size, max_lengths, eos_id,
                         alpha=alpha, num_results=num_results, early_finish=early_finish,
                         max_steps=max_steps,
                         forced_ids=prefix,
                         return_token_scores=return_token_scores and track,
                         return_alignment=return_alignment and track,
                         sentence_state=sentences, terms=terms_ids)
    if not post_pass:
        return result
    ids, scores = result
    # Only up to the longest hypothesis: the rest of the search's storage is padding.
    ids = ids[:, :, :tf.reduce_max(tf.math.count_nonzero(ids, axis=2, dtype=tf.int32))]
    details = _token_details(model, memory, mask, ids, bos_id, layer)
    out = {"ids": ids, "scores": scores}
    if return_token_scores:
        out["token_log_probs"] = details["token_log_probs"]
    if return_alignment:
        out["alignment"] = details["alignment"]
    return out


def _token_details(model, memory, mask, ids, bos_id, layer):
    """Per-token log-probabilities and alignments of finished hypotheses, teacher-forced.

    The same numbers the search computes step by step (the full and the cached decoder agree
    to float precision; the end token forced at the length limit keeps its model
    log-probability in both), from one decoder pass over [batch * n, length].

    Args:
        memory, mask: `model.encode` of the sources [batch, ...].
        ids: int32 [batch, n, length] from `beam_search`, 0-padded after the end token.
    Returns:
        {"token_log_probs": float32 [batch, n, length] (0 at padding), "alignment": int32
        [batch, n, length] (-1 at padding)}.
    """
    shape = tf.shape(ids)
    batch, n, length = shape[0], shape[1], shape[2]
    flat = tf.reshape(ids, [batch * n, length])
    target_in = tf.concat([tf.fill([batch * n, 1], bos_id), flat[:, :-1]], axis=1)
    logits, weights = model.decode(target_in, tf.repeat(memory, n, axis=0),
                                   tf.repeat(mask, n, axis=0), return_attention_scores=True,
                                   training=False, attention_layer=layer)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    token_log_probs = tf.gather(log_probs, flat, axis=2, batch_dims=2)
    # weights [batch * n, heads, length, source_len]: head average, then the argmax.
    alignment = tf.argmax(tf.reduce_mean(tf.cast(weights, tf.float32), axis=1), axis=-1,
                          output_type=tf.int32)
    padding = tf.equal(flat, PAD_ID)
    return {"token_log_probs": tf.reshape(tf.where(padding, 0.0, token_log_probs), shape),
            "alignment": tf.reshape(tf.where(padding, -1, alignment), shape)}


def score_ids(model, source_ids, target_ids, alpha=PAPER_DECODING.alpha, bos_id=BOS_ID,
              teacher_inputs=None):
    """Length-penalised log-probability of given targets under the full forward pass.

    The same score `beam_search` reports, computed without the cache: the reference for
    checking it.

    Args:
        target_ids: int [batch, length], each ending with the end token, 0-padded after it.
        teacher_inputs: optional `f(source_ids, target_in) -> target_in`, what the decoder
            was trained to read instead of [BOS] + target (see `DecodingConstraint.
            decoder_inputs`).
    """
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    batch = tf.shape(target_ids)[0]
    target_in = tf.concat([tf.fill([batch, 1], bos_id), target_ids[:, :-1]], axis=1)
    if teacher_inputs is not None:
        target_in = teacher_inputs(source_ids, target_in)
    log_probs = tf.nn.log_softmax(model((source_ids, target_in), training=False), axis=-1)
    token_log_probs = tf.gather(log_probs, target_ids, axis=2, batch_dims=2)
    mask = tf.cast(tf.not_equal(target_ids, PAD_ID), tf.float32)
    lengths = tf.reduce_sum(mask, axis=1)
    return tf.reduce_sum(token_log_probs * mask, axis=1) / length_penalty(lengths, alpha)
