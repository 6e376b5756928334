"""SavedModel export: raw text in, translations out, everything in the graph.

The SavedModel written by `export_saved_model` has two signatures:

* ``serving_default``: ``source`` tf.string [batch] -> ``translation`` tf.string [batch],
  ``score`` float32 [batch]. SentencePiece tokenization (the model proto is embedded in the
  graph), EOS appended, truncation to ``max_length`` tokens, padding, beam search
  (`keras_transformer.search.translate_ids`), EOS/padding stripped, detokenization.
* ``translate_ids``: ``source_ids`` int32 [batch, length] -> ``ids`` int32 [batch, length'],
  ``score`` float32 [batch], for clients that tokenize themselves.

Beam size, alpha, extra length and maximum input length are fixed at export time: TensorFlow
Serving requires every input of a signature in every request, so optional decoding inputs
would make the plain ``{"instances": [{"source": ...}]}`` request fail.

The SavedModel is written with `keras.export.ExportArchive`, whose variable tracking gives
one saved variable per weight: a plain `tf.Module` holding Keras 3 variables was measured to
export two handles per weight, and the TF1 session loader (how TensorFlow Serving restores)
then fails with "Could not find variable ... uninitialized". The SentencePiece tokenizer is
created inside the traced functions (see `Translator._tokenizer`), so its resource needs no
tracking and survives `tf.random.set_seed`.

Versions are written as ``<export_dir>/<version>/``, the layout TensorFlow Serving watches,
atomically: into a hidden temporary directory beside it (which the server ignores, its name
not being a number), then renamed into place.
"""
from __future__ import annotations

import datetime
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any, Mapping

import tensorflow as tf

from keras_transformer.search import translate_ids as _beam_search_ids
from pipelines.vocab import BOS_ID, EOS_ID, PAD_ID, vocab_size_of

SERVING_SIGNATURE = "serving_default"
IDS_SIGNATURE = "translate_ids"
EXTRA_DIR = "assets.extra"  # files beside the SavedModel that TensorFlow never loads
EXPORT_INFO_FILE = "export.json"
VOCAB_COPY_FILE = "spm.model"

# The paper's decoding defaults (Section 6.1), used when neither the caller nor
# settings.json says otherwise.
DEFAULT_BEAM_SIZE = 4
DEFAULT_ALPHA = 0.6
DEFAULT_EXTRA_LENGTH = 50


class ExportError(ValueError):
    """An export cannot be written as asked (bad settings, existing version, ...)."""


def _as_proto(spm_proto) -> bytes:
    """The serialized SentencePiece model: bytes as given, or read from a file/model dir."""
    if isinstance(spm_proto, (bytes, bytearray)):
        return bytes(spm_proto)
    from pipelines.vocab import read_model_proto

    return read_model_proto(spm_proto)


