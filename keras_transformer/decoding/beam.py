"""Beam search: `beam_search` runs each batch with a driver (`BeamRun`, `CompactingRun`), its
state under named keys, its loop of named steps, its rules from `core`."""
import dataclasses
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.decoding import core
from keras_transformer.decoding.core import NEG, gather_beams, length_penalty, take_along

STATE = ("step", "sentences", "alive", "alive_log_probs", "cache", "finished", "finished_scores")
"""Loop state entries: "sentences", per searched sentence (batch index, length limit, forced
tokens, caller's state); "alive", "finished": per-hypothesis storage (tokens; with details,
log-probabilities, alignment), finished for the whole batch; "cache": live decoder state."""


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """What a search returns and is given beside the model's step and its settings.

    Attributes:
        num_results: hypotheses returned per sentence (n-best, <= beam_size).
        early_finish: stop once no sentence can improve; False runs all `max_steps` (benchmarks).
        max_steps: the loop and storage bound (>= max(max_lengths); default that maximum); one
            from input shapes only keeps one compiled search per shape.
        forced_ids: optional int32 [batch, width]: generated token i is forced_ids[:, i] where not
            0 (a target prefix; forced tokens' log-probabilities count in the score).
        track_details: also return each token's log-probability and alignment (step_fn's 3rd).
        sentence_state: optional nest of per-sentence tensors [batch, ...], step_fn's 4th argument
            (with "max_lengths"); given it, the TensorFlow graph driver lets sentences leave.
        terms: optional int32 [batch, phrases, length]: phrases every output contains (`terms`).
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
        step_fn: see `keras_transformer.decoding.step`; with `options.track_details` it also
            returns int32 [batch, beam], the source position each next token is aligned to.
        initial_ids: int32 [batch], the start token of every sentence.
        initial_cache: nest of [batch, beam_size, ...] tensors (fixed slots, or under TensorFlow
            growing ones: a dimension of size 0 at the start may grow).
        search: a `BeamSearch` (beam size a Python int, or under TensorFlow an int32 scalar
            tensor); its extra length is the caller's, in `max_lengths`.
        max_lengths: int32 [batch] or scalar, most tokens per sentence, the end token forced last.
    Returns:
        `Decoded` with ids [batch, num_results, max_steps] (0-padded after the end token) and
        scores best first; details (0 / -1 at padding) with `track_details`.
    """
    k, n = search.beam_size, options.num_results
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (k, n)) and not 1 <= n <= k:
        raise ValueError(f"num_results must be in [1, beam_size={k}], got {n}")
    initial_ids = ops.cast(ops.convert_to_tensor(initial_ids), "int32")
    batch = ops.shape(initial_ids)[0]
    max_lengths = ops.broadcast_to(ops.cast(max_lengths, "int32"), (batch,))
    steps = ops.max(max_lengths) if options.max_steps is None else options.max_steps
    driver = CompactingRun if _compacts(options) else BeamRun
    run = driver(step_fn, search, eos_id, options, batch, steps)
    initial = run.initial_state(initial_ids, initial_cache, max_lengths)
    return run.results(initial, run.loop(initial))


def _compacts(options) -> bool:
    """Whether sentences leave the batch: in TensorFlow's graph outside XLA, given their
    state, when the search stops early."""
    if not (core.on_tensorflow() and options.sentence_state is not None and options.early_finish):
        return False
    from keras_transformer.decoding import tf_graph

    return not tf_graph.compiling_with_xla()


