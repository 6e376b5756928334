"""Where training runs: the devices, the strategy over them or a cluster (under JAX, Keras's
distribution), and which process is the chief that writes the model dir."""

import contextlib
import os
import pathlib

import keras
import tensorflow as tf

from pipelines.errors import ConfigError
from pipelines.model_dir import layout as md


def configure_devices(count: int, backend: str = "tensorflow") -> None:
    """Under TensorFlow, splits the CPU into `count` logical devices for MirroredStrategy; under
    another backend keeps TensorFlow, which only feeds data, off the GPUs. Before any op runs."""
    if backend != "tensorflow":
        tf.config.set_visible_devices([], "GPU")
    elif count > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count)


class KerasDistribution:
    """A strategy's stand-in under another Keras backend: the replica count and a scope; with
    several devices, `keras.distribution.DataParallel` (the loss's token sums are then global)."""

    def __init__(self):
        devices = keras.distribution.list_devices()
        self.num_replicas_in_sync = len(devices)
        if len(devices) > 1:
            keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))

    @staticmethod
    def scope():
        return contextlib.nullcontext()


def make_strategy(jit_compile: bool = False):
    """MultiWorkerMirroredStrategy when TF_CONFIG is set, else MirroredStrategy over the local
    GPUs or logical CPUs, else the default one; under another backend `KerasDistribution`."""
    if keras.backend.backend() != "tensorflow":
        if os.environ.get("TF_CONFIG"):
            raise ConfigError("TF_CONFIG is set: multi-worker training is TensorFlow's "
                              "(MultiWorkerMirroredStrategy); train with --backend tensorflow, "
                              "or unset TF_CONFIG to train on this machine's devices")
        return KerasDistribution()
    if os.environ.get("TF_CONFIG"):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        local = len(strategy.extended.worker_devices)
    else:
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        local = len(devices)
        strategy = (tf.distribute.MirroredStrategy([d.name for d in devices]) if local > 1
                    else tf.distribute.get_strategy())
    if jit_compile and local > 1 and not tf.config.list_logical_devices("GPU"):
        # XLA cannot reach variables on another CPU device, and can hang at exit.
        raise ConfigError(
            "--jit_compile is not supported with several CPU devices: XLA cannot access "
            "variables mirrored on another logical CPU. Use --num_cpu_devices 1 (the default) "
            "with --jit_compile, or --nojit_compile with several devices.")
    return strategy


def is_chief(strategy=None) -> bool:
    """True for a single process and for a cluster's chief (the "chief" task, else worker 0),
    which writes the model dir; the cluster is `strategy`'s, else TF_CONFIG's."""
    if strategy is None:
        resolver = (tf.distribute.cluster_resolver.TFConfigClusterResolver()
                    if os.environ.get("TF_CONFIG") else None)
    else:
        resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return (resolver.task_type == "chief" or
            (not has_chief and resolver.task_type == "worker" and resolver.task_id == 0))


def worker_dir(strategy, model_dir) -> pathlib.Path:
    """Where this worker writes checkpoints and logs: the model dir for the chief, else a
    private subdirectory (other workers must save too: saving is collective)."""
    if is_chief(strategy):
        return pathlib.Path(model_dir)
    resolver = strategy.cluster_resolver
    return pathlib.Path(model_dir) / md.WORKERS_DIR / f"{resolver.task_type}-{resolver.task_id}"