class Translator:
    """The serving functions, callable in-process: exactly what the SavedModel runs.

    `translate` (tf.string [batch] -> {"translation", "score"}) and `translate_ids` (int32
    [batch, length] -> {"ids", "score"}) are `tf.function`s with fixed input signatures; the
    export registers these very functions as the two signatures, so calling them here and
    calling the loaded SavedModel give the same results. `tokenize` (the text signature's
    first half: pieces, EOS, truncation, padding) and `detokenize` (its last) are there for
    callers and tests that want the pieces.

    Example:
        >>> translator = Translator(model, spm_proto, beam_size=4, alpha=0.6)
        >>> out = translator.translate(tf.constant(["A dog runs through the snow."]))
        >>> out["translation"], out["score"]

    Args:
        model: a built `keras_transformer.Transformer`.
        spm_proto: the serialized SentencePiece model (bytes), or the path of ``spm.model``
            or of a model directory holding it.
        beam_size: beams per sentence (fixed: it sets tensor shapes).
        alpha: GNMT length-penalty exponent.
        extra_length: a translation has at most (source tokens + extra_length) tokens, EOS
            included, and never more than ``model.config.max_length``.
        max_length: the longest source in tokens, EOS included; longer inputs are truncated
            to their first ``max_length - 1`` pieces plus EOS. Default and upper bound:
            ``model.config.max_length``.
        jit_compile: compile the id -> id beam search with XLA (`tf.function(jit_compile=True)`).
        constraint: a `keras_transformer.search.DecodingConstraint` on the output tokens.
        preprocess: in-graph `sentences -> sentences` applied before tokenization.
        postprocess: in-graph `(sentences, outputs) -> answers` applied to the detokenized
            outputs (the parser turns linearized trees into bracketed trees).
    """

    def __init__(self, model, spm_proto, *, beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA,
                 extra_length=DEFAULT_EXTRA_LENGTH, max_length=None, jit_compile=False,
                 constraint=None, preprocess=None, postprocess=None):
        if not model.built:
            model.build()
        config = model.config
        self.model = model
        self.spm_proto = _as_proto(spm_proto)
        self.beam_size = _check_int("beam_size", beam_size, low=1)
        self.extra_length = _check_int("extra_length", extra_length, low=0)
        self.max_length = _check_int(
            "max_length", config.max_length if max_length is None else max_length,
            low=1, high=config.max_length,
            high_reason="model.config.max_length: the longest sequence the model supports")
        try:
            self.alpha = float(alpha)
        except (TypeError, ValueError):
            raise ExportError(f"alpha must be a number >= 0, got {alpha!r}") from None
        if not self.alpha >= 0.0:
            raise ExportError(f"alpha must be a number >= 0, got {alpha!r}")
        self.jit_compile = bool(jit_compile)
        self.constraint = constraint
        self.preprocess = preprocess
        self.postprocess = postprocess
        # Translations may not be longer than the model's positions allow.
        self.output_cap = config.max_length

        spm_size = vocab_size_of(self.spm_proto)
        if spm_size > config.vocab_size:
            raise ExportError(
                f"the SentencePiece model has {spm_size} pieces but the Transformer only "
                f"{config.vocab_size} embeddings: export with the spm.model the model was "
                f"trained with (its model directory's spm.model)")
        self.vocab_size = spm_size

        search = self._search_ids
        self._search_core = (tf.function(search, jit_compile=True, autograph=False)
                             if self.jit_compile else search)
        strings = tf.TensorSpec([None], tf.string, name="source")
        ids = tf.TensorSpec([None, None], tf.int32, name="source_ids")
        self.translate = tf.function(self._translate, input_signature=[strings],
                                     autograph=False)
        self.translate_ids = tf.function(self._translate_ids, input_signature=[ids],
                                         autograph=False)
        self.tokenize = tf.function(self._tokenize_only, input_signature=[strings],
                                    autograph=False)
        self.detokenize = tf.function(self._detokenize_only, input_signature=[ids],
                                      autograph=False)

    # ------------------------------------------------------------------ graph pieces
    def settings(self) -> dict[str, Any]:
        """The decoding settings baked into the graph."""
        return {"beam_size": self.beam_size, "alpha": self.alpha,
                "extra_length": self.extra_length, "max_length": self.max_length,
                "output_cap": self.output_cap, "jit_compile": self.jit_compile,
                "bos_id": BOS_ID, "eos_id": EOS_ID, "pad_id": PAD_ID}

    def _search_ids(self, source_ids):
        """Beam search on a non-empty batch -> (ids [batch, len] with EOS, 0-padded; scores)."""
        ids, scores = _beam_search_ids(
            self.model, source_ids, beam_size=self.beam_size, alpha=self.alpha,
            extra_length=self.extra_length, max_length=self.output_cap, bos_id=BOS_ID,
            eos_id=EOS_ID, num_results=1, constraint=self.constraint)
        ids, scores = ids[:, 0], scores[:, 0]
        # The search keeps room for the longest allowed output; drop all-padding columns.
        width = tf.reduce_max(tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), 1))
        return ids[:, :width], scores

    def _search(self, source_ids):
        """`_search_ids`, also for an empty batch (the search needs at least one sentence)."""
        return tf.cond(
            tf.shape(source_ids)[0] > 0,
            lambda: self._search_core(source_ids),
            lambda: (tf.zeros([0, 0], tf.int32), tf.zeros([0], tf.float32)))

    def _tokenizer(self):
        """A SentencePiece tokenizer made inside the function being traced.

        Its resource then belongs to that function and lives as long as it does. One made
        eagerly would be owned by a kernel in TensorFlow's eager kernel cache, which
        `tf.random.set_seed` (and `keras.utils.set_random_seed`, `clear_session`) empty,
        deleting the resource ("Resource ... SentencepieceOp ... does not exist").
        """
        import tensorflow_text as tf_text

        return tf_text.SentencepieceTokenizer(model=self.spm_proto, out_type=tf.int32)

    def _tokenize(self, tokenizer, source):
        """Sentences tf.string [batch] -> source ids int32 [batch, length]: pieces, EOS, 0-pad.

        Sources longer than `max_length` tokens keep their first `max_length - 1` pieces.
        """
        pieces = tokenizer.tokenize(source)[:, :self.max_length - 1]
        eos = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(source)[0], 1], EOS_ID))
        return tf.concat([tf.cast(pieces, tf.int32), eos], axis=1).to_tensor(
            default_value=PAD_ID)

    def _detokenize(self, tokenizer, ids):
        """Ids [batch, length] -> tf.string [batch]: tokens before the first EOS or padding."""
        keep = tf.math.cumprod(
            tf.cast(tf.not_equal(ids, EOS_ID) & tf.not_equal(ids, PAD_ID), tf.int32), axis=1)
        pieces = tf.RaggedTensor.from_tensor(ids, lengths=tf.reduce_sum(keep, axis=1))
        return tokenizer.detokenize(pieces)

    def _translate(self, source):
        tokenizer = self._tokenizer()
        if self.preprocess is not None:
            source = self.preprocess(source)
        ids, scores = self._search(self._tokenize(tokenizer, source))
        translation = self._detokenize(tokenizer, ids)
        if self.postprocess is not None:
            translation = self.postprocess(source, translation)
        return {"translation": translation, "score": scores}

    def _translate_ids(self, source_ids):
        ids, scores = self._search(source_ids[:, :self.max_length])
        return {"ids": ids, "score": scores}

    def _tokenize_only(self, source):
        return self._tokenize(self._tokenizer(), source)

    def _detokenize_only(self, ids):
        return self._detokenize(self._tokenizer(), ids)


