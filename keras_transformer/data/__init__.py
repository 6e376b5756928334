"""Data for `model.fit` from the library alone: the SentencePiece vocabulary (`tokenizer`),
sentences <-> ids (`text`), tokenized pairs of text files and token-budget training batches
(`batches`, `buckets`). The pipeline (`pipelines/`) builds on these same functions. Names load
on first use (`keras_transformer.lazy`).
"""
from keras_transformer.lazy import lazy_names, load_when_documented

__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "keras_transformer.data.batches": ["text_pairs", "training_batches"],
    "keras_transformer.data.tokenizer": ["load_tokenizer", "train_sentencepiece"],
})
load_when_documented(__name__)
