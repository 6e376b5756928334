"""Translate a split with beam search and score it: sacreBLEU, and BLEU as the paper computed it.

sacreBLEU (detokenized, cased, 13a) is the reproducible number; its signature is printed with
every score. The paper's En-De numbers were "tokenized BLEU with compound splitting"
(tensor2tensor's get_ende_bleu.sh: Moses tokenizer, `-` in compounds split into
` ##AT##-##AT## `, multi-bleu.perl); `tokenized_bleu` computes that with sacreBLEU's 13a
tokenizer standing in for Moses' tokenizer.perl, scored on the pre-tokenized text.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import keras
import numpy as np
import sacrebleu
import tensorflow as tf
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from keras_transformer.constants import PAD_ID
from keras_transformer.search import translate_ids
from pipelines import dataset as ds_lib
from pipelines.model_dir import EVAL_DIR, write_text_atomic
from pipelines.vocab import BOS_ID, EOS_ID

_COMPOUND = re.compile(r"(\S)-(\S)")


def make_translator(model, beam_size=4, alpha=0.6, extra_length=50, jit_compile=False,
                    constraint=None):
    """A compiled `source_ids [batch, len] -> (ids [batch, len'], scores [batch])` function.

    `constraint`: the task's `DecodingConstraint` (`Task.decoding_constraint`), if any.
    """

    @tf.function(jit_compile=jit_compile, reduce_retracing=True)
    def translate(source_ids):
        ids, scores = translate_ids(model, source_ids, beam_size=beam_size, alpha=alpha,
                                    extra_length=extra_length, bos_id=BOS_ID, eos_id=EOS_ID,
                                    constraint=constraint)
        return ids[:, 0], scores[:, 0]

    return translate


def ids_to_pieces(ids) -> list[list[int]]:
    """Rows of generated ids -> id lists without the end token and padding."""
    rows = []
    for row in np.asarray(ids):
        row = row[row != PAD_ID]
        ends = np.flatnonzero(row == EOS_ID)
        rows.append([int(x) for x in (row[:ends[0]] if ends.size else row)])
    return rows


def translate_batches(translate, batches, tokenizer, verbose=1):
    """Decodes `EvalBatch`es; returns (texts, scores) in corpus order, with a progress bar."""
    texts, scores = [], []
    progress = keras.utils.Progbar(sum(len(b.indices) for b in batches), verbose=verbose,
                                   unit_name="sentence")
    for batch in batches:
        ids, batch_scores = translate(tf.constant(batch.source_ids))
        pieces = tf.ragged.constant(ids_to_pieces(ids.numpy()), dtype=tf.int32, ragged_rank=1)
        texts.append([t.decode("utf-8") for t in tokenizer.detokenize(pieces).numpy()])
        scores.append([float(s) for s in batch_scores.numpy()])
        progress.add(len(batch.indices))
    return ds_lib.restore_order(batches, texts), ds_lib.restore_order(batches, scores)


def first_sentences(data, count):
    """The `EvalInput` restricted to its first `count` sentences (quick evaluations)."""
    batches = []
    for batch in data.batches:
        keep = batch.indices < count
        if keep.any():
            batches.append(ds_lib.EvalBatch(batch.source_ids[keep], batch.indices[keep]))
    return dataclasses.replace(data, sources=data.sources[:count],
                               references=data.references[:count], batches=batches)


def sacre_bleu(hypotheses, references, lowercase=False):
    """sacreBLEU (default 13a tokenization) -> (score, signature string)."""
    metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
    result = metric.corpus_score(hypotheses, [references])
    return result.score, str(metric.get_signature())


def tokenized_bleu(hypotheses, references, split_compounds=True, lowercase=False):
    """BLEU on tokenized text, as multi-bleu.perl after tensor2tensor's get_ende_bleu.sh."""
    tokenize = Tokenizer13a()

    def prepare(line):
        line = tokenize(line.lower() if lowercase else line)
        return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line) if split_compounds else line

    metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    return metric.corpus_score([prepare(h) for h in hypotheses],
                               [[prepare(r) for r in references]]).score


def score_translations(hypotheses, references, target_lang="de"):
    """Every BLEU variant we report, with the sacreBLEU signature."""
    score, signature = sacre_bleu(hypotheses, references)
    lower, lower_signature = sacre_bleu(hypotheses, references, lowercase=True)
    return {
        "sacrebleu": score,
        "sacrebleu_signature": signature,
        "sacrebleu_lowercase": lower,
        "sacrebleu_lowercase_signature": lower_signature,
        "tokenized_bleu": tokenized_bleu(hypotheses, references,
                                         split_compounds=target_lang == "de"),
        "tokenized_bleu_lowercase": tokenized_bleu(hypotheses, references,
                                                   split_compounds=target_lang == "de",
                                                   lowercase=True),
    }


def write_results(model_dir, split, hypotheses, scores: dict, extra: dict | None = None):
    """eval/<split>.hyp (one translation a line) and eval/<split>.json (scores, settings)."""
    out = pathlib.Path(model_dir) / EVAL_DIR
    write_text_atomic(out / f"{split}.hyp", "".join(h + "\n" for h in hypotheses))
    write_text_atomic(out / f"{split}.json",
                      json.dumps({**scores, **(extra or {})}, indent=2, sort_keys=True) + "\n")
    return out
