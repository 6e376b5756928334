"""One worker of the MultiWorkerMirroredStrategy test (run twice, with TF_CONFIG set).

Trains a tiny model a few SGD steps with `pipelines.training.train.compile_model` (which applies
the Keras multi-worker fix) and saves the final weights to argv[1] as .npz.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.data import batches as batching  # noqa: E402
from pipelines.training import devices  # noqa: E402
from pipelines.training import train as train_lib  # noqa: E402
from tests.helpers import random_ids, tiny_config, training_options  # noqa: E402

strategy = devices.make_strategy()
assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy), type(strategy)
import keras  # noqa: E402

keras.utils.set_random_seed(5)
model = train_lib.compile_model(tiny_config(), strategy, training_options(warmup_steps=10))
source, target = random_ids(32, 6, seed=1), random_ids(32, 7, seed=2)
target_in = np.concatenate([np.full((32, 1), 2, "int32"), target[:, :-1]], axis=1)
dataset = tf.data.Dataset.from_tensor_slices(((source, target_in), target)).batch(8).repeat()
history = model.fit(batching.global_batches(dataset), epochs=2, steps_per_epoch=3, verbose=0)
np.savez(sys.argv[1], loss=np.array(history.history["loss"]),
         steps=np.array(int(model.optimizer.iterations.numpy())),
         **{f"w{i}": w.numpy() for i, w in enumerate(model.weights)})
