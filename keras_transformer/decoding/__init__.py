"""Decoding: beam search (with required phrases, a target prefix, a constraint) and sampling
over a `Transformer`, through one entry point, `decode`, on every Keras backend.

Modules: `settings` (`BeamSearch`, `Sampling`), `core` (the rules, in keras.ops; `Decoded`),
`step` (the model as a step function; `DecodingConstraint`), `beam` (the beam-search loop),
`terms` (required phrases), `sampling`, `tf_graph` (TensorFlow-only kernels and loops) and
`entry` (`decode`, `make_translate_function`, `translate`, `score_ids`). Names load on first
use (`keras_transformer.lazy`): the settings need neither Keras nor TensorFlow.
"""
from keras_transformer.lazy import lazy_names, load_when_documented

__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "keras_transformer.decoding.core": ["Decoded", "alignment_layer", "length_penalty"],
    "keras_transformer.decoding.entry": ["Required", "decode", "make_translate_function",
                                         "score_ids", "translate"],
    "keras_transformer.decoding.settings": ["MAX_BEAM_SIZE", "BeamSearch", "Sampling"],
    "keras_transformer.decoding.step": ["DecodingConstraint"],
})
load_when_documented(__name__)
