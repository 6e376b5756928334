"""SavedModel export: versions TensorFlow Serving watches, written atomically, with export.json.

The six functions of a `ServingFunctions` become signatures of the same names (``translate`` as
``serving_default``), saving each captured `tf.Variable` once (why not `keras.export`:
docs/serving.md). A version is written in a hidden directory, then renamed into place; an
overwritten one is moved aside first, and put back if the rename fails."""

import datetime
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any

import tensorflow as tf

from keras_transformer.decoding import alignment_layer
from keras_transformer.serving.functions import (BEAM_SEARCH, MAX_BEAM_SIZE, ExportError,
                                                 ServingFunctions)

SERVING_SIGNATURE = "serving_default"
"""The signature of `ServingFunctions.translate`: sentences in, translations and scores out."""
IDS_SIGNATURE = "translate_ids"
"""The signature of `ServingFunctions.translate_ids`: source ids in, ids and scores out."""
OPTIONS_SIGNATURE = "translate_with_options"
"""Sentences with per-request beam, alpha, n-best, extra length and target prefix."""
IDS_OPTIONS_SIGNATURE = "translate_ids_with_options"
"""`OPTIONS_SIGNATURE` on ids."""
ALL_OPTIONS_SIGNATURE = "translate_with_all_options"
"""`OPTIONS_SIGNATURE` with sampling and required target phrases."""
IDS_ALL_OPTIONS_SIGNATURE = "translate_ids_with_all_options"
"""`ALL_OPTIONS_SIGNATURE` on ids."""
SIGNATURES = (SERVING_SIGNATURE, IDS_SIGNATURE, OPTIONS_SIGNATURE, IDS_OPTIONS_SIGNATURE,
              ALL_OPTIONS_SIGNATURE, IDS_ALL_OPTIONS_SIGNATURE)
"""Every signature, named as the `ServingFunctions` function it serves but for the first."""
EXTRA_DIR = "assets.extra"  # files beside the SavedModel that TensorFlow never loads
EXPORT_INFO_FILE = "export.json"
VOCAB_COPY_FILE = "spm.model"


def existing_versions(export_dir) -> list[int]:
    """Version numbers present under `export_dir` (subdirectories named by an integer)."""
    path = pathlib.Path(export_dir)
    if not path.is_dir():
        return []
    return sorted(int(p.name) for p in path.iterdir() if p.is_dir() and p.name.isdigit())


def next_version(export_dir) -> int:
    """One more than the largest existing version; 1 for an empty or missing directory."""
    return max(existing_versions(export_dir), default=0) + 1


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
        f"{final} already exists: pass overwrite=True (--overwrite_export) to replace version "
        f"{version}, or leave the version unset to write version {next_version(export_dir)}")


def saveable(functions: ServingFunctions):
    """(the object to save, {signature name: concrete function}): the object holds each captured
    variable once; the SentencePiece proto is an attribute of the graph's SentencepieceOp nodes."""
    signatures = {name: getattr(functions, "translate" if name == SERVING_SIGNATURE else name)
                  .get_concrete_function() for name in SIGNATURES}
    captured = {}
    for function in signatures.values():
        for variable in function.variables:
            captured.setdefault(id(variable), variable)
    root = tf.Module()
    root.captured_variables = list(captured.values())
    return root, signatures


