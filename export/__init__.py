"""Export: a text-in, text-out SavedModel that stock TensorFlow Serving loads.

`Translator` (translator.py) holds the serving functions; `export_saved_model` (saved_model.py)
writes ``<export_dir>/<version>/``, with int8 matrices under ``quantize="int8"`` (quantize.py);
`check_ops` (op_check.py) checks that core TensorFlow or tensorflow-text registers every op;
`write_ctranslate2` (ctranslate2.py) converts a model for CTranslate2, and ct2_decoding.py decodes
with it as our search does. Imports `keras_transformer` only; serving: export/README.md.
Names load on first use (PEP 562): importing `export.quantize` (read by the settings resolver,
also under another Keras backend) must not load the TensorFlow-only search behind `Translator`.
"""
import importlib

_WHERE = {
    "export.op_check": ["FORBIDDEN_OPS", "OpReport", "check_ops", "graph_op_types"],
    "export.quantize": ["QUANTIZE_MODES", "Int8Weights"],
    "export.saved_model": ["ALL_OPTIONS_SIGNATURE", "IDS_ALL_OPTIONS_SIGNATURE",
                           "IDS_OPTIONS_SIGNATURE", "IDS_SIGNATURE", "OPTIONS_SIGNATURE",
                           "SERVING_SIGNATURE", "existing_versions", "export_saved_model",
                           "next_version", "write_translator"],
    "export.translator": ["MAX_BEAM_SIZE", "ExportError", "Translator"],
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'export' has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
