"""Decoder layer and stack (Section 3.1), with a cached single-step path for decoding."""
import keras

from keras_transformer.layers.encoder import _Block
from keras_transformer.layers.masks import causal_mask
from keras_transformer.layers.residual import residual
from keras_transformer.layers.stack import LayerStack


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(_Block):
    """Masked self-attention, attention to the encoder output, then a position-wise FFN (args:
    as `EncoderLayer`)."""

    NORMS = ("self_attention_norm", "cross_attention_norm", "feed_forward_norm")
    CROSS = True

    def _attend_memory_and_feed_forward(self, x, memory, memory_kv, memory_mask, training,
                                        return_attention_scores=False):
        """The cross-attention and FFN sub-layers, shared by the full and the cached path."""
        pre = self.norm == "pre"
        weights = []

        def cross(h):
            out, w = self.cross_attention(h, memory=memory, memory_kv=memory_kv,
                                          attention_mask=memory_mask,
                                          return_attention_scores=True, training=training)
            weights.append(w)
            return out

        x = residual(x, cross, self.cross_attention_norm, self.dropout, pre, training)
        x = residual(x, lambda h: self.feed_forward(h, training=training),
                     self.feed_forward_norm, self.dropout, pre, training)
        return (x, weights[0]) if return_attention_scores else x

    def call(self, x, memory, self_mask=None, memory_mask=None, memory_kv=None,
             return_attention_scores=False, training=None):
        """The full-sequence (teacher-forced) path of embedded targets `x` [batch, target_len,
        d_model] over the encoder output `memory` [batch, source_len, d_model]; `self_mask`
        [.., target_len, target_len] (normally `causal_mask`), `memory_mask` the source padding
        mask, `memory_kv` an optional `cross_attention.project_memory(memory)`; with the
        cross-attention weights [batch, heads, target_len, source_len] if asked."""
        pre = self.norm == "pre"
        x = residual(x, lambda h: self.self_attention(h, attention_mask=self_mask,
                                                      training=training),
                     self.self_attention_norm, self.dropout, pre, training)
        return self._attend_memory_and_feed_forward(x, memory, memory_kv, memory_mask, training,
                                                    return_attention_scores)

    def step(self, x, position, cache, memory_kv, memory_mask=None,
             return_attention_scores=False):
        """One new position per hypothesis (`x` [batch, rows, d_model], a sentence's beams at
        `position`) attending to the prefix in `cache` (`MultiHeadAttention.initial_cache`) and
        to `memory_kv` (`cross_attention.project_memory`, shared by a sentence's rows) ->
        (output, updated cache) and the cross-attention weights [batch, heads, rows, source_len]
        if asked."""
        new_cache = {}

        def attend_prefix(h):
            out, cache_out = self.self_attention.step(h, position, cache)
            new_cache.update(cache_out)
            return out

        x = residual(x, attend_prefix, self.self_attention_norm, self.dropout,
                     self.norm == "pre", training=False)
        out = self._attend_memory_and_feed_forward(x, None, memory_kv, memory_mask, False,
                                                   return_attention_scores)
        return (out[0], new_cache, out[1]) if return_attention_scores else (out, new_cache)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(LayerStack):
    """`num_layers` decoder layers: full-sequence `call`, cached `step`. Args: see `LayerStack`."""

    layer_class = DecoderLayer

    def call(self, x, memory, memory_mask=None, return_attention_scores=False, training=None,
             attention_layer=-1, self_mask=None):
        """x: embedded targets [batch, target_len, d_model] -> [batch, target_len, d_model], and
        the cross-attention weights of layer `attention_layer` (default: the last) if asked.
        `memory_mask`: source padding mask [batch, 1, 1, source_len] or a packed row's
        `segment_mask` [batch, 1, target_len, source_len]; `self_mask`, if given, restricts
        self-attention beyond the causal mask (a packed row's `segment_mask`)."""
        causal = causal_mask(keras.ops.shape(x)[1])
        self_mask = causal if self_mask is None else keras.ops.logical_and(causal, self_mask)
        weights = None
        wanted = range(len(self.blocks))[attention_layer]
        for index, layer in enumerate(self.blocks):
            asked = return_attention_scores and index == wanted
            out = layer(x, memory, self_mask=self_mask, memory_mask=memory_mask,
                        return_attention_scores=asked, training=training)
            x, weights = out if asked else (out, weights)
        return (self._finish(x), weights) if return_attention_scores else self._finish(x)

    def project_memory(self, memory):
        """Every layer's cross-attention keys and values: computed once per source sentence."""
        return [layer.cross_attention.project_memory(memory) for layer in self.blocks]

    def initial_cache(self, batch_size, num_rows, max_length=None):
        """Empty self-attention caches of every layer for `num_rows` hypotheses per sentence."""
        return [layer.self_attention.initial_cache(batch_size, num_rows, max_length)
                for layer in self.blocks]

    def step(self, x, position, cache, memory_kv, memory_mask=None,
             return_attention_scores=False, attention_layer=-1):
        """x [batch, rows, d_model] at `position` -> (output, new cache[, weights]), the weights
        being the cross-attention of layer `attention_layer` (default: the last)."""
        new_cache, weights = [], None
        wanted = range(len(self.blocks))[attention_layer]
        for index, (layer, layer_cache, layer_kv) in enumerate(zip(self.blocks, cache, memory_kv)):
            asked = return_attention_scores and index == wanted
            out = layer.step(x, position, layer_cache, layer_kv, memory_mask, asked)
            x, weights = out[0], (out[2] if asked else weights)
            new_cache.append(out[1])
        x = self._finish(x)
        return (x, new_cache, weights) if return_attention_scores else (x, new_cache)
