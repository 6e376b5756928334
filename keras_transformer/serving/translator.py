"""`Translator`: Python text in, text out, through the very functions the SavedModel serves (what
a Python user gets is what TensorFlow Serving answers); the one decoding front of the project."""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Sequence

import tensorflow as tf

from keras_transformer import native_logs
from keras_transformer.decoding import BeamSearch, Sampling
from keras_transformer.serving.functions import BEAM_SEARCH, ServingFunctions
from keras_transformer.serving.saved_model import write_saved_model


def _no_log(message):
    """The default log of library calls: nothing (the command line passes its own)."""


def _terms_tensor(terms: Sequence[Sequence[str]] | None) -> tf.Tensor:
    """string [rows, phrases]: each row's non-blank phrases, ""-padded ([[]]: none at all)."""
    phrases = [[p for p in row if p.strip()] for row in (terms or [])]
    width = max(map(len, phrases), default=0)
    if not width:
        return tf.constant([[]] * max(len(phrases), 1), tf.string)
    return tf.constant([row + [""] * (width - len(row)) for row in phrases], tf.string)


class Translator:
    """Translates sentences with a trained `Transformer` and its SentencePiece model; takes
    `ServingFunctions`' arguments (`search`: every call's default, which its keywords override).

    Example:
        >>> translator = Translator(model, spm_proto, BeamSearch(beam_size=4, alpha=0.6))
        >>> translator.translate(["A dog runs through the snow."])
        ['Ein Hund rennt durch den Schnee.']
        >>> translator.export("exports/ende")   # the SavedModel TensorFlow Serving loads
    """

    @native_logs.quiet()
    def __init__(self, model, spm_proto: bytes, search: BeamSearch = BeamSearch(), **graph):
        self.functions = ServingFunctions(model, spm_proto, search, **graph)
        self._graph = graph
        self._by_stop_rule = {search.stop_rule: self.functions}

    @property
    def model(self):
        return self.functions.model

    @property
    def search(self) -> BeamSearch:
        """The default decoding settings (`BeamSearch`)."""
        return self.functions.search

    @property
    def spm_proto(self) -> bytes:
        return self.functions.spm_proto

    @property
    def max_input_length(self) -> int:
        """The longest source in tokens, EOS included; longer ones keep their first pieces."""
        return self.functions.max_length

    def _functions_for(self, stop_rule: str | None) -> ServingFunctions:
        """The serving functions with `stop_rule` (a graph constant: one set per rule used)."""
        stop_rule = stop_rule or self.search.stop_rule
        if stop_rule not in self._by_stop_rule:
            self._by_stop_rule[stop_rule] = ServingFunctions(
                self.model, self.spm_proto, dataclasses.replace(self.search, stop_rule=stop_rule),
                **self._graph)
        return self._by_stop_rule[stop_rule]

    @native_logs.quiet()
    def translate(self, texts: Sequence[str], *, beam_size: int | None = None,
                  alpha: float | None = None, max_extra_length: int | None = None,
                  n_best: int = 1, with_scores: bool = False, details: bool = False,
                  prefixes: Sequence[str] | None = None,
                  terms: Sequence[Sequence[str]] | None = None,
                  sampling: Sampling | None = None, stop_rule: str | None = None) -> list:
        """Translates `texts`: a str each (an empty or blank text gives "", score 0), unless
        `n_best` > 1, `with_scores` or `details` ask for more.

        Args:
            beam_size, alpha, max_extra_length: this call's search (default: `search`'s; the
                beam is widened to `n_best` if narrower).
            n_best: hypotheses per sentence, best first.
            with_scores: per sentence a list of `n_best` (translation, score) pairs.
            details: per sentence a dict of lists over its hypotheses: "translations",
                "scores", "tokens" (pieces), "token_log_probs", "alignment" (source positions).
            prefixes: per sentence the text its translations start with ("": none).
            terms: per sentence the phrases each of its translations must contain.
            sampling: a `Sampling` instead of beam search (alpha, extra length: this call's).
            stop_rule: `BeamSearch.stop_rule` for this call.
        """
        functions = self._functions_for(stop_rule)
        sources = tf.constant(list(texts), tf.string)
        plain = (beam_size, alpha, max_extra_length, prefixes, terms, sampling) == (None,) * 6
        if plain and n_best == 1 and not (with_scores or details):
            return [t.decode("utf-8") for t in
                    functions.translate(source=sources)["translation"].numpy()]
        search = self.search
        topk, topp, temperature, seed = (BEAM_SEARCH if sampling is None else (
            sampling.topk, sampling.topp, sampling.temperature, sampling.seed))
        out = functions.translate_with_all_options(
            source=sources, beam_size=tf.constant(max(beam_size or search.beam_size, n_best)),
            alpha=tf.constant(search.alpha if alpha is None else alpha, tf.float32),
            num_results=tf.constant(n_best),
            max_extra_length=tf.constant(
                search.extra_length if max_extra_length is None else max_extra_length),
            target_prefix=tf.constant(list(prefixes) if prefixes else [""] * len(texts),
                                      tf.string),
            sampling_topk=tf.constant(topk, tf.int32), sampling_topp=tf.constant(topp, tf.float32),
            sampling_temperature=tf.constant(temperature, tf.float32),
            seed=tf.constant(seed, tf.int64), terms=_terms_tensor(terms))
        out = {name: value.numpy() for name, value in out.items()}
        if details:
            return [_details(out, row) for row in range(len(texts))]
        rows = [[(t.decode("utf-8"), float(s)) for t, s in zip(hypotheses, scores)]
                for hypotheses, scores in zip(out["translations"], out["scores"])]
        return rows if n_best > 1 or with_scores else [row[0][0] for row in rows]

    def translate_ids(self, source_ids) -> tuple:
        """The 1-best of id rows (int32 [batch, length], EOS-ended, 0-padded), as the
        `translate_ids` signature answers: (ids [batch, length'] with EOS, scores [batch])."""
        out = self.functions.translate_ids(source_ids=tf.convert_to_tensor(source_ids, tf.int32))
        return out["ids"], out["score"]

    @native_logs.quiet()
    def export(self, export_dir: str | pathlib.Path, version: int | None = None,
               overwrite: bool = False, log=_no_log) -> pathlib.Path:
        """Writes the served SavedModel as `<export_dir>/<version>/` (default: the next version;
        `ExportError` if it exists, unless `overwrite`); loading it needs tensorflow_text."""
        return write_saved_model(self.functions, export_dir, version=version,
                                 overwrite=overwrite, log=log)


def _details(out: dict, row: int) -> dict:
    """Row `row` of `translate_with_all_options`' outputs, each hypothesis cut to its pieces."""
    lengths = [int((pieces != b"").sum()) for pieces in out["tokens"][row]]

    def unpadded(name, convert):
        return [[convert(v) for v in values[:n]] for values, n in zip(out[name][row], lengths)]

    return {"translations": [t.decode("utf-8") for t in out["translations"][row]],
            "scores": [float(v) for v in out["scores"][row]],
            "tokens": unpadded("tokens", lambda p: p.decode("utf-8")),
            "token_log_probs": unpadded("token_log_probs", float),
            "alignment": unpadded("alignment", int)}
