"""N identical layers in sequence, closed by a LayerNorm under pre-norm (Section 3.1)."""
import keras

LAYER_NORM_EPSILON = 1e-6


class LayerStack(keras.layers.Layer):
    """Base of `Encoder` and `Decoder`: `num_layers` (N, 6 in the paper) copies of `layer_class`
    with the other arguments, and under pre-norm a final LayerNorm (the residual stream is never
    normalised otherwise)."""

    layer_class = None  # set by subclasses

    def __init__(self, num_layers, d_ff, num_heads, d_k, d_v, dropout=0.1,
                 attention_dropout=0.0, relu_dropout=0.0, norm="post", **kwargs):
        super().__init__(**kwargs)
        self.layer_args = dict(d_ff=int(d_ff), num_heads=int(num_heads), d_k=int(d_k),
                               d_v=int(d_v), dropout=float(dropout),
                               attention_dropout=float(attention_dropout),
                               relu_dropout=float(relu_dropout), norm=norm)
        self.num_layers = int(num_layers)
        self.blocks = [self.layer_class(**self.layer_args, name=f"layer_{i}",
                                        dtype=self.dtype_policy)
                       for i in range(self.num_layers)]
        self.final_norm = (keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="final_norm", dtype=self.dtype_policy)
            if norm == "pre" else None)

    def compute_output_shape(self, x_shape, memory_shape=None):
        return tuple(x_shape)

    def build(self, x_shape, memory_shape=None):
        shapes = (x_shape,) if memory_shape is None else (x_shape, memory_shape)
        for layer in self.blocks:
            layer.build(*shapes)
        if self.final_norm is not None:
            self.final_norm.build(x_shape)
        self.built = True

    def _finish(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, **self.layer_args)
        return config
