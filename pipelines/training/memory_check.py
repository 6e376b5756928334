"""The largest batch (the largest bucket's), tried before training, so that a token budget that
does not fit fails at once: one step on it must peak (GPU allocator, else resident memory) under
`--memory_limit_mb`, else on a CPU under the RAM available."""

import contextlib
import os
import pathlib
import threading

import numpy as np
import tensorflow as tf

from keras_transformer.constants import BOS_ID, EOS_ID
from pipelines import Log
from pipelines.errors import ConfigError

MB = 1 << 20
STATM = pathlib.Path("/proc/self/statm")
"""This process's memory in pages (Linux); the second field is the resident set."""


def rss_bytes() -> int:
    """Resident memory of this process in bytes (Linux /proc; 0 where unavailable)."""
    try:
        return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _available_bytes() -> int | None:
    """RAM the kernel can still give without swapping (MemAvailable), or None."""
    with contextlib.suppress(OSError, ValueError):
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def _peak_rss_during(fn) -> int:
    """The highest resident memory of this process while `fn()` runs (sampled every 2 ms)."""
    peak, done = [rss_bytes()], threading.Event()

    def sample():
        while not done.wait(0.002):
            peak[0] = max(peak[0], rss_bytes())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        fn()
    finally:
        done.set()
        thread.join()
    return max(peak[0], rss_bytes())


def largest_batch(batch_size: int, source_length: int, target_length: int, vocab_size: int):
    """((source, target_in), target_out) int32 batch of full-length random sentences."""
    rng = np.random.default_rng(0)
    words = lambda length: rng.integers(4, vocab_size, (batch_size, length)).astype("int32")  # noqa: E731
    source, target = words(source_length), words(target_length - 1)
    source[:, -1] = EOS_ID
    target_in = np.concatenate([np.full((batch_size, 1), BOS_ID, "int32"), target], 1)
    target_out = np.concatenate([target, np.full((batch_size, 1), EOS_ID, "int32")], 1)
    return (source, target_in), target_out


def check_largest_batch(model, strategy, batch, *, limit_mb: int | None, jit_compile=False,
                        log: Log = print) -> int:
    """Runs forward + backward on `batch` on every replica and returns the peak memory in MB;
    ConfigError over the limit (module docstring)."""
    (source, target_in), target_out = batch

    @tf.function(jit_compile=jit_compile, autograph=False)  # graph code: nothing to convert
    def probe(source, target_in, target_out):
        def step(source, target_in, target_out):
            with tf.GradientTape() as tape:
                logits = model((source, target_in), training=True)
                loss = model.loss(target_out, logits)
            gradients = tape.gradient(loss, model.trainable_variables)
            return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in gradients
                             if g is not None])

        return strategy.run(step, args=(source, target_in, target_out))

    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        for gpu in gpus:
            tf.config.experimental.reset_memory_stats(gpu.name)
        probe(source, target_in, target_out)
        peak = max(tf.config.experimental.get_memory_info(g.name)["peak"] for g in gpus)
        limit = None if limit_mb is None else limit_mb * MB
        where = "GPU memory"
    else:
        before = rss_bytes()
        peak = _peak_rss_during(lambda: probe(source, target_in, target_out))
        available = _available_bytes()
        limit = (limit_mb * MB if limit_mb is not None
                 else None if available is None else before + available)
        where = "resident memory"
    shape = f"{source.shape[0]} x {source.shape[1]} / {target_in.shape[1]} tokens"
    log(f"memory: the largest batch ({shape}) peaks at {peak / MB:,.0f} MB of {where}"
        + (f" (limit {limit / MB:,.0f} MB)" if limit else ""))
    if limit is not None and peak > limit:
        raise ConfigError(
            f"--batch_tokens: one step on the largest batch ({shape}) needs {peak / MB:,.0f} MB "
            f"of {where}, over the {limit / MB:,.0f} MB "
            f"{'of --memory_limit_mb' if limit_mb is not None else 'available'}; lower "
            f"--batch_tokens (reach the same batch with --accumulate_steps) or the task's "
            f"max length")
    return int(peak / MB)
