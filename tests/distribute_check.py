"""Run in a subprocess by test_distribute.py: one replica vs MirroredStrategy on 2 CPUs.

Logical devices must be configured before TensorFlow initialises, hence a fresh process.
Prints one JSON line: the losses and the max weight difference after a few SGD steps.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from keras_transformer import LabelSmoothedCrossEntropy, Transformer  # noqa: E402
from tests.helpers import random_ids, tiny_config  # noqa: E402


def train(strategy, data):
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = Transformer(tiny_config())
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=LabelSmoothedCrossEntropy(0.1))
    before = [w.numpy() for w in model.weights]
    initial = model.evaluate(*data, batch_size=8, verbose=0)
    history = model.fit(*data, batch_size=8, epochs=3, shuffle=False, verbose=0)
    change = max(float(np.max(np.abs(w.numpy() - b))) for w, b in zip(model.weights, before))
    return initial, history.history["loss"], [w.numpy() for w in model.weights], change


source, target = random_ids(8, 6, seed=1), random_ids(8, 7, seed=2)
# Very different token counts in the two replicas' halves: a per-replica mean would differ
# from the global per-token mean.
target[4:, 2:] = 0
target_in = np.concatenate([np.full((8, 1), 2, "int32"), target[:, :-1]], axis=1)
data = ((source, target_in), target)
one = train(tf.distribute.get_strategy(), data)
two = train(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), data)
print(json.dumps({
    "replicas": 2,
    "eval_loss": [one[0], two[0]],
    "fit_loss": [one[1], two[1]],
    "max_weight_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(one[2], two[2])),
    "max_weight_change": one[3],
}))
