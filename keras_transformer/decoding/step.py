"""The model as every search sees it: a step function `(ids, step, cache, sentences) ->
(logits, cache[, alignment])`, optionally restricted by a `DecodingConstraint`.

`ids` [batch, rows] are the tokens at position `step` (position 0 holds the start id);
`logits` [batch, rows, vocab] predict position `step + 1`; `cache` is a nest of
per-hypothesis tensors [batch, rows, ...] that the search reorders with the hypotheses;
`sentences` holds what is the same for every hypothesis of a sentence ("memory": the
cross-attention keys/values and mask, "max_lengths"), for the sentences still searched.
"""
import abc

from keras import ops

from keras_transformer.decoding.core import NEG, alignment_layer


class DecodingConstraint(abc.ABC):
    """Restricts which tokens a search may choose, e.g. to well-formed parse trees.

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


def model_step(model, with_alignment=False):
    """`model.decode_step` as a step function; `with_alignment` adds, per hypothesis, the
    source position its next token attends to most (int32 [batch, rows]: the argmax of the
    head-averaged cross-attention of `alignment_layer`)."""
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
    """`step_fn` under `constraint`: its cache becomes {"model", "constraint"}, the model
    reads `constraint.decoder_inputs` and disallowed tokens get logit `NEG`."""
    def step(ids, step, cache, sentences):
        out = step_fn(constraint.decoder_inputs(ids, cache["constraint"]), step,
                      cache["model"], sentences)
        allowed, state = constraint.allowed(ids, step, cache["constraint"],
                                            sentences["max_lengths"], vocab_size)
        logits = ops.where(allowed, constraint.logits(out[0], state), NEG)
        return (logits, {"model": out[1], "constraint": state}) + tuple(out[2:])

    return step
