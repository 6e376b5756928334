"""One worker of the global-batch test (run twice, with TF_CONFIG set): what this worker's
replica receives of the training batches, bucketed and packed, for `STEPS` steps.

Distributes the pipelines' batches as `model.fit` does (`experimental_distribute_dataset`)
and saves each step's arrays to argv[1] as .npz, keys `<kind>-<step>-<i>` (i: the i-th array
of the batch's flattened structure). `global_streams` builds the same batches in one process,
for the test to compare.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.data import batches as batching  # noqa: E402
from pipelines.data import packing  # noqa: E402

BUDGET = 256
MAX_LENGTH = 24
STEPS = 6


def global_streams(batch_multiple: int) -> dict:
    """`{"buckets": ..., "packed": ...}`: seeded training batches of 500 random pairs."""
    tf.random.set_seed(0)  # the shuffles' seeds derive from it too, as run.py sets it
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, MAX_LENGTH - 1, size=(500, 2))
    sources = [rng.integers(4, 50, n).tolist() for n in lengths[:, 0]]
    targets = [rng.integers(4, 50, n).tolist() for n in lengths[:, 1]]
    pairs = tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant(sources), tf.ragged.constant(targets)))
    limits = {"max_source_length": MAX_LENGTH, "max_target_length": MAX_LENGTH}
    buckets = batching.training_batches(pairs, **limits, batch_tokens=BUDGET,
                                      boundaries=[8, 16, MAX_LENGTH],
                                      batch_multiple=batch_multiple, pad_to_bucket=False)
    rows = packing.row_lengths(lengths, MAX_LENGTH, MAX_LENGTH)
    packed = packing.packed_batches(batching.training_examples(pairs, **limits), rows,
                                    batch_tokens=BUDGET, batch_multiple=batch_multiple,
                                    window=128)
    return {"buckets": buckets, "packed": packed}


def main(path):
    from pipelines.training import devices

    strategy = devices.make_strategy()
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy), type(strategy)
    arrays = {}
    for kind, dataset in global_streams(strategy.num_replicas_in_sync).items():
        batches = iter(strategy.experimental_distribute_dataset(dataset))
        for step in range(STEPS):
            parts = tf.nest.flatten(next(batches))
            for i, part in enumerate(parts):
                (local,) = strategy.experimental_local_results(part)  # one replica a worker
                arrays[f"{kind}-{step}-{i}"] = local.numpy()
    np.savez(path, **arrays)


if __name__ == "__main__":
    main(sys.argv[1])
