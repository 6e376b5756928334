"""Measure input-pipeline throughput on Multi30k train: pairs/s read + tokenized in-graph.

Prints one JSON line with three figures, each the median of ``--repeats`` timed passes after
a warm-up, counted in-graph (``Dataset.reduce``) so Python iteration is not measured:

* ``read_tokenize_batched``: read both files and tokenize 1,024 lines per op call with the
  in-graph tensorflow-text tokenizer (the token cache itself tokenizes in worker processes,
  ``pipelines.data.token_shards``: see benchmarks/prepare_speed.py);
* ``read_tokenize_pairs``: the same, unbatched to one pair per element;
* ``cached_batches``: one pass of token-budget training batches from the cache
  (filter, shuffle, EOS/BOS, bucketing, padding: what every epoch costs).

    python benchmarks/data_throughput.py --data_dir $KT_DATA_DIR [--work_dir /tmp/kt_bench]
"""
import json
import os
import pathlib
import statistics
import tempfile
import time

from absl import app, flags

flags.DEFINE_string("data_dir", os.environ.get("KT_DATA_DIR"), "Directory containing multi30k/.")
flags.DEFINE_string("work_dir", None, "Work directory (vocab, caches); a temp dir if unset.")
flags.DEFINE_integer("repeats", 3, "Timed passes per figure; the median is reported.")
flags.DEFINE_integer("vocab_size", 8000, "Vocabulary size if a model must be trained.")
FLAGS = flags.FLAGS


def _tokenized(source_path, target_path, tokenizer, lines_per_call=1024):
    """``(source_ids, target_ids)`` ragged batches of ``lines_per_call`` lines of two aligned
    files, tokenized in-graph, one tokenizer call per batch."""
    import tensorflow as tf

    lines = tf.data.Dataset.zip(tf.data.TextLineDataset(str(source_path)),
                                tf.data.TextLineDataset(str(target_path)))
    return lines.batch(lines_per_call).map(
        lambda src, tgt: (tokenizer.tokenize(src), tokenizer.tokenize(tgt)),
        num_parallel_calls=tf.data.AUTOTUNE)


def _timed(dataset, pairs_of) -> tuple[float, int]:
    """Median seconds of a full pass and the pair count, counted in-graph."""
    import tensorflow as tf

    def one_pass() -> tuple[float, int]:
        start = time.perf_counter()
        count = dataset.reduce(tf.constant(0, tf.int64), lambda n, x: n + pairs_of(x))
        return time.perf_counter() - start, int(count)

    one_pass()  # warm-up: tracing, file cache
    runs = [one_pass() for _ in range(FLAGS.repeats)]
    return statistics.median(s for s, _ in runs), runs[0][1]


def main(argv):
    del argv
    if not FLAGS.data_dir:
        raise app.UsageError("pass --data_dir (the directory containing multi30k/) or set $KT_DATA_DIR")
    import tensorflow as tf

    from pipelines import tasks
    from keras_transformer.data import batches as batching
    from pipelines.data import prepare, vocab

    work_dir = pathlib.Path(FLAGS.work_dir or tempfile.mkdtemp(prefix="kt_bench_"))
    task = tasks.get_task("multi30k_ende", data_dir=FLAGS.data_dir)
    quiet = lambda message: None  # noqa: E731
    proto = prepare.ensure_vocab(task, work_dir, FLAGS.vocab_size, log=quiet)
    tokenizer = vocab.load_tokenizer(proto)
    clean = prepare.clean_split(task, "train", work_dir, log=quiet)
    prepared = prepare.prepare_split(task, "train", work_dir, proto, log=quiet)

    one = lambda x: tf.constant(1, tf.int64)  # noqa: E731
    figures = {
        "read_tokenize_batched": _timed(
            _tokenized(clean.source_path, clean.target_path, tokenizer),
            lambda x: x[0].nrows(),
        ),
        "read_tokenize_pairs": _timed(
            _tokenized(clean.source_path, clean.target_path, tokenizer).unbatch(), one
        ),
        "cached_batches": _timed(
            batching.training_batches(
                prepared.cache.dataset(),
                max_source_length=task.max_source_length,
                max_target_length=task.max_target_length,
                repeat=False,
            ),
            lambda x: tf.cast(tf.shape(x[0][0])[0], tf.int64),
        ),
    }
    result = {
        "benchmark": "data_throughput",
        "corpus": "multi30k_ende train",
        "vocab_size": vocab.vocab_size_of(proto),
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    for name, (seconds, pairs) in figures.items():
        result[f"{name}_pairs"] = pairs
        result[f"{name}_seconds"] = round(seconds, 3)
        result[f"{name}_pairs_per_s"] = round(pairs / seconds)
    print(json.dumps(result))


if __name__ == "__main__":
    app.run(main)
