"""Data for `model.fit` from the library alone: the SentencePiece vocabulary (`tokenizer`),
sentences <-> ids (`text`), tokenized pairs of text files and token-budget training batches
(`batches`, `buckets`). The pipeline (`pipelines/`) builds on these same functions.
"""
from keras_transformer.data.batches import text_pairs, training_batches
from keras_transformer.data.tokenizer import load_tokenizer, train_sentencepiece

__all__ = ["load_tokenizer", "text_pairs", "train_sentencepiece", "training_batches"]