def _check_int(name, value, low, high=None, high_reason=""):
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            as_int = int(value)
        except (TypeError, ValueError):
            as_int = None
        if as_int is None or as_int != value:
            raise ExportError(f"{name} must be an integer, got {value!r}")
        value = as_int
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}] ({high_reason})" if high is not None else f">= {low}"
        raise ExportError(f"{name} must be {bound}, got {value}")
    return value


# ---------------------------------------------------------------------- versions
def existing_versions(export_dir) -> list[int]:
    """Version numbers present under `export_dir` (subdirectories named by an integer)."""
    path = pathlib.Path(export_dir)
    if not path.is_dir():
        return []
    return sorted(int(p.name) for p in path.iterdir() if p.is_dir() and p.name.isdigit())


def next_version(export_dir) -> int:
    """One more than the largest existing version; 1 for an empty or missing directory."""
    versions = existing_versions(export_dir)
    return versions[-1] + 1 if versions else 1


def _version_dir(export_dir: pathlib.Path, version) -> tuple[int, pathlib.Path]:
    version = next_version(export_dir) if version is None else version
    if isinstance(version, str) and version.isdigit():
        version = int(version)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ExportError(f"version must be a non-negative integer (TensorFlow Serving "
                          f"loads directories named by a number), got {version!r}")
    return version, export_dir / str(version)


def _refuse_existing(final: pathlib.Path, version: int, export_dir: pathlib.Path):
    raise ExportError(
        f"{final} already exists: pass overwrite=True (--overwrite) to replace version "
        f"{version}, or leave the version unset to write version {next_version(export_dir)}")


