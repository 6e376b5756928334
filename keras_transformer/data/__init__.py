"""Data for `model.fit` from the library alone: the vocabulary (`tokenizer`), sentences <-> ids
(`text`), training batches (`batches`, `buckets`). Names load on first use (`lazy`)."""
from keras_transformer.lazy import lazy_names, load_when_documented

__getattr__, __dir__, __all__ = lazy_names(__name__, {
    "keras_transformer.data.batches": ["text_pairs", "training_batches"],
    "keras_transformer.data.tokenizer": ["load_tokenizer", "train_sentencepiece"],
})
load_when_documented(__name__)
