"""Decoding: beam search (with required phrases, a target prefix, a constraint) and sampling
over a `Transformer`, through one entry point, `decode`, on every Keras backend.

  settings     the strategies, BeamSearch and Sampling (plain values, no TensorFlow)
  core         the rules, once, in keras.ops: lengths, length penalty, candidate ranking,
               gathers, when a sentence can still improve; `Decoded`, what every search returns
  step         the model as a step function; `DecodingConstraint` and the constrained step
  beam         the beam-search loop, on fixed slots or TensorFlow's growing, compacting graph
  terms        required phrases: dynamic beam allocation (TensorFlow)
  sampling     top-k / top-p / temperature sampling (TensorFlow)
  tf_graph     TensorFlow-only kernels and loops
  entry        `decode`, `make_translate_function`, `translate`, `score_ids`
"""
from keras_transformer.decoding.core import Decoded, alignment_layer, length_penalty
from keras_transformer.decoding.entry import (Required, decode, make_translate_function,
                                              score_ids, translate)
from keras_transformer.decoding.settings import MAX_BEAM_SIZE, BeamSearch, Sampling
from keras_transformer.decoding.step import DecodingConstraint

__all__ = ["BeamSearch", "Decoded", "DecodingConstraint", "MAX_BEAM_SIZE", "Required",
           "Sampling", "alignment_layer", "decode", "length_penalty", "make_translate_function",
           "score_ids", "translate"]
