"""One embedding matrix shared by source, target and the pre-softmax projection (3.4)."""
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """`vocab_size` token embeddings of width `d_model`, scaled by sqrt(d_model); `project`
    reuses them as output weights (3.4). Initialised with stddev d_model^-0.5: the scaled
    embeddings have unit variance, as positions."""

    def __init__(self, vocab_size, d_model, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.d_model = int(vocab_size), int(d_model)

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape) + (self.d_model,)

    def call(self, ids):
        """ids [batch, length] -> [batch, length, d_model], times sqrt(d_model)."""
        vectors = ops.take(self.embeddings, ops.cast(ids, "int32"), axis=0)
        return ops.cast(vectors, self.compute_dtype) * ops.cast(self.d_model ** 0.5,
                                                                 self.compute_dtype)

    def project(self, x):
        """x [..., d_model] -> logits [..., vocab_size] with the transposed embeddings."""
        return ops.matmul(x, ops.transpose(ops.cast(self.embeddings, x.dtype)))

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, d_model=self.d_model)
        return config
