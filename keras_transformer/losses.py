"""Label-smoothed cross-entropy over non-pad target tokens (Section 5.4), on every backend."""
import importlib
import math

import keras
from keras import ops

from keras_transformer.constants import PAD_ID
from keras_transformer.learning_rate import LABEL_SMOOTHING


def tensorflow_kernels():
    """The `tensorflow` module when it is the Keras backend, else None."""
    on_tensorflow = keras.backend.backend() == "tensorflow"
    return importlib.import_module("tensorflow") if on_tensorflow else None


def target_nll(target_ids, logits):
    """-log softmax(logits)[target]: int32 [batch, length], [batch, length, vocab] -> float32."""
    tf = tensorflow_kernels()
    if tf is not None:
        # One fused kernel; the log-softmax and gather below materialise [tokens, vocab].
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target_ids, logits=logits)
    target_logits = ops.take_along_axis(logits, ops.expand_dims(target_ids, -1), axis=-1)
    return ops.logsumexp(logits, axis=-1) - ops.squeeze(target_logits, -1)


def _global_sum(value):
    """Sum of `value` over a `tf.distribute` step's replicas; elsewhere `value` itself."""
    tf = tensorflow_kernels()
    context = tf.distribute.get_replica_context() if tf is not None else None
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce("SUM", value)


def _smoothed_values(vocab, label_smoothing):
    """The smoothed target's (true token's, each other token's) probability."""
    return 1.0 - label_smoothing, label_smoothing / (ops.cast(vocab, "float32") - 1.0)


def smoothed_token_losses(target_ids, logits, label_smoothing):
    """Per-token cross-entropy against targets smoothed with eps_ls (Section 5.4): 1 - eps on the
    true token, eps / (V - 1) on each other (as tensor2tensor). int [batch, length] (0: padding),
    float [batch, length, vocab] -> float32 (losses, 0 on padding; mask of non-pad tokens)."""
    logits = ops.cast(logits, "float32")
    target_ids = ops.cast(target_ids, "int32")
    vocab = ops.shape(logits)[-1]
    on_value, off_value = _smoothed_values(vocab, label_smoothing)
    tf = tensorflow_kernels()
    if tf is not None:
        # One fused kernel and one pass over [tokens, vocab] for the loss and its gradient
        # (softmax - q); written out they take a dozen passes (docs/results.md).
        smoothed = tf.one_hot(target_ids, vocab, on_value=on_value, off_value=off_value)
        losses = tf.nn.softmax_cross_entropy_with_logits(labels=tf.stop_gradient(smoothed),
                                                         logits=logits)
    else:
        # sum_v log p(v) = sum_v logits(v) - V * logsumexp(logits)
        sum_log_probs = (ops.sum(logits, axis=-1)
                         - ops.cast(vocab, "float32") * ops.logsumexp(logits, axis=-1))
        # -sum_v q(v) log p(v) = -off * sum_v log p(v) + (on - off) * -log p(target)
        losses = -off_value * sum_log_probs + (on_value - off_value) * target_nll(target_ids,
                                                                                  logits)
    mask = ops.cast(ops.not_equal(target_ids, PAD_ID), "float32")
    return losses * mask, mask


def target_nll_beside_loss(target_ids, logits, label_smoothing):
    """``target_nll`` (not on padding) from the kernel of the step's loss with ``label_smoothing``,
    which TensorFlow computes once for both: as the loss is logsumexp - (on - off) * logit(t) -
    off * sum_v logit(v), -log p(t) is the expression returned."""
    if tensorflow_kernels() is None:  # the loss has no kernel of its own there
        return target_nll(target_ids, logits)
    losses, _ = smoothed_token_losses(target_ids, logits, label_smoothing)
    logits = ops.cast(logits, "float32")
    target_ids = ops.cast(target_ids, "int32")
    on_value, off_value = _smoothed_values(ops.shape(logits)[-1], label_smoothing)
    target_logits = ops.squeeze(
        ops.take_along_axis(logits, ops.expand_dims(target_ids, -1), axis=-1), -1)
    return (losses + (on_value - off_value - 1.0) * target_logits
            + off_value * ops.sum(logits, axis=-1))


def smoothed_loss_floor(vocab_size, label_smoothing):
    """The smallest reachable loss: the entropy of the smoothed target distribution."""
    on, off = (float(value) for value in _smoothed_values(vocab_size, label_smoothing))
    entropy = -on * math.log(on) if on > 0 else 0.0
    if off > 0:
        entropy -= (vocab_size - 1) * off * math.log(off)
    return entropy


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Mean label-smoothed (eps_ls: `label_smoothing`) cross-entropy per non-pad target token,
    for `model.fit`. Each replica divides its token-loss sum by the GLOBAL batch's token count,
    so the summed gradients give the global per-token mean."""

    def __init__(self, label_smoothing=LABEL_SMOOTHING, name="label_smoothed_cross_entropy",
                 **kwargs):
        super().__init__(name=name, reduction=None, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def __call__(self, y_true, y_pred, sample_weight=None):
        losses, mask = smoothed_token_losses(y_true, y_pred, self.label_smoothing)
        if sample_weight is not None:
            weights = ops.cast(sample_weight, "float32")
            while len(weights.shape) < len(losses.shape):
                weights = weights[..., None]
            losses, mask = losses * weights, mask * weights
        return ops.sum(losses) / ops.maximum(_global_sum(ops.sum(mask)), 1.0)

    def call(self, y_true, y_pred):
        return smoothed_token_losses(y_true, y_pred, self.label_smoothing)[0]

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "name": self.name}
