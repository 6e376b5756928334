"""A trained model as a CTranslate2 model (a C++ inference engine, fast on CPU: docs/results.md).

`write_ctranslate2` writes a float32 `Transformer` and its SentencePiece model as <dir>/model.bin,
config.json, shared_vocabulary.json (CTranslate2's), spm.model and keras_transformer.json (the
settings of `export.ct2_decoding`). The Keras side imports no ctranslate2 and the CTranslate2
side no Keras: benchmarks/ct2_convert.py runs them in two environments.

Layout: Dense kernels [in, out] become [out, in]; self-attention's fused Q | K | V is
`linear_0`, cross-attention's `query`, `kv`, `output` `linear_0`..`linear_2`. Our sinusoidal
positions interleave sin and cos from position 0 (CTranslate2's concatenate them from 1), so our
layer's table is saved. Embeddings are scaled by sqrt(d_model), the shared one written under all
three names.
"""

import json
import os
import pathlib
import shutil
import tempfile
from typing import Any

import numpy as np

from export.ct2_decoding import SETTINGS_FILE, VOCAB_FILE, ConversionError, check_stop_rule

SPECIAL_PIECES = {0: "<pad>", 1: "<unk>", 2: "<s>", 3: "</s>"}  # what CT2's config names


def _numpy(variable) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(variable), np.float32)


def _linear(arrays, name, dense):
    """A Keras Dense layer as CTranslate2 `name/weight` [out, in] and `name/bias`."""
    arrays[f"{name}/weight"] = _numpy(dense.kernel).T
    if dense.use_bias:
        arrays[f"{name}/bias"] = _numpy(dense.bias)


def _norm(arrays, name, norm):
    arrays[f"{name}/gamma"] = _numpy(norm.gamma)
    arrays[f"{name}/beta"] = _numpy(norm.beta)


def model_arrays(model) -> dict[str, np.ndarray]:
    """{CTranslate2 variable path: float32 array} for a built float32 `Transformer`."""
    arrays = {"encoder/embeddings_0/weight": _numpy(model.source_embedding.embeddings),
              "decoder/embeddings/weight": _numpy(model.target_embedding.embeddings)}
    if model.output_projection is None:
        arrays["decoder/projection/weight"] = arrays["decoder/embeddings/weight"]
    else:
        _linear(arrays, "decoder/projection", model.output_projection)
    for stack, positions in (("encoder", model.source_positions),
                             ("decoder", model.target_positions)):
        zeros = np.zeros([1, model.config.max_length, model.config.d_model], np.float32)
        arrays[f"{stack}/position_encodings/encodings"] = _numpy(positions(zeros)[0])
        if getattr(model, stack).final_norm is not None:
            _norm(arrays, f"{stack}/layer_norm", getattr(model, stack).final_norm)

    def self_attention_and_ffn(prefix, block, attention_norm):
        """The two sub-layers an encoder and a decoder layer share, in CT2's names."""
        _linear(arrays, f"{prefix}/self_attention/linear_0", block.self_attention.qkv_projection)
        _linear(arrays, f"{prefix}/self_attention/linear_1", block.self_attention.output_projection)
        _norm(arrays, f"{prefix}/self_attention/layer_norm", attention_norm)
        _linear(arrays, f"{prefix}/ffn/linear_0", block.feed_forward.inner)
        _linear(arrays, f"{prefix}/ffn/linear_1", block.feed_forward.outer)
        _norm(arrays, f"{prefix}/ffn/layer_norm", block.feed_forward_norm)

    for i, block in enumerate(model.encoder.blocks):
        self_attention_and_ffn(f"encoder/layer_{i}", block, block.attention_norm)
    for i, block in enumerate(model.decoder.blocks):
        prefix = f"decoder/layer_{i}"
        self_attention_and_ffn(prefix, block, block.self_attention_norm)
        _linear(arrays, f"{prefix}/attention/linear_0", block.cross_attention.query_projection)
        _linear(arrays, f"{prefix}/attention/linear_1", block.cross_attention.kv_projection)
        _linear(arrays, f"{prefix}/attention/linear_2", block.cross_attention.output_projection)
        _norm(arrays, f"{prefix}/attention/layer_norm", block.cross_attention_norm)
    return arrays


def decoding_settings(search, max_input_length: int) -> dict[str, Any]:
    """SETTINGS_FILE's "decoding" (`translate`'s defaults), checked by `check_stop_rule`."""
    settings = {"beam_size": search.beam_size, "alpha": search.alpha,
                "extra_length": search.extra_length, "stop_rule": search.stop_rule,
                "max_input_length": max_input_length}
    check_stop_rule(settings)
    return settings


