"""Position-wise feed-forward network, FFN(x) = max(0, x W1 + b1) W2 + b2 (Eq. 2)."""
import keras


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """Two linear maps with a ReLU between (inner width `d_ff`; `relu_dropout` after the ReLU,
    0 in the paper), applied to every position alike (Section 3.3)."""

    def __init__(self, d_ff, relu_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_ff, self.relu_dropout = int(d_ff), float(relu_dropout)
        self.inner = keras.layers.Dense(self.d_ff, activation="relu", name="inner",
                                        dtype=self.dtype_policy)
        self.dropout = keras.layers.Dropout(self.relu_dropout, dtype=self.dtype_policy)

    def build(self, inputs_shape):
        self.inner.build(inputs_shape)
        self.outer = keras.layers.Dense(inputs_shape[-1], name="outer", dtype=self.dtype_policy)
        self.outer.build(tuple(inputs_shape[:-1]) + (self.d_ff,))

    def call(self, x, training=None):
        """x [batch, length, d_model] -> [batch, length, d_model]."""
        return self.outer(self.dropout(self.inner(x), training=training))

    def get_config(self):
        config = super().get_config()
        config.update(d_ff=self.d_ff, relu_dropout=self.relu_dropout)
        return config
