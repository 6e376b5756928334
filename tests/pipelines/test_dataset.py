"""tf.data input: example format, token budgets, padding, length filter, caching, eval order."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.errors import UserError
from keras_transformer.data import buckets as bucket_rules
from keras_transformer.learning_rate import BATCH_TOKENS
from keras_transformer.data import batches as batching
from pipelines.data import buckets, token_cache, token_shards
from pipelines.data import dataset as ds_lib
from pipelines.data import prepare, text_io, vocab
from pipelines.tasks import get_task

pytestmark = pytest.mark.xdist_group("test_dataset")  # its module fixtures: one worker

BUDGET = BATCH_TOKENS
QUIET = lambda message: None  # noqa: E731


@pytest.fixture(scope="module")
def multi30k(shared_data, tmp_path_factory):
    """Multi30k with a small (3,000-piece) vocabulary and a token cache of train."""
    work_dir = tmp_path_factory.mktemp("work")
    task = get_task("multi30k_ende", data_dir=str(shared_data))
    proto = prepare.ensure_vocab(task, work_dir, 3000, sample_lines=20_000, log=QUIET)
    train = prepare.prepare_split(task, "train", work_dir, proto, log=QUIET)
    return task, work_dir, proto, train


@pytest.mark.quick
def test_model_example_adds_eos_and_bos_where_they_belong():
    (source, target_in), target_out = batching.to_model_example(
        tf.constant([7, 8, 9]), tf.constant([10, 11])
    )
    assert source.numpy().tolist() == [7, 8, 9, vocab.EOS_ID]
    assert target_in.numpy().tolist() == [vocab.BOS_ID, 10, 11]
    assert target_out.numpy().tolist() == [10, 11, vocab.EOS_ID]


@pytest.mark.quick
def test_default_boundaries_are_fine_when_short_and_geometric_when_long():
    b = bucket_rules.default_boundaries(256)
    assert b[:8] == [8, 12, 16, 20, 24, 28, 32, 36] and b[-1] == 256
    assert all(x % 4 == 0 for x in b) and b == sorted(set(b))
    gaps = [y / x for x, y in zip(b[10:-2], b[11:-1])]
    assert all(1.05 < g < 1.2 for g in gaps)
    assert len(b) < 30
    assert bucket_rules.default_boundaries(100)[-1] == 100


@pytest.mark.quick
def test_batch_sizes_follow_the_budget_and_the_replica_multiple():
    assert bucket_rules.bucket_batch_sizes([8, 100, 256], 25_000) == [3125, 250, 97]
    assert bucket_rules.bucket_batch_sizes([8, 100, 256], 25_000, batch_multiple=8) == [3120, 248, 96]
    with pytest.raises(ValueError, match="Raise batch_tokens to at least 2,048"):
        bucket_rules.bucket_batch_sizes([8, 256], 2000, batch_multiple=8)
    # A budget short of a middle bucket names what the largest needs (one raise, not one per
    # bucket), as a user's error.
    with pytest.raises(UserError, match=r"of 256 tokens \(bucket 256\)\. Raise batch_tokens to "
                                        r"at least 256 "):
        bucket_rules.bucket_batch_sizes([8, 100, 256], 99)


def test_every_multi30k_batch_respects_the_budget_and_padding_is_low(multi30k):
    task, work_dir, _, train = multi30k
    data = prepare.training_input(task, work_dir, repeat=False, log=QUIET)
    boundaries = bucket_rules.default_boundaries(task.max_length)
    sentences = real = padded = batches = 0
    partial = {}
    for (source, target_in), target_out in data.dataset.as_numpy_iterator():
        size, length = source.shape
        assert target_in.shape == target_out.shape == (size, length)
        assert length in boundaries
        assert size * length <= BUDGET  # both sides share the padded length
        if size != BUDGET // length:  # only a bucket's last batch may be smaller
            partial[length] = partial.get(length, 0) + 1
        assert np.all(target_in[:, 0] == vocab.BOS_ID)
        assert np.all(np.sum(source == vocab.EOS_ID, axis=1) == 1)
        assert np.all(np.sum(target_out == vocab.EOS_ID, axis=1) == 1)
        sentences += size
        batches += 1
        real += np.count_nonzero(source) + np.count_nonzero(target_in)
        padded += source.size + target_in.size
    padding = 1 - real / padded
    print(f"\nMulti30k train, default buckets, budget {BUDGET:,}: {batches} batches, "
          f"padding fraction {padding:.1%}")
    assert sentences == 29_000 and batches == data.batches_per_epoch
    assert all(n == 1 for n in partial.values())
    rows = buckets.bucket_table(
        train.cache.lengths, boundaries, bucket_rules.bucket_batch_sizes(boundaries, BUDGET),
        task.max_source_length, task.max_target_length,
    )
    assert padding == pytest.approx(buckets.table_padding(rows), abs=1e-9)
    assert padding < 0.15


def test_batch_multiple_and_distribution_options(multi30k):
    task, work_dir, _, _ = multi30k
    data = prepare.training_input(
        task, work_dir, batch_tokens=2048, batch_multiple=8, shuffle=False, repeat=False, log=QUIET
    )
    options = data.dataset.options()
    assert options.experimental_distribute.auto_shard_policy == (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    count = 0
    for (source, _), _ in data.dataset.take(40).as_numpy_iterator():
        assert source.shape[0] % 8 == 0 and source.shape[0] * source.shape[1] <= 2048
        count += 1
    assert count == 40


def test_overlong_pairs_are_dropped_and_counted(multi30k, tmp_path):
    _, _, proto, _ = multi30k
    long_line = " ".join(["word"] * 10_000)
    (tmp_path / "s").write_text(f"a dog runs\n{long_line}\ntwo men\nshort\n", encoding="utf-8")
    (tmp_path / "t").write_text(f"ein Hund\nlang\nzwei Männer\n{long_line}\n", encoding="utf-8")
    clean = text_io.clean_parallel(tmp_path / "s", tmp_path / "t", tmp_path / "c", log=QUIET)
    cache = token_cache.load_or_build_cache(
        clean.source_path, clean.target_path, proto, tmp_path / "cache", log=QUIET
    )
    assert cache.lengths[1, 0] >= 10_000
    counts = buckets.length_filter_counts(cache.lengths, 64, 64)
    assert counts == {"pairs": 4, "kept": 2, "too_long": 2, "too_long_source": 1,
                      "too_long_target": 1}
    batches = batching.training_batches(
        cache.dataset(), max_source_length=64, max_target_length=64, repeat=False
    )
    kept = [s for (s, _), _ in batches.as_numpy_iterator()]
    assert sum(len(b) for b in kept) == 2 and max(b.shape[1] for b in kept) <= 64


def test_cache_is_reused_and_keyed_by_vocab_and_text(multi30k, monkeypatch):
    task, work_dir, proto, train = multi30k

    def must_not_tokenize(*args, **kwargs):
        raise AssertionError("a second run must not tokenize again")

    monkeypatch.setattr(token_shards, "tokenize_shard", must_not_tokenize)
    logs = []
    again = prepare.prepare_split(task, "train", work_dir, proto, log=logs.append)
    assert again.cache.path == train.cache.path and any("cache: reusing" in m for m in logs)
    np.testing.assert_array_equal(again.cache.lengths, train.cache.lengths)
    first = next(iter(again.cache.dataset()))
    expected = vocab.python_processor(proto).encode(text_io.read_lines(train.clean.source_path)[0])
    assert first[0].numpy().tolist() == expected
    key = token_cache.cache_key(task.name, "train", vocab.model_digest(proto), train.clean.digest)
    assert train.cache.path.name == key and key.startswith("multi30k_ende-train-")
    assert token_cache.cache_key(task.name, "train", "other-vocab", train.clean.digest) != key
    assert token_cache.cache_key(task.name, "train", vocab.model_digest(proto), "other-text") != key


def test_shuffle_is_seeded(multi30k):
    _, _, _, train = multi30k

    def first_batch(seed):
        pairs = train.cache.dataset().take(3000)
        ds = batching.training_batches(pairs, max_source_length=128, max_target_length=128,
                                     batch_tokens=512, shuffle_buffer=3000, seed=seed)
        return next(iter(ds))[0][0].numpy()

    np.testing.assert_array_equal(first_batch(1), first_batch(1))
    assert not np.array_equal(first_batch(1), first_batch(2))


@pytest.mark.parametrize("pack", [False, True], ids=["buckets", "packed"])
def test_every_iterator_draws_the_same_batches(multi30k, pack):
    """The training batches depend on the seed alone, not on how many iterators were made of
    the dataset before: tf.distribute's workers make theirs concurrently, and with one reshuffle
    counter per dataset a loaded machine had two workers train on halves of different global
    batches."""
    task, work_dir, _, _ = multi30k
    data = prepare.training_input(task, work_dir, batch_tokens=1024, seed=3, pack=pack,
                                  log=QUIET)

    def first_batches():
        batches = iter(data.dataset)
        return [tf.nest.flatten(next(batches)) for _ in range(3)]

    for made_first, made_later in zip(first_batches(), first_batches()):
        for array, again in zip(made_first, made_later):
            np.testing.assert_array_equal(array, again)


@pytest.mark.quick
def test_each_epoch_is_shuffled_anew_and_alike_in_every_iterator():
    shuffled = batching.reshuffled(tf.data.Dataset.range(50), 50, seed=7, repeat=True)
    epochs = list(shuffled.take(100).as_numpy_iterator())
    first, second = epochs[:50], epochs[50:]
    assert sorted(first) == sorted(second) == list(range(50))  # each epoch every element once
    assert first != second and first != sorted(first)
    assert list(shuffled.take(100).as_numpy_iterator()) == epochs

def test_eval_batches_are_length_sorted_and_order_is_restored(multi30k, shared_data):
    _, _, proto, _ = multi30k
    lines = text_io.read_lines(shared_data / "multi30k" / "val.en") + [""]
    logs = []
    batches = ds_lib.eval_batches(lines, vocab.load_tokenizer(proto), max_source_length=16,
                                  batch_tokens=1024, log=logs.append)
    ids = vocab.python_processor(proto).encode(lines)
    assert logs and logs[0].startswith(
        f"eval: truncated {sum(len(x) + 1 > 16 for x in ids):,} of 1,015 sources to 16"
    )
    lengths = []
    for b in batches:
        assert b.source_ids.shape[0] * b.source_ids.shape[1] <= 1024
        assert b.source_ids.shape[1] <= 16
        lengths += np.count_nonzero(b.source_ids, axis=1).tolist()
        for row, i in zip(b.source_ids, b.indices):
            n = min(len(ids[i]), 15)
            assert row[:n].tolist() == ids[i][:n] and row[n] == vocab.EOS_ID
    assert lengths == sorted(lengths) and lengths[0] == 1  # the empty line is just EOS
    restored = ds_lib.restore_order(batches, [b.indices.tolist() for b in batches])
    assert restored == list(range(len(lines)))


def test_prepare_prints_corpus_stats_and_bucket_table(multi30k):
    task, work_dir, _, _ = multi30k
    logs = []
    stats = prepare.prepare(task, work_dir, splits=("train", "dev"), log=logs.append)
    text = "\n".join(logs)
    assert "train: pairs read 29,000, kept 29,000" in text
    assert "dev: pairs read 1,014, kept 1,014" in text
    assert " bucket  batch  batches  sentences  padding" in text and "  total " in text
    assert stats["vocab"]["size"] == 3000
    assert stats["splits"]["dev"]["pairs_kept"] == 1014
    train = stats["splits"]["train"]
    assert train["source_max"] >= train["source_mean"] > 5
    assert sum(r["sentences"] for r in stats["buckets"]) == 29_000
    assert stats["batches_per_epoch"] == sum(r["batches"] for r in stats["buckets"])
    assert 0 < stats["padding"] < 0.15
    with pytest.raises(text_io.DataError, match="has 3,000 pieces but vocab_size=8,000"):
        prepare.prepare(task, work_dir, vocab_size=8000, log=QUIET)


def test_text_task_reports_every_kind_of_skip(tmp_path):
    words = "the a dog cat runs sits on under big small red blue man woman".split()
    rng = np.random.default_rng(0)
    src = [" ".join(rng.choice(words, 6)) for _ in range(60)]
    tgt = [" ".join(rng.choice(words, 5)) for _ in range(60)]
    src[3], tgt[7] = "  ", ""                  # empty on either side
    src[10] = " ".join(["dog"] * 10_000)       # a 10,000-token line
    src[11] = src[11] + "\x00"                 # a NUL byte
    (tmp_path / "s").write_text("\r\n".join(src) + "\r\n", encoding="utf-8")
    (tmp_path / "t").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    task = get_task("text", train_src=str(tmp_path / "s"), train_tgt=str(tmp_path / "t"),
                    vocab_size=300, max_source_length=32, max_target_length=32)
    logs = []
    stats = prepare.prepare(task, tmp_path / "work", splits=("train",), log=logs.append)
    train = stats["splits"]["train"]
    assert train["pairs_read"] == 60 and train["pairs_kept"] == 57
    assert train["skipped"] == {"empty source": 1, "empty target": 1, "over length limit": 1}
    assert sum(r["sentences"] for r in stats["buckets"]) == 57
    summary = next(m for m in logs if m.startswith("clean:"))
    assert "pairs read 60, kept 58, skipped 2" in summary and "1 lines with NUL" in summary
    assert "60 CRLF endings stripped" in summary
    assert any("skipped: empty source 1, empty target 1, over length limit 1" in m for m in logs)


@pytest.mark.parametrize("replicas", [1, 2])
def test_validation_steps_see_every_dev_pair_once(multi30k, replicas):
    """What `fit` validates on, `batches_per_epoch` batches, is one pass over dev, none
    dropped for the replicas (whole rows of padding split the last batches evenly), and the
    next validation sees the same batches again, from a pipeline that does not autotune."""
    task, work_dir, proto, _ = multi30k
    dev = prepare.validation_input(task, work_dir, batch_tokens=2048, batch_multiple=replicas,
                                   log=QUIET)
    lengths = prepare.prepare_split(task, "dev", work_dir, proto, log=QUIET).cache.lengths
    batches = list(dev.dataset.take(2 * dev.batches_per_epoch).as_numpy_iterator())
    first, second = batches[:dev.batches_per_epoch], batches[dev.batches_per_epoch:]
    assert all(len(target_out) % replicas == 0 for _, target_out in first)
    assert sum(np.count_nonzero(target_out.any(axis=1)) for _, target_out in first) == \
        len(lengths) == 1014
    assert sum(np.count_nonzero(source.any(axis=1)) for (source, _), _ in first) == 1014
    assert sum(np.count_nonzero(target_out) for _, target_out in first) == \
        sum(target + 1 for _, target in lengths)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(first, second))
    # Keras deletes each epoch's validation iterator; with autotuning on, deleting one waited
    # for its tuning thread to wake, up to 60 s of an idle process (docs/results.md).
    assert dev.dataset.options().autotune.enabled is False
