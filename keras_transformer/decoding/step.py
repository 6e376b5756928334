"""The model as every search sees it: `step_fn(ids, step, cache, sentences) -> (logits, cache[,
alignment])`, optionally restricted by a `DecodingConstraint`. `ids` [batch, rows]: the tokens at
position `step` (0: the start id); `logits` [batch, rows, vocab] predict `step + 1`; `cache`:
per-hypothesis tensors [batch, rows, ...] the search reorders; `sentences`: what a sentence's
hypotheses share ("memory", "max_lengths"), for the sentences still searched."""
import abc

from keras import ops

from keras_transformer.decoding.core import NEG, alignment_layer


class DecodingConstraint(abc.ABC):
    """Restricts which tokens a search may choose, e.g. to well-formed parse trees. Its
    per-hypothesis state lives in the search cache; before each step it allows tokens (the rest
    get probability 0): always at least one, and the end token at a sentence's last position."""

    @abc.abstractmethod
    def initial_state(self, source_ids, beam_size, max_steps):
        """Nest of [batch, beam_size, ...] tensors: the state before the first step."""

    @abc.abstractmethod
    def allowed(self, ids, step, state, max_lengths, vocab_size):
        """(bool [batch, beam, vocab_size]: the tokens allowed at `step + 1`, the new state), given
        `ids` [batch, beam] just chosen at `step`."""

    def decoder_inputs(self, ids, state):
        """The tokens the model reads for the chosen `ids` [batch, beam], given the state before
        them: `ids` unless the decoder was trained otherwise (a parser reads a symbol's word)."""
        return ids

    def logits(self, logits, state):
        """The logits [batch, beam, vocab] ranking the allowed tokens, given the model's and
        the new state: the model's unless pooled (a token for a class gets its probability)."""
        return logits


def model_step(model, with_alignment=False):
    """`model.decode_step` as a step function; `with_alignment` adds the source position each
    hypothesis's next token attends to most (int32 [batch, rows]; `alignment_layer`)."""
    if not with_alignment:
        return lambda ids, step, cache, sentences: model.decode_step(
            ids, step, cache, sentences["memory"])
    layer = alignment_layer(model.config.num_layers)

    def step_fn(ids, step, cache, sentences):
        logits, cache, weights = model.decode_step(
            ids, step, cache, sentences["memory"], return_attention_scores=True,
            attention_layer=layer)
        # weights [batch, heads, rows, source_len]: head average, then the argmax.
        average = ops.mean(ops.cast(weights, "float32"), axis=1)
        return logits, cache, ops.cast(ops.argmax(average, axis=-1), "int32")

    return step_fn


def constrained(step_fn, constraint, vocab_size):
    """`step_fn` under `constraint`: cache {"model", "constraint"}; disallowed tokens get `NEG`."""
    def step(ids, step, cache, sentences):
        out = step_fn(constraint.decoder_inputs(ids, cache["constraint"]), step,
                      cache["model"], sentences)
        allowed, state = constraint.allowed(ids, step, cache["constraint"],
                                            sentences["max_lengths"], vocab_size)
        logits = ops.where(allowed, constraint.logits(out[0], state), NEG)
        return (logits, {"model": out[1], "constraint": state}) + tuple(out[2:])

    return step
