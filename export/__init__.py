"""Export fronts over `keras_transformer.serving`: `op_check`, `ctranslate2`, `ct2_decoding`."""
