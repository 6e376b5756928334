"""Prepare a task for training: text files, cleaning, vocabulary, token caches, statistics. Every
step is idempotent and reuses earlier work; ``work_dir`` holds spm.model, ``clean/<task>/<split>/``
(``text_io``), ``cache/<key>/`` (``token_cache``) and the task's own ``data/`` and ``downloads/``.
"""

import dataclasses
import os
import pathlib
from typing import Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.constants import PAD_ID
from keras_transformer.data import batches as batching
from keras_transformer.data import buckets as bucket_rules
from keras_transformer.learning_rate import BATCH_TOKENS
from keras_transformer.model_dir import VOCAB_FILE
from pipelines import Log, report
from pipelines.data import buckets, packing, text_io, token_cache
from pipelines.data import dataset as ds_lib
from pipelines.data import vocab as vocab_lib
from pipelines.data.text_io import CleanResult, clean_parallel, read_lines
from pipelines.errors import DataError
from pipelines.model_dir import layout as md
from pipelines.tasks import SPLITS, Task

VOCAB_SAMPLE_LINES = 1_000_000


def vocab_path(work_dir: os.PathLike | str) -> pathlib.Path:
    """Where the shared SentencePiece model of ``work_dir`` lives."""
    return pathlib.Path(work_dir) / VOCAB_FILE


def clean_split(task: Task, split: str, work_dir: os.PathLike | str, *,
                log: Log = print) -> CleanResult:
    """The task's text for ``split``, validated and cleaned (train drops empty pairs)."""
    src, tgt = task.data_files(split, work_dir, log=log)
    given = split == "test" and task.test_files  # a user's test set, cleaned beside the task's
    out = pathlib.Path(work_dir) / md.CLEAN_DIR / task.name / (f"{split}.given" if given else split)
    return clean_parallel(src, tgt, out, drop_empty=split == "train", log=log)


def check_training_text(task: Task, work_dir: os.PathLike | str, *, log: Log = print) -> None:
    """`DataError` if the training text was edited since ``work_dir``'s model trained on it."""
    src, tgt = task.data_files("train", work_dir, log=log)
    clean = pathlib.Path(work_dir) / md.CLEAN_DIR / task.name / "train"
    if text_io.changed_since(src, tgt, clean):
        raise DataError(f"{src}, {tgt}: changed since the model in {work_dir} was trained on "
                        f"them; train a new model dir on them (--model_dir NEW), or fine-tune "
                        f"this one (--init_from {work_dir} --model_dir NEW)")


def ensure_vocab(task: Task, work_dir: os.PathLike | str, vocab_size: int | None = None, *,
                 sample_lines: int = VOCAB_SAMPLE_LINES, log: Log = print) -> bytes:
    """The proto of ``work_dir/spm.model``, trained on the train split if absent; `DataError` if
    an existing model's size differs from a given ``vocab_size``."""
    path = vocab_path(work_dir)
    if path.is_file():
        proto = vocab_lib.read_model_proto(path)
        size = vocab_lib.vocab_size_of(proto)
        if vocab_size is not None and size != vocab_size:
            raise DataError(
                f"{path} has {size:,} pieces but vocab_size={vocab_size:,} was asked for. "
                "Delete it to train a new one (token caches are keyed by it), or drop the flag.")
        report(log, path, f"vocab: reusing {path} ({size:,} pieces)")
        return proto
    clean = clean_split(task, "train", work_dir, log=log)
    vocab_lib.build_vocab([clean.source_path, clean.target_path], work_dir,
                          vocab_size or task.vocab_size, max_sentences=sample_lines,
                          user_defined_symbols=task.vocab_symbols(clean.target_path),
                          total_lines=2 * clean.stats.kept, log=log)
    return vocab_lib.read_model_proto(path)


@dataclasses.dataclass(frozen=True)
class PreparedSplit:
    """One split after cleaning and tokenization."""

    split: str
    clean: CleanResult
    cache: token_cache.TokenCache


def prepare_split(task: Task, split: str, work_dir: os.PathLike | str, proto: bytes, *,
                  log: Log = print) -> PreparedSplit:
    """Clean ``split`` and cache its token ids, keyed by task, split, vocabulary and text."""
    clean = clean_split(task, split, work_dir, log=log)
    key = token_cache.cache_key(task.name, split, vocab_lib.model_digest(proto), clean.digest)
    cache = token_cache.load_or_build_cache(
        clean.source_path, clean.target_path, proto, pathlib.Path(work_dir) / md.CACHE_DIR / key,
        log=log)
    return PreparedSplit(split, clean, cache)


