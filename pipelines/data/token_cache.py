"""Tokenized corpora saved once, in shards (``token_shards``) tokenized on every core: built in
``layout.building(cache/<key>)`` and renamed into place once whole (``layout.CACHE_*``); a build
killed mid-way (even with SIGKILL) resumes from the shards it finished."""

import concurrent.futures
import dataclasses
import hashlib
import json
import multiprocessing
import os
import pathlib
import shutil

import numpy as np
import tensorflow as tf

from keras_transformer.atomic_files import write_atomic
from pipelines import Log, report
from pipelines.data import token_shards
from pipelines.data.progress import DEFAULT_INTERVAL, Progress
from pipelines.errors import DataError
from pipelines.model_dir.files import read_json, write_json_atomic
from pipelines.model_dir.layout import (CACHE_LENGTHS, CACHE_META, CACHE_SHARD_PLAN, CACHE_SHARDS,
                                         building)

CACHE_FORMAT_VERSION = "3"
"""Bumped whenever the stored format changes, so old caches are never misread."""
SHARD_PAIRS = 100_000
"""Pairs per shard: a few core-seconds, so progress is frequent and a kill loses little."""


def cache_key(*parts: str) -> str:
    """A directory name from the format version and inputs (task, split, vocab and text hashes)."""
    digest = hashlib.sha256("\0".join((CACHE_FORMAT_VERSION,) + parts).encode("utf-8")
                            ).hexdigest()[:16]
    readable = "-".join(p for p in parts[:2] if p)
    return f"{readable}-{digest}" if readable else digest


def _read_shard(path: tf.Tensor) -> tf.data.Dataset:
    """The ``(source_ids, target_ids)`` pairs of one shard file, in-graph."""
    record = tf.io.decode_raw(tf.io.read_file(path), tf.int32, little_endian=True)
    n = record[0]
    source_lengths = tf.cast(record[1:1 + n], tf.int64)
    target_lengths = tf.cast(record[1 + n:1 + 2 * n], tf.int64)
    ids = record[1 + 2 * n:]
    split = tf.cast(tf.reduce_sum(source_lengths), tf.int32)
    source = tf.RaggedTensor.from_row_lengths(ids[:split], source_lengths, validate=False)
    target = tf.RaggedTensor.from_row_lengths(ids[split:], target_lengths, validate=False)
    return tf.data.Dataset.from_tensors((source, target)).unbatch()


@dataclasses.dataclass(frozen=True)
class TokenCache:
    """Tokenized pairs in shard files (``token_shards``) plus their token counts ``[N, 2]``."""

    path: pathlib.Path
    lengths: np.ndarray

    def shard_files(self) -> list[str]:
        """The shard files, in corpus order."""
        return sorted(str(p) for p in (self.path / CACHE_SHARDS).glob(f"*{token_shards.SUFFIX}"))

    def dataset(self) -> tf.data.Dataset:
        """The cached pairs in corpus order, a shard at a time (``flat_map``: docs/data.md)."""
        files = self.shard_files()
        pairs = tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string)
                                                   if files else tf.zeros([0], tf.string))
        return pairs.flat_map(_read_shard)


def worker_count() -> int:
    """The CPUs this process may run on (``taskset`` and containers narrow it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load_or_build_cache(source_path: os.PathLike | str, target_path: os.PathLike | str,
                        model_proto: bytes, cache_dir: os.PathLike | str, *,
                        shard_pairs: int = SHARD_PAIRS, workers: int | None = None,
                        progress_interval: float = DEFAULT_INTERVAL,
                        log: Log = print) -> TokenCache:
    """The token cache of cleaned parallel text at ``cache_dir``, tokenized and saved first if
    absent. ``cache_dir`` must be unique to its inputs (``cache_key``): a complete cache there is
    trusted, an interrupted build's shards reused. ``workers``: default one per usable CPU."""
    cache_dir = pathlib.Path(cache_dir)
    if (cache_dir / CACHE_META).is_file():
        lengths = np.load(cache_dir / CACHE_LENGTHS)
        report(log, cache_dir, f"cache: reusing {cache_dir} ({len(lengths):,} pairs)")
        return TokenCache(cache_dir, lengths)
    partial = building(cache_dir)
    jobs = _plan(source_path, target_path, model_proto, partial, shard_pairs)
    todo = [job for job in jobs if not pathlib.Path(job.output).is_file()]
    total = sum(job.pairs for job in jobs)
    reused = total - sum(job.pairs for job in todo)
    workers = max(1, min(workers or worker_count(), len(todo)))
    if reused:
        log(f"cache: resuming {partial}: {len(jobs) - len(todo)} of {len(jobs)} shards "
            f"({reused:,} pairs) already tokenized")
    log(f"cache: tokenizing {source_path} / {target_path}: {total - reused:,} pairs in {len(todo)} "
        f"shard{'s' if len(todo) != 1 else ''} on {workers} process{'es' if workers > 1 else ''}")
    progress = Progress("cache", total, "pairs", log, already=reused, interval=progress_interval)
    tokens = _tokenize(todo, workers, progress)
    progress.finish({"tokens": tokens})
    return _finish(partial, cache_dir, jobs, {"source": str(source_path),
                                              "target": str(target_path)}, log)


