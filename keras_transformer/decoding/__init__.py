"""Decoding: beam search (with required phrases, a target prefix, a constraint) and sampling
over a `Transformer`, through one entry point, `decode`, on every Keras backend.

Modules: `settings` (`BeamSearch`, `Sampling`), `core` (the rules, in keras.ops; `Decoded`),
`step` (the model as a step function; `DecodingConstraint`), `beam` (the beam-search loop),
`terms` (required phrases), `sampling`, `tf_graph` (TensorFlow-only kernels and loops) and
`entry` (`decode`, `make_translate_function`, `translate`, `score_ids`).
"""
from keras_transformer.decoding.core import Decoded, alignment_layer, length_penalty
from keras_transformer.decoding.entry import (Required, decode, make_translate_function,
                                              score_ids, translate)
from keras_transformer.decoding.settings import MAX_BEAM_SIZE, BeamSearch, Sampling
from keras_transformer.decoding.step import DecodingConstraint

__all__ = ["BeamSearch", "Decoded", "DecodingConstraint", "MAX_BEAM_SIZE", "Required",
           "Sampling", "alignment_layer", "decode", "length_penalty", "make_translate_function",
           "score_ids", "translate"]
