"""Beam search: greedy equivalence, scores, cached vs uncached decoding, lengths."""
import numpy as np
import pytest
import tensorflow as tf

import keras

from keras_transformer import LabelSmoothedCrossEntropy, Transformer
from keras_transformer.search import beam_search, score_ids, translate_ids
from tests.helpers import random_ids, tiny_config

BOS, EOS = 2, 3


@pytest.fixture(scope="module")
def model():
    """A model trained briefly to reverse sequences of varied length: its outputs depend on
    the input and end at various steps, but it is unsure enough for beams to disagree."""
    rng = np.random.default_rng(5)
    n, width = 2048, 6
    lengths = rng.integers(2, width + 1, size=n)
    source = rng.integers(4, 12, size=(n, width)).astype("int32")
    source[np.arange(width)[None, :] >= lengths[:, None]] = 0
    target = np.zeros((n, width + 1), "int32")
    for i, length in enumerate(lengths):
        target[i, :length] = source[i, :length][::-1]
        target[i, length] = EOS
    target_in = np.concatenate([np.full((n, 1), BOS, "int32"), target[:, :-1]], axis=1)
    model = Transformer(tiny_config(vocab_size=12))
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=LabelSmoothedCrossEntropy(0.1))
    model.fit((source, target_in), target, batch_size=64, epochs=2, verbose=0)
    return model


@pytest.fixture(scope="module")
def source():
    ids = random_ids(4, 6, vocab_size=12, seed=11)
    ids[1, 3:] = 0
    ids[3, 5:] = 0
    return ids


def plain_greedy(model, source, steps):
    """Arg-max over non-pad ids, re-running the full forward pass on the prefix each step."""
    target = np.full((source.shape[0], 1), BOS, "int32")
    for _ in range(steps):
        logits = model((source, target), training=False).numpy()
        target = np.concatenate([target, (logits[:, -1, 1:].argmax(-1) + 1)[:, None].astype("int32")], 1)
    out = target[:, 1:]
    for row in out:  # pad after the first end token
        ends = np.flatnonzero(row == EOS)
        if ends.size:
            row[ends[0] + 1:] = 0
    return out


def test_beam_one_without_penalty_is_greedy(model, source):
    ids, _ = translate_ids(model, source, beam_size=1, alpha=0.0, extra_length=4, eos_id=EOS)
    ids = ids.numpy()[:, 0]
    expected = plain_greedy(model, source, ids.shape[1])
    lengths = (source != 0).sum(1) + 4
    for row, want, length in zip(ids, expected, lengths):
        # The search forces the end token at the last allowed position; greedy does not.
        np.testing.assert_array_equal(row[:length - 1], want[:length - 1])
    assert len(np.unique(ids)) > 3  # the model really produces varied output


@pytest.mark.parametrize("beam_size,alpha", [(1, 0.0), (4, 0.6), (3, 1.0)])
def test_returned_score_equals_full_forward_rescoring(model, source, beam_size, alpha):
    ids, scores = translate_ids(model, source, beam_size=beam_size, alpha=alpha,
                                extra_length=5, eos_id=EOS, num_results=min(2, beam_size))
    for n in range(ids.shape[1]):
        rescored = score_ids(model, source, ids[:, n], alpha=alpha).numpy()
        np.testing.assert_allclose(scores.numpy()[:, n], rescored, rtol=1e-4, atol=1e-4)
    # n-best comes sorted, best first
    assert np.all(np.diff(scores.numpy(), axis=1) <= 1e-6)


def test_every_output_ends_with_eos_within_its_length(model, source):
    extra = 3
    ids, _ = translate_ids(model, source, beam_size=4, extra_length=extra, eos_id=EOS)
    ids = ids.numpy()[:, 0]
    for row, src in zip(ids, source):
        length = int((src != 0).sum()) + extra
        real = row[row != 0]
        assert real[-1] == EOS and len(real) <= length
        assert np.all(row[len(real):] == 0)


def test_cached_and_uncached_decoding_agree(model, source):
    """The KV-cached step and a full re-run of the prefix give the same beams."""
    beam, extra = 4, 5
    lengths = (source != 0).sum(1) + extra
    cached = translate_ids(model, source, beam_size=beam, extra_length=extra, eos_id=EOS,
                           num_results=beam)
    steps = int(lengths.max())
    batch = source.shape[0]
    tiled_source = np.repeat(source, beam, axis=0)

    def uncached(ids, step, cache):
        prefix = tf.where(tf.equal(tf.range(steps + 1), step)[None, None, :], ids[:, :, None],
                          cache["prefix"])
        flat = tf.reshape(prefix, [batch * beam, steps + 1])
        logits = model((tiled_source, flat), training=False)
        step_logits = tf.reshape(tf.gather(logits, step, axis=1), [batch, beam, -1])
        return step_logits, {"prefix": prefix}

    start = tf.fill([batch], BOS)
    uncached_result = beam_search(uncached, start,
                                  {"prefix": tf.zeros([batch, beam, steps + 1], tf.int32)},
                                  beam, lengths, EOS, alpha=0.6, num_results=beam)
    np.testing.assert_array_equal(cached[0].numpy(), uncached_result[0].numpy())
    np.testing.assert_allclose(cached[1].numpy(), uncached_result[1].numpy(), atol=1e-4)


def test_runs_under_xla_with_dynamic_shapes(model):
    decode = tf.function(lambda s: translate_ids(model, s, beam_size=2, extra_length=3,
                                                 eos_id=EOS), jit_compile=True)
    eager = translate_ids(model, random_ids(2, 5, vocab_size=12, seed=1), beam_size=2,
                          extra_length=3, eos_id=EOS)
    compiled = decode(random_ids(2, 5, vocab_size=12, seed=1))
    np.testing.assert_array_equal(eager[0].numpy(), compiled[0].numpy())
    assert decode(random_ids(3, 7, vocab_size=12, seed=2))[0].shape[0] == 3


def test_without_early_finish_runs_every_step(model, source):
    ids, scores = translate_ids(model, source, beam_size=2, extra_length=4, eos_id=EOS,
                                early_finish=False)
    assert ids.shape[2] == source.shape[1] + 4
    assert np.all(np.isfinite(scores.numpy()))
