"""int8 weights for an exported model: every matrix (Dense kernels, the shared embedding) stored
as int8 with a float32 step per output channel (`w ~ q * step`), dequantized to the compute dtype
once per request (float kernels are faster than int8 ones on CPU: docs/serving.md)."""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import tf_internals
from keras_transformer.layers.embedding import SharedEmbedding

INT8_MAX = 127  # symmetric: -127..127, so that -q is representable too


def quantized_matrices(model):
    """(variable, reduced axis) of each matrix `Int8Weights` quantizes: a step per column of a
    Dense kernel [in, out] (axis 0), per row of the tied embedding (axis 1: Section 3.4)."""
    seen = set()
    for layer in tf_internals.sublayers(model):
        if isinstance(layer, keras.layers.Dense):
            variable, axis = layer.kernel, 0
        elif isinstance(layer, SharedEmbedding):
            variable, axis = layer.embeddings, 1
        else:
            continue
        if id(variable) not in seen:
            seen.add(id(variable))
            yield variable, axis


def quantize_int8(matrix: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """float matrix -> (int8 values, float32 steps, keepdims along `axis`): matrix ~ q * step."""
    matrix = np.asarray(matrix, np.float32)
    step = np.max(np.abs(matrix), axis=axis, keepdims=True) / INT8_MAX
    step = np.where(step > 0, step, 1.0).astype(np.float32)  # an all-zero channel stays 0
    q = np.clip(np.rint(matrix / step), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, step


class Int8Weights:
    """int8 copies of the built `model`'s matrices, which it reads dequantized to its dtype in
    `scope()`. `source`: a model of the same config holding the weights to quantize (default:
    `model`), e.g. the float32 one of a bfloat16 `model`, so int8 values are rounded once."""

    mode = "int8"

    def __init__(self, model, source=None):
        source = model if source is None else source
        values = {id(target): value for target, value in zip(model.weights, source.weights)}
        self._targets, self.values, self.steps = [], [], []
        for variable, axis in quantized_matrices(model):
            q, step = quantize_int8(keras.ops.convert_to_numpy(values[id(variable)]), axis)
            self._targets.append(variable)
            name = variable.path.replace("/", "_")
            self.values.append(tf.Variable(q, trainable=False, name=f"{name}_int8"))
            self.steps.append(tf.Variable(step, trainable=False, name=f"{name}_step"))

    def dequantized(self):
        """[(model variable, its dequantized value in its dtype)]: graph ops made where called."""
        return [(variable, tf.cast(tf.cast(q, tf.float32) * step, variable.dtype))
                for variable, q, step in zip(self._targets, self.values, self.steps)]

    def scope(self):
        """A `keras.StatelessScope` in which the model reads its matrices dequantized."""
        return keras.StatelessScope(state_mapping=self.dequantized())
