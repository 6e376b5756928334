"""The encoder-decoder Transformer as a subclassed `keras.Model` (Section 3, Figure 1)."""
import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.masks import padding_mask, segment_mask
from keras_transformer.layers.positional import (LearnedPositionalEmbedding,
                                                 SinusoidalPositionalEncoding)

PACKED_INPUTS = ("source_ids", "target_in_ids", "source_segments", "target_segments",
                 "source_positions", "target_positions")
"""Keys of a packed batch's inputs, each int [batch, length]: ids 0-padded; segments numbering a
row's pairs 1, 2, ... (0 on padding); positions restarting at 0 with each pair."""


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The paper's model: `model((source_ids, target_in_ids))` -> float32 logits; id 0 is padding.
    `config`: a `TransformerConfig` (or its dict form, as `from_config` passes it).

    Example:
        >>> config = TransformerConfig.preset("base", vocab_size=100, num_layers=1,
        ...                                   d_model=32, d_ff=64, num_heads=2)
        >>> model = Transformer(config)
        >>> source = keras.ops.array([[5, 6, 7, 3]])
        >>> target_in = keras.ops.array([[2, 8, 9]])
        >>> tuple(model((source, target_in)).shape)
        (1, 3, 100)
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        self.config = config
        policy = self.dtype_policy
        self.source_embedding = SharedEmbedding(config.vocab_size, config.d_model,
                                                name="embedding", dtype=policy)
        if config.share_embeddings:
            self.target_embedding = self.source_embedding
            self.output_projection = None
        else:
            self.target_embedding = SharedEmbedding(config.vocab_size, config.d_model,
                                                    name="target_embedding", dtype=policy)
            self.output_projection = keras.layers.Dense(config.vocab_size, use_bias=False,
                                                        name="output_projection", dtype=policy)
        if config.positional == "learned":
            self.source_positions = LearnedPositionalEmbedding(
                config.max_length, name="source_positions", dtype=policy)
            self.target_positions = LearnedPositionalEmbedding(
                config.max_length, name="target_positions", dtype=policy)
        else:
            self.source_positions = self.target_positions = SinusoidalPositionalEncoding(
                name="positions", dtype=policy)
        stack_args = dict(num_layers=config.num_layers, d_ff=config.d_ff,
                          num_heads=config.num_heads, d_k=config.d_k, d_v=config.d_v,
                          dropout=config.dropout, attention_dropout=config.attention_dropout,
                          relu_dropout=config.relu_dropout, norm=config.norm, dtype=policy)
        self.encoder = Encoder(name="encoder", **stack_args)
        self.decoder = Decoder(name="decoder", **stack_args)
        self.embedding_dropout = keras.layers.Dropout(config.dropout, name="embedding_dropout",
                                                      dtype=policy)
        self.build()  # weights exist from here on: ready for load_weights and summary()

    def build(self, inputs_shape=None):
        if self.built:
            return
        ids_shape, vector_shape = (None, None), (None, None, self.config.d_model)
        # Shared layers appear twice below: build each object once.
        for layer in {id(x): x for x in (self.source_embedding, self.target_embedding)}.values():
            layer.build(ids_shape)
        for layer in {id(x): x for x in (self.source_positions, self.target_positions)}.values():
            layer.build(vector_shape)
        self.embedding_dropout.build(vector_shape)
        self.encoder.build(vector_shape)
        self.decoder.build(vector_shape, vector_shape)
        if self.output_projection is not None:
            self.output_projection.build(vector_shape)
        self.built = True

    def _embed(self, ids, embedding, position_layer, start=0, positions=None, training=None):
        """Token embeddings + positions (from `start`, or a packed row's), dropout on the sum."""
        x = embedding(ids)
        return self.embedding_dropout(x + position_layer(x, start=start, positions=positions),
                                      training=training)

    def _encode(self, source_ids, mask, positions=None, training=None):
        """The encoder over `source_ids` whose self-attention may see the keys `mask` allows."""
        x = self._embed(source_ids, self.source_embedding, self.source_positions,
                        positions=positions, training=training)
        return self.encoder(x, padding_mask=mask, training=training)

    def project(self, x):
        """Decoder output [..., d_model] -> float32 logits [..., vocab_size]."""
        project = self.output_projection or self.target_embedding.project
        return ops.cast(project(x), "float32")

    def encode(self, source_ids, training=None):
        """int [batch, source_len] 0-padded -> (memory [batch, source_len, d_model], source
        padding mask [batch, 1, 1, source_len])."""
        mask = padding_mask(source_ids)
        return self._encode(source_ids, mask, training=training), mask

    def decode(self, target_in_ids, memory, memory_mask, return_attention_scores=False,
               training=None, attention_layer=-1, self_mask=None, positions=None):
        """Teacher-forced logits [batch, tgt_len, vocab][, decoder layer `attention_layer`'s
        cross-attention [batch, heads, tgt_len, src_len]]; `self_mask`, `positions`: packing."""
        x = self._embed(target_in_ids, self.target_embedding, self.target_positions,
                        positions=positions, training=training)
        out = self.decoder(x, memory, memory_mask=memory_mask, self_mask=self_mask,
                           return_attention_scores=return_attention_scores, training=training,
                           attention_layer=attention_layer)
        if return_attention_scores:
            return self.project(out[0]), out[1]
        return self.project(out)

    def call(self, inputs, training=None):
        """Logits [batch, tgt_len, vocab] of `(source_ids, target_in_ids)` (int [batch, len] each),
        or of packed rows (a `PACKED_INPUTS` dict; each pair's as if alone)."""
        if isinstance(inputs, dict):
            return self._call_packed(inputs, training)
        source_ids, target_in_ids = inputs
        memory, mask = self.encode(source_ids, training=training)
        return self.decode(target_in_ids, memory, mask, training=training)

    def _call_packed(self, inputs, training=None):
        """`call` on packed rows (a dict of `PACKED_INPUTS`)."""
        missing = [key for key in PACKED_INPUTS if key not in inputs]
        if missing:
            raise ValueError(f"a packed batch needs the inputs {PACKED_INPUTS}; "
                             f"missing: {missing}")
        source_segments, target_segments = inputs["source_segments"], inputs["target_segments"]
        memory = self._encode(inputs["source_ids"],
                              segment_mask(source_segments, source_segments),
                              positions=inputs["source_positions"], training=training)
        return self.decode(inputs["target_in_ids"], memory,
                           segment_mask(target_segments, source_segments), training=training,
                           self_mask=segment_mask(target_segments, target_segments),
                           positions=inputs["target_positions"])

    def initial_decode_state(self, memory, memory_mask, num_rows, max_length=None):
        """What `decode_step` needs for `encode`'s output: (cache of `num_rows` hypotheses per
        sentence, reordered on axis 1; memory_state per sentence, constant). `max_length`: fixed
        cache slots for that many positions (XLA); None: caches that grow."""
        cache = self.decoder.initial_cache(ops.shape(memory)[0], num_rows, max_length)
        return cache, {"memory_kv": self.decoder.project_memory(memory), "mask": memory_mask}

    def decode_step(self, token_ids, position, cache, memory_state,
                    return_attention_scores=False, attention_layer=-1):
        """`decode` one position at a time, from the cache: `token_ids` int [batch, rows] at
        `position` (a scalar int) -> (logits float32 [batch, rows, vocab], new cache[, attention
        weights as `decode`'s]); `cache`, `memory_state` as `initial_decode_state` returns them."""
        x = self.target_embedding(token_ids)
        # Axis 1 holds hypotheses, all at `position`: one positional vector for every row.
        x = x + self.target_positions(x[:, :1], start=position)
        out = self.decoder.step(x, position, cache, memory_state["memory_kv"],
                                memory_state["mask"], return_attention_scores,
                                attention_layer)
        return (self.project(out[0]), *out[1:])

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
