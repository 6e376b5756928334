"""The serving functions: raw sentences in, translations out, everything in the graph.

`ServingFunctions` holds the six functions an exported SavedModel serves: ``translate`` and
``translate_ids`` (the 1-best of sentences or of id rows: SentencePiece is in the graph), the
``*_with_options`` pair (per-request beam, alpha, n-best, extra length, target prefix) and the
``*_with_all_options`` pair (also sampling and required phrases); their inputs and outputs:
export/README.md. Serving has no optional inputs: a released signature never gains one."""

import contextlib
import dataclasses
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.data import text
from keras_transformer.data.tokenizer import load_tokenizer
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.errors import UserError
from keras_transformer.decoding import MAX_BEAM_SIZE, BeamSearch, Required, Sampling, decode

OPTION_SPECS = [tf.TensorSpec([], tf.int32, name="beam_size"),
                tf.TensorSpec([], tf.float32, name="alpha"),
                tf.TensorSpec([], tf.int32, name="num_results"),
                tf.TensorSpec([], tf.int32, name="max_extra_length")]
SAMPLING_SPECS = [tf.TensorSpec([], tf.int32, name="sampling_topk"),
                  tf.TensorSpec([], tf.float32, name="sampling_topp"),
                  tf.TensorSpec([], tf.float32, name="sampling_temperature"),
                  tf.TensorSpec([], tf.int64, name="seed")]
"""The sampling inputs of the all-options functions, after the target prefix."""
BEAM_SEARCH = (0, 1.0, 0.0, 0)
"""The sampling inputs that mean beam search: temperature 0, top-k 0, top-p 1 (seed unused)."""
TERMS_SPEC = tf.TensorSpec([None, None], tf.string, name="terms")
"""The terms input: phrases that row i's translations must contain ("" is none; [[]]: none)."""
TERMS_IDS_SPEC = tf.TensorSpec([None, None, None], tf.int32, name="terms_ids")
"""The terms_ids input: the phrases as 0-padded ids [batch, phrases, length] ([[[]]]: none)."""
NO_TERMS, NO_TERMS_IDS = (("",),), (((0,),),)
"""No phrase (Python values: a tensor made at import would start TensorFlow's runtime early)."""


def _beam_search_sampling():
    """`BEAM_SEARCH` as tensors of the sampling inputs' dtypes (made while tracing)."""
    return [tf.constant(value, spec.dtype) for value, spec in zip(BEAM_SEARCH, SAMPLING_SPECS)]


class ExportError(UserError):
    """An export cannot be written as asked (a `UserError`)."""


