"""keras_transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in
Keras 3: presets, schedule, loss, decoding on every backend (`translate`, `decoding.decode`), and
the model dir (`save`, `load`: a `serving.Translator`, which exports the served SavedModel).
Names load on first use (`keras_transformer.lazy`)."""
from keras_transformer.lazy import lazy_names, load_when_documented

__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "keras_transformer.config": ["PRESETS", "TransformerConfig"],
    "keras_transformer.constants": ["PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID"],
    "keras_transformer.losses": ["LabelSmoothedCrossEntropy"],
    "keras_transformer.metrics": ["Perplexity", "TokenAccuracy", "TokenCount"],
    "keras_transformer.model": ["Transformer"],
    "keras_transformer.model_dir": ["load", "save"],
    "keras_transformer.schedules": ["NoamSchedule", "paper_optimizer"],
    "keras_transformer.decoding": ["BeamSearch", "Decoded", "Sampling", "decode",
                                   "make_translate_function", "translate"],
})
load_when_documented(__name__)
__version__ = "0.1.0"