def model_settings(config) -> dict[str, Any]:
    """The shape settings `build_spec` needs, from a `TransformerConfig`."""
    from keras_transformer.layers.stack import LAYER_NORM_EPSILON

    if config.d_k != config.d_v:
        raise ConversionError(f"CTranslate2 needs d_k == d_v (the model has {config.d_k} and "
                              f"{config.d_v})")
    return {"num_layers": config.num_layers, "num_heads": config.num_heads, "head_dim": config.d_k,
            "d_model": config.d_model, "pre_norm": config.norm == "pre",
            "max_length": config.max_length, "layer_norm_epsilon": LAYER_NORM_EPSILON}


def vocabulary(spm_proto: bytes, vocab_size: int) -> list[str]:
    """The pieces in id order, padded to `vocab_size`; special ids must be CTranslate2's tokens."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_proto=spm_proto)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    for index, piece in SPECIAL_PIECES.items():
        if pieces[index] != piece:
            raise ConversionError(f"SentencePiece piece {index} is {pieces[index]!r}; "
                                  f"CTranslate2's config expects {piece!r}")
    return pieces + [f"<unused_{i}>" for i in range(len(pieces), vocab_size)]


def _set(spec, path: str, value: np.ndarray) -> None:
    """Sets `spec`'s variable at CTranslate2 path "a/layer_0/b/weight" ("x_3" indexes list x)."""
    *scopes, name = path.split("/")
    for scope in scopes:
        if hasattr(spec, scope):
            spec = getattr(spec, scope)
        else:
            base, index = scope.rsplit("_", 1)
            spec = getattr(spec, base)[int(index)]
    if not hasattr(spec, name):
        raise ConversionError(f"CTranslate2's spec has no variable {path}")
    setattr(spec, name, value)


def build_spec(arrays: dict[str, np.ndarray], settings: dict[str, Any], pieces: list[str]):
    """A validated float32 `TransformerSpec` (CTranslate2 quantizes at load time if asked)."""
    from ctranslate2.specs import common_spec, transformer_spec

    head_dim = settings["head_dim"]
    if head_dim * settings["num_heads"] == settings["d_model"]:
        head_dim = None  # CTranslate2's default, d_model / heads
    shape = (settings["num_layers"], settings["num_heads"])
    common = dict(pre_norm=settings["pre_norm"], activation=common_spec.Activation.RELU,
                  head_dim=head_dim)
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(*shape, **common),
        transformer_spec.TransformerDecoderSpec(*shape, **common))
    for path, value in arrays.items():
        _set(spec, path, value)
    spec.encoder.scale_embeddings = True
    spec.decoder.scale_embeddings = True
    spec.config.layer_norm_epsilon = settings["layer_norm_epsilon"]
    spec.config.add_source_eos = True
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.validate()
    spec.optimize(quantization="float32")
    return spec


def save(spec, spm_proto: bytes, settings: dict[str, Any], output_dir,
         overwrite: bool = False) -> pathlib.Path:
    """Writes `spec`, the SentencePiece model and `settings` into a temporary directory, then
    renames it to `output_dir` (replaced only when `overwrite`): no reader sees half a model."""
    final = pathlib.Path(output_dir)
    if final.exists() and not overwrite:
        raise FileExistsError(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    old = final.parent / f"{tmp.name}.old"
    try:
        os.chmod(tmp, 0o755)
        spec.save(str(tmp))
        (tmp / VOCAB_FILE).write_bytes(spm_proto)
        (tmp / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
        if final.exists():
            os.rename(final, old)
        try:
            os.rename(tmp, final)
        except OSError:
            if old.exists():  # put the previous model back
                os.rename(old, final)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return final


def write_ctranslate2(model, spm_proto: bytes, output_dir, decoding: dict[str, Any],
                      overwrite: bool = False) -> pathlib.Path:
    """Converts a built float32 `Transformer` and its SentencePiece model's bytes into
    `output_dir` (replaced only when `overwrite`), with `decoding_settings`; ConversionError for a
    vocabulary or shape CTranslate2 cannot take."""
    import ctranslate2

    settings = model_settings(model.config)
    spec = build_spec(model_arrays(model), settings, vocabulary(spm_proto, model.config.vocab_size))
    info = {"decoding": dict(decoding), "model": settings, "ctranslate2": ctranslate2.__version__}
    return save(spec, spm_proto, info, output_dir, overwrite)
