"""Packed training batches: row lengths, the packer, packed Multi30k, and `run.py --pack`."""
import collections
import json

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constants import BOS_ID, EOS_ID
from keras_transformer.model import PACKED_INPUTS
from pipelines.data import packing, prepare
from pipelines.tasks import get_task
from tests.pipelines.run_helpers import TINY, copy_prepared, run_stages

pytestmark = pytest.mark.xdist_group("test_packing")  # its module fixtures: one worker

QUIET = lambda message: None  # noqa: E731


@pytest.mark.quick
def test_rows_hold_the_longest_pair_and_follow_the_sides_totals():
    # Targets twice as long as sources; the longest target is 30 (31 with EOS).
    lengths = np.array([[5, 10]] * 40 + [[12, 30]], np.int32)
    rows = packing.row_lengths(lengths, max_source_length=64, max_target_length=64)
    mean_target = (40 * 11 + 31) / 41
    assert rows.target % packing.ROW_MULTIPLE == 0
    assert rows.target >= max(31, packing.PAIRS_PER_ROW * mean_target)
    assert rows.target - packing.ROW_MULTIPLE < max(31, packing.PAIRS_PER_ROW * mean_target)
    totals = 40 * 6 + 13, 40 * 11 + 31
    assert rows.source == int(np.ceil(rows.target * totals[0] / totals[1]))
    # Pairs beyond the length limits are dropped before packing: they do not count.
    with_long = np.concatenate([lengths, [[500, 500]]])
    assert packing.row_lengths(with_long, 64, 64) == rows
    assert packing.rows_per_batch(rows, 1024, batch_multiple=4) % 4 == 0
    with pytest.raises(ValueError, match="Raise batch_tokens"):
        packing.rows_per_batch(rows, rows.target - 1)


@pytest.mark.quick
def test_the_packer_places_every_pair_once_and_never_overfills_a_row():
    rng = np.random.default_rng(0)
    source = rng.integers(1, 40, 500).astype(np.int32)
    target = rng.integers(1, 60, 500).astype(np.int32)
    row, rank = (x.numpy() for x in packing.assign_rows(source, target, np.int32(48),
                                                        np.int32(64)))
    assert sorted(rank) == list(range(500))  # each pair placed exactly once
    used = np.bincount(row)
    assert np.all(used > 0) and row.min() == 0  # rows numbered 0, 1, ... without gaps
    assert np.all(np.bincount(row, weights=source) <= 48)
    assert np.all(np.bincount(row, weights=target) <= 64)
    # Ranks list rows one after another (what pack_window relies on).
    assert np.all(np.diff(row[np.argsort(rank)]) >= 0)
    fill = (source.sum() + target.sum()) / (len(used) * (48 + 64))
    assert fill > 0.9


@pytest.mark.quick
def test_a_pair_longer_than_a_row_is_refused():
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than a packed row"):
        packing.assign_rows(np.array([3, 9], np.int32), np.array([3, 3], np.int32),
                            np.int32(8), np.int32(8))


@pytest.fixture(scope="module")
def multi30k(shared_data, tmp_path_factory):
    """Multi30k with the task's own vocabulary (8,000 pieces), prepared, and its report."""
    work_dir = tmp_path_factory.mktemp("work")
    task = get_task("multi30k_ende", data_dir=str(shared_data))
    lines = []
    report = prepare.prepare(task, work_dir, batch_tokens=2048, splits=["train"],
                             log=lines.append)
    return task, work_dir, report, "\n".join(lines)


