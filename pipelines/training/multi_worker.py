"""The one workaround that makes Keras 3 `fit` run under MultiWorkerMirroredStrategy.

Upstream: keras-team/keras#20585 (reproduced with TensorFlow 2.21 + Keras 3.15.1, 2 workers).
Two Keras internals fail with a multi-worker (collective all-reduce) strategy:
  1. `_maybe_symbolic_build` calls `strategy.reduce("MEAN", batch)` on the PerReplica first
     batch to build the compiled metrics: "Attempt to convert a value (PerReplica...)".
     Any one replica's batch has the right structure and dtypes, so build from that.
  2. The step function reduces its logs with `reduce_per_replica(..., reduction="auto")`,
     hard-coded, which under multi-worker calls `strategy.reduce("MEAN", v, axis=0)` on the
     scalar logs: "Invalid reduction dimension 0 for input with 0 dimensions". Returning
     each log with shape [1] gives that reduction its axis; the logs are metric results,
     already synchronised across replicas, so their mean is the value itself.
Remove this module once the upstream issue is fixed.
"""
import types

import tensorflow as tf
from keras.src import tree


def _maybe_symbolic_build(self, iterator=None, data_batch=None):
    """Keras' `_maybe_symbolic_build` with the PerReplica batch replaced by one replica's."""
    def first_replica(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return self.distribute_strategy.experimental_local_results(value)[0]
        return value

    if iterator is not None:
        for _, _, it in iterator:
            data_batch = tree.map_structure(first_replica, next(it))
            break
    with self.distribute_strategy.scope():
        self._symbolic_build(data_batch=data_batch)


def needs_fix(strategy) -> bool:
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def _with_axis(step):
    """Wraps a train/test step so that every scalar log has shape [1]."""
    def step_with_axis(data):
        return tree.map_structure(lambda v: tf.reshape(v, [-1]), step(data))

    return step_with_axis


def apply_fix(model):
    """Patches this model instance (only) for `fit` under MultiWorkerMirroredStrategy."""
    model._maybe_symbolic_build = types.MethodType(_maybe_symbolic_build, model)
    model.train_step = _with_axis(model.train_step)
    model.test_step = _with_axis(model.test_step)
    return model
