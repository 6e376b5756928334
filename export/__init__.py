"""Export: a text-in, text-out SavedModel that stock TensorFlow Serving loads.

`export_saved_model(model, spm_proto, export_dir, ...)` writes ``<export_dir>/<version>/``;
`export_model_dir(model_dir, ...)` does it for a model directory (what ``export/run.py`` and
``pipelines/run.py --mode export`` call); `check_ops` verifies that every op in the result is
registered by core TensorFlow or tensorflow-text. Serving instructions: export/README.md.
"""
from export.op_check import FORBIDDEN_OPS, OpReport, check_ops, graph_op_types
from export.saved_model import (IDS_SIGNATURE, SERVING_SIGNATURE, ExportError, Translator,
                                decoding_defaults, existing_versions, export_model_dir,
                                export_saved_model, next_version, write_translator)

__all__ = ["FORBIDDEN_OPS", "OpReport", "check_ops", "graph_op_types", "IDS_SIGNATURE",
           "SERVING_SIGNATURE", "ExportError", "Translator", "decoding_defaults",
           "existing_versions", "export_model_dir", "export_saved_model", "next_version",
           "write_translator"]