def unpack(batch):
    """The (source, target) ids (without EOS/BOS) of every pair of a packed batch, checking
    each pair's layout: contiguous segments 1, 2, ..., positions from 0, EOS and BOS in place,
    target_out = target_in shifted by one."""
    inputs, target_out = batch
    pairs = []
    for row in range(len(target_out)):
        sides = {}
        for side, ids in (("source", inputs["source_ids"][row]),
                          ("target", inputs["target_in_ids"][row])):
            segments = inputs[f"{side}_segments"][row]
            count = segments.max()
            real = np.count_nonzero(segments)
            # pairs 1..count one after another, then only padding
            assert np.array_equal(segments[:real], np.sort(segments[:real]))
            assert set(segments[:real]) == set(range(1, count + 1))
            assert not np.any(ids[real:]) and np.all(ids[:real])
            spans = [np.flatnonzero(segments == k) for k in range(1, count + 1)]
            for span in spans:
                assert np.array_equal(inputs[f"{side}_positions"][row][span],
                                      np.arange(len(span)))
            sides[side] = spans
        assert len(sides["source"]) == len(sides["target"])
        assert not np.any(target_out[row][len(np.flatnonzero(inputs["target_segments"][row])):])
        for source_span, target_span in zip(sides["source"], sides["target"]):
            source = inputs["source_ids"][row][source_span]
            target_in = inputs["target_in_ids"][row][target_span]
            out = target_out[row][target_span]
            assert source[-1] == EOS_ID and target_in[0] == BOS_ID and out[-1] == EOS_ID
            assert np.array_equal(target_in[1:], out[:-1])
            pairs.append((tuple(source[:-1].tolist()), tuple(out[:-1].tolist())))
    return pairs


def test_packed_multi30k_keeps_every_pair_once_with_under_3_percent_padding(multi30k):
    """One pass of packed batches over the real train split: every pair exactly once, each
    laid out as the model expects, rows of one shape, and padding <= 3% (bucketed: 13.9%),
    as prepare's table predicts."""
    task, work_dir, report, table = multi30k
    packed_line = [line for line in table.splitlines() if line.lstrip().startswith("packed")]
    assert len(packed_line) == 1 and "(--pack: rows of" in packed_line[0]
    estimate = report["packed"]
    assert estimate["padding"] < report["padding"]

    data = prepare.training_input(task, work_dir, batch_tokens=2048, repeat=False, pack=True,
                                  log=QUIET)
    rows = estimate["rows"]
    seen, real, padded, batches = [], 0, 0, 0
    for batch in data.dataset.as_numpy_iterator():
        inputs, target_out = batch
        assert sorted(inputs) == sorted(PACKED_INPUTS)
        size = len(target_out)
        assert size <= estimate["rows_per_batch"]
        for key, array in inputs.items():
            assert array.shape == (size, rows.source if key.startswith("source") else rows.target)
        assert target_out.shape == (size, rows.target)
        seen.extend(unpack(batch))
        positions = inputs["source_ids"].size + inputs["target_in_ids"].size
        padded += positions
        real += round((1 - packing.padding_fraction(batch)) * positions)
        batches += 1
    padding = 1 - real / padded
    print(f"\nMulti30k train packed in rows of {rows.source}/{rows.target} tokens, budget 2,048: "
          f"{batches} batches, padding {padding:.2%} (estimate {estimate['padding']:.2%}; "
          f"bucketed {report['padding']:.2%})")
    cache = prepare.prepare_split(task, "train", work_dir,
                                  prepare.ensure_vocab(task, work_dir, log=QUIET), log=QUIET).cache
    expected = []
    for source, target in cache.dataset().ragged_batch(8192).as_numpy_iterator():
        expected.extend((tuple(np.asarray(s).tolist()), tuple(np.asarray(t).tolist()))
                        for s, t in zip(source, target))
    assert len(seen) == len(expected) == 29_000
    assert collections.Counter(seen) == collections.Counter(expected)
    assert padding <= 0.03
    assert padding == pytest.approx(estimate["padding"], abs=0.005)
    assert batches == pytest.approx(data.batches_per_epoch, rel=0.02)


def test_run_trains_on_packed_batches_and_remembers_it(prepared, tmp_path, shared_data):
    """`--pack` trains, is saved in settings.json, and a resumed run packs without the flag."""
    model_dir = copy_prepared(prepared, tmp_path / "model")
    given = dict(model_dir=str(model_dir), **TINY, checkpoint_every=2)
    assert "train: packed, rows of" in run_stages("train", shared_data, **given, train_steps=2,
                                                  pack=True).log
    settings = json.loads((model_dir / "settings.json").read_text())
    assert settings["training"]["pack"] is True
    log = run_stages("train", shared_data, **given, train_steps=4).log
    assert "resumed from" in log and "train: packed, rows of" in log
    assert 'model_checkpoint_path: "ckpt-4"' in (
        model_dir / "checkpoints" / "checkpoint").read_text()
