"""Sampling decoding: reproducible per seed, greedy at the limits, the right distribution."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer
from keras_transformer.decoding import (BeamSearch, DecodingConstraint, Required, Sampling,
                                        decode, score_ids)
from keras_transformer.decoding.sampling import truncated_logits
from tests.helpers import random_ids, tiny_config

pytestmark = pytest.mark.xdist_group("test_sampling")  # its module fixtures: one worker

BOS, EOS, VOCAB = 2, 3, 20


@pytest.fixture(scope="module")
def model():
    """A random tiny model: its next-token distributions are uneven enough to sample from."""
    import keras

    keras.utils.set_random_seed(7)
    model = Transformer(tiny_config(vocab_size=VOCAB))
    return model


@pytest.fixture(scope="module")
def source():
    ids = random_ids(4, 6, vocab_size=VOCAB, seed=3, low=4)
    ids[1, 4:] = 0
    ids[3, 2:] = 0
    return ids


def sample_ids(model, source, *, seed, extra_length=BeamSearch.extra_length, **settings):
    """Sampling through the one entry point; alpha 0 ranks the samples by log-probability.
    `settings`: `Sampling`'s fields, and `decode`'s options (num_results, ...)."""
    fields = {k: settings.pop(k) for k in ("topk", "topp", "temperature") if k in settings}
    return decode(model, source, Sampling(**fields, seed=seed, alpha=0.0,
                                          extra_length=extra_length), **settings)


def _trim(ids):
    """Drops the all-padding columns at the end of [batch, n, length] ids."""
    ids = np.asarray(ids)
    return ids[:, :, :max(1, int((ids != 0).sum(-1).max()))]


def test_same_seed_same_samples_in_any_mode_other_seed_other_samples(model, source):
    args = dict(topk=8, topp=0.95, temperature=1.3, num_results=3, extra_length=6)
    eager = sample_ids(model, source, seed=11, **args)
    graph = tf.function(lambda s, seed: sample_ids(model, s, seed=seed, **args),
                                                   autograph=False)
    traced = graph(tf.constant(source), tf.constant(11, tf.int64))
    np.testing.assert_array_equal(eager[0], traced[0])
    np.testing.assert_allclose(eager[1], traced[1], rtol=1e-6)
    again = graph(tf.constant(source), tf.constant(11, tf.int64))
    np.testing.assert_array_equal(traced[0], again[0])
    others = [_trim(graph(tf.constant(source), tf.constant(seed, tf.int64))[0])
              for seed in (12, 13)]
    mine = _trim(eager[0])
    for other in others:
        assert mine.shape != other.shape or np.any(mine != other)
    # The 3 samples of a sentence are independent draws, not copies.
    assert any(len({tuple(s) for s in sentence.tolist()}) > 1 for sentence in mine)


def test_top_k_one_and_a_tiny_top_p_are_greedy_decoding(model, source):
    greedy, scores, *_ = decode(model, source, BeamSearch(beam_size=1, alpha=0.0, extra_length=6))
    greedy = _trim(greedy)
    for args in (dict(topk=1, temperature=2.0), dict(topp=1e-6, temperature=0.5)):
        for seed in (0, 1):
            ids, log_probs, *_ = sample_ids(model, source, seed=seed, extra_length=6, **args)
            np.testing.assert_array_equal(_trim(ids), greedy)
            np.testing.assert_allclose(log_probs, scores, atol=1e-5)
    assert len(np.unique(greedy)) > 3  # the model does not say one token only


def test_samples_end_at_eos_within_their_length_and_log_probs_are_the_models(model, source):
    out = sample_ids(model, source, seed=5, temperature=1.5, num_results=4, extra_length=3,
                     details=True)
    ids, token_log_probs = out.ids.numpy(), out.token_log_probs.numpy()
    max_lengths = (source != 0).sum(1) + 3
    for sentence, limit in enumerate(max_lengths):
        for row in ids[sentence]:
            length = int((row != 0).sum())
            assert 1 <= length <= limit and row[length - 1] == EOS
            assert not np.any(row[:length - 1] == EOS) and not np.any(row[length:])
    padding = ids == 0
    assert np.all(token_log_probs[padding] == 0) and np.all(token_log_probs[~padding] < 0)
    np.testing.assert_allclose(token_log_probs.sum(-1), out.scores, rtol=1e-5)
    alignment = out.alignment.numpy()
    assert np.all(alignment[padding] == -1)
    assert np.all((alignment >= 0) & (alignment < (source != 0).sum(1)[:, None, None])
                  | padding)
    # The full forward pass gives the same (untempered, untruncated) log-probabilities.
    for n in range(4):
        rescored = score_ids(model, source, ids[:, n], alpha=0.0)
        np.testing.assert_allclose(rescored, out.scores[:, n], rtol=1e-4, atol=1e-4)


def _expected(probs, topk, topp, temperature):
    """The sampling distribution by the definitions: tempered softmax, top-k, then top-p on
    the renormalised top-k (the smallest most likely set reaching p)."""
    with np.errstate(divide="ignore"):  # a token never allowed has probability 0
        tempered = np.exp(np.log(probs) / temperature)
    tempered /= tempered.sum()
    order = np.argsort(-tempered, kind="stable")
    kept = order[:topk] if topk else order
    mass = tempered[kept] / tempered[kept].sum()
    kept = kept[:int(np.searchsorted(np.cumsum(mass), topp)) + 1] if topp < 1 else kept
    want = np.zeros_like(tempered)
    want[kept] = tempered[kept] / tempered[kept].sum()
    return want


# The 99.9% quantiles of chi-square with 1..19 degrees of freedom: a correct sampler exceeds
# them with probability 0.1% (and the seeds are fixed, so a pass is reproducible).
CHI2_999 = [10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26,
            32.91, 34.53, 36.12, 37.70, 39.25, 40.79, 42.31, 43.82]


def _chi_square(counts, probs):
    support = probs > 0
    expected = counts.sum() * probs[support]
    return float(((counts[support] - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("topk,topp,temperature",
                         [(5, 1.0, 0.5), (0, 0.7, 0.6), (8, 1.0, 0.6), (0, 1.0, 0.5)])
def test_first_token_frequencies_follow_the_tempered_truncated_softmax(
        model, topk, topp, temperature):
    source = random_ids(1, 5, vocab_size=VOCAB, seed=9, low=4)
    logits = model((source, np.full([1, 1], BOS, np.int32)), training=False)[0, 0].numpy()
    probs = np.exp(logits[1:] - logits[1:].max())  # PAD (id 0) is never a choice
    probs[EOS - 1] = 0.0  # nor, as the first token, EOS (no output ends at once)
    probs = np.concatenate([[0.0], probs / probs.sum()])
    want = _expected(probs[1:], topk, topp, temperature)
    want = np.concatenate([[0.0], want])
    # 8 seeds x 500 samples; at max_length 2 the first token is free, the second is EOS.
    counts = np.zeros(VOCAB)
    for seed in range(8):
        ids, *_ = sample_ids(model, source, seed=seed, topk=topk, topp=topp,
                             temperature=temperature, num_results=500, max_length=2)
        counts += np.bincount(ids.numpy()[0, :, 0], minlength=VOCAB)
    assert counts.sum() == 4000
    assert np.all(counts[want == 0] == 0), (counts, want)
    support = int((want > 0).sum())
    assert support >= 5 and (support < VOCAB - 2) == (topk > 0 or topp < 1)  # a real cut
    critical = CHI2_999[support - 2]
    statistic = _chi_square(counts, want)
    assert statistic < critical, (statistic, counts, want * 4000)
    # The test can tell: the distribution without the temperature, or without the cut, is
    # rejected by far (or made impossible by a token drawn outside its support).
    wrongs = [_expected(probs[1:], topk, topp, 1.0)]
    if topk or topp < 1:
        wrongs.append(_expected(probs[1:], 0, 1.0, temperature))
    for wrong in wrongs:
        wrong = np.concatenate([[0.0], wrong])
        if not np.any(counts[wrong == 0] > 0):
            assert _chi_square(counts, wrong) > 3 * critical, (counts, wrong * 4000)


@pytest.mark.quick
def test_truncation_keeps_the_smallest_set_reaching_p_of_the_top_k():
    log_probs = np.log(np.array([[0.05, 0.5, 0.15, 0.3]], np.float32))

    def kept(topk, topp, temperature=1.0):
        logits, tokens = truncated_logits(tf.constant(log_probs), tf.constant(topk),
                                          tf.constant(topp), tf.constant(temperature))
        return sorted(tokens.numpy()[0][logits.numpy()[0] > -1e8].tolist())

    assert kept(0, 1.0) == [0, 1, 2, 3]
    assert kept(0, 0.4) == [1]            # the top token alone has 0.5 >= 0.4
    assert kept(0, 0.75) == [1, 3]        # 0.5 < 0.75, 0.5 + 0.3 >= 0.75
    assert kept(0, 0.85) == [1, 2, 3]
    assert kept(2, 1.0) == [1, 3]
    assert kept(3, 0.9) == [1, 2, 3]      # top-3 renormalised: 0.53, 0.32 before 0.16
    assert kept(3, 0.8) == [1, 3]         # 0.53 + 0.32 = 0.84 >= 0.8
    logits, tokens = truncated_logits(tf.constant(log_probs), tf.constant(0),
                                      tf.constant(1.0), tf.constant(2.0))
    np.testing.assert_allclose(logits.numpy()[0], log_probs[0][tokens.numpy()[0]] / 2.0,
                               rtol=1e-6)


class _Forbid(DecodingConstraint):
    """Allows every token but `forbidden` (EOS stays allowed)."""

    def __init__(self, forbidden):
        self.forbidden = forbidden

    def initial_state(self, source_ids, beam_size, max_steps):
        return {"unused": tf.zeros([tf.shape(source_ids)[0], beam_size, 1])}

    def allowed(self, ids, step, state, max_lengths, vocab_size):
        allowed = ~tf.reduce_any(tf.equal(tf.range(vocab_size)[:, None], self.forbidden), 1)
        return tf.broadcast_to(allowed, tf.concat([tf.shape(ids), [vocab_size]], 0)), state


def test_constraint_and_prefix_restrict_the_samples(model, source):
    greedy, *_ = decode(model, source, BeamSearch(beam_size=1, alpha=0.0, extra_length=6))
    prefix = np.array([[7, 8], [0, 0], [9, 0], [10, 11]], np.int32)
    forbidden = sorted(set(np.unique(greedy)) - {0, EOS} - set(prefix.ravel()))[:3]
    assert forbidden  # tokens the model likes
    ids, *_ = sample_ids(model, source, seed=3, temperature=1.5, num_results=5, extra_length=6,
                         constraint=_Forbid(forbidden), required=Required(prefix_ids=prefix))
    ids = ids.numpy()
    assert not np.isin(ids, forbidden).any()
    for sentence, row_prefix in enumerate(prefix):
        width = int((row_prefix != 0).sum())
        assert np.all(ids[sentence, :, :width] == row_prefix[:width])
    unconstrained, *_ = sample_ids(model, source, seed=3, temperature=1.5, num_results=5,
                                   extra_length=6)
    assert np.isin(unconstrained.numpy(), forbidden).any()  # the constraint did something


@pytest.mark.quick
@pytest.mark.parametrize("field,value,message", [
    ("topk", -1, "topk must be an integer >= 0"), ("topp", 0.0, "topp must be in (0, 1]"),
    ("topp", 1.5, "topp must be in (0, 1]"), ("temperature", 0.0, "temperature must be"),
    ("temperature", float("nan"), "temperature must be"), ("seed", 2 ** 63, "seed must be")])
def test_settings_refuse_values_that_mean_nothing(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        Sampling(**{field: value})


def test_sampling_with_tensor_fields_samples_as_with_python_values(model, source):
    """`Sampling` holding scalar tensors, as the served graph passes them, samples exactly
    as with the same Python values."""
    import tensorflow as tf

    expected = sample_ids(model, source, seed=4, topk=8, topp=0.9, temperature=1.3,
                          num_results=2, extra_length=4)
    search = Sampling(tf.constant(8), tf.constant(0.9), tf.constant(1.3),
                      tf.constant(4, tf.int64), alpha=tf.constant(0.0), extra_length=4)
    got = decode(model, source, search, num_results=2)
    np.testing.assert_array_equal(got.ids, expected.ids)
    np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-6)