# ---------------------------------------------------------------------- export
def build_archive(translator: Translator):
    """A `keras.export.ExportArchive` with the two signatures (not yet written)."""
    import keras

    archive = keras.export.ExportArchive()
    archive.track(translator.model)
    # The SentencePiece resource is made inside the traced functions (see
    # `Translator._tokenizer`): nothing to track, the model proto is an attribute of the
    # SentencepieceOp node in the serving function's body.
    # The first endpoint is also registered as serving_default; naming it so keeps one copy.
    archive.add_endpoint(SERVING_SIGNATURE, translator.translate)
    archive.add_endpoint(IDS_SIGNATURE, translator.translate_ids)
    return archive


def _export_info(translator: Translator, version: int) -> dict[str, Any]:
    import keras
    import tensorflow_text as tf_text

    from pipelines.vocab import model_digest

    return {
        "version": version,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "signatures": {
            SERVING_SIGNATURE: {"inputs": {"source": "string [batch]"},
                                "outputs": {"translation": "string [batch]",
                                            "score": "float32 [batch]"}},
            IDS_SIGNATURE: {"inputs": {"source_ids": "int32 [batch, length]"},
                            "outputs": {"ids": "int32 [batch, length]",
                                        "score": "float32 [batch]"}},
        },
        "decoding": translator.settings(),
        "model_config": translator.model.config.to_dict(),
        "spm_sha256": model_digest(translator.spm_proto),
        "spm_pieces": translator.vocab_size,
        "versions": {"tensorflow": tf.__version__, "tensorflow_text": tf_text.__version__,
                     "keras": keras.__version__},
    }


def write_translator(translator: Translator, export_dir, version=None, overwrite=False,
                     log=print) -> pathlib.Path:
    """Writes `translator` as `<export_dir>/<version>/` atomically; returns that path."""
    export_dir = pathlib.Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    version, final = _version_dir(export_dir, version)
    if final.exists() and not overwrite:
        _refuse_existing(final, version, export_dir)

    tmp = pathlib.Path(tempfile.mkdtemp(dir=export_dir, prefix=f".tmp-{version}-"))
    old = None
    try:
        # mkdtemp makes the directory private (0700); a server running as another user
        # must be able to read the version.
        os.chmod(tmp, 0o755)
        build_archive(translator).write_out(str(tmp), verbose=False)
        extra = tmp / EXTRA_DIR
        extra.mkdir(exist_ok=True)
        (extra / VOCAB_COPY_FILE).write_bytes(translator.spm_proto)
        (extra / EXPORT_INFO_FILE).write_text(
            json.dumps(_export_info(translator, version), indent=2, sort_keys=True) + "\n",
            encoding="utf-8")
        if final.exists():
            if not overwrite:  # appeared while we were writing
                _refuse_existing(final, version, export_dir)
            old = pathlib.Path(tempfile.mkdtemp(dir=export_dir, prefix=f".old-{version}-"))
            os.rename(final, old / final.name)
        try:
            os.rename(tmp, final)
        except OSError as e:
            if old is not None:  # put the previous version back
                os.rename(old / final.name, final)
            raise ExportError(f"could not move the export into {final}: {e}") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    log(f"export: wrote {final} (signatures {SERVING_SIGNATURE}, {IDS_SIGNATURE}; beam "
        f"{translator.beam_size}, alpha {translator.alpha}, extra length "
        f"{translator.extra_length}, max input length {translator.max_length})")
    return final


