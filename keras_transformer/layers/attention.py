"""Multi-head scaled dot-product attention (Section 3.2, Eq. 1) with a decoding cache.

Unlike `keras.layers.MultiHeadAttention`: a key/value cache, fused Q/K/V (K/V) projections, and
cross-attention keys/values computed once per source and shared by its beams (their queries are
stacked along the query axis), so beam search never copies them. d_k, d_v free (Table 3 A, B).
"""
import math

import keras
from keras import ops

from keras_transformer.layers.masks import apply_mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """h parallel attention heads over projected queries, keys and values (Section 3.2.2).

    Example:
        >>> x = keras.random.normal((2, 10, 512))
        >>> MultiHeadAttention(num_heads=8, key_dim=64)(x).shape
        TensorShape([2, 10, 512])
        >>> cross = MultiHeadAttention(num_heads=8, key_dim=64, self_attention=False)
        >>> cross(x[:, :3], memory=x).shape
        TensorShape([2, 3, 512])

    Args:
        num_heads: h.
        key_dim: d_k, the per-head query/key width.
        value_dim: d_v, the per-head value width (default: d_k).
        self_attention: True: fused Q/K/V of one input; False: Q of the query, K/V of `memory`.
        attention_dropout: dropout rate on the attention weights.
    """

    def __init__(self, num_heads, key_dim, value_dim=None, self_attention=True,
                 attention_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.self_attention = bool(self_attention)
        self.key_dim = int(key_dim)
        self.value_dim = int(value_dim or key_dim)
        self.attention_dropout = float(attention_dropout)
        self._dropout = keras.layers.Dropout(self.attention_dropout, dtype=self.dtype_policy)

    def build(self, query_shape, memory_shape=None):
        model_dim = query_shape[-1]
        keys = self.num_heads * self.key_dim
        values = self.num_heads * self.value_dim
        policy = self.dtype_policy
        if self.self_attention:
            self.qkv_projection = keras.layers.Dense(2 * keys + values, name="qkv", dtype=policy)
            self.qkv_projection.build(query_shape)
        else:
            self.query_projection = keras.layers.Dense(keys, name="query", dtype=policy)
            self.query_projection.build(query_shape)
            self.kv_projection = keras.layers.Dense(keys + values, name="kv", dtype=policy)
            self.kv_projection.build(memory_shape or query_shape)
        self.output_projection = keras.layers.Dense(model_dim, name="output", dtype=policy)
        self.output_projection.build(tuple(query_shape[:-1]) + (values,))
        self.built = True

    # ------------------------------------------------------------------ projections
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
        heads = lambda t, depth: ops.reshape(t, (batch, length, self.num_heads, depth))  # noqa: E731
        return heads(q, self.key_dim), heads(k, self.key_dim), heads(v, self.value_dim)

    def _self_qkv(self, x):
        """Q, K, V of `x` [batch, length, d_model], each [batch, heads, length, depth]."""
        return tuple(ops.transpose(t, (0, 2, 1, 3)) for t in self._fused_qkv(x))

    def project_memory(self, memory):
        """Cross-attention keys and values of the encoder output, computed once per source.

        Args:
            memory: encoder output [batch, source_len, d_model].
        Returns:
            (keys [batch, heads, source_len, d_k], values [batch, heads, source_len, d_v]).
        """
        keys = self.num_heads * self.key_dim
        k, v = ops.split(self.kv_projection(memory), [keys], axis=-1)
        return self._split_heads(k, self.key_dim), self._split_heads(v, self.value_dim)

    def _merge_heads(self, x):
        """[batch, heads, length, d_v] -> output projection -> [batch, length, d_model]."""
        batch, length = ops.shape(x)[0], ops.shape(x)[2]
        x = ops.reshape(ops.transpose(x, (0, 2, 1, 3)), (batch, length, -1))
        return self.output_projection(x)

    def _attend(self, q, k, v, mask, training, einsums=("bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd")):
        """softmax(Q K^T / sqrt(d_k)) V (Eq. 1), softmax in float32 for stability."""
        q = q * ops.cast(1.0 / math.sqrt(self.key_dim), q.dtype)
        scores = ops.einsum(einsums[0], q, k)
        scores = apply_mask(ops.cast(scores, "float32"), mask)
        if scores.shape[-1] == 1:  # one key (a first decoding step): keras.ops.softmax warns
            weights = ops.ones_like(scores)
        else:
            weights = ops.softmax(scores, axis=-1)
        weights = ops.cast(weights, v.dtype)
        output = ops.einsum(einsums[1], self._dropout(weights, training=training), v)
        return output, weights

    # ------------------------------------------------------------------ full sequences
    def call(self, query, memory=None, attention_mask=None, memory_kv=None,
             return_attention_scores=False, training=None):
        """Attention of `query` to itself (self-attention) or to `memory` (cross-attention).

        Args:
            query: [batch, query_len, d_model].
            memory: [batch, key_len, d_model] for cross-attention; unused in self-attention.
            attention_mask: bool, broadcasts to [batch, heads, query_len, key_len]; True = allowed.
            memory_kv: precomputed `project_memory(memory)`, used instead of `memory`.
            return_attention_scores: also return the weights [batch, heads, query_len, key_len].
        Returns:
            [batch, query_len, d_model] (and the weights if asked).
        """
        if self.self_attention:
            q, k, v = self._self_qkv(query)
        else:
            if memory is None and memory_kv is None:
                raise ValueError("Cross-attention needs `memory` or `memory_kv`.")
            q = self._split_heads(self.query_projection(query), self.key_dim)
            k, v = memory_kv if memory_kv is not None else self.project_memory(memory)
        output, weights = self._attend(q, k, v, attention_mask, training)
        output = self._merge_heads(output)
        return (output, weights) if return_attention_scores else output

    # ------------------------------------------------------------------ decoding
    def initial_cache(self, batch_size, num_rows, max_length=None):
        """An empty self-attention cache for `num_rows` hypotheses (beams, axis 1) per sentence:
        with `max_length`, zeros {"key": [batch, rows, heads, max_length, d_k], "value": [...,
        d_v]}, position p in slot p (static shapes, for XLA); without, {"growing_key",
        "growing_value"} of length 0 that each `step` extends (faster without XLA; a loop needs
        a free length axis: `keras_transformer.decoding.tf_graph.while_loop`)."""
        if max_length is None:
            shape = (batch_size, num_rows, self.num_heads, 0)
            return {"growing_key": ops.zeros(shape + (self.key_dim,), self.compute_dtype),
                    "growing_value": ops.zeros(shape + (self.value_dim,), self.compute_dtype)}
        shape = (batch_size, num_rows, self.num_heads, max_length)
        return {"key": ops.zeros(shape + (self.key_dim,), self.compute_dtype),
                "value": ops.zeros(shape + (self.value_dim,), self.compute_dtype)}

    def step(self, query, position, cache, return_attention_scores=False):
        """Self-attention of one new position per hypothesis, using and extending `cache`.

        Args:
            query: [batch, rows, d_model], the new position of each hypothesis.
            position: scalar int, index of the new position (the cache holds 0..position-1).
            cache: from `initial_cache` (or the previous step).
        Returns:
            (output [batch, rows, d_model], updated cache) and the weights if asked.
        """
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
