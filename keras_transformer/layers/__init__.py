"""Building blocks of the Transformer, one idea per module."""
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.masks import causal_mask, padding_mask, segment_mask
from keras_transformer.layers.positional import (LearnedPositionalEmbedding,
                                                 SinusoidalPositionalEncoding)

__all__ = ["MultiHeadAttention", "Decoder", "DecoderLayer", "SharedEmbedding", "Encoder",
           "EncoderLayer", "FeedForward", "causal_mask", "padding_mask", "segment_mask",
           "LearnedPositionalEmbedding", "SinusoidalPositionalEncoding"]
