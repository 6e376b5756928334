"""Encoder layer and stack (Section 3.1): self-attention and a feed-forward network."""
import functools

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.residual import residual
from keras_transformer.layers.stack import LAYER_NORM_EPSILON, LayerStack


class _Block(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`: their settings, sub-layers (with
    cross-attention where `CROSS`; a LayerNorm per name in `NORMS`) and config."""

    NORMS = ("attention_norm", "feed_forward_norm")
    CROSS = False

    def __init__(self, d_ff, num_heads, d_k, d_v, dropout=0.1, attention_dropout=0.0,
                 relu_dropout=0.0, norm="post", **kwargs):
        super().__init__(**kwargs)
        self.d_ff, self.num_heads = int(d_ff), int(num_heads)
        self.d_k, self.d_v, self.dropout_rate = int(d_k), int(d_v), float(dropout)
        self.attention_dropout, self.relu_dropout = float(attention_dropout), float(relu_dropout)
        self.norm = norm
        policy = self.dtype_policy
        attention = functools.partial(MultiHeadAttention, num_heads, d_k, d_v,
                                      attention_dropout=attention_dropout, dtype=policy)
        self.self_attention = attention(self_attention=True, name="self_attention")
        if self.CROSS:
            self.cross_attention = attention(self_attention=False, name="cross_attention")
        self.feed_forward = FeedForward(d_ff, relu_dropout, name="feed_forward", dtype=policy)
        for name in self.NORMS:
            setattr(self, name, keras.layers.LayerNormalization(
                epsilon=LAYER_NORM_EPSILON, name=name, dtype=policy))
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=policy)

    def build(self, x_shape, memory_shape=None):
        self.self_attention.build(x_shape)
        if self.CROSS:
            self.cross_attention.build(x_shape, memory_shape or x_shape)
        for layer in (self.feed_forward, *(getattr(self, name) for name in self.NORMS)):
            layer.build(x_shape)
        self.built = True

    def get_config(self):
        config = super().get_config()
        config.update(d_ff=self.d_ff, num_heads=self.num_heads, d_k=self.d_k, d_v=self.d_v,
                      dropout=self.dropout_rate, attention_dropout=self.attention_dropout,
                      relu_dropout=self.relu_dropout, norm=self.norm)
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(_Block):
    """Multi-head self-attention then a position-wise FFN, each residual with `dropout` on the
    sub-layer's output (Section 5.4); `attention_dropout`, `relu_dropout`: extra dropouts, 0 in
    the paper; `norm`: "post" (the paper) or "pre"; the others: see `TransformerConfig`."""

    def build(self, x_shape):  # one argument: Keras passes the first input's shape
        super().build(x_shape)

    def call(self, x, padding_mask=None, training=None):
        """x [batch, source_len, d_model]; padding_mask [batch, 1, 1, source_len] or a packed
        row's `segment_mask` [batch, 1, source_len, source_len]."""
        pre = self.norm == "pre"
        x = residual(x, lambda h: self.self_attention(h, attention_mask=padding_mask,
                                                      training=training),
                     self.attention_norm, self.dropout, pre, training)
        return residual(x, lambda h: self.feed_forward(h, training=training),
                        self.feed_forward_norm, self.dropout, pre, training)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(LayerStack):
    """A stack of `num_layers` encoder layers (N = 6 in the paper). Args: see `LayerStack`."""

    layer_class = EncoderLayer

    def build(self, x_shape):
        super().build(x_shape)

    def call(self, x, padding_mask=None, training=None):
        """Embedded sources [batch, source_len, d_model] -> same shape; masks as a layer's."""
        for layer in self.blocks:
            x = layer(x, padding_mask=padding_mask, training=training)
        return self._finish(x)
