"""The one decode loop: beam search over id batches of a split, back to text in corpus order,
with the exported SavedModel's rules (`keras_transformer.data.text`, `.decoding`)."""

import dataclasses
import json
import pathlib
import types

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.atomic_files import atomic_files
from keras_transformer.data import text
from keras_transformer.decoding import BeamSearch, make_translate_function
from pipelines.data import dataset as ds_lib
from pipelines.data.progress import PLAIN_INTERVAL, Progress
from pipelines.errors import ConfigError
from pipelines.model_dir.layout import EVAL_DIR


def make_translator(model, search: BeamSearch, spm_proto: bytes | None = None,
                    jit_compile=False, constraint=None):
    """A `source_ids -> (ids, scores)` function (1-best): under TensorFlow with the vocabulary the
    served `Translator.translate_ids` itself, so evaluation decodes as the SavedModel does; else
    the library's compiled search. A `constraint` needs TensorFlow, else `ConfigError`."""
    if keras.backend.backend() == "tensorflow" and spm_proto is not None:
        from keras_transformer.serving import Translator

        return Translator(model, spm_proto, search, jit_compile=jit_compile,
                          constraint=constraint).translate_ids
    if constraint is not None and keras.backend.backend() != "tensorflow":
        raise ConfigError(f"--backend {keras.backend.backend()}: this task's constrained "
                          f"search runs under TensorFlow only; train with --backend "
                          f"tensorflow, or drop --dev_metric_every")
    search = make_translate_function(model, search, jit_compile=jit_compile, constraint=constraint)
    if keras.backend.backend() == "tensorflow":
        return lambda source_ids: tuple(value[:, 0] for value in search(source_ids)[:2])
    return lambda source_ids: tuple(np.asarray(value)[:, 0]
                                    for value in search(np.asarray(source_ids))[:2])


def translate_batches(translate, batches, tokenizer, verbose=1, log=print):
    """Decodes `EvalBatch`es; returns (texts, scores) in corpus order, with a progress bar
    (verbose 1), or (verbose 2: no terminal) a line with the ETA at least once a minute."""
    texts, scores = [], []
    total = sum(len(b.indices) for b in batches)
    if verbose == 2:
        lines = Progress("decode", total, "sentences", log, interval=PLAIN_INTERVAL)
        progress = types.SimpleNamespace(add=lambda n: lines.update(lines.done + n))
    else:
        progress = keras.utils.Progbar(total, verbose=verbose, unit_name="sentence")
    for batch in batches:
        ids, batch_scores = text.empty_where_blank(text.blank_rows(batch.source_ids),
                                                   *translate(tf.constant(batch.source_ids)))
        texts.append([t.decode("utf-8") for t in text.ids_to_sentences(tokenizer, ids).numpy()])
        scores.append([float(s) for s in np.asarray(batch_scores)])
        progress.add(len(batch.indices))
    return ds_lib.restore_order(batches, texts), ds_lib.restore_order(batches, scores)


def first_sentences(data, count):
    """The `EvalInput` restricted to its first `count` sentences (all of them for 0/None)."""
    if not count or count >= len(data.sources):
        return data
    kept = [(batch, batch.indices < count) for batch in data.batches]
    batches = [ds_lib.EvalBatch(batch.source_ids[keep], batch.indices[keep])
               for batch, keep in kept if keep.any()]
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