def export_saved_model(model, spm_proto, export_dir, version=None, beam_size=DEFAULT_BEAM_SIZE,
                       alpha=DEFAULT_ALPHA, extra_length=DEFAULT_EXTRA_LENGTH, max_length=None,
                       overwrite=False, jit_compile=False, task=None, log=print) -> pathlib.Path:
    """Writes a text-in, text-out SavedModel for TensorFlow Serving under `export_dir/<version>/`.

    Args:
        model: a built `keras_transformer.Transformer`.
        spm_proto: the serialized SentencePiece model (bytes), or a path to ``spm.model`` or
            to a model directory holding it. It is embedded in the graph, and a copy is
            written to ``<version>/assets.extra/spm.model`` for clients of `translate_ids`.
        export_dir: the model base path TensorFlow Serving watches.
        version: a non-negative integer; default: one more than the largest existing version
            (1 in an empty directory).
        beam_size, alpha, extra_length: decoding settings, fixed in the graph (paper: 4, 0.6,
            50).
        max_length: longest source in tokens, EOS included; longer inputs are truncated.
            Default and maximum: `model.config.max_length`.
        overwrite: replace an existing version; without it an existing version is an error.
        jit_compile: XLA-compile the beam search (see export/README.md for what it supports).
        task: the `pipelines.tasks.Task` the model was trained for, if its output needs its
            decoding constraint and in-graph post-processing (ptb_parsing: bracketed trees).
        log: progress sink.
    Returns:
        The path of the written version directory.
    Raises:
        ExportError: invalid settings or an existing version without `overwrite`.
    """
    export_dir = pathlib.Path(export_dir)
    if version is not None:  # fail before the slow part
        version, final = _version_dir(export_dir, version)
        if final.exists() and not overwrite:
            _refuse_existing(final, version, export_dir)
    hooks = {}
    if task is not None:
        hooks = {"constraint": task.decoding_constraint(_as_proto(spm_proto)),
                 "preprocess": task.serving_input, "postprocess": task.serving_output}
    translator = Translator(model, spm_proto, beam_size=beam_size, alpha=alpha,
                            extra_length=extra_length, max_length=max_length,
                            jit_compile=jit_compile, **hooks)
    return write_translator(translator, export_dir, version=version, overwrite=overwrite,
                            log=log)


def decoding_defaults(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Beam size, alpha and extra length from a model directory's settings.json.

    Looks at the top level first, then in a "decoding" or "task" section; missing values
    are the paper's (4, 0.6, 50).
    """
    found = {"beam_size": DEFAULT_BEAM_SIZE, "alpha": DEFAULT_ALPHA,
             "extra_length": DEFAULT_EXTRA_LENGTH}
    sections = [settings] + [settings[k] for k in ("decoding", "task")
                             if isinstance(settings.get(k), Mapping)]
    for key in found:
        for section in sections:
            if section.get(key) is not None:
                found[key] = section[key]
                break
    return found


def export_model_dir(model_dir, export_dir=None, version=None, beam_size=None, alpha=None,
                     extra_length=None, max_length=None, overwrite=False, jit_compile=False,
                     log=print) -> pathlib.Path:
    """Exports a model directory's final model (config.json, final.weights.h5, spm.model).

    Decoding settings left as None come from its settings.json (see `decoding_defaults`).
    `export_dir` defaults to ``<model_dir>/export``.
    """
    from pipelines import model_dir as md
    from pipelines.vocab import read_model_proto

    model_dir = pathlib.Path(model_dir)
    if not model_dir.is_dir():
        raise ExportError(f"{model_dir}: no such model directory (train one with "
                          f"pipelines/run.py, or check the path)")
    export_dir = pathlib.Path(model_dir / md.EXPORT_DIR if export_dir is None else export_dir)
    if version is not None:  # fail before loading the model
        version, final = _version_dir(export_dir, version)
        if final.exists() and not overwrite:
            _refuse_existing(final, version, export_dir)
    settings = md.load_settings(model_dir)
    defaults = decoding_defaults(settings)
    given = {"beam_size": beam_size, "alpha": alpha, "extra_length": extra_length}
    decoding = {k: defaults[k] if v is None else v for k, v in given.items()}
    proto = read_model_proto(model_dir)
    model = md.load_final_model(model_dir)
    return export_saved_model(model, proto, export_dir, version=version, max_length=max_length,
                              overwrite=overwrite, jit_compile=jit_compile,
                              task=_settings_task(settings), log=log, **decoding)


def _settings_task(settings: Mapping[str, Any]):
    """The task a model directory was trained for (settings.json), or None if unknown."""
    from pipelines.tasks import get_task

    name = settings.get("task")
    if not isinstance(name, str):
        return None
    return get_task(name, **settings.get("task_options", {}))
