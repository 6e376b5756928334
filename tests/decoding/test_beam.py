"""Beam search: greedy equivalence, scores, cached vs uncached decoding, lengths."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import BeamSearch, Required, decode, score_ids
from keras_transformer.decoding.beam import SearchOptions, beam_search
from keras_transformer.decoding.tf_graph import cache_length, compiling_with_xla
from tests.helpers import random_ids, reversal_model

pytestmark = pytest.mark.xdist_group("test_beam")  # its module fixtures: one worker

BOS, EOS = 2, 3


@pytest.fixture(scope="module")
def model():
    return reversal_model()


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


@pytest.mark.quick
def test_beam_one_without_penalty_is_greedy(model, source):
    ids, *_ = decode(model, source, BeamSearch(beam_size=1, alpha=0.0, extra_length=4))
    ids = ids.numpy()[:, 0]
    expected = plain_greedy(model, source, ids.shape[1])
    lengths = (source != 0).sum(1) + 4
    for row, want, length in zip(ids, expected, lengths):
        # The search forces the end token at the last allowed position; greedy does not.
        np.testing.assert_array_equal(row[:length - 1], want[:length - 1])
    assert len(np.unique(ids)) > 3  # the model really produces varied output


@pytest.mark.parametrize("beam_size,alpha", [
    (1, 0.0), pytest.param(4, 0.6, marks=pytest.mark.quick), (3, 1.0)])
def test_returned_score_equals_full_forward_rescoring(model, source, beam_size, alpha):
    ids, scores, *_ = decode(model, source,
                             BeamSearch(beam_size=beam_size, alpha=alpha, extra_length=5),
                             num_results=min(2, beam_size))
    for n in range(ids.shape[1]):
        rescored = score_ids(model, source, ids[:, n], alpha=alpha).numpy()
        np.testing.assert_allclose(scores.numpy()[:, n], rescored, rtol=1e-4, atol=1e-4)
    # n-best comes sorted, best first
    assert np.all(np.diff(scores.numpy(), axis=1) <= 1e-6)


def test_every_output_ends_with_eos_within_its_length(model, source):
    extra = 3
    ids, *_ = decode(model, source, BeamSearch(beam_size=4, extra_length=extra))
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
    cached = decode(model, source, BeamSearch(beam_size=beam, extra_length=extra),
                    num_results=beam)
    steps = int(lengths.max())
    batch = source.shape[0]
    tiled_source = np.repeat(source, beam, axis=0)

    def uncached(ids, step, cache, sentences):
        prefix = tf.where(tf.equal(tf.range(steps + 1), step)[None, None, :], ids[:, :, None],
                          cache["prefix"])
        flat = tf.reshape(prefix, [batch * beam, steps + 1])
        logits = model((tiled_source, flat), training=False)
        step_logits = tf.reshape(tf.gather(logits, step, axis=1), [batch, beam, -1])
        return step_logits, {"prefix": prefix}

    start = tf.fill([batch], BOS)
    uncached_result = beam_search(uncached, start,
                                  {"prefix": tf.zeros([batch, beam, steps + 1], tf.int32)},
                                  BeamSearch(beam, 0.6), lengths, EOS,
                                  SearchOptions(num_results=beam))
    np.testing.assert_array_equal(cached[0].numpy(), uncached_result[0].numpy())
    np.testing.assert_allclose(cached[1].numpy(), uncached_result[1].numpy(), atol=1e-4)


def test_runs_under_xla_with_dynamic_shapes(model):
    compile = tf.function(lambda s: decode(model, s, BeamSearch(beam_size=2, extra_length=3)),
                          jit_compile=True)
    eager = decode(model, random_ids(2, 5, vocab_size=12, seed=1),
                   BeamSearch(beam_size=2, extra_length=3))
    compiled = compile(random_ids(2, 5, vocab_size=12, seed=1))
    np.testing.assert_array_equal(eager[0].numpy(), compiled[0].numpy())
    assert compile(random_ids(3, 7, vocab_size=12, seed=2))[0].shape[0] == 3


def test_the_graph_search_equals_the_xla_one(model):
    """Outside XLA the decoder cache grows a position a step and sentences that cannot
    improve leave the batch; under XLA the cache has fixed slots and every sentence stays.
    Both give the same n-best lists and scores (and so does eager execution)."""
    source = random_ids(16, 6, vocab_size=12, seed=21)
    source[np.arange(6)[None, :] >= np.arange(16)[:, None] % 6 + 1] = 0  # lengths 1..6

    def search(s):
        return decode(model, s, BeamSearch(beam_size=4, extra_length=5), num_results=3)

    kinds = []

    def record(s):
        kinds.append((compiling_with_xla(), cache_length(tf.constant(7))))
        return search(s)

    graph = tf.function(record)(source)
    xla = tf.function(record, jit_compile=True)(source)
    assert kinds[0] == (False, None) and kinds[1][0] and kinds[1][1] is not None
    np.testing.assert_array_equal(graph[0].numpy(), xla[0].numpy())
    np.testing.assert_allclose(graph[1].numpy(), xla[1].numpy(), atol=1e-5)
    np.testing.assert_array_equal(search(source)[0].numpy(), xla[0].numpy())  # eager


def test_without_early_finish_runs_every_step(model, source):
    from tests.decoding.test_drivers import full_length

    ids, scores, *_ = full_length(model, source, BeamSearch(beam_size=3, extra_length=4), None)
    assert ids.shape[2] == source.shape[1] + 4
    assert np.all(np.isfinite(scores.numpy()))


# ---------------------------------------------------------------------- per-request options
def test_dynamic_beam_in_a_graph_equals_the_static_beam(model, source):
    """Beam size, alpha and num_results as tensors (a dynamic beam, no XLA) change nothing."""
    static_ids, static_scores, *_ = decode(model, source,
                                           BeamSearch(beam_size=3, alpha=0.6, extra_length=4),
                                           num_results=2)
    dynamic = tf.function(
        lambda s, k, a, n: decode(model, s, BeamSearch(beam_size=k, alpha=a, extra_length=4),
                                  num_results=n), autograph=False)
    ids, scores, *_ = dynamic(source, tf.constant(3), tf.constant(0.6), tf.constant(2))
    np.testing.assert_array_equal(ids.numpy(), static_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), static_scores.numpy(), atol=1e-5)
    # The hypotheses axis really is dynamic: one trace serves another beam size.
    ids4, *_ = dynamic(source, tf.constant(4), tf.constant(0.6), tf.constant(4))
    assert ids4.shape[1] == 4 and dynamic.experimental_get_tracing_count() == 1


def test_prefix_is_forced_scored_and_token_scores_add_up(model, source):
    prefix = np.array([[5, 6], [7, 0], [0, 0], [4, 4]], np.int32)
    out = decode(model, source, BeamSearch(beam_size=3, alpha=0.6, extra_length=4),
                 num_results=3, required=Required(prefix_ids=prefix), details=True)
    ids, scores = out.ids.numpy(), out.scores.numpy()
    for row, forced in enumerate(prefix):
        forced = forced[forced != 0]
        assert np.all(ids[row, :, :len(forced)] == forced)
    lengths = np.count_nonzero(ids, axis=2)
    token_log_probs = out.token_log_probs.numpy()
    np.testing.assert_allclose(token_log_probs.sum(2), scores * ((5 + lengths) / 6) ** 0.6,
                               rtol=1e-4, atol=1e-4)
    for n in range(3):  # the forced pieces' log-probabilities count in the score
        rescored = score_ids(model, source, ids[:, n], alpha=0.6).numpy()
        np.testing.assert_allclose(scores[:, n], rescored, rtol=1e-4, atol=1e-4)
    alignment = out.alignment.numpy()
    source_lengths = np.count_nonzero(source, axis=1)
    assert np.all(alignment[ids == 0] == -1)
    assert np.all((alignment[ids != 0] >= 0))
    assert np.all(alignment < source_lengths[:, None, None])
    # Without `details` the search computes none of them.
    plain = decode(model, source, BeamSearch(beam_size=3, alpha=0.6, extra_length=4),
                   num_results=3)
    assert plain.token_log_probs is None and plain.alignment is None


@pytest.mark.quick
def test_alignment_layer_is_the_penultimate():
    from keras_transformer.decoding import alignment_layer

    assert [alignment_layer(n) for n in (1, 2, 6)] == [0, 0, 4]


def test_token_details_tracked_in_the_search_equal_the_teacher_forced_pass(model, source):
    """With a constraint the search tracks token scores and alignments step by step;
    without one they come from a teacher-forced pass. An allow-all constraint must give
    the same numbers as no constraint."""
    from keras_transformer.decoding import DecodingConstraint

    class AllowAll(DecodingConstraint):
        def initial_state(self, source_ids, beam_size, max_steps):
            return {"unused": tf.zeros([tf.shape(source_ids)[0], beam_size, 1])}

        def allowed(self, ids, step, state, max_lengths, vocab_size):
            shape = tf.concat([tf.shape(ids), [vocab_size]], 0)
            return tf.ones(shape, tf.bool), state

    search = BeamSearch(beam_size=3, alpha=0.6, extra_length=4)
    args = dict(num_results=2, details=True,
                required=Required(prefix_ids=np.array([[5], [0], [6], [0]], np.int32)))
    tracked = decode(model, source, search, constraint=AllowAll(), **args)
    forced = decode(model, source, search, **args)
    width = forced.ids.shape[2]
    np.testing.assert_array_equal(tracked.ids.numpy()[:, :, :width], forced.ids.numpy())
    assert not np.any(tracked.ids.numpy()[:, :, width:])
    np.testing.assert_allclose(tracked.token_log_probs.numpy()[:, :, :width],
                               forced.token_log_probs.numpy(), atol=1e-4)
    np.testing.assert_array_equal(tracked.alignment.numpy()[:, :, :width],
                                  forced.alignment.numpy())


@pytest.mark.quick
@pytest.mark.parametrize("kind", ["normal", "ties", "mostly_masked"])
def test_blocked_top_k_equals_tensorflows(kind):
    """Values and indices equal `tf.math.top_k`'s, ties (to the lower index) included, for
    row lengths with and without a block size dividing them, static and dynamic."""
    from keras_transformer.decoding.tf_graph import top_k
    rng = np.random.default_rng({"normal": 0, "ties": 1, "mostly_masked": 2}[kind])
    dynamic = tf.function(top_k, input_signature=[tf.TensorSpec([None, None], tf.float32),
                                                  tf.TensorSpec([], tf.int32)])
    for n in (3, 127, 250, 8000, 8001, 37000):
        x = {"normal": lambda: rng.normal(size=(5, n)),
             "ties": lambda: rng.integers(0, 4, size=(5, n)).astype(float),
             "mostly_masked": lambda: np.where(rng.random((5, n)) < 0.002,
                                               rng.normal(size=(5, n)), -1e9)}[kind]()
        x = tf.constant(x, tf.float32)
        for k in sorted({1, 3, min(9, n)}):
            expected = tf.math.top_k(x, k)
            for got in (top_k(x, k), dynamic(x, k)):
                np.testing.assert_array_equal(got[0], expected[0])
                np.testing.assert_array_equal(got[1], expected[1])


@pytest.mark.quick
def test_candidates_equal_ranking_the_whole_vocabulary():
    """`_candidates` (top tokens per hypothesis, one log-sum-exp) picks what ranking every
    beam x vocabulary sum of the log-softmax does, with padding never chosen, only the end
    token at a last position and only the forced token where one is forced."""
    from keras_transformer.decoding.core import NEG as _NEG
    from keras_transformer.decoding.core import candidates as _candidates
    rng = np.random.default_rng(3)
    batch, beams, vocab, width = 6, 3, 50, 6
    logits = tf.constant(rng.normal(size=(batch, beams, vocab)) * 3, tf.float32)
    alive = tf.constant(np.where(rng.random((batch, beams)) < 0.2, _NEG,
                                 -rng.random((batch, beams)) * 5), tf.float32)
    last = tf.constant([False, True, False, False, True, False])
    forced = tf.constant([0, 0, 7, 0, 0, 9], tf.int32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    columns = tf.range(vocab)[None, None, :]
    disallowed = ((last[:, None, None] & (columns != EOS)) | (columns == 0)
                  | ((forced > 0)[:, None, None] & (columns != forced[:, None, None])))
    masked = tf.where(disallowed, _NEG, log_probs)
    expected_sums, expected = tf.math.top_k(
        tf.reshape(alive[:, :, None] + masked, [batch, -1]), width)
    sums, beam, token, token_log_probs = _candidates(logits, alive, width, EOS, last, forced)
    allowed = expected_sums > _NEG / 2  # beyond them the order of masked fillers is free
    np.testing.assert_allclose(sums, expected_sums, rtol=1e-6)
    np.testing.assert_array_equal(np.where(allowed, beam, -1),
                                  np.where(allowed, expected // vocab, -1))
    np.testing.assert_array_equal(np.where(allowed, token, -1),
                                  np.where(allowed, expected % vocab, -1))
    np.testing.assert_allclose(
        np.where(allowed, token_log_probs, 0),
        np.where(allowed, tf.gather(tf.reshape(masked, [batch, -1]), expected, batch_dims=1),
                 0), rtol=1e-6)
    assert np.all(token.numpy()[allowed.numpy()] != 0)


def scripted_step(ids, step, cache, sentences):
    """A model of two sentences. The first surely says "4" (step 0), then ends slightly more
    readily than it says "4" again (step 1), then surely says "4" (step 2) and surely ends
    (later): "4 EOS" scores -0.644 / lp(2) = -0.587, "4 4 4 EOS" -0.744 / lp(4) = -0.583 with
    alpha 0.6, the better one, found only by searching on after the first hypothesis
    finished. The second surely says "4" four times, then ends: the search goes on for it."""
    low, four, end = -30.0, [-30.0] * 4 + [10.0], [-30.0] * 3 + [10.0, -30.0]
    tables = tf.constant([[four, [low, low, low, 0.1, 0.0], four, end, end],
                          [four, four, four, four, end]])
    logits = tf.gather(tf.gather(tables, sentences["index"]), tf.minimum(step, 4), axis=1)
    return tf.broadcast_to(logits[:, None], tf.concat([tf.shape(ids), [5]], 0)), cache


@pytest.mark.quick
@pytest.mark.parametrize("leaving", [False, True], ids=["fixed_rows", "sentences_leave"])
def test_the_stop_rules(leaving):
    """"exact" searches on while a live hypothesis could still win and finds "4 4 4 EOS";
    "best_finished" stops as soon as the finished "4 EOS" beats every live hypothesis as it
    stands, in both drivers (sentences leaving the batch, or staying to the end)."""
    def search(stop_rule):
        return tf.function(lambda: beam_search(
            scripted_step, tf.fill([2], BOS), {"rows": tf.zeros([2, 2, 1])},
            BeamSearch(2, 0.6, stop_rule=stop_rule), 6, EOS,
            SearchOptions(sentence_state={"unused": tf.zeros([2])} if leaving else None)))()

    exact, early = search("exact"), search("best_finished")
    np.testing.assert_array_equal(exact.ids.numpy()[0, 0, :4], [4, 4, 4, EOS])
    np.testing.assert_array_equal(early.ids.numpy()[0, 0, :3], [4, EOS, 0])
    np.testing.assert_allclose(early.scores.numpy()[0, 0],
                               np.log(1 / (1 + np.exp(-0.1))) / (7 / 6) ** 0.6, rtol=1e-5)
    assert exact.scores.numpy()[0, 0] > early.scores.numpy()[0, 0]
    # The second sentence, searched on meanwhile, is the same under both rules.
    for out in (exact, early):
        np.testing.assert_array_equal(out.ids.numpy()[1, 0, :5], [4, 4, 4, 4, EOS])


def _ending_model(vocab=6):
    """A step function whose likeliest token is always the end token (log-probability about
    -0.01), then token 4 (about -5): the empty output outscores every real one."""
    logits = tf.constant([-10.0, -10.0, -10.0, 5.0, 0.0, -10.0][:vocab])

    def step_fn(last_tokens, step, cache, sentences):
        shape = tf.shape(last_tokens)
        return tf.broadcast_to(logits, tf.concat([shape, [vocab]], 0)), cache

    return step_fn


@pytest.mark.quick
@pytest.mark.parametrize("beam_size", [1, 4])
@pytest.mark.parametrize("compacting", [False, True])
def test_no_hypothesis_ends_before_its_first_token(beam_size, compacting):
    """fairseq's --min-len 1: where the model would end at once (its likeliest first token is
    the end token, and under any length penalty the empty output wins), the search returns a
    token first; only a sentence whose limit is one token ends at once."""
    from keras_transformer.decoding.sampling import sample
    from keras_transformer.decoding import Sampling

    batch, step_fn = 2, _ending_model()
    lengths = tf.constant([6, 1])
    options = SearchOptions(num_results=1, sentence_state=tf.zeros([batch, 1])
                            if compacting else None)
    ids, scores = beam_search(step_fn, tf.fill([batch], BOS), tf.zeros([batch, beam_size, 1]),
                              BeamSearch(beam_size=beam_size, alpha=1.0), lengths, EOS,
                              options)[:2]
    assert ids.numpy()[:, 0, :2].tolist() == [[4, EOS], [EOS, 0]]
    assert scores.numpy()[0, 0] == pytest.approx(-5.0 / ((5 + 2) / 6), abs=0.02)
    drawn = sample(step_fn, tf.fill([batch], BOS), tf.zeros([batch, 1]),
                   Sampling(topk=1), lengths, EOS, SearchOptions(num_results=1))
    assert drawn.ids.numpy()[:, 0, :2].tolist() == [[4, EOS], [EOS, 0]]