class BeamRun:
    """One beam search over one batch, with fixed slots (every backend; TensorFlow under XLA):
    its named steps, over the search's settings and this run's batch size and bound."""

    SHRINKING = ()
    """Loop state entries whose first axis shrinks (`CompactingRun`'s)."""

    def __init__(self, step_fn, search, eos_id, options, batch, steps):
        self.step_fn, self.eos_id, self.options = step_fn, eos_id, options
        self.k, self.alpha, self.stop_rule = search.beam_size, search.alpha, search.stop_rule
        self.batch, self.steps = batch, steps
        self.positions = ops.arange(steps + 1, dtype="int32")

    def initial_state(self, initial_ids, initial_cache, max_lengths):
        """The state before the first step."""
        o = self.options
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
        if not core.on_tensorflow():
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
            shrinking=tuple(STATE.index(name) for name in self.SHRINKING))
        return named(out)

    def can_improve(self, step, alive_log_probs, finished_scores, max_lengths):
        return core.can_improve(step, alive_log_probs, finished_scores, max_lengths,
                                self.alpha, self.options.num_results, self.stop_rule)

    def continues(self, state):
        """Whether any sentence is still searched (and the bound is not reached)."""
        going = state["step"] < self.steps
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
        """(logits [batch, beam, vocab], new cache, alignment or None, phrase state or None)."""
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
        """`Candidates`: each sentence's 2k best continuations (`terms.candidates` if phrases)."""
        step, sentences = state["step"], state["sentences"]
        forced = sentences["forced"][:, step] if self.options.forced_ids is not None else None
        if term_state is None:
            return Candidates(*core.candidates(
                logits, state["alive_log_probs"], 2 * self.k, self.eos_id,
                ops.equal(step + 1, sentences["max_lengths"]), forced, ops.equal(step, 0)))
        from keras_transformer.decoding import terms as terms_lib

        return Candidates(*terms_lib.candidates(
            logits, state["alive_log_probs"], self.k, self.eos_id, forced,
            sentences["max_lengths"] - 1 - step,
            (sentences["terms"], sentences["term_lengths"], term_state), ops.equal(step, 0)))

    def write(self, state, candidates, alignment):
        """The candidates' storage: their beams' tokens (and details), the new one at step + 1."""
        new_values = {"ids": candidates.tokens}
        if self.options.track_details:
            new_values["token_log_probs"] = candidates.token_log_probs
            new_values["alignment"] = take_along(alignment, candidates.beams)
        write = ops.equal(self.positions, state["step"] + 1)[None, None, :]
        return {name: ops.where(write, new_values[name][:, :, None], old)
                for name, old in gather_beams(state["alive"], candidates.beams).items()}

    def pick_alive(self, top, candidates):
        """(live storage, log-probabilities, parent rows) of the k best candidates not ended."""
        ended = ops.equal(candidates.tokens, self.eos_id)
        alive_log_probs, pick = core.top_k(ops.where(ended, NEG, candidates.log_probs), self.k)
        return gather_beams(top, pick), alive_log_probs, take_along(candidates.beams, pick)

    def pick_finished(self, state, top, candidates):
        """(storage, scores): the k best of the sentences' finished hypotheses and those ending
        now; as in fairseq, an ending counts only among the k best candidates, so beam 1 is greedy
        (with phrases, every allowed ending counts)."""
        kept, kept_scores = self._finished_of_searched(state)
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

    def _finished_of_searched(self, state):
        """(finished storage, scores) of the sentences still in the batch: all of them here."""
        return state["finished"], state["finished_scores"]

    def advance(self, state, alive, alive_log_probs, cache, parents, kept, kept_scores):
        """The next state: the cache reordered to the live hypotheses' parents; with a stop rule
        other than exact, a sentence that cannot improve stays as it is."""
        step, lengths = state["step"] + 1, state["sentences"]["max_lengths"]
        if self.options.early_finish and self.stop_rule != "exact":
            alive_log_probs = ops.where(
                self.can_improve(step, alive_log_probs, kept_scores, lengths)[:, None],
                alive_log_probs, NEG)
        return {"step": step, "sentences": state["sentences"], "alive": alive,
                "alive_log_probs": alive_log_probs, "cache": gather_beams(cache, parents),
                "finished": kept, "finished_scores": kept_scores}

    def _live_of_every_sentence(self, initial, final):
        """(live storage, log-probabilities) of every sentence at the end: the final state's."""
        return final["alive"], final["alive_log_probs"]

    def results(self, initial, final):
        """`Decoded` from the last state: finished hypotheses, or live ones where none finished
        (only without early_finish, stopped at max(max_lengths))."""
        alive, alive_log_probs = self._live_of_every_sentence(initial, final)
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


class CompactingRun(BeamRun):
    """A `BeamRun` in TensorFlow's graph outside XLA whose cache grows a position a step and
    whose sentences leave the batch once they cannot improve (`advance`), with the same
    results; the finished hypotheses stay in their rows of the whole batch."""

    SHRINKING = ("sentences", "alive", "alive_log_probs", "cache")

    def continues(self, state):
        """Whether the bound is not reached and a sentence is left (the others have left)."""
        return (state["step"] < self.steps) & (ops.size(state["sentences"]["index"]) > 0)

    def _finished_of_searched(self, state):
        import tensorflow as tf

        index = state["sentences"]["index"]
        return tf.nest.map_structure(lambda x: tf.gather(x, index),
                                     (state["finished"], state["finished_scores"]))

    def advance(self, state, alive, alive_log_probs, cache, parents, kept, kept_scores):
        """The next state: finished hypotheses back in their rows; the sentences that cannot
        improve out of the batch, with their cache rows."""
        import tensorflow as tf

        step, sentences = state["step"] + 1, state["sentences"]
        rows = sentences["index"][:, None]
        finished, finished_scores = tf.nest.map_structure(
            lambda whole, part: tf.tensor_scatter_nd_update(whole, rows, part),
            (state["finished"], state["finished_scores"]), (kept, kept_scores))
        still = tf.where(self.can_improve(step, alive_log_probs, kept_scores,
                                          sentences["max_lengths"]))[:, 0]
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

    def _live_of_every_sentence(self, initial, final):
        """The sentences searched to the last step: their live beams, in their rows."""
        import tensorflow as tf

        rows = final["sentences"]["index"][:, None]
        return tf.nest.map_structure(
            lambda whole, part: tf.tensor_scatter_nd_update(whole, rows, part),
            (initial["alive"], tf.fill([self.batch, self.k], NEG)),
            (final["alive"], final["alive_log_probs"]))
