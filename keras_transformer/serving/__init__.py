"""Serving, TensorFlow only: `Translator` (text in, text out; `export` writes the SavedModel that
TensorFlow Serving loads) over `ServingFunctions`, the six in-graph functions it serves."""
from keras_transformer.serving.functions import ExportError, ServingFunctions
from keras_transformer.serving.quantize import Int8Weights
from keras_transformer.serving.saved_model import (
    ALL_OPTIONS_SIGNATURE, IDS_ALL_OPTIONS_SIGNATURE, IDS_OPTIONS_SIGNATURE, IDS_SIGNATURE,
    OPTIONS_SIGNATURE, SERVING_SIGNATURE, existing_versions, library_versions, next_version,
    write_saved_model)
from keras_transformer.serving.translator import Translator

__all__ = ["ALL_OPTIONS_SIGNATURE", "ExportError", "IDS_ALL_OPTIONS_SIGNATURE",
           "IDS_OPTIONS_SIGNATURE", "IDS_SIGNATURE", "Int8Weights", "OPTIONS_SIGNATURE",
           "SERVING_SIGNATURE", "ServingFunctions", "Translator", "existing_versions",
           "library_versions", "next_version", "write_saved_model"]
