"""The one decode loop: beam search over id batches of a split, back to text in corpus order.

The evaluate stage, the dev metric during training and the benchmarks decode through here;
sentences become ids and ids become text by `export.text`, the rule the exported
SavedModel uses too. Under TensorFlow the search is `keras_transformer.search`'s (the
exported one); under another Keras backend (training with `--backend jax`) the dev metric
decodes with `keras_transformer.beam_ops`, which gives the same ids.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib

import keras
import numpy as np
import tensorflow as tf

from export import text
from keras_transformer.decoding import DecodingSettings
from pipelines import dataset as ds_lib
from pipelines.errors import ConfigError
from pipelines.files import atomic_files
from pipelines.model_dir import EVAL_DIR


def make_translator(model, settings: DecodingSettings, jit_compile=False, constraint=None):
    """A compiled `source_ids [batch, len] -> (ids [batch, len'], scores [batch])` function.

    `constraint`: the task's `DecodingConstraint` (`Task.decoding_constraint`), if any; only
    TensorFlow's search takes one. `jit_compile`: TensorFlow's choice; other backends always
    compile (`beam_ops.make_translate_function`).
    """
    if keras.backend.backend() != "tensorflow":
        if constraint is not None:
            raise ConfigError(f"--backend {keras.backend.backend()}: this task's constrained "
                              f"search runs under TensorFlow only; train with --backend "
                              f"tensorflow, or drop --dev_metric_every")
        from keras_transformer import beam_ops

        search = beam_ops.make_translate_function(
            model, beam_size=settings.beam_size, alpha=settings.alpha,
            extra_length=settings.extra_length)

        def translate_elsewhere(source_ids):
            ids, scores = search(np.asarray(source_ids))
            return np.asarray(ids)[:, 0], np.asarray(scores)[:, 0]

        return translate_elsewhere
    from keras_transformer.search import translate_ids

    @tf.function(jit_compile=jit_compile, reduce_retracing=True)
    def translate(source_ids):
        ids, scores = translate_ids(model, source_ids, beam_size=settings.beam_size,
                                    alpha=settings.alpha, extra_length=settings.extra_length,
                                    constraint=constraint)
        return ids[:, 0], scores[:, 0]

    return translate


def translate_batches(translate, batches, tokenizer, verbose=1):
    """Decodes `EvalBatch`es; returns (texts, scores) in corpus order, with a progress bar
    on stderr."""
    texts, scores = [], []
    progress = keras.utils.Progbar(sum(len(b.indices) for b in batches), verbose=verbose,
                                   unit_name="sentence")
    for batch in batches:
        ids, batch_scores = translate(tf.constant(batch.source_ids))
        texts.append([t.decode("utf-8")
                      for t in text.ids_to_sentences(tokenizer, ids).numpy()])
        scores.append([float(s) for s in np.asarray(batch_scores)])
        progress.add(len(batch.indices))
    return ds_lib.restore_order(batches, texts), ds_lib.restore_order(batches, scores)


def first_sentences(data, count):
    """The `EvalInput` restricted to its first `count` sentences (all of them for 0/None)."""
    if not count or count >= len(data.sources):
        return data
    batches = []
    for batch in data.batches:
        keep = batch.indices < count
        if keep.any():
            batches.append(ds_lib.EvalBatch(batch.source_ids[keep], batch.indices[keep]))
    return dataclasses.replace(data, sources=data.sources[:count],
                               references=data.references[:count], batches=batches)


def write_results(model_dir, split, hypotheses, scores: dict, extra: dict | None = None):
    """eval/<split>.hyp (one translation a line) and eval/<split>.json (scores, settings),
    written as one unit: the JSON is renamed in last and so always describes the .hyp."""
    out = pathlib.Path(model_dir) / EVAL_DIR
    with atomic_files(out / f"{split}.hyp", out / f"{split}.json") as (hyp, info):
        hyp.write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
        info.write_text(json.dumps({**scores, **(extra or {})}, indent=2, sort_keys=True) + "\n",
                        encoding="utf-8")
    return out
