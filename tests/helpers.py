"""Shared test helpers: where the real data is, tiny configurations, random id batches and
gradients on the current Keras backend."""
import gzip
import os
import pathlib

import keras
import numpy as np
from keras import ops

from keras_transformer import TransformerConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
DATA_CACHE = (pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
              / "keras_transformer" / "test_data")
"""Where the tests download Multi30k when no local copy is given."""


def multi30k_files():
    """{name: (url, sha256)} of the Multi30k task-1 files, as the product downloads them."""
    from pipelines.tasks.multi30k import MULTI30K_SHA256, MULTI30K_URL

    return {name: (MULTI30K_URL.format(name=name), sha) for name, sha in MULTI30K_SHA256.items()}


def has_multi30k(root: pathlib.Path) -> bool:
    """Whether `root/multi30k` holds every task-1 file, gzipped and plain (tests read both)."""
    return all((root / "multi30k" / f"{name}{ext}").is_file()
               for name in multi30k_files() for ext in ("", ".gz"))


def fetch_multi30k(root: pathlib.Path) -> bool:
    """Downloads Multi30k task 1 into `root/multi30k` with the product's checked downloader
    (`pipelines.tasks.downloads`: a bounded reachability probe, then each file checked
    against its sha256 before it takes its name), plus a plain copy of each. Returns False,
    downloading nothing, when the host is unreachable.

    Raises:
        DataError: a download failed or its checksum differs (nothing half-written is kept).
    """
    from keras_transformer.atomic_files import write_atomic
    from pipelines.tasks import downloads

    files = multi30k_files()
    if downloads.unreachable([url for url, _ in files.values()], downloads.PROBE_TIMEOUT_S):
        return False
    folder = root / "multi30k"
    for name, (url, sha256) in files.items():
        gz = folder / f"{name}.gz"
        if not gz.is_file():
            downloads.download_verified(url, gz, sha256, str(folder))
        if not (folder / name).is_file():
            write_atomic(folder / name, gzip.decompress(gz.read_bytes()))
    return True


def find_test_data(environ=os.environ, shared=SHARED_DATA, cache=DATA_CACHE,
                   fetch=fetch_multi30k):
    """Where the tests' real data is: `(path, None)`, or `(None, the one line to fail with)`.

    $KT_DATA_DIR if set (it must hold multi30k/), else `shared` (../shared/data), else the
    download cache, filled by `fetch` (`fetch_multi30k`) when the network is there.
    """
    if environ.get("KT_DATA_DIR"):
        path = pathlib.Path(environ["KT_DATA_DIR"])
        if (path / "multi30k").is_dir():
            return path, None
        return None, f"real test data not found at {path}: set $KT_DATA_DIR"
    if (shared / "multi30k").is_dir():
        return shared, None
    if has_multi30k(cache) or fetch(cache):
        return cache, None
    return None, f"real test data not found at {shared}: set $KT_DATA_DIR"


def tiny_config(**overrides):
    """A 2-layer, d_model 32 model: big enough to exercise every path, fast on a CPU."""
    fields = dict(vocab_size=50, num_layers=2, d_model=32, d_ff=64, num_heads=4, dropout=0.0,
                  max_length=64)
    fields.update(overrides)
    return TransformerConfig.preset("base", **fields)


def random_ids(batch, length, vocab_size=50, seed=0, low=3):
    """Random non-pad ids [batch, length] (ids below `low` are reserved)."""
    return np.random.default_rng(seed).integers(low, vocab_size, size=(batch, length)).astype("int32")


def gradients(fn, *values):
    """The gradients of the scalar `fn(*values)` with respect to each of `values` (float
    arrays), as numpy arrays, on the current Keras backend.

    Each backend differentiates its own way; the tests run under TensorFlow and JAX.
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        grads = jax.jit(jax.grad(fn, argnums=tuple(range(len(values)))))(*values)
    elif backend == "tensorflow":
        import tensorflow as tf

        tensors = [tf.convert_to_tensor(v) for v in values]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            result = fn(*tensors)
        # Dense, as JAX's: an embedding lookup's gradient is IndexedSlices, an unused
        # input's None.
        grads = [tf.zeros_like(t) if g is None else tf.convert_to_tensor(g)
                 for t, g in zip(tensors, tape.gradient(result, tensors))]
    else:
        raise ValueError(f"no gradient helper for the {backend!r} backend")
    return [np.asarray(ops.convert_to_numpy(g)) for g in grads]


def reversal_model(seed=5, n=2048, width=6, vocab_size=12, bos=2, eos=3):
    """A tiny model trained briefly to reverse sequences of ids 4..11 of varied length: its
    outputs depend on the input and end at various steps, but it is unsure enough for beams
    to disagree (the search tests' model)."""
    from keras_transformer import LabelSmoothedCrossEntropy, Transformer

    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, width + 1, size=n)
    source = rng.integers(4, vocab_size, size=(n, width)).astype("int32")
    source[np.arange(width)[None, :] >= lengths[:, None]] = 0
    target = np.zeros((n, width + 1), "int32")
    for i, length in enumerate(lengths):
        target[i, :length] = source[i, :length][::-1]
        target[i, length] = eos
    target_in = np.concatenate([np.full((n, 1), bos, "int32"), target[:, :-1]], axis=1)
    model = Transformer(tiny_config(vocab_size=vocab_size))
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=LabelSmoothedCrossEntropy(0.1))
    model.fit((source, target_in), target, batch_size=64, epochs=2, verbose=0)
    return model



def training_options(**changes):
    """The default run's `TrainingOptions` (the table's and the paper's values), with
    `changes` (for `train.compile_model`)."""
    import dataclasses

    from pipelines.settings import resolver

    return dataclasses.replace(resolver.resolve({"model_dir": "unused"}).training, **changes)
