"""Beam search: an object built from its settings, its state under named keys, its loop made
of named steps; its rules from `core`, its drivers by need.

A step of `BeamSearchLoop`: `extend` runs the model one token further on the live
hypotheses; `grow` takes each sentence's 2k best one-token continuations (`core.candidates`,
or with required phrases `terms.candidates`); `pick_alive` keeps the k best that did not
end; `pick_finished` merges those that ended into the k best finished; `advance` makes the
next state. `continues` says whether the loop goes on.

Two drivers share the loop. With fixed slots (every Keras backend, and TensorFlow under
XLA) the decoder cache has a slot per output position and every sentence stays in the
batch until the whole batch is done, as `jax.lax.while_loop` and XLA need. In TensorFlow's
graph outside XLA the cache grows a position a step and a sentence leaves the batch as soon
as no live hypothesis can beat its finished ones (`advance` then compacts the batch): later
steps compute only the sentences still searched (docs/results.md), with the same results,
since a sentence that cannot improve never changes its finished hypotheses again.
"""
import dataclasses
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.decoding import core
from keras_transformer.decoding.core import NEG, gather_beams, length_penalty, take_along

STATE = ("step", "sentences", "alive", "alive_log_probs", "cache", "finished",
         "finished_scores")
"""The loop state's entries. "sentences": what the search knows of each sentence it still
searches (its index in the batch, its length limit, its forced tokens, the caller's state);
"alive" and "finished": per-hypothesis storage (the tokens, and with details each token's
log-probability and alignment) of the live and the finished hypotheses; the cache holds the
live ones' decoder state. The finished hypotheses are kept for the whole batch."""
LEAVING = ("sentences", "alive", "alive_log_probs", "cache")
"""The entries whose first axis shrinks as sentences leave the batch (compacting driver)."""


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """What a search returns and what it is given beside the model's step and its settings.

    Attributes:
        num_results: hypotheses returned per sentence (n-best, <= beam_size).
        early_finish: stop as soon as no live hypothesis of any sentence can beat its
            finished ones; False always runs all `max_steps` steps (for benchmarks).
        max_steps: the loop and storage bound (>= max(max_lengths); default that maximum):
            one that depends on input shapes only keeps one compiled search per shape.
        forced_ids: optional int32 [batch, width]: generated token i must be forced_ids[:, i]
            where that is not 0 (a target prefix); forced tokens keep their model
            log-probabilities, which count in the score.
        track_details: also return every token's log-probability and alignment (the step
            function then returns the alignment as a third value).
        sentence_state: optional nest of per-sentence tensors [batch, ...] that the step
            function reads (its 4th argument, with "max_lengths" added), for the sentences
            still searched; given it, the TensorFlow graph driver lets finished sentences
            leave.
        terms: optional int32 [batch, phrases, length]: target phrases every returned
            hypothesis contains (`keras_transformer.decoding.terms`, TensorFlow only).
    """

    num_results: Any = 1
    early_finish: bool = True
    max_steps: Any = None
    forced_ids: Any = None
    track_details: bool = False
    sentence_state: Any = None
    terms: Any = None


class Candidates(NamedTuple):
    """A step's one-token continuations, best first: [batch, width] each."""

    log_probs: Any        # the hypothesis's log-probability with the token
    beams: Any            # the live hypothesis each continues
    tokens: Any
    token_log_probs: Any  # the token's own log-probability


def beam_search(step_fn, initial_ids, initial_cache, search, max_lengths, eos_id,
                options=SearchOptions()):
    """Finds high-scoring continuations of `initial_ids` for every sentence of a batch.

    Args:
        step_fn: see `keras_transformer.decoding.step`; with `options.track_details` it
            returns a third value, int32 [batch, beam]: the source position each
            hypothesis's next token is aligned to.
        initial_ids: int32 [batch], the start token of every sentence.
        initial_cache: nest of [batch, beam_size, ...] tensors (fixed slots for every output
            position, or under TensorFlow growing ones: a dimension of size 0 at the start
            may grow).
        search: a `BeamSearch`: beam size (a Python int, or under TensorFlow an int32
            scalar tensor, a dynamic beam), alpha and stop rule (`core.can_improve`); its
            extra length is the caller's, in `max_lengths`.
        max_lengths: int32 [batch] (or scalar), the most tokens to generate per sentence,
            end token included; at that length the end token is forced.
        eos_id: the end token.
        options: `SearchOptions`.
    Returns:
        `Decoded`: ids int32 [batch, num_results, max_steps], 0-padded after the end token;
        scores float32 [batch, num_results], best first; with `track_details`
        token_log_probs float32 (0 at padding) and alignment int32 (-1 at padding).
    """
    return BeamSearchLoop(step_fn, search, eos_id, options).run(initial_ids, initial_cache,
                                                                max_lengths)