def split_stats(task: Task, prepared: PreparedSplit) -> dict:
    """Corpus statistics of one split: pairs, skips by reason, tokens and lengths per side."""
    lengths = prepared.cache.lengths.reshape(-1, 2).astype(np.int64)
    limits = buckets.length_filter_counts(lengths, task.max_source_length, task.max_target_length)
    clean = prepared.clean.stats
    skipped = dict(clean.skipped)
    if prepared.split == "train" and limits["too_long"]:
        skipped["over length limit"] = limits["too_long"]
    mean, top = (lengths.mean(0), lengths.max(0)) if len(lengths) else ((0.0, 0.0), (0, 0))
    return {"pairs_read": clean.pairs_read,
            "pairs_kept": limits["kept"] if prepared.split == "train" else clean.kept,
            "skipped": skipped, "over_length_limit": limits["too_long"],
            "source_tokens": int(lengths[:, 0].sum()), "target_tokens": int(lengths[:, 1].sum()),
            "source_mean": float(mean[0]), "target_mean": float(mean[1]),
            "source_max": int(top[0]), "target_max": int(top[1])}


def prepare(task: Task, work_dir: os.PathLike | str, vocab_size: int | None = None,
            batch_tokens: int = BATCH_TOKENS, *, batch_multiple: int = 1,
            boundaries: Sequence[int] | None = None, vocab_sample_lines: int = VOCAB_SAMPLE_LINES,
            splits: Sequence[str] = SPLITS, tables: bool = True, log: Log = print) -> dict:
    """Build vocabulary and token caches for ``splits``; log (unless not ``tables``) and return
    corpus stats and, with "train", the bucket table of a global budget of ``batch_tokens`` a
    side; ``vocab_size`` and ``boundaries``: the task's if None."""
    for split in splits:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    splits = [split for split in splits if split == "train" or task.has_split(split)]
    _bucket_rows(task, np.zeros((0, 2)), boundaries, batch_tokens, batch_multiple)  # write nothing
    proto = ensure_vocab(task, work_dir, vocab_size, sample_lines=vocab_sample_lines, log=log)
    vocab = {"path": str(vocab_path(work_dir)), "size": vocab_lib.vocab_size_of(proto),
             "sha256": vocab_lib.model_digest(proto)}
    prepared = {split: prepare_split(task, split, work_dir, proto, log=log) for split in splits}
    result: dict = {"task": task.name, "vocab": vocab,
                    "splits": {split: split_stats(task, p) for split, p in prepared.items()}}
    shown = log if tables else (lambda message: None)
    shown(f"corpus ({task.source_lang} / {task.target_lang}, subword tokens without EOS/BOS):")
    for split, s in result["splits"].items():
        skipped = ", ".join(f"{k} {v:,}" for k, v in sorted(s["skipped"].items())) or "none"
        shown(f"{split:>5}: pairs read {s['pairs_read']:,}, kept {s['pairs_kept']:,} "
              f"(skipped: {skipped}); tokens src {s['source_tokens']:,} / tgt "
              f"{s['target_tokens']:,}; mean length {s['source_mean']:.1f} / "
              f"{s['target_mean']:.1f}; max {s['source_max']:,} / {s['target_max']:,}")
    if "train" in prepared:
        lengths = prepared["train"].cache.lengths
        _, rows = _bucket_rows(task, lengths, boundaries, batch_tokens, batch_multiple)
        packed = packing.packing_table(lengths, task.max_source_length, task.max_target_length,
                                       batch_tokens, batch_multiple)
        result.update(buckets=rows, batches_per_epoch=sum(r["batches"] for r in rows),
                      padding=buckets.table_padding(rows), packed=packed)
        shown(f"train buckets (budget {batch_tokens:,} tokens per side, batch multiple "
              f"{batch_multiple}; padding counts both sides):")
        shown(buckets.format_bucket_table(rows, packed))
    return result


def _bucket_rows(task: Task, lengths: np.ndarray, boundaries: Sequence[int] | None,
                 batch_tokens: int, batch_multiple: int) -> tuple[list[int], list[dict]]:
    """Boundaries (task's if None) and bucket table; `UserError` if a bucket exceeds the budget."""
    boundaries = list(boundaries or bucket_rules.default_boundaries(task.max_length))
    sizes = bucket_rules.bucket_batch_sizes(boundaries, batch_tokens, batch_multiple)
    return boundaries, buckets.bucket_table(lengths, boundaries, sizes, task.max_source_length,
                                            task.max_target_length)


@dataclasses.dataclass(frozen=True)
class TrainingInput:
    """A batched training (or validation-loss) dataset and the batches in one pass over it."""

    dataset: tf.data.Dataset
    batches_per_epoch: int


