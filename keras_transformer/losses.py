"""Label-smoothed cross-entropy over non-pad target tokens (Section 5.4)."""
import math

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.constants import PAD_ID


def smoothed_token_losses(target_ids, logits, label_smoothing):
    """Per-token cross-entropy against targets smoothed with eps_ls (Section 5.4).

    The smoothed target puts 1 - eps on the true token and eps / (V - 1) on every other
    token, as tensor2tensor does; padding positions get loss 0.

    Args:
        target_ids: int [batch, length], 0 = padding.
        logits: float [batch, length, vocab].
        label_smoothing: eps_ls.
    Returns:
        (losses [batch, length] float32, mask [batch, length] float32 of non-pad tokens).
    """
    logits = tf.cast(logits, tf.float32)
    vocab = tf.shape(logits)[-1]
    target_ids = tf.cast(target_ids, tf.int32)
    # -log p(target) from the fused kernel, whose gradient (softmax - one-hot) it computes
    # in the forward pass; gathering from log_softmax instead costs a scatter of the
    # gradient over [tokens, vocab] (UnsortedSegmentSum, 6% of a training step).
    true_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target_ids, logits=logits)
    # sum_v log p(v) = sum_v logits(v) - V * logsumexp(logits)
    sum_log_probs = (tf.reduce_sum(logits, axis=-1)
                     - tf.cast(vocab, tf.float32) * tf.reduce_logsumexp(logits, axis=-1))
    on_value = 1.0 - label_smoothing
    off_value = label_smoothing / tf.cast(vocab - 1, tf.float32)
    # -sum_v q(v) log p(v) = -off * sum_v log p(v) + (on - off) * -log p(target)
    losses = -off_value * sum_log_probs + (on_value - off_value) * true_nll
    mask = ops.cast(ops.not_equal(target_ids, PAD_ID), "float32")
    return losses * mask, mask


def smoothed_loss_floor(vocab_size, label_smoothing):
    """The smallest reachable loss: the entropy of the smoothed target distribution.

    A model that predicts the smoothed distribution exactly gets this value; it is the
    natural reference point for the training loss (0 only without smoothing).
    """
    on = 1.0 - label_smoothing
    off = label_smoothing / (vocab_size - 1)
    entropy = -on * math.log(on) if on > 0 else 0.0
    if off > 0:
        entropy -= (vocab_size - 1) * off * math.log(off)
    return entropy


def _global_sum(value):
    """Sum of `value` over all replicas when called inside a `tf.distribute` replica."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce("SUM", value)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Mean label-smoothed cross-entropy per non-pad target token, for `model.fit`.

    Correct under any number of replicas: each replica returns its token-loss sum divided by
    the token count of the GLOBAL batch, so the replicas' gradients, which Keras sums,
    are those of the global per-token mean. (A loss that returns a per-replica mean would be
    counted once per replica; Keras 3 divides only its built-in reductions by the number of
    replicas.) For the progress bar Keras multiplies each replica's value by the number of
    replicas and averages over replicas, which again gives the global per-token mean.

    Args:
        label_smoothing: eps_ls (0.1 in the paper).
    """

    def __init__(self, label_smoothing=0.1, name="label_smoothed_cross_entropy", **kwargs):
        super().__init__(name=name, reduction=None, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def __call__(self, y_true, y_pred, sample_weight=None):
        losses, mask = smoothed_token_losses(y_true, y_pred, self.label_smoothing)
        if sample_weight is not None:
            weights = ops.cast(sample_weight, "float32")
            while len(weights.shape) < len(losses.shape):
                weights = weights[..., None]
            losses, mask = losses * weights, mask * weights
        total_tokens = _global_sum(ops.sum(mask))
        return ops.sum(losses) / ops.maximum(total_tokens, 1.0)

    def call(self, y_true, y_pred):
        return smoothed_token_losses(y_true, y_pred, self.label_smoothing)[0]

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "name": self.name}