def _is_static(value):
    return isinstance(value, int) and not isinstance(value, bool)


class BeamSearchLoop:
    """One beam search, built from its settings; `run` decodes a batch (see `beam_search`)."""

    def __init__(self, step_fn, search, eos_id, options=SearchOptions()):
        k, n = search.beam_size, options.num_results
        if _is_static(k) and _is_static(n) and not 1 <= n <= k:
            raise ValueError(f"num_results must be in [1, beam_size={k}], got {n}")
        self.step_fn, self.eos_id, self.options = step_fn, eos_id, options
        self.k, self.alpha, self.stop_rule = k, search.alpha, search.stop_rule
        self.on_tf = core.on_tensorflow()

    # ------------------------------------------------------------------ the run
    def run(self, initial_ids, initial_cache, max_lengths):
        initial = self.initial_state(initial_ids, initial_cache, max_lengths)
        return self.results(initial, self.loop(initial))

    def initial_state(self, initial_ids, initial_cache, max_lengths):
        """The state before the first step; fixes the run's batch, bound and driver."""
        o = self.options
        initial_ids = ops.cast(ops.convert_to_tensor(initial_ids), "int32")
        self.batch = ops.shape(initial_ids)[0]
        max_lengths = ops.broadcast_to(ops.cast(max_lengths, "int32"), (self.batch,))
        self.steps = ops.max(max_lengths) if o.max_steps is None else o.max_steps
        self.positions = ops.arange(self.steps + 1, dtype="int32")
        if self.on_tf:
            from keras_transformer.decoding import tf_graph

            self.compact = (o.sentence_state is not None and o.early_finish
                            and not tf_graph.compiling_with_xla())
        else:
            self.compact = False
        alive = {"ids": self._storage(initial_ids, "int32")}
        if o.track_details:
            alive["token_log_probs"] = self._storage(ops.zeros((self.batch,)), "float32")
            alive["alignment"] = self._storage(ops.full((self.batch,), -1, "int32"), "int32")
        # Only the first beam is live at the start, or the k beams would be k copies.
        alive_log_probs = ops.tile(ops.where(ops.arange(self.k) == 0, 0.0, NEG)[None, :],
                                   (self.batch, 1))
        sentences, cache = self._sentences(max_lengths, initial_cache)
        return {"step": ops.convert_to_tensor(0, "int32"), "sentences": sentences,
                "alive": alive, "alive_log_probs": alive_log_probs, "cache": cache,
                "finished": keras.tree.map_structure(ops.zeros_like, alive),
                "finished_scores": ops.full((self.batch, self.k), NEG, "float32")}

    def _storage(self, first, dtype):
        """[batch, k, steps + 1]: `first` at position 0 (the start token), zeros after."""
        first = ops.tile(ops.cast(first, dtype)[:, None, None], (1, self.k, 1))
        return ops.concatenate([first, ops.zeros((self.batch, self.k, self.steps), dtype)],
                               axis=2)

    def _sentences(self, max_lengths, cache):
        """(the per-sentence state, the cache with the phrase state when there are terms)."""
        o = self.options
        sentences = {"index": ops.arange(self.batch, dtype="int32"), "max_lengths": max_lengths}
        if o.forced_ids is not None:  # one column per loop step: forced[:, step] always exists
            forced_ids = ops.cast(o.forced_ids, "int32")
            sentences["forced"] = ops.concatenate(
                [forced_ids, ops.zeros((self.batch, self.steps), "int32")], axis=1
            )[:, :self.steps]
        if o.sentence_state is not None:
            sentences["memory"] = o.sentence_state
        if o.terms is not None:
            from keras_transformer.decoding import terms as terms_lib

            sentences["terms"] = ops.cast(o.terms, "int32")
            sentences["term_lengths"] = terms_lib.phrase_lengths(sentences["terms"])
            # The phrase state is per hypothesis, kept and reordered with the decoder cache.
            cache = {"model": cache,
                     "terms": terms_lib.initial_state(sentences["term_lengths"], self.k)}
        return sentences, cache

    def loop(self, state):
        """The state after the last step: `step` while `continues`."""
        if not self.on_tf:
            return ops.while_loop(self.continues, self.step, state,
                                  maximum_iterations=self.steps)
        from keras_transformer.decoding import tf_graph

        def named(values):
            return dict(zip(STATE, values))

        def body(*values):
            after = self.step(named(values))  # once: each call adds a body to the graph
            return tuple(after[name] for name in STATE)

        out = tf_graph.while_loop(
            lambda *values: self.continues(named(values)), body,
            tuple(state[name] for name in STATE), maximum_iterations=self.steps,
            shrinking=tuple(STATE.index(name) for name in LEAVING) if self.compact else ())
        return named(out)

    # ------------------------------------------------------------------ the steps
    def can_improve(self, step, alive_log_probs, finished_scores, max_lengths):
        return core.can_improve(step, alive_log_probs, finished_scores, max_lengths,
                                self.alpha, self.options.num_results, self.stop_rule)

    def continues(self, state):
        """Whether any sentence is still searched (and the bound is not reached)."""
        going = state["step"] < self.steps
        if self.compact:  # the sentences that could not improve have left
            return going & (ops.size(state["sentences"]["index"]) > 0)
        if not self.options.early_finish:
            return going
        return going & ops.any(self.can_improve(state["step"], state["alive_log_probs"],
                                                state["finished_scores"],
                                                state["sentences"]["max_lengths"]))

    def step(self, state):
        """One token more for every sentence still searched."""
        logits, cache, alignment, term_state = self.extend(state)
        candidates = self.grow(state, logits, term_state)
        if term_state is not None:
            cache = {"model": cache, "terms": term_state}
        top = self.write(state, candidates, alignment)
        alive, alive_log_probs, parents = self.pick_alive(top, candidates)
        kept, kept_scores = self.pick_finished(state, top, candidates)
        return self.advance(state, alive, alive_log_probs, cache, parents, kept, kept_scores)

    def extend(self, state):
        """(the next token's logits [batch, beam, vocab], the new cache, the alignment or
        None, the phrase state met with the tokens just chosen or None)."""
        cache, step, sentences = state["cache"], state["step"], state["sentences"]
        last_tokens = state["alive"]["ids"][:, :, step]
        term_state = None
        if self.options.terms is not None:
            from keras_transformer.decoding import terms as terms_lib

            term_state = terms_lib.advance(cache["terms"], last_tokens, sentences["terms"],
                                           sentences["term_lengths"])
            cache = cache["model"]
        out = self.step_fn(last_tokens, step, cache, sentences)
        alignment = out[2] if self.options.track_details else None
        return out[0], out[1], alignment, term_state

    def grow(self, state, logits, term_state):
        """`Candidates`: each sentence's 2k best continuations (with phrases, the ones
        `terms.candidates` allocates)."""
        step, sentences = state["step"], state["sentences"]
        forced = sentences["forced"][:, step] if self.options.forced_ids is not None else None
        if term_state is None:
            return Candidates(*core.candidates(
                logits, state["alive_log_probs"], 2 * self.k, self.eos_id,
                ops.equal(step + 1, sentences["max_lengths"]), forced))
        from keras_transformer.decoding import terms as terms_lib

        return Candidates(*terms_lib.candidates(
            logits, state["alive_log_probs"], self.k, self.eos_id, forced,
            sentences["max_lengths"] - 1 - step, term_state,
            (sentences["terms"], sentences["term_lengths"])))

    def write(self, state, candidates, alignment):
        """The candidates' storage: their beams' tokens (and details) with the new one
        written at position step + 1."""
        new_values = {"ids": candidates.tokens}
        if self.options.track_details:
            new_values["token_log_probs"] = candidates.token_log_probs
            new_values["alignment"] = take_along(alignment, candidates.beams)
        write = ops.equal(self.positions, state["step"] + 1)[None, None, :]
        return {name: ops.where(write, new_values[name][:, :, None], old)
                for name, old in gather_beams(state["alive"], candidates.beams).items()}

    def pick_alive(self, top, candidates):
        """(the live storage, log-probabilities, the cache rows they continue): the k best
        candidates that did not end."""
        ended = ops.equal(candidates.tokens, self.eos_id)
        alive_log_probs, pick = core.top_k(ops.where(ended, NEG, candidates.log_probs), self.k)
        return gather_beams(top, pick), alive_log_probs, take_along(candidates.beams, pick)

    def pick_finished(self, state, top, candidates):
        """(storage, scores) of the k best of the finished hypotheses of the sentences
        searched and the candidates that ended now. As in fairseq, an ending counts only if
        it ranks among the k best candidates, so that beam size 1 is exactly greedy
        decoding (with phrases, every allowed ending counts)."""
        kept, kept_scores = state["finished"], state["finished_scores"]
        if self.compact:
            import tensorflow as tf

            index = state["sentences"]["index"]
            kept, kept_scores = tf.nest.map_structure(lambda x: tf.gather(x, index),
                                                      (kept, kept_scores))
        ended = ops.equal(candidates.tokens, self.eos_id) & (candidates.log_probs > NEG / 2)
        if self.options.terms is None:
            ended = ended & (ops.arange(2 * self.k) < self.k)[None, :]
        ended_scores = ops.where(
            ended, candidates.log_probs / length_penalty(state["step"] + 1, self.alpha), NEG)
        pool_scores = ops.concatenate([kept_scores, ended_scores], axis=1)
        pool = keras.tree.map_structure(lambda f, t: ops.concatenate([f, t], axis=1), kept,
                                        top)
        kept_scores, pick = core.top_k(pool_scores, self.k)
        return gather_beams(pool, pick), kept_scores

    def advance(self, state, alive, alive_log_probs, cache, parents, kept, kept_scores):
        """The next state: the cache reordered to the live hypotheses' parents; with the
        compacting driver, the finished hypotheses back in their sentences' rows and the
        sentences that cannot improve any more out of the batch."""
        step, lengths = state["step"] + 1, state["sentences"]["max_lengths"]
        if not self.compact:
            if self.options.early_finish and self.stop_rule != "exact":
                # A stopped sentence stays as it is.
                alive_log_probs = ops.where(
                    self.can_improve(step, alive_log_probs, kept_scores, lengths)[:, None],
                    alive_log_probs, NEG)
            return {"step": step, "sentences": state["sentences"], "alive": alive,
                    "alive_log_probs": alive_log_probs, "cache": gather_beams(cache, parents),
                    "finished": kept, "finished_scores": kept_scores}
        import tensorflow as tf

        sentences = state["sentences"]
        rows = sentences["index"][:, None]
        finished, finished_scores = tf.nest.map_structure(
            lambda whole, part: tf.tensor_scatter_nd_update(whole, rows, part),
            (state["finished"], state["finished_scores"]), (kept, kept_scores))
        still = tf.where(self.can_improve(step, alive_log_probs, kept_scores, lengths))[:, 0]
        still = tf.cast(still, tf.int32)
        cache = gather_beams(cache, tf.gather(parents, still), sentences=still)
        alive, alive_log_probs = tf.nest.map_structure(lambda x: tf.gather(x, still),
                                                       (alive, alive_log_probs))
        sentences = tf.cond(tf.size(still) < tf.size(sentences["index"]),
                            lambda: tf.nest.map_structure(lambda x: tf.gather(x, still),
                                                          sentences),
                            lambda: sentences)
        return {"step": step, "sentences": sentences, "alive": alive,
                "alive_log_probs": alive_log_probs, "cache": cache, "finished": finished,
                "finished_scores": finished_scores}

    # ------------------------------------------------------------------ the results
    def results(self, initial, final):
        """`Decoded` from the last state: each sentence's finished hypotheses, or its live
        ones where none finished (only when early_finish is off and decoding stopped at
        max(max_lengths) before the sentence's own end)."""
        alive, alive_log_probs = final["alive"], final["alive_log_probs"]
        if self.compact:  # the sentences searched to the last step: their live beams, in place
            import tensorflow as tf

            rows = final["sentences"]["index"][:, None]
            alive, alive_log_probs = tf.nest.map_structure(
                lambda whole, part: tf.tensor_scatter_nd_update(whole, rows, part),
                (initial["alive"], tf.fill([self.batch, self.k], NEG)),
                (alive, alive_log_probs))
        n = self.options.num_results
        finished_scores = final["finished_scores"]
        has_finished = finished_scores[:, :1] > NEG / 2
        alive_scores = alive_log_probs / length_penalty(self.steps, self.alpha)
        outputs = {name: ops.where(has_finished[:, :, None], final["finished"][name],
                                   alive[name])[:, :n, 1:]
                   for name in alive}
        scores = ops.where(has_finished, finished_scores, alive_scores)[:, :n]
        if not self.options.track_details:
            return core.Decoded(outputs["ids"], scores)
        padding = ops.equal(outputs["ids"], PAD_ID)
        return core.Decoded(outputs["ids"], scores,
                            ops.where(padding, 0.0, outputs["token_log_probs"]),
                            ops.where(padding, -1, outputs["alignment"]))