def _plan(source_path, target_path, model_proto: bytes, partial: pathlib.Path,
          shard_pairs: int) -> list[token_shards.ShardJob]:
    """The shard jobs of both files, and ``partial`` ready for them: kept with its finished
    shards if an earlier build cut the same shards, else made anew."""
    src_starts, src_lines = token_shards.shard_offsets(source_path, shard_pairs)
    tgt_starts, tgt_lines = token_shards.shard_offsets(target_path, shard_pairs)
    if src_lines != tgt_lines:
        raise DataError(f"{source_path} has {src_lines:,} lines but {target_path} has "
                        f"{tgt_lines:,}: a token cache needs one line per sentence on both "
                        "sides; clean them together (pipelines.data.text_io.clean_parallel)")
    plan = {"format": CACHE_FORMAT_VERSION, "shard_pairs": shard_pairs, "pairs": src_lines}
    plan_file = partial / CACHE_SHARD_PLAN
    if read_json(plan_file) == plan:
        for stray in (partial / CACHE_SHARDS).glob(".*"):  # a killed worker's temporary
            stray.unlink(missing_ok=True)
    else:
        shutil.rmtree(partial, ignore_errors=True)
        (partial / CACHE_SHARDS).mkdir(parents=True)
        write_json_atomic(plan_file, plan)
    return [token_shards.ShardJob(
        index=i, pairs=min(shard_pairs, src_lines - i * shard_pairs), source=str(source_path),
        target=str(target_path), source_range=(src_starts[i], src_starts[i + 1]),
        target_range=(tgt_starts[i], tgt_starts[i + 1]), first_line=i * shard_pairs + 1,
        model_proto=model_proto, output=str(token_shards.shard_path(partial / CACHE_SHARDS, i)))
        for i in range(len(src_starts) - 1)]


def _tokenize(jobs: list[token_shards.ShardJob], workers: int, progress: Progress) -> int:
    """Run ``jobs`` on ``workers`` processes (here if 1), updating ``progress``; return tokens."""
    done, tokens = progress.already, 0
    if workers == 1:
        for job in jobs:
            _, pairs, count = token_shards.tokenize_shard(job)
            done, tokens = done + pairs, tokens + count
            progress.update(done, {"tokens": tokens})
        return tokens
    # "spawn": a fork of TensorFlow's threads is unsafe. Workers import no TensorFlow, and
    # spawn reruns the main script's top level (run.py's is flags only).
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"),
        initializer=token_shards.worker_init, initargs=(os.getpid(),))
    with pool:
        pending = {pool.submit(token_shards.tokenize_shard, job) for job in jobs}
        try:
            while pending:
                finished, pending = concurrent.futures.wait(
                    pending, timeout=max(progress.seconds_to_next(), 0.05),
                    return_when=concurrent.futures.FIRST_COMPLETED)
                for future in finished:
                    _, pairs, count = future.result()
                    done, tokens = done + pairs, tokens + count
                progress.update(done, {"tokens": tokens})
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return tokens


def _finish(partial: pathlib.Path, cache_dir: pathlib.Path,
            jobs: list[token_shards.ShardJob], meta: dict, log: Log) -> TokenCache:
    """Write ``lengths.npy`` and ``meta.json`` into ``partial`` and rename it ``cache_dir``."""
    lengths = (np.concatenate([token_shards.read_lengths(job.output) for job in jobs])
               if jobs else np.zeros((0, 2), np.int32))
    np.save(partial / CACHE_LENGTHS, lengths)
    meta = dict(meta, pairs=len(lengths), tokens=int(lengths.sum()), shards=len(jobs))
    write_atomic(partial / CACHE_META, json.dumps(meta, indent=1))
    try:
        os.replace(partial, cache_dir)
    except OSError:
        if not (cache_dir / CACHE_META).is_file():
            raise
        shutil.rmtree(partial, ignore_errors=True)  # another build finished it meanwhile
        lengths = np.load(cache_dir / CACHE_LENGTHS)
    report(log, cache_dir,
           f"cache: wrote {cache_dir} ({len(lengths):,} pairs, {int(lengths.sum()):,} tokens)")
    return TokenCache(cache_dir, lengths)
