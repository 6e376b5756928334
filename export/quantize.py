"""int8 weights for an exported model: stored as int8, dequantized once per request.

`Int8Weights` keeps every matrix of a Transformer (the Dense kernels and the shared
embedding) as int8 with one float32 step per output channel (symmetric, abs-max: `w ~ q *
step`, `q` in [-127, 127]); biases and layer norms stay as they are. The SavedModel then
stores these variables instead of the model's matrices: a quarter of float32's bytes.

At serving time the matrices are dequantized to the model's compute dtype once per request,
before the search, and the search reads them through a `keras.StatelessScope`, so each
decoding step runs the same float or bfloat16 kernels as an unquantized export: on this
project's CPU TensorFlow's int8 kernels are slower than its bfloat16 ones (figures:
docs/serving.md). Every op is core TensorFlow (`Cast`, `Mul`), so stock TensorFlow Serving
runs it.

Example:
    >>> weights = Int8Weights(model)                 # or Int8Weights(bf16_model, f32_model)
    >>> with weights.scope():                        # inside a traced function
    ...     logits = model((source_ids, target_in_ids))
"""

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.layers.embedding import SharedEmbedding

QUANTIZE_MODES = ("int8",)
"""What `--quantize` accepts."""

INT8_MAX = 127  # symmetric: -127..127, so that -q is representable too


def quantized_matrices(model):
    """(variable, reduced axis) of every matrix `Int8Weights` stores as int8.

    The step runs along the output channels, one per column of a Dense kernel [in, out]
    (the maximum is taken over axis 0) and one per row of the shared embedding [vocab,
    d_model] (axis 1): a row is both the vector looked up for a token and the output unit of
    the tied pre-softmax projection (Section 3.4)."""
    seen = set()
    for layer in model._flatten_layers():  # what keras.Model.quantize walks too
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
    """int8 copies of a model's matrices and the scope in which the model reads them.

    Args:
        model: the built model the serving graph runs; its dtype (float32 or bfloat16) is
            the compute dtype the matrices are dequantized to.
        source: a model of the same config holding the weights to quantize (default:
            `model`). Give the float32 model when `model` is a bfloat16 copy, so that the
            int8 values are rounded once, from the trained weights.
    """

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
        """[(model variable, its dequantized value in the variable's dtype)]: graph ops,
        made where this is called (once per request in a serving function)."""
        return [(variable, tf.cast(tf.cast(q, tf.float32) * step, variable.dtype))
                for variable, q, step in zip(self._targets, self.values, self.steps)]

    def scope(self):
        """A `keras.StatelessScope` in which the model reads its matrices dequantized."""
        return keras.StatelessScope(state_mapping=self.dequantized())
