"""Multi-head scaled dot-product attention (Section 3.2, Eq. 1) with a decoding cache.

Unlike `keras.layers.MultiHeadAttention`: a key/value cache, fused Q/K/V (K/V) projections, and
cross-attention keys/values computed once per source and shared by its beams, so beam search
never copies them. d_k, d_v free (Table 3 A, B)."""
import math

import keras
from keras import ops

from keras_transformer.layers.masks import apply_mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """h = `num_heads` parallel attention heads over projected queries, keys and values (Section
    3.2.2), of per-head widths d_k = `key_dim` (queries, keys) and d_v = `value_dim` (values;
    default d_k). `self_attention`: True, fused Q/K/V of one input; False, Q of the query, K/V of
    `memory`. `attention_dropout`: dropout rate on the attention weights."""

    def __init__(self, num_heads, key_dim, value_dim=None, self_attention=True,
                 attention_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads, self.self_attention = int(num_heads), bool(self_attention)
        self.key_dim, self.value_dim = int(key_dim), int(value_dim or key_dim)
        self.attention_dropout = float(attention_dropout)
        self._dropout = keras.layers.Dropout(self.attention_dropout, dtype=self.dtype_policy)

    def build(self, query_shape, memory_shape=None):
        keys, values = self.num_heads * self.key_dim, self.num_heads * self.value_dim
        policy = self.dtype_policy
        if self.self_attention:
            self.qkv_projection = keras.layers.Dense(2 * keys + values, name="qkv", dtype=policy)
            self.qkv_projection.build(query_shape)
        else:
            self.query_projection = keras.layers.Dense(keys, name="query", dtype=policy)
            self.query_projection.build(query_shape)
            self.kv_projection = keras.layers.Dense(keys + values, name="kv", dtype=policy)
            self.kv_projection.build(memory_shape or query_shape)
        self.output_projection = keras.layers.Dense(query_shape[-1], name="output", dtype=policy)
        self.output_projection.build(tuple(query_shape[:-1]) + (values,))
        self.built = True

    def _split_heads(self, x, depth):
        """[batch, length, heads * depth] -> [batch, heads, length, depth]."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, depth))
        return ops.transpose(x, (0, 2, 1, 3))

    def _fused_qkv(self, x):
        """Q, K, V [batch, length, heads, d] of `x` [batch, length, d_model] by one matmul."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        keys = self.num_heads * self.key_dim
        # A split, not three slices: its gradient is one concat, where every slice's gradient
        # is a zero-filled copy of the whole projection (docs/results.md).
        q, k, v = ops.split(self.qkv_projection(x), [keys, 2 * keys], axis=-1)
        heads = lambda t, d: ops.reshape(t, (batch, length, self.num_heads, d))  # noqa: E731
        return heads(q, self.key_dim), heads(k, self.key_dim), heads(v, self.value_dim)

    def project_memory(self, memory):
        """(keys [batch, heads, source_len, d_k], values [..., d_v]) of the encoder output
        `memory` [batch, source_len, d_model]: cross-attention's, computed once per source."""
        keys = self.num_heads * self.key_dim
        k, v = ops.split(self.kv_projection(memory), [keys], axis=-1)
        return self._split_heads(k, self.key_dim), self._split_heads(v, self.value_dim)

    def _attend(self, q, k, v, mask, training, einsums=("bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd")):
        """softmax(Q K^T / sqrt(d_k)) V (Eq. 1), softmax in float32 for stability."""
        q = q * ops.cast(1.0 / math.sqrt(self.key_dim), q.dtype)
        scores = ops.einsum(einsums[0], q, k)
        scores = apply_mask(ops.cast(scores, "float32"), mask)
        # One key (a first decoding step): keras.ops.softmax warns.
        weights = ops.ones_like(scores) if scores.shape[-1] == 1 else ops.softmax(scores, axis=-1)
        weights = ops.cast(weights, v.dtype)
        output = ops.einsum(einsums[1], self._dropout(weights, training=training), v)
        return output, weights

    def call(self, query, memory=None, attention_mask=None, memory_kv=None,
             return_attention_scores=False, training=None):
        """Attention of `query` [batch, query_len, d_model] to itself (self-attention) or to
        `memory` [batch, key_len, d_model] (cross-attention; or its precomputed `memory_kv`,
        `project_memory(memory)`) under `attention_mask` (bool, broadcasts to [batch, heads,
        query_len, key_len]; True = allowed) -> [batch, query_len, d_model], and the weights
        [batch, heads, query_len, key_len] if `return_attention_scores`."""
        if self.self_attention:
            q, k, v = (ops.transpose(t, (0, 2, 1, 3)) for t in self._fused_qkv(query))
        else:
            if memory is None and memory_kv is None:
                raise ValueError("Cross-attention needs `memory` or `memory_kv`.")
            q = self._split_heads(self.query_projection(query), self.key_dim)
            k, v = memory_kv if memory_kv is not None else self.project_memory(memory)
        output, weights = self._attend(q, k, v, attention_mask, training)
        batch, length = ops.shape(output)[0], ops.shape(output)[2]
        output = self.output_projection(
            ops.reshape(ops.transpose(output, (0, 2, 1, 3)), (batch, length, -1)))
        return (output, weights) if return_attention_scores else output

    def initial_cache(self, batch_size, num_rows, max_length=None):
        """An empty self-attention cache for `num_rows` hypotheses (beams, axis 1) per sentence:
        with `max_length`, zeros {"key": [batch, rows, heads, max_length, d_k], "value": [...,
        d_v]}, position p in slot p (static shapes, for XLA); without, {"growing_key",
        "growing_value"} of length 0 that each `step` extends (faster without XLA; a loop needs
        a free length axis: `keras_transformer.decoding.tf_graph.while_loop`)."""
        prefix = "growing_" if max_length is None else ""
        shape = (batch_size, num_rows, self.num_heads, 0 if max_length is None else max_length)
        return {prefix + "key": ops.zeros(shape + (self.key_dim,), self.compute_dtype),
                prefix + "value": ops.zeros(shape + (self.value_dim,), self.compute_dtype)}

    def step(self, query, position, cache, return_attention_scores=False):
        """Self-attention of `query` [batch, rows, d_model], each hypothesis's new position
        (index `position`: the cache holds 0..position-1), using and extending `cache` (from
        `initial_cache` or the previous step) -> (output [batch, rows, d_model], updated cache)
        and the weights if asked."""
        batch, rows = ops.shape(query)[0], ops.shape(query)[1]
        q, k, v = self._fused_qkv(query)  # rows play the role of positions here
        if "growing_key" in cache:
            cache = {name: ops.concatenate([cache[name], new[:, :, :, None]], axis=3)
                     for name, new in (("growing_key", k), ("growing_value", v))}
            keys, values, visible = cache["growing_key"], cache["growing_value"], None
        else:
            max_length = ops.shape(cache["key"])[3]
            # A select against a one-hot over positions: one core element-wise op (no XLA-only
            # scatter), one pass over the cache (adding entry * one-hot takes two).
            slot = ops.equal(ops.arange(max_length), position)[:, None]
            cache = {"key": ops.where(slot, k[:, :, :, None, :], cache["key"]),
                     "value": ops.where(slot, v[:, :, :, None, :], cache["value"])}
            keys, values = cache["key"], cache["value"]
            visible = (ops.arange(max_length) <= position)[None, None, None, :]
        output, weights = self._attend(
            q, keys, values, visible, training=False,
            einsums=("brhd,brhld->brhl", "brhl,brhld->brhd"))
        output = self.output_projection(ops.reshape(output, (batch, rows, -1)))
        return (output, cache, weights) if return_attention_scores else (output, cache)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, key_dim=self.key_dim, value_dim=self.value_dim,
                      self_attention=self.self_attention,
                      attention_dropout=self.attention_dropout)
        return config
