"""The shared source+target SentencePiece BPE vocabulary (Section 5.1): train it, load it in the
graph. No normalization or whitespace squeezing, so ``detokenize(tokenize(x)) == x`` but for
leading whitespace, which tensorflow-text's detokenizer drops (trim lines); byte fallback, so
``<unk>`` is practically never made."""

import io
import os
import pathlib
from typing import Iterable, Sequence

from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def train_sentencepiece(sentences: Iterable[str], vocab_size: int, *,
                        num_threads: int | None = None,
                        user_defined_symbols: Sequence[str] = ()) -> bytes:
    """A serialized BPE SentencePiece model of ``sentences``; ``user_defined_symbols`` become
    single pieces (write them with the leading ``▁``, so that a separate symbol is one piece)."""
    import sentencepiece as spm

    sentences = list(sentences)
    if not sentences:
        raise ValueError("cannot train a vocabulary on an empty corpus: no non-empty lines found")
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=writer, model_type="bpe",
        vocab_size=vocab_size, character_coverage=1.0, normalization_rule_name="identity",
        remove_extra_whitespaces=False, byte_fallback=True,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        input_sentence_size=0, shuffle_input_sentence=False,  # the caller already sampled
        num_threads=num_threads or max(1, os.cpu_count() or 1), minloglevel=1,
        user_defined_symbols=list(user_defined_symbols))
    return writer.getvalue()


def load_tokenizer(path_or_proto: os.PathLike | str | bytes):
    """An in-graph int32 ``tensorflow_text.SentencepieceTokenizer`` (no BOS/EOS) of a model or
    its file."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    proto = (path_or_proto if isinstance(path_or_proto, bytes)
             else pathlib.Path(path_or_proto).read_bytes())
    return tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)
