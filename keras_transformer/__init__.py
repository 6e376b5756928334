"""keras_transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in
Keras 3: presets, schedule, loss, decoding on every backend (`translate`, `decoding.decode`)."""
from keras_transformer.config import PRESETS, Preset, TransformerConfig
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import Perplexity, TokenAccuracy, TokenCount
from keras_transformer.model import Transformer
from keras_transformer.schedules import NoamSchedule, paper_optimizer
from keras_transformer.decoding import (BeamSearch, Decoded, Sampling, decode,
                                        make_translate_function, translate)

__all__ = ["PRESETS", "Preset", "TransformerConfig", "PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID",
           "LabelSmoothedCrossEntropy", "Perplexity", "TokenAccuracy", "TokenCount",
           "Transformer", "NoamSchedule", "paper_optimizer", "BeamSearch", "Decoded",
           "Sampling", "decode", "make_translate_function", "translate"]
__version__ = "0.1.0"