def _export_info(functions: ServingFunctions, version: int) -> dict[str, Any]:
    options = {"beam_size": f"int32 scalar in [1, {MAX_BEAM_SIZE}]",
               "alpha": "float32 scalar >= 0",
               "num_results": "int32 scalar in [1, beam_size]",
               "max_extra_length": "int32 scalar >= 0"}
    sampling = {"num_results": f"int32 scalar in [1, beam_size] (sampling: [1, {MAX_BEAM_SIZE}])",
                "sampling_topk": f"int32 scalar >= 0 (0: no cut; beam search: {BEAM_SEARCH[0]})",
                "sampling_topp": f"float32 scalar in (0, 1] (1: no cut; beam search: "
                                 f"{BEAM_SEARCH[1]})",
                "sampling_temperature": "float32 scalar >= 0 (0: beam search, > 0: sample)",
                "seed": "int64 scalar (sampling only: the same seed, the same samples)"}
    n_best = {"scores": "float32 [batch, num_results], best first",
              "token_log_probs": "float32 [batch, num_results, length] (0 = padding)",
              "alignment": "int32 [batch, num_results, length]: source position (-1 = padding)"}
    text_options = {
        "inputs": {"source": "string [batch]", **options,
                   "target_prefix": "string [batch] (empty: none)"},
        "outputs": {"translations": "string [batch, num_results]",
                    "tokens": "string [batch, num_results, length] ('' = padding)", **n_best}}
    ids_options = {
        "inputs": {"source_ids": "int32 [batch, length]", **options,
                   "target_prefix_ids": "int32 [batch, length] 0-padded (0: none)"},
        "outputs": {"ids": "int32 [batch, num_results, length] 0-padded", **n_best}}
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
            OPTIONS_SIGNATURE: text_options,
            IDS_OPTIONS_SIGNATURE: ids_options,
            ALL_OPTIONS_SIGNATURE: {
                "inputs": {**text_options["inputs"], **sampling,
                           "terms": "string [batch, phrases]: required target phrases "
                                    "('' = none; [[]] = none at all)"},
                "outputs": text_options["outputs"]},
            IDS_ALL_OPTIONS_SIGNATURE: {
                "inputs": {**ids_options["inputs"], **sampling,
                           "terms_ids": "int32 [batch, phrases, length] 0-padded (0: none)"},
                "outputs": ids_options["outputs"]},
        },
        "options_limits": {"max_beam_size": MAX_BEAM_SIZE,
                           "alignment_layer": alignment_layer(
                               functions.model.config.num_layers)},
        "decoding": functions.settings(),
        "model_config": functions.model.config.to_dict(),
        "spm_sha256": hashlib.sha256(functions.spm_proto).hexdigest(),
        "spm_pieces": functions.vocab_size,
        "versions": library_versions(),
    }


def library_versions() -> dict[str, str]:
    """The versions an export is made with: the libraries that write its graph and ours."""
    import keras
    import tensorflow_text as tf_text

    import keras_transformer

    return {"tensorflow": tf.__version__, "tensorflow_text": tf_text.__version__,
            "keras": keras.__version__, "keras_transformer": keras_transformer.__version__}


def write_saved_model(functions: ServingFunctions, export_dir, version=None, overwrite=False,
                      log=print) -> pathlib.Path:
    """Writes `functions` as `<export_dir>/<version>/` atomically; returns that path."""
    export_dir = pathlib.Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    version, final = _version_dir(export_dir, version)
    if final.exists() and not overwrite:
        _refuse_existing(final, version, export_dir)

    tmp = pathlib.Path(tempfile.mkdtemp(dir=export_dir, prefix=f".tmp-{version}-"))
    old = None
    try:
        # mkdtemp's 0700 would hide the version from a server running as another user.
        os.chmod(tmp, 0o755)
        root, signatures = saveable(functions)
        tf.saved_model.save(root, str(tmp), signatures=signatures)
        extra = tmp / EXTRA_DIR
        extra.mkdir(exist_ok=True)
        (extra / VOCAB_COPY_FILE).write_bytes(functions.spm_proto)
        (extra / EXPORT_INFO_FILE).write_text(
            json.dumps(_export_info(functions, version), indent=2, sort_keys=True) + "\n",
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
    d = functions.settings()
    log(f"export: wrote {final} (signatures {', '.join(SIGNATURES)}; default beam "
        f"{d['beam_size']}, alpha {d['alpha']}, extra length {d['extra_length']}, max input "
        f"length {d['max_input_length']}, {d['precision']}"
        f"{'' if functions.weights is None else ', weights ' + functions.weights.mode})")
    return final