def training_input(task: Task, work_dir: os.PathLike | str, *, split: str = "train",
                   batch_tokens: int = BATCH_TOKENS, batch_multiple: int = 1,
                   boundaries: Sequence[int] | None = None, shuffle: bool = True,
                   repeat: bool = True, seed: int = 0, pad_to_bucket: bool = True,
                   pack: bool = False, drop_remainder: bool | None = None,
                   log: Log = print) -> TrainingInput:
    """``((source, target_in), target_out)`` token-budget batches of ``split``, or with ``pack``
    packed rows (``packing``: dict inputs, estimated ``batches_per_epoch``). ``drop_remainder``
    (default: with several replicas) drops each bucket's last partial batch."""
    proto = ensure_vocab(task, work_dir, log=log)
    prepared = prepare_split(task, split, work_dir, proto, log=log)
    lengths = prepared.cache.lengths
    counts = buckets.length_filter_counts(lengths, task.max_source_length, task.max_target_length)
    log(f"{split}: {counts['kept']:,} of {counts['pairs']:,} pairs within length limits "
        f"{task.max_source_length}/{task.max_target_length}; dropped {counts['too_long']:,} "
        f"(source too long {counts['too_long_source']:,}, target {counts['too_long_target']:,})")
    drop = batch_multiple > 1 if drop_remainder is None else drop_remainder
    examples = dict(max_source_length=task.max_source_length,
                    max_target_length=task.max_target_length, shuffle=shuffle, seed=seed,
                    repeat=repeat, teacher_inputs=task.teacher_inputs(proto))
    if pack:
        table = packing.packing_table(lengths, task.max_source_length, task.max_target_length,
                                      batch_tokens, batch_multiple, seed=seed)
        log(f"{split}: packed, rows of {table['rows'].source} source / {table['rows'].target} "
            f"target tokens, {table['rows_per_batch']:,} a batch; about {table['batches']:,} "
            f"batches and {table['padding']:.1%} padding per pass over {table['sentences']:,} "
            f"pairs")
        pairs = batching.training_examples(prepared.cache.dataset(), **examples)
        dataset = packing.packed_batches(pairs, table["rows"], batch_tokens=batch_tokens,
                                         batch_multiple=batch_multiple, shuffle=shuffle,
                                         seed=seed, drop_remainder=drop)
        batches = table["rows_per_pass"] // table["rows_per_batch"] if drop else table["batches"]
        return TrainingInput(dataset, batches)
    boundaries, rows = _bucket_rows(task, lengths, boundaries, batch_tokens, batch_multiple)
    batches = sum(r["sentences"] // r["batch_size"] if drop else r["batches"] for r in rows)
    dataset = batching.training_batches(
        prepared.cache.dataset(), batch_tokens=batch_tokens, boundaries=boundaries,
        batch_multiple=batch_multiple, drop_remainder=drop, pad_to_bucket=pad_to_bucket, **examples)
    return TrainingInput(dataset, batches)


def validation_input(task: Task, work_dir: os.PathLike | str, *, batch_tokens: int,
                     batch_multiple: int = 1, pad_to_bucket: bool = True,
                     log: Log = print) -> TrainingInput:
    """The dev split's batches for ``model.fit``'s validation loss: ``batches_per_epoch`` batches
    are one pass, repeated unchanged. A bucket's last batch gets padding rows (no loss or tokens)
    up to a multiple of ``batch_multiple``, to split across replicas (JAX requires it)."""
    one_pass = training_input(task, work_dir, split="dev", batch_tokens=batch_tokens,
                              batch_multiple=batch_multiple, shuffle=False, repeat=False,
                              pad_to_bucket=pad_to_bucket, drop_remainder=False, log=log)

    def pad_rows(inputs, target_out):
        rows = -tf.shape(target_out)[0] % batch_multiple
        return tf.nest.map_structure(
            lambda t: tf.pad(t, [[0, rows], [0, 0]], constant_values=PAD_ID), (inputs, target_out))

    dataset = one_pass.dataset.map(pad_rows) if batch_multiple > 1 else one_pass.dataset
    # No autotuning: Keras deletes each epoch's validation iterator, waiting up to 60 s for it.
    options = tf.data.Options()
    options.autotune.enabled = False
    return TrainingInput(dataset.repeat().with_options(options), one_pass.batches_per_epoch)


@dataclasses.dataclass(frozen=True)
class EvalInput:
    """A dev/test split for decoding: raw sources, references, and length-sorted id batches."""

    sources: list[str]
    references: list[str]
    batches: list[ds_lib.EvalBatch]


def eval_input(task: Task, split: str, work_dir: os.PathLike | str, *,
               max_source_length: int | None = None, batch_tokens: int = 4096,
               log: Log = print) -> EvalInput:
    """Sources, references and id batches (``dataset.eval_batches``) of ``split``."""
    proto = ensure_vocab(task, work_dir, log=log)
    clean = clean_split(task, split, work_dir, log=log)
    sources = read_lines(clean.source_path)
    references = read_lines(clean.target_path)
    batches = ds_lib.eval_batches(sources, vocab_lib.load_tokenizer(proto),
                                  max_source_length=max_source_length or task.max_source_length,
                                  batch_tokens=batch_tokens, log=log)
    return EvalInput(sources, references, batches)
