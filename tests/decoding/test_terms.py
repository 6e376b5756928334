"""Terminology constraints: the phrase state, bank allocation and the constrained search."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import BeamSearch, Required, decode, terms
from tests.helpers import random_ids, reversal_model

pytestmark = pytest.mark.xdist_group("test_terms")  # its module fixtures: one worker

EOS = 3


@pytest.fixture(scope="module")
def model():
    return reversal_model()


def _walk(phrases, tokens):
    """The state after feeding `tokens` one by one to a single hypothesis."""
    phrases = tf.constant([phrases], tf.int32)
    lengths = terms.phrase_lengths(phrases)
    state = terms.initial_state(lengths, 1)
    needs = []
    for token in tokens:
        state = terms.advance(state, tf.constant([[token]]), phrases, lengths)
        needs.append(int(terms.needed(state, lengths)[0, 0]))
    return {name: value.numpy()[0, 0] for name, value in state.items()}, needs


@pytest.mark.quick
def test_phrases_are_met_in_any_order_and_broken_ones_start_again():
    phrases = [[5, 6, 0], [7, 0, 0], [0, 0, 0]]  # the empty third phrase is met already
    state, needs = _walk(phrases, [5, 8, 7, 5, 6])
    assert needs == [2, 3, 2, 1, 0]  # 5 starts [5, 6], 8 breaks it, 7 meets [7]
    assert state["met"].tolist() == [True, True, True] and state["phrase"] == -1
    state, needs = _walk(phrases, [5, 5, 6])  # a repeated first token starts it again
    assert needs == [2, 2, 1] and state["met"].tolist() == [True, False, True]
    # A token that begins two phrases starts the first: 5 starts [5, 6], so 9 breaks it
    # rather than meeting [5, 9]; then 5, 6 meets [5, 6].
    state, needs = _walk([[5, 6], [5, 9]], [5, 9, 5, 6])
    assert needs == [3, 4, 3, 2] and state["met"].tolist() == [True, False]
    state, needs = _walk([[5, 6], [5, 9]], [5, 6, 5, 9])
    assert needs == [3, 2, 1, 0] and state["met"].tolist() == [True, True]


@pytest.mark.quick
def test_next_and_forced_tokens_continue_the_phrase_in_progress():
    phrases = tf.constant([[[5, 6, 4], [7, 0, 0], [9, 8, 0]]], tf.int32)
    lengths = terms.phrase_lengths(phrases)
    state = terms.initial_state(lengths, 1)
    assert terms.next_tokens(state, phrases).numpy().tolist() == [[[5, 7, 9]]]
    assert int(terms.forced_token(state, phrases)[0, 0]) == 5
    state = terms.advance(state, tf.constant([[9]]), phrases, lengths)  # [9, 8] started
    assert terms.next_tokens(state, phrases).numpy().tolist() == [[[5, 7, 8]]]
    assert int(terms.forced_token(state, phrases)[0, 0]) == 8
    state = terms.advance(state, tf.constant([[8]]), phrases, lengths)
    assert terms.next_tokens(state, phrases).numpy().tolist() == [[[5, 7, 0]]]
    assert int(terms.forced_token(state, phrases)[0, 0]) == 5


@pytest.mark.quick
def test_round_robin_gives_every_bank_a_turn_best_first():
    scores = tf.constant([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]])
    banks = tf.constant([[0, 0, 0, 2, 1, 2]])
    valid = tf.constant([[True, True, True, True, True, False]])
    picks = terms.round_robin(scores, banks, valid, 5).numpy()[0].tolist()
    # Turn 1: bank 2's best (3), bank 1's (4), bank 0's (0); turn 2: bank 0's second (1);
    # bank 2's second is not valid, so the fifth slot is bank 0's third.
    assert picks == [3, 4, 0, 1, 2]


def _contains(row, phrase):
    phrase = [t for t in phrase if t]
    return any(list(row[i:i + len(phrase)]) == phrase for i in range(len(row)))


@pytest.mark.parametrize("beam_size,num_results", [(1, 1), (4, 2), (6, 6)])
def test_every_hypothesis_contains_every_phrase_and_ends(model, beam_size, num_results):
    source = random_ids(6, 6, vocab_size=12, seed=3, low=4)
    source[2, 3:] = 0
    phrases = np.array([[[5, 6], [9, 0]], [[4, 4], [0, 0]], [[11, 10], [7, 8]],
                        [[0, 0], [0, 0]], [[8, 0], [8, 0]], [[6, 5], [5, 6]]], np.int32)
    ids, scores, *_ = decode(model, source, BeamSearch(beam_size=beam_size, extra_length=3),
                             num_results=num_results, required=Required(terms_ids=phrases))
    ids, scores = ids.numpy(), scores.numpy()
    assert np.all(scores > -1e8) and np.all(np.diff(scores, axis=1) <= 1e-6)
    for sentence in range(len(source)):
        for row in ids[sentence]:
            length = int(np.flatnonzero(row == EOS)[0]) + 1
            assert not row[length:].any() and EOS not in row[:length - 1]
            tokens = list(row[:length - 1])
            for phrase in phrases[sentence]:
                assert _contains(tokens, phrase), (sentence, tokens, phrase)
        if sentence == 4:  # a phrase given twice appears twice
            assert all(list(row).count(8) >= 2 for row in ids[sentence])


def test_phrases_that_only_just_fit_are_forced_in_time(model):
    """With no extra length, a 3-token source may produce 3 tokens and the end: two phrases
    of three tokens in all fill it, in the order given, whatever the model prefers (the
    reversal model would start with 6)."""
    source = np.array([[4, 5, 6]], np.int32)
    phrases = np.array([[[11, 11], [10, 0]]], np.int32)
    ids, *_ = decode(model, source, BeamSearch(beam_size=4, extra_length=0),
                     required=Required(terms_ids=phrases))
    assert ids.numpy()[0, 0, :4].tolist() == [11, 11, 10, EOS]


@pytest.mark.parametrize("beam_size,alpha,num_results", [(1, 0.0, 1), (4, 0.6, 3)])
def test_sentences_without_phrases_decode_as_without_terms(model, beam_size, alpha,
                                                           num_results):
    source = random_ids(8, 6, vocab_size=12, seed=11, low=4)
    source[1, 3:] = 0
    phrases = np.zeros([8, 2, 2], np.int32)
    phrases[2] = [[7, 7], [5, 0]]
    search = BeamSearch(beam_size=beam_size, alpha=alpha, extra_length=4)
    settings = dict(num_results=num_results)
    plain_ids, plain_scores, *_ = decode(model, source, search, **settings)
    ids, scores, *_ = decode(model, source, search, required=Required(terms_ids=phrases),
                             **settings)
    free = [0, 1, 3, 4, 5, 6, 7]
    width = min(ids.shape[2], plain_ids.shape[2])
    np.testing.assert_array_equal(ids.numpy()[free, :, :width],
                                  plain_ids.numpy()[free, :, :width])
    np.testing.assert_allclose(scores.numpy()[free], plain_scores.numpy()[free], atol=1e-5)
    assert not np.array_equal(ids.numpy()[2, :, :width], plain_ids.numpy()[2, :, :width])


def test_phrases_too_long_for_the_output_cap_are_invalid_arguments(model):
    source = np.array([[4, 5, 6]], np.int32)
    phrases = np.full([1, 2, 16], 7, np.int32)  # 32 tokens and the end: more than 32
    with pytest.raises(tf.errors.InvalidArgumentError, match="required phrases do not fit"):
        decode(model, source, BeamSearch(beam_size=2), max_length=32,
               required=Required(terms_ids=phrases))
    # Longer than the source allows but within the cap: the sentence gets the room.
    ids, *_ = decode(model, source, BeamSearch(beam_size=2, extra_length=0),
                     required=Required(terms_ids=phrases[:, :, :4]))
    assert list(ids.numpy()[0, 0, :9]) == [7] * 8 + [EOS]


def test_a_target_prefix_comes_first_and_the_phrases_follow(model):
    source = random_ids(3, 5, vocab_size=12, seed=2, low=4)
    prefix = np.array([[9, 9], [0, 0], [10, 0]], np.int32)
    phrases = np.array([[[5, 6]], [[7, 0]], [[0, 0]]], np.int32)
    ids, *_ = decode(model, source, BeamSearch(beam_size=4, extra_length=2), num_results=2,
                     required=Required(prefix_ids=prefix, terms_ids=phrases))
    for sentence, rows in enumerate(ids.numpy()):
        start = [t for t in prefix[sentence] if t]
        for row in rows:
            assert list(row[:len(start)]) == start
            assert _contains(list(row[:list(row).index(EOS)]), phrases[sentence, 0])
    # A prefix of no columns leaves no room unaccounted for.
    with pytest.raises(tf.errors.InvalidArgumentError, match="required phrases do not fit"):
        decode(model, source[:1], BeamSearch(beam_size=2), max_length=8,
               required=Required(np.zeros([1, 0], np.int32), np.full([1, 1, 8], 7, np.int32)))
