"""Decoding: beam search (with required phrases, a target prefix, a constraint) and sampling
over a `Transformer`, through one entry point, `decode` (`entry`), on every Keras backend. Names
load on first use (`keras_transformer.lazy`): the settings need neither Keras nor TensorFlow."""
from keras_transformer.lazy import lazy_names, load_when_documented

__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "keras_transformer.decoding.core": ["Decoded", "alignment_layer", "length_penalty"],
    "keras_transformer.decoding.entry": ["Required", "decode", "make_translate_function",
                                         "score_ids", "translate"],
    "keras_transformer.decoding.settings": ["MAX_BEAM_SIZE", "BeamSearch", "Sampling"],
    "keras_transformer.decoding.step": ["DecodingConstraint"],
})
load_when_documented(__name__)
