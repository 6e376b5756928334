"""Export fronts over `keras_transformer.serving` (which writes the SavedModel): `check_ops`
(op_check.py) checks that core TensorFlow or tensorflow-text registers every op of an export;
`write_ctranslate2` (ctranslate2.py) converts a model for CTranslate2, and ct2_decoding.py decodes
with it as our search does. Imports `keras_transformer` only; serving: export/README.md.
"""
