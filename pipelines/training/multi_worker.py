"""The workaround that makes Keras 3 `fit` run under MultiWorkerMirroredStrategy; remove it
once keras-team/keras#20585 is fixed. Two Keras internals fail there:
  1. `_maybe_symbolic_build` reduces the PerReplica first batch to build the metrics ("Attempt
     to convert a value (PerReplica...)"): build from one replica's batch instead.
  2. The step reduces its scalar logs along axis 0 ("Invalid reduction dimension 0 for input
     with 0 dimensions"): each log gets shape [1]; the logs are already synchronised across
     replicas, so their mean is the value itself.
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