class ServingFunctions:
    """The six `tf.function`s of the module docstring, callable in-process: exactly what the
    SavedModel runs. The options functions check their inputs in the graph before decoding
    (InvalidArgumentError); a temperature > 0 samples, best first. `ExportError` if the
    SentencePiece model has more pieces than the model has embeddings.

    Args:
        model: a built `keras_transformer.Transformer` (its dtype is the decoding precision).
        spm_proto: the serialized SentencePiece model (bytes) the model was trained with.
        search: the `BeamSearch` of `translate` and `translate_ids` (its beam size is fixed: it
            sets tensor shapes); its stop rule serves every signature.
        max_input_length: the longest source in tokens (at most and by default the model's).
        jit_compile: XLA-compile the beam search of `translate` and `translate_ids`.
        constraint: a `keras_transformer.decoding.DecodingConstraint` on the output tokens.
        preprocess: in-graph `sentences -> sentences` applied before tokenization.
        postprocess: in-graph `(sentences, outputs) -> answers` on the detokenized outputs.
        weights: None (the model's variables) or an `Int8Weights`.
    """

    def __init__(self, model, spm_proto: bytes, search: BeamSearch = BeamSearch(), *,
                 max_input_length=None, jit_compile=False, constraint=None, preprocess=None,
                 postprocess=None, weights=None):
        self.model = model
        self.spm_proto = bytes(spm_proto)
        self.search = search
        # Translations may not be longer than the model's positions allow.
        self.output_cap = model.config.max_length
        self.max_length = min(max_input_length or self.output_cap, self.output_cap)
        self.jit_compile = bool(jit_compile)
        self.constraint = constraint
        self.preprocess = preprocess
        self.postprocess = postprocess
        self.weights = weights
        spm_size = int(load_tokenizer(self.spm_proto).vocab_size())
        if spm_size > model.config.vocab_size:
            raise ExportError(
                f"the SentencePiece model has {spm_size} pieces but the Transformer only "
                f"{model.config.vocab_size} embeddings: export with the spm.model the model was "
                f"trained with (its model directory's spm.model)")
        self.vocab_size = spm_size

        def graph(function, *specs):
            return tf.function(function, input_signature=list(specs), autograph=False)

        strings = tf.TensorSpec([None], tf.string, name="source")
        ids = tf.TensorSpec([None, None], tf.int32, name="source_ids")
        # One search function per kind of signature: a SavedModel stores each search graph once.
        id_rows = tf.TensorSpec([None, None], tf.int32)
        self._search_core = tf.function(self._search_ids, input_signature=[id_rows],
                                        jit_compile=self.jit_compile, autograph=False)
        self._search_with_options = graph(self._search_with_options_fn, id_rows, *OPTION_SPECS,
                                          id_rows, tuple(SAMPLING_SPECS),
                                          tf.TensorSpec([None, None, None], tf.int32))
        self.translate = graph(self._translate, strings)
        self.translate_ids = graph(self._translate_ids, ids)
        text_options = [strings, *OPTION_SPECS,
                        tf.TensorSpec([None], tf.string, name="target_prefix")]
        ids_options = [ids, *OPTION_SPECS,
                       tf.TensorSpec([None, None], tf.int32, name="target_prefix_ids")]
        self.translate_with_options = graph(self._translate_with_options, *text_options)
        self.translate_ids_with_options = graph(self._translate_ids_with_options, *ids_options)
        self.translate_with_all_options = graph(self._translate_with_all_options, *text_options,
                                                *SAMPLING_SPECS, TERMS_SPEC)
        self.translate_ids_with_all_options = graph(self._translate_ids_with_all_options,
                                                    *ids_options, *SAMPLING_SPECS, TERMS_IDS_SPEC)

    def settings(self) -> dict[str, Any]:
        """The decoding settings baked into the graph."""
        return {**dataclasses.asdict(self.search), "max_input_length": self.max_length,
                "precision": keras.backend.standardize_dtype(self.model.compute_dtype),
                "output_cap": self.output_cap, "jit_compile": self.jit_compile,
                "quantize": self.weights and self.weights.mode,
                "bos_id": BOS_ID, "eos_id": EOS_ID, "pad_id": PAD_ID}

    def _model_weights(self):
        """The context the search runs the model in: its variables, or `weights` dequantized."""
        return contextlib.nullcontext() if self.weights is None else self.weights.scope()

    def _search_ids(self, source_ids):
        """Beam search on a non-empty batch -> (ids [batch, len] with EOS, 0-padded; scores): the
        part `jit_compile` compiles (its output shapes follow the input's, not its values)."""
        with self._model_weights():
            out = decode(self.model, source_ids, self.search, max_length=self.output_cap,
                         constraint=self.constraint)
        return out.ids[:, 0], out.scores[:, 0]

    def _search(self, source_ids):
        """`_search_ids` also for an empty batch; blank sources get no ids and score 0."""
        def search():
            ids, scores = text.empty_where_blank(text.blank_rows(source_ids),
                                                 *self._search_core(source_ids))
            # The search keeps room for the longest allowed output.
            width = tf.reduce_max(tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), 1))
            return ids[:, :width], scores

        return tf.cond(tf.shape(source_ids)[0] > 0, search,
                       lambda: (tf.zeros([0, 0], tf.int32), tf.zeros([0], tf.float32)))

    def _tokenizer(self):
        """A SentencePiece tokenizer made inside the traced function, which then owns it: one made
        eagerly dies with the eager kernel cache, which `tf.random.set_seed` empties."""
        return load_tokenizer(self.spm_proto)

    def _translate(self, source):
        tokenizer = self._tokenizer()
        if self.preprocess is not None:
            source = self.preprocess(source)
        ids, scores = self._search(text.sentences_to_ids(tokenizer, source, self.max_length))
        translation = text.ids_to_sentences(tokenizer, ids)
        if self.postprocess is not None:
            translation = self.postprocess(source, translation)
        return {"translation": translation, "score": scores}

    def _client_ids(self, source_ids):
        """A client's source ids, checked (InvalidArgument for an id outside [0, vocab_size)) and
        truncated to `max_length` keeping EOS, as `text.sentences_to_ids` truncates sentences."""
        check = tf.debugging.Assert(
            tf.reduce_all((source_ids >= 0) & (source_ids < self.vocab_size)),
            [f"source ids must be in [0, {self.vocab_size})"])
        with tf.control_dependencies([check]):
            return text.truncate_ids(source_ids, self.max_length)

    def _translate_ids(self, source_ids):
        ids, scores = self._search(self._client_ids(source_ids))
        return {"ids": ids, "score": scores}

    def _check_options(self, batch, beam_size, alpha, num_results, max_extra_length,
                       prefix_batch, sampling, terms_ids):
        """In-graph checks (core Assert ops: InvalidArgument, before any decoding)."""
        def check(condition, *message):
            return tf.debugging.Assert(condition, list(message), summarize=5)

        topk, topp, temperature, _ = sampling
        samples = temperature > 0.0
        has_terms = tf.reduce_any(tf.not_equal(terms_ids, PAD_ID))
        return [
            check((beam_size >= 1) & (beam_size <= MAX_BEAM_SIZE),
                  f"beam_size must be in [1, {MAX_BEAM_SIZE}], got", beam_size),
            check((num_results >= 1)
                  & (num_results <= tf.where(samples, MAX_BEAM_SIZE, beam_size)),
                  f"num_results must be in [1, beam_size] (sampling: [1, {MAX_BEAM_SIZE}]), "
                  f"got num_results", num_results, "beam_size", beam_size),
            check(tf.math.is_finite(temperature) & (temperature >= 0.0),
                  "sampling_temperature must be a finite number >= 0 (0: beam search), got",
                  temperature),
            check(topk >= 0, "sampling_topk must be >= 0 (0: no cut), got", topk),
            check((topp > 0.0) & (topp <= 1.0),
                  "sampling_topp must be in (0, 1] (1: no cut), got", topp),
            check(samples | ((topk == 0) & (topp == 1.0)),
                  "sampling_topk and sampling_topp need sampling_temperature > 0 (0 is beam "
                  "search), got sampling_topk", topk, "sampling_topp", topp),
            check(tf.math.is_finite(alpha) & (alpha >= 0.0),
                  "alpha must be a finite number >= 0, got", alpha),
            check(max_extra_length >= 0, "max_extra_length must be >= 0, got",
                  max_extra_length),
            check(tf.equal(prefix_batch, batch),
                  "the target prefix must have one row per source row: got", prefix_batch,
                  "prefix rows for", batch, "sources"),
            check(tf.equal(tf.shape(terms_ids)[0], batch) | ~has_terms,
                  "terms must have one row per source row: got", tf.shape(terms_ids)[0],
                  "rows for", batch, "sources"),
            check(tf.reduce_all((terms_ids >= 0) & (terms_ids < self.vocab_size)
                                & (terms_ids != EOS_ID) & (terms_ids != BOS_ID)),
                  f"term ids must be in [0, {self.vocab_size}) and neither BOS ({BOS_ID}) nor "
                  f"EOS ({EOS_ID})"),
            check(~(has_terms & samples),
                  "terms need beam search (sampling_temperature 0): sampling does not take "
                  "them"),
            check(~has_terms | (self.constraint is None),
                  "terms: this model's decoding constraint does not take required phrases"),
        ]

    def _search_with_options_fn(self, source_ids, beam_size, alpha, num_results,
                                max_extra_length, prefix_ids, sampling, terms_ids):
        """Checked options -> (ids, scores, token log-probs, alignment) of n results per source,
        also for an empty batch: by beam search with `terms_ids`, or sampling (temperature > 0)."""
        checks = self._check_options(tf.shape(source_ids)[0], beam_size, alpha, num_results,
                                     max_extra_length, tf.shape(prefix_ids)[0], sampling,
                                     terms_ids)
        checks.append(tf.debugging.Assert(
            tf.reduce_all((prefix_ids >= 0) & (prefix_ids < self.vocab_size)),
            [f"target prefix ids must be in [0, {self.vocab_size})"]))
        with tf.control_dependencies(checks):
            beam_size, alpha, num_results, prefix_ids, terms_ids, *sampling = (
                tf.identity(v) for v in (beam_size, alpha, num_results, prefix_ids, terms_ids,
                                         *sampling))
            # The output cap bounds the search anyway; this keeps the sum from overflowing.
            extra = tf.minimum(max_extra_length, self.output_cap)

        beam = dataclasses.replace(self.search, beam_size=beam_size, alpha=alpha,
                                   extra_length=extra)
        sample = Sampling(*sampling, alpha=alpha, extra_length=extra)

        def search(strategy):
            with self._model_weights():
                # Terms are refused with a constraint by the checks above.
                required = Required(prefix_ids, terms_ids if self.constraint is None else None)
                out = decode(self.model, source_ids, strategy, max_length=self.output_cap,
                             num_results=num_results, constraint=self.constraint,
                             required=required, details=True)
            ids, scores, log_probs, alignment = text.empty_where_blank(
                text.blank_rows(source_ids), out.ids, out.scores, out.token_log_probs,
                out.alignment)
            width = tf.reduce_max(tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), 2))
            return ids[..., :width], scores, log_probs[..., :width], alignment[..., :width]

        def empty():
            return (tf.zeros([0, num_results, 0], tf.int32), tf.zeros([0, num_results]),
                    tf.zeros([0, num_results, 0]), tf.zeros([0, num_results, 0], tf.int32))

        return tf.cond(tf.shape(source_ids)[0] > 0, lambda: tf.cond(  # the temperature chooses
            sample.temperature > 0.0, lambda: search(sample), lambda: search(beam)), empty)

    def _translate_with_options(self, source, beam_size, alpha, num_results, max_extra_length,
                                target_prefix):
        """`translate_with_all_options` by beam search without terms (one graph to store)."""
        return self.translate_with_all_options(
            source, beam_size, alpha, num_results, max_extra_length, target_prefix,
            *_beam_search_sampling(), tf.constant(NO_TERMS, tf.string))

    def _translate_with_all_options(self, source, beam_size, alpha, num_results,
                                    max_extra_length, target_prefix, sampling_topk,
                                    sampling_topp, sampling_temperature, seed, terms):
        tokenizer = self._tokenizer()
        if self.preprocess is not None:
            source = self.preprocess(source)
        source_ids = text.sentences_to_ids(tokenizer, source, self.max_length)
        # The prefix's pieces, no end token; an empty string forces nothing.
        prefix_ids = tf.cast(tokenizer.tokenize(target_prefix), tf.int32).to_tensor(
            default_value=PAD_ID)[:, :self.output_cap - 1]
        # Each phrase's pieces: tokenized alone, a word-initial phrase keeps its word marker.
        terms_ids = tf.cast(tokenizer.tokenize(terms), tf.int32).to_tensor(default_value=PAD_ID)
        ids, scores, token_log_probs, alignment = self._search_with_options(
            source_ids, beam_size, alpha, num_results, max_extra_length, prefix_ids,
            (sampling_topk, sampling_topp, sampling_temperature, seed), terms_ids)
        shape = tf.shape(ids)
        flat = tf.reshape(ids, [shape[0] * shape[1], shape[2]])
        translations = text.ids_to_sentences(tokenizer, flat)
        if self.postprocess is not None:
            translations = self.postprocess(tf.repeat(source, shape[1]), translations)
        pieces = tf.where(tf.equal(ids, PAD_ID), "", tokenizer.id_to_string(ids))
        return {"translations": tf.reshape(translations, shape[:2]), "scores": scores,
                "tokens": pieces, "token_log_probs": token_log_probs, "alignment": alignment}

    def _translate_ids_with_options(self, source_ids, beam_size, alpha, num_results,
                                    max_extra_length, target_prefix_ids):
        """`translate_ids_with_all_options` by beam search without terms (one graph to store)."""
        return self.translate_ids_with_all_options(
            source_ids, beam_size, alpha, num_results, max_extra_length, target_prefix_ids,
            *_beam_search_sampling(), tf.constant(NO_TERMS_IDS, tf.int32))

    def _translate_ids_with_all_options(self, source_ids, beam_size, alpha, num_results,
                                        max_extra_length, target_prefix_ids, sampling_topk,
                                        sampling_topp, sampling_temperature, seed, terms_ids):
        ids, scores, token_log_probs, alignment = self._search_with_options(
            self._client_ids(source_ids), beam_size, alpha, num_results, max_extra_length,
            target_prefix_ids[:, :self.output_cap - 1],
            (sampling_topk, sampling_topp, sampling_temperature, seed), terms_ids)
        return {"ids": ids, "scores": scores, "token_log_probs": token_log_probs,
                "alignment": alignment}
