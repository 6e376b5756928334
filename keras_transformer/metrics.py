"""Token accuracy and per-word-piece perplexity, both ignoring padding."""
import keras
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.losses import target_nll_beside_loss


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenAccuracy(keras.metrics.Mean):
    """Fraction of non-pad target tokens whose arg-max prediction is right."""

    def __init__(self, name="token_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true),
                           "float32")
        mask = ops.cast(ops.not_equal(y_true, PAD_ID), "float32")
        if sample_weight is not None:
            mask = mask * ops.cast(ops.reshape(sample_weight, (-1, 1)), "float32")
        return super().update_state(correct, sample_weight=mask)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(keras.metrics.Metric):
    """exp of the mean unsmoothed cross-entropy per non-pad word-piece: Table 3's "PPL (dev)".
    ``label_smoothing``: the eps_ls of the loss compiled beside it, whose kernel it then shares
    (``losses.target_nll_beside_loss``); the value is the same whatever it is."""

    def __init__(self, name="perplexity", label_smoothing=0.0, **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        nll = target_nll_beside_loss(y_true, y_pred, self.label_smoothing)
        mask = ops.cast(ops.not_equal(y_true, PAD_ID), "float32")
        self.total.assign_add(ops.sum(nll * mask))
        self.count.assign_add(ops.sum(mask))

    def result(self):
        return ops.exp(self.total / ops.maximum(self.count, 1.0))

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype, "label_smoothing": self.label_smoothing}


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenCount(keras.metrics.Sum):
    """Number of non-pad target tokens seen since the last reset (for tokens/s)."""

    def __init__(self, name="target_tokens", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(ops.sum(ops.cast(ops.not_equal(y_true, PAD_ID), "float32")))
