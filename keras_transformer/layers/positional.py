"""Position information added to token embeddings (Section 3.5; Table 3 row E)."""
import math

import keras
from keras import ops


class _Positions(keras.layers.Layer):
    """Base of the two: [batch, length, d] inputs -> their positions' shape [1, length, d]."""

    def compute_output_shape(self, inputs_shape):  # Keras' default build names it so
        return (1,) + tuple(inputs_shape[1:])


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(_Positions):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Section 3.5), interleaved,
    computed on the fly: no length limit, no weights."""

    def get_config(self):  # not dead: without an override Keras' auto-config raises here
        return super().get_config()

    def call(self, inputs, start=0, positions=None):
        """Encodings of positions start .. start + length - 1 of `inputs` [batch, length, d]
        (only its length and width are used) -> [1, length, d], or of the given `positions` int
        [batch, length] (a packed row's restart at 0 with each pair) -> [batch, length, d]."""
        depth = inputs.shape[-1]
        if positions is None:
            positions = (ops.arange(ops.shape(inputs)[1]) + start)[None]
        positions = ops.cast(positions, "float32")  # [rows, length]
        inverse_freq = ops.exp(
            ops.arange(0, depth, 2, dtype="float32") * (-math.log(10000.0) / depth))
        angles = positions[:, :, None] * inverse_freq[None, None, :]  # [rows, length, ceil(d/2)]
        encoding = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
        encoding = ops.reshape(encoding, (ops.shape(angles)[0], ops.shape(angles)[1], -1))
        return ops.cast(encoding[:, :, :depth], self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(_Positions):
    """One trained vector per position below `max_length` (Table 3 row E)."""

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = int(max_length)

    def build(self, inputs_shape):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.max_length, inputs_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=inputs_shape[-1] ** -0.5))

    def call(self, inputs, start=0, positions=None):
        """Embeddings of positions start .. start + length - 1 -> [1, length, d], or of the
        given `positions` int [batch, length] -> [batch, length, d]."""
        if positions is None:
            positions = (ops.arange(ops.shape(inputs)[1]) + start)[None]
        return ops.cast(ops.take(self.embeddings, positions, axis=0), self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length)
        return config
