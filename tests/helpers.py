"""Shared test helpers: tiny configurations and random id batches."""
import numpy as np

from keras_transformer import TransformerConfig


def tiny_config(**overrides):
    """A 2-layer, d_model 32 model: big enough to exercise every path, fast on a CPU."""
    fields = dict(vocab_size=50, num_layers=2, d_model=32, d_ff=64, num_heads=4, dropout=0.0,
                  max_length=64)
    fields.update(overrides)
    return TransformerConfig.preset("base", **fields)


def random_ids(batch, length, vocab_size=50, seed=0, low=3):
    """Random non-pad ids [batch, length] (ids below `low` are reserved)."""
    return np.random.default_rng(seed).integers(low, vocab_size, size=(batch, length)).astype("int32")
