"""Export: a text-in, text-out SavedModel that stock TensorFlow Serving loads.

`Translator` (translator.py) holds the serving functions, around text.py (sentences <-> ids,
shared with `pipelines`); `export_saved_model(model, spm_proto, export_dir, settings, ...)`
(saved_model.py) writes ``<export_dir>/<version>/`` (``quantize="int8"``: int8 matrices,
`Int8Weights` in quantize.py);
`check_ops` (op_check.py) verifies that every op in the result is registered by core
TensorFlow or tensorflow-text. This package depends on `keras_transformer` only; reading a
model directory is `pipelines.stages.run_export`, which both CLIs call. Serving
instructions: export/README.md.
"""
from export.op_check import FORBIDDEN_OPS, OpReport, check_ops, graph_op_types
from export.quantize import QUANTIZE_MODES, Int8Weights
from export.saved_model import (IDS_OPTIONS_SIGNATURE, IDS_SIGNATURE, OPTIONS_SIGNATURE,
                                SERVING_SIGNATURE, existing_versions, export_saved_model,
                                next_version, write_translator)
from export.translator import MAX_BEAM_SIZE, ExportError, Translator

__all__ = ["FORBIDDEN_OPS", "OpReport", "check_ops", "graph_op_types", "IDS_SIGNATURE",
           "SERVING_SIGNATURE", "OPTIONS_SIGNATURE", "IDS_OPTIONS_SIGNATURE", "MAX_BEAM_SIZE",
           "ExportError", "Translator", "existing_versions", "QUANTIZE_MODES", "Int8Weights",
           "export_saved_model", "next_version", "write_translator"]
