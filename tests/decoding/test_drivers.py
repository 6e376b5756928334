"""The two drivers of the one beam search give the same results: fixed slots (every Keras
backend; TensorFlow under XLA) and TensorFlow's graph with a growing cache and sentences
leaving the batch: ids exactly, scores within 1e-5.

Under TensorFlow here; tests/test_backends.py checks the same ids under JAX, with weights
and references written by `write_beam_reference` in this (TensorFlow) process.
"""
import numpy as np
import pytest

import keras

from keras_transformer import Transformer
from keras_transformer.decoding import BeamSearch, decode, make_translate_function, translate
from tests.helpers import random_ids, reversal_model, tiny_config

pytestmark = pytest.mark.xdist_group("test_drivers")  # its module fixtures: one worker

EOS = 3
VOCAB = 12  # `reversal_model`'s vocabulary
CASES = [dict(beam_size=1, alpha=0.0, num_results=1),
         dict(beam_size=4, alpha=0.0, num_results=2),
         dict(beam_size=4, alpha=0.6, num_results=1),
         dict(beam_size=4, alpha=0.6, num_results=2)]
"""Greedy and beam 4, without and with the length penalty, 1-best and 2-best."""
JAX_CASES = (CASES[3],)
"""What tests/test_backends.py compares under JAX: the paper's beam and alpha, 2-best (each
case costs an XLA compilation of about 5 s there; greedy is the same code with k = 1)."""

on_tensorflow = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                   reason="compares with TensorFlow's graph driver")


def varied_source():
    """16 sources of 1 to 6 tokens, 0-padded to 6."""
    source = random_ids(16, 6, vocab_size=VOCAB, seed=21)
    source[np.arange(6)[None, :] >= np.arange(16)[:, None] % 6 + 1] = 0
    return source


def case_name(case):
    return "beam{beam_size}_alpha{alpha}_n{num_results}".format(**case)


def case_args(case, **search):
    """A case as `decode`'s arguments: its `BeamSearch` (with `search`) and num_results."""
    return (BeamSearch(case["beam_size"], case["alpha"], **search),
            {"num_results": case["num_results"]})


def write_beam_reference(weights_path, values):
    """Trains `tests.helpers.reversal_model` under TensorFlow, saves its weights to
    `weights_path` (.weights.h5) and adds to `values` the source and what
    `decode` returns for each of `JAX_CASES` ("beam_source", "beam_ids_<case>",
    "beam_scores_<case>")."""
    model = reversal_model()
    model.save_weights(weights_path)
    values["beam_source"] = source = varied_source()
    for case in JAX_CASES:
        search, options = case_args(case, extra_length=5)
        ids, scores, *_ = decode(model, source, search, **options)
        values[f"beam_ids_{case_name(case)}"] = ids.numpy()
        values[f"beam_scores_{case_name(case)}"] = scores.numpy()


@pytest.fixture(scope="module")
def model():
    return reversal_model()


def fixed_slots(model, search, **options):
    """`decode` under XLA: the fixed-slot driver, every sentence kept to the end."""
    return make_translate_function(model, search, jit_compile=True, **options)


@on_tensorflow
@pytest.mark.parametrize("case", CASES, ids=case_name)
def test_equals_tensorflows_search(model, case):
    """Fixed slots give the same n-best ids and scores as the graph driver (growing cache,
    compaction) on sources of every length 1-6 with padding; the model really answers
    varied lengths."""
    source = varied_source()
    search, options = case_args(case, extra_length=5)
    expected_ids, expected_scores, *_ = decode(model, source, search, **options)
    ids, scores, *_ = fixed_slots(model, search, **options)(source)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(ids), expected_ids.numpy())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scores), expected_scores.numpy(),
                               rtol=0, atol=1e-5)
    lengths = np.count_nonzero(expected_ids.numpy()[:, 0], axis=1)
    assert len(set(lengths)) > 2, lengths


def full_length(model, source, search, max_length):
    """`beam_search` without early finish (as benchmarks/throughput.py times it), every
    sentence kept to the end; `max_length` None: a growing cache, else fixed slots."""
    from keras_transformer.decoding import step
    from keras_transformer.decoding.beam import SearchOptions, beam_search

    steps = source.shape[1] + search.extra_length
    memory, mask = model.encode(source, training=False)
    cache, sentences = model.initial_decode_state(memory, mask, search.beam_size, max_length)
    return beam_search(step.model_step(model), keras.ops.full((len(source),), 2, "int32"),
                       cache, search, steps, EOS,
                       SearchOptions(num_results=3, early_finish=False, sentence_state=sentences))


@on_tensorflow
def test_in_a_graph_with_dynamic_shapes_and_without_early_finish(model):
    """Inside `tf.function` with unknown batch and width (as an export traces it), the graph
    driver equals fixed slots; so does a growing cache running every step without early
    finish."""
    import tensorflow as tf

    source = varied_source()
    search = BeamSearch(beam_size=3, alpha=0.6, extra_length=4)
    graph = tf.function(lambda s: decode(model, s, search, num_results=3),
                        input_signature=[tf.TensorSpec([None, None], tf.int32)])
    steps = source.shape[1] + search.extra_length
    for got, expected in ((graph(source), fixed_slots(model, search, num_results=3)(source)),
                          (full_length(model, source, search, None),
                           full_length(model, source, search, steps))):
        np.testing.assert_array_equal(np.asarray(got[0]), expected[0].numpy())
        np.testing.assert_allclose(np.asarray(got[1]), expected[1].numpy(), rtol=0, atol=1e-5)


@on_tensorflow
def test_compiled_functions_and_translate_agree(model):
    """`make_translate_function` (in a `tf.function`, with and without XLA) and `translate`
    give the same results; one compiled function also takes a batch of another shape and
    integer type."""
    source = varied_source()[:6]
    search, options = BeamSearch(beam_size=2, alpha=0.6, extra_length=3), dict(num_results=2)
    compiled = make_translate_function(model, search, **options)
    results = [compiled(source), fixed_slots(model, search, **options)(source),
               translate(model, source, search, **options)]
    for ids, scores, *_ in results[1:]:
        np.testing.assert_array_equal(np.asarray(ids), np.asarray(results[0][0]))
        np.testing.assert_allclose(np.asarray(scores), np.asarray(results[0][1]), atol=1e-5)
    narrower = source[:4, :5].astype("int64")
    (ids, scores, *_), expected = compiled(narrower), translate(model, narrower, search,
                                                                **options)
    np.testing.assert_array_equal(np.asarray(ids), np.asarray(expected[0]))
    np.testing.assert_allclose(np.asarray(scores), np.asarray(expected[1]), atol=1e-5)


@pytest.mark.quick
def test_num_results_beyond_the_beam_is_refused():
    with pytest.raises(ValueError, match="num_results"):
        decode(Transformer(tiny_config()), varied_source(), BeamSearch(beam_size=2),
               num_results=3)


@on_tensorflow
def test_best_finished_rule_equals_tensorflows_search(model):
    """Under the "best_finished" stop rule a stopped sentence keeps its results while its
    batch-mates go on (fixed slots) exactly as when it leaves the batch (graph driver)."""
    source = varied_source()
    search = BeamSearch(beam_size=4, alpha=0.6, extra_length=5, stop_rule="best_finished")
    case = dict(num_results=2)
    expected_ids, expected_scores, *_ = decode(model, source, search, **case)
    ids, scores, *_ = fixed_slots(model, search, **case)(source)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(ids), expected_ids.numpy())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scores), expected_scores.numpy(),
                               rtol=0, atol=1e-5)
