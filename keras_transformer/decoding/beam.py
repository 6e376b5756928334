"""Beam search: one loop for every backend, its rules from `core`, its drivers by need.

Two drivers share the loop. With fixed slots (every Keras backend, and TensorFlow under
XLA) the decoder cache has a slot per output position and every sentence stays in the
batch until the whole batch is done, as `jax.lax.while_loop` and XLA need. In TensorFlow's
graph outside XLA the cache grows a position a step and a sentence leaves the batch as soon
as no live hypothesis can beat its finished ones ("compact"): later steps compute only the
sentences still searched (docs/results.md), with the same results, since a sentence that
cannot improve never changes its finished hypotheses again.
"""
import keras
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.decoding import core
from keras_transformer.decoding.core import NEG, gather_beams, length_penalty, take_along


def _is_static(value):
    return isinstance(value, int) and not isinstance(value, bool)


def beam_search(step_fn, initial_ids, initial_cache, beam_size, max_lengths, eos_id, alpha,
                num_results=1, early_finish=True, max_steps=None, forced_ids=None,
                track_details=False, sentence_state=None, terms=None, stop_rule="exact"):
    """Finds high-scoring continuations of `initial_ids` for every sentence of a batch.

    Args:
        step_fn: see `keras_transformer.decoding.step`; with `track_details` it returns a
            third value, int32 [batch, beam]: the source position each hypothesis's next
            token is aligned to.
        initial_ids: int32 [batch], the start token of every sentence.
        initial_cache: nest of [batch, beam_size, ...] tensors (fixed slots for every output
            position, or under TensorFlow growing ones: a dimension of size 0 at the start
            may grow).
        beam_size: k; 1 with alpha 0 is greedy decoding. A Python int, or under TensorFlow
            an int32 scalar tensor (a dynamic beam; values are not checked here).
        max_lengths: int32 [batch] (or scalar), the most tokens to generate per sentence,
            end token included; at that length the end token is forced.
        eos_id: the end token.
        alpha: length-penalty exponent (0.6 in the paper; 0 scores by log-probability).
        num_results: hypotheses returned per sentence (n-best, <= beam_size).
        early_finish: stop as soon as no live hypothesis of any sentence can beat its
            finished ones; False always runs all `max_steps` steps (for benchmarks).
        max_steps: the loop and storage bound (>= max(max_lengths); default that maximum):
            one that depends on input shapes only keeps one compiled search per shape.
        forced_ids: optional int32 [batch, width]: generated token i must be forced_ids[:, i]
            where that is not 0 (a target prefix); forced tokens keep their model
            log-probabilities, which count in the score.
        track_details: also return every token's log-probability and alignment.
        sentence_state: optional nest of per-sentence tensors [batch, ...] that `step_fn`
            reads (its 4th argument, with "max_lengths" added), for the sentences still
            searched; given it, the TensorFlow graph driver lets finished sentences leave.
        terms: optional int32 [batch, phrases, length]: target phrases every returned
            hypothesis contains (`keras_transformer.decoding.terms`, TensorFlow only).
        stop_rule: when a sentence stops (`core.can_improve`): "exact" or "best_finished".
    Returns:
        `Decoded`: ids int32 [batch, num_results, max_steps], 0-padded after the end token;
        scores float32 [batch, num_results], best first; with `track_details`
        token_log_probs float32 (0 at padding) and alignment int32 (-1 at padding).
    """
    if _is_static(beam_size) and _is_static(num_results) and not 1 <= num_results <= beam_size:
        raise ValueError(f"num_results must be in [1, beam_size={beam_size}], got {num_results}")
    on_tf = core.on_tensorflow()
    if on_tf:
        import tensorflow as tf

        from keras_transformer.decoding import tf_graph
    initial_ids = ops.cast(ops.convert_to_tensor(initial_ids), "int32")
    batch = ops.shape(initial_ids)[0]
    max_lengths = ops.broadcast_to(ops.cast(max_lengths, "int32"), (batch,))
    steps = ops.max(max_lengths) if max_steps is None else max_steps
    k = beam_size
    compact = (sentence_state is not None and early_finish and on_tf
               and not tf_graph.compiling_with_xla())
    # Per-hypothesis storage, reordered together: the tokens (the start token at position 0
    # and generated tokens after it) and, if asked, what each token cost and attends to.
    def storage(first, dtype):
        first = ops.tile(ops.cast(first, dtype)[:, None, None], (1, k, 1))
        return ops.concatenate([first, ops.zeros((batch, k, steps), dtype)], axis=2)

    initial_alive = {"ids": storage(initial_ids, "int32")}
    if track_details:
        initial_alive["token_log_probs"] = storage(ops.zeros((batch,)), "float32")
        initial_alive["alignment"] = storage(ops.full((batch,), -1, "int32"), "int32")
    # Only the first beam is live at the start, or the k beams would be k copies.
    alive_log_probs = ops.tile(ops.where(ops.arange(k) == 0, 0.0, NEG)[None, :], (batch, 1))
    finished = keras.tree.map_structure(ops.zeros_like, initial_alive)
    finished_scores = ops.full((batch, k), NEG, "float32")
    positions = ops.arange(steps + 1, dtype="int32")
    # What the search knows of each sentence it still searches (with `compact`, those that
    # can still improve; else all): its index in the batch, its length limit, its forced
    # tokens and the caller's per-sentence state. Live hypotheses and the cache hold the
    # same sentences; the finished ones are kept for the whole batch.
    sentences = {"index": ops.arange(batch, dtype="int32"), "max_lengths": max_lengths}
    if forced_ids is not None:  # one column per loop step: forced[:, step] always exists
        forced_ids = ops.cast(forced_ids, "int32")
        sentences["forced"] = ops.concatenate(
            [forced_ids, ops.zeros((batch, steps), "int32")], axis=1)[:, :steps]
    if sentence_state is not None:
        sentences["memory"] = sentence_state
    if terms is not None:
        from keras_transformer.decoding import terms as terms_lib

        sentences["terms"] = ops.cast(terms, "int32")
        sentences["term_lengths"] = terms_lib.phrase_lengths(sentences["terms"])
        # The phrase state is per hypothesis, kept and reordered with the decoder cache.
        initial_cache = {"model": initial_cache,
                         "terms": terms_lib.initial_state(sentences["term_lengths"], k)}

    def can_improve(step, alive_log_probs, finished_scores, max_lengths):
        return core.can_improve(step, alive_log_probs, finished_scores, max_lengths, alpha,
                                num_results, stop_rule)

    def not_done(step, sentences, alive, alive_log_probs, cache, finished, finished_scores):
        if compact:  # the sentences that could not improve have left
            return (step < steps) & (ops.size(sentences["index"]) > 0)
        if not early_finish:
            return step < steps
        return (step < steps) & ops.any(
            can_improve(step, alive_log_probs, finished_scores, sentences["max_lengths"]))

    def body(step, sentences, alive, alive_log_probs, cache, finished, finished_scores):
        index, lengths = sentences["index"], sentences["max_lengths"]
        kept, kept_scores = finished, finished_scores
        if compact:
            kept, kept_scores = tf.nest.map_structure(lambda x: tf.gather(x, index),
                                                      (finished, finished_scores))
        if terms is not None:  # the phrases met with the tokens just chosen
            term_state = terms_lib.advance(cache["terms"], alive["ids"][:, :, step],
                                           sentences["terms"], sentences["term_lengths"])
            cache = cache["model"]
        out = step_fn(alive["ids"][:, :, step], step, cache, sentences)
        logits, cache = out[0], out[1]
        last = ops.equal(step + 1, lengths)
        forced = sentences["forced"][:, step] if forced_ids is not None else None
        if terms is None:
            top_log_probs, top_beams, top_tokens, top_token_log_probs = core.candidates(
                logits, alive_log_probs, 2 * k, eos_id, last, forced)
        else:
            top_log_probs, top_beams, top_tokens, top_token_log_probs = terms_lib.candidates(
                logits, alive_log_probs, k, eos_id, last, forced, lengths - 1 - step,
                term_state, sentences["terms"], sentences["term_lengths"])
            cache = {"model": cache, "terms": term_state}
        new_values = {"ids": top_tokens}
        if track_details:
            new_values["token_log_probs"] = top_token_log_probs
            new_values["alignment"] = take_along(out[2], top_beams)
        write = ops.equal(positions, step + 1)[None, None, :]
        top = {name: ops.where(write, new_values[name][:, :, None], old)
               for name, old in gather_beams(alive, top_beams).items()}
        top_is_eos = ops.equal(top_tokens, eos_id)

        # Live beams: the k best candidates that did not end.
        alive_log_probs, alive_pick = core.top_k(ops.where(top_is_eos, NEG, top_log_probs), k)
        alive = gather_beams(top, alive_pick)
        parents = take_along(top_beams, alive_pick)  # the cache rows they continue

        # Finished: the k best of the old finished and the candidates that ended now. As in
        # fairseq, an ending counts only if it ranks among the k best candidates, so that
        # beam size 1 is exactly greedy decoding (with phrases, every allowed ending counts).
        ended = top_is_eos & (top_log_probs > NEG / 2)
        if terms is None:
            ended = ended & (ops.arange(2 * k) < k)[None, :]
        ended_scores = ops.where(ended, top_log_probs / length_penalty(step + 1, alpha), NEG)
        pool_scores = ops.concatenate([kept_scores, ended_scores], axis=1)
        pool = keras.tree.map_structure(lambda f, t: ops.concatenate([f, t], axis=1), kept, top)
        kept_scores, finished_pick = core.top_k(pool_scores, k)
        kept = gather_beams(pool, finished_pick)
        if not compact:
            if early_finish and stop_rule != "exact":  # a stopped sentence stays as it is
                alive_log_probs = ops.where(
                    can_improve(step + 1, alive_log_probs, kept_scores, lengths)[:, None],
                    alive_log_probs, NEG)
            return (step + 1, sentences, alive, alive_log_probs, gather_beams(cache, parents),
                    kept, kept_scores)
        # The finished hypotheses go back to their sentences; the sentences that can no
        # longer improve leave the batch (exact: their results cannot change any more).
        rows = index[:, None]
        whole = tf.nest.map_structure(lambda f, new: tf.tensor_scatter_nd_update(f, rows, new),
                                      (finished, finished_scores), (kept, kept_scores))
        still = tf.where(can_improve(step + 1, alive_log_probs, kept_scores, lengths))[:, 0]
        still = tf.cast(still, tf.int32)
        cache = gather_beams(cache, tf.gather(parents, still), sentences=still)
        alive, alive_log_probs = tf.nest.map_structure(lambda x: tf.gather(x, still),
                                                       (alive, alive_log_probs))
        sentences = tf.cond(tf.size(still) < tf.size(index),
                            lambda: tf.nest.map_structure(lambda x: tf.gather(x, still),
                                                          sentences),
                            lambda: sentences)
        return (step + 1, sentences, alive, alive_log_probs, cache) + whole

    loop_vars = (ops.convert_to_tensor(0, "int32"), sentences, initial_alive, alive_log_probs,
                 initial_cache, finished, finished_scores)
    if on_tf:
        out = tf_graph.while_loop(not_done, body, loop_vars, maximum_iterations=steps,
                                  shrinking=(1, 2, 3, 4) if compact else ())
    else:
        out = ops.while_loop(not_done, body, loop_vars, maximum_iterations=steps)
    _, sentences, alive, alive_log_probs, _, finished, finished_scores = out
    if compact:  # the sentences searched to the last step: their live beams, in place
        rows = sentences["index"][:, None]
        alive, alive_log_probs = tf.nest.map_structure(
            lambda whole, part: tf.tensor_scatter_nd_update(whole, rows, part),
            (initial_alive, tf.fill([batch, k], NEG)), (alive, alive_log_probs))

    # A sentence with no finished hypothesis (only when early_finish is off and decoding
    # stopped at max(max_lengths) before its own end) returns its live beams instead.
    has_finished = finished_scores[:, :1] > NEG / 2
    alive_scores = alive_log_probs / length_penalty(steps, alpha)
    outputs = {name: ops.where(has_finished[:, :, None], finished[name],
                               alive[name])[:, :num_results, 1:]
               for name in alive}
    scores = ops.where(has_finished, finished_scores, alive_scores)[:, :num_results]
    if not track_details:
        return core.Decoded(outputs["ids"], scores)
    padding = ops.equal(outputs["ids"], PAD_ID)
    return core.Decoded(outputs["ids"], scores,
                        ops.where(padding, 0.0, outputs["token_log_probs"]),
                        ops.where(padding, -1, outputs["alignment"]))
