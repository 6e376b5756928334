"""Positional information (Section 3.5; learned positions: Table 3 row E).

PE(pos, 2i) = sin(pos / 10000^(2i / d_model)), PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model)).
Both layers return [1, length, d] for positions start .. start + length - 1; incremental
decoding relies on `start` giving the same vectors as the full sequence. Given `positions`
[batch, length] (a packed row's, restarting with each pair), they return [batch, length, d].
"""
import numpy as np
import pytest

from keras_transformer.layers import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from tests.layers.harness import normal, run_layer_test, to_numpy

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)

D_MODEL = 16


def paper_encoding(positions, depth):
    pe = np.zeros((len(positions), depth))
    for row, pos in enumerate(positions):
        for dim in range(depth):
            i2 = dim - dim % 2  # 2i
            angle = pos / 10000 ** (i2 / depth)
            pe[row, dim] = np.sin(angle) if dim % 2 == 0 else np.cos(angle)
    return pe


def test_sinusoidal_layer():
    run_layer_test(
        SinusoidalPositionalEncoding, {}, normal((2, 7, D_MODEL), seed=1),
        expected_output_shape=(1, 7, D_MODEL),  # broadcast over the batch
        run_graph_check=True,
        expected_num_trainable_weights=0)


@pytest.mark.parametrize("depth", [16, 6, 5])
def test_sinusoidal_equals_the_paper_formula(depth):
    out = to_numpy(SinusoidalPositionalEncoding()(np.zeros((1, 64, depth), "float32")))
    positions = [0, 1, 5, 50, 63]
    np.testing.assert_allclose(out[0, positions], paper_encoding(positions, depth), atol=2e-5)


def test_sinusoidal_does_not_depend_on_the_embeddings():
    layer = SinusoidalPositionalEncoding()
    np.testing.assert_array_equal(to_numpy(layer(normal((3, 4, D_MODEL), seed=2))),
                                  to_numpy(layer(np.zeros((1, 4, D_MODEL), "float32"))))


def test_sinusoidal_start_continues_the_sequence():
    layer = SinusoidalPositionalEncoding()
    full = to_numpy(layer(np.zeros((1, 12, D_MODEL), "float32")))
    np.testing.assert_allclose(to_numpy(layer(np.zeros((2, 3, D_MODEL), "float32"), start=5)),
                               full[:, 5:8], atol=1e-6)
    np.testing.assert_allclose(to_numpy(layer(np.zeros((2, 1, D_MODEL), "float32"), start=11)),
                               full[:, 11:12], atol=1e-6)


def test_sinusoidal_offset_is_a_linear_function_of_the_position():
    """3.5: "for any fixed offset k, PE_pos+k can be represented as a linear function of
    PE_pos" - a rotation of each (sin, cos) pair by the angle of PE_k."""
    pe = to_numpy(SinusoidalPositionalEncoding()(np.zeros((1, 40, D_MODEL), "float32")))[0]
    k = 7
    sin_k, cos_k = pe[k, 0::2], pe[k, 1::2]
    for pos in (0, 3, 20, 32):
        sin_p, cos_p = pe[pos, 0::2], pe[pos, 1::2]
        np.testing.assert_allclose(pe[pos + k, 0::2], sin_p * cos_k + cos_p * sin_k, atol=1e-5)
        np.testing.assert_allclose(pe[pos + k, 1::2], cos_p * cos_k - sin_p * sin_k, atol=1e-5)


def test_learned_layer():
    run_layer_test(
        LearnedPositionalEmbedding, dict(max_length=10), normal((2, 7, D_MODEL), seed=3),
        expected_output_shape=(1, 7, D_MODEL),
        run_graph_check=True,
        expected_num_trainable_weights=1,
        expected_num_trainable_params=10 * D_MODEL)


def test_learned_returns_the_rows_of_its_positions():
    layer = LearnedPositionalEmbedding(max_length=10)
    x = np.zeros((2, 4, D_MODEL), "float32")
    first = to_numpy(layer(x))
    table = to_numpy(layer.embeddings)
    assert table.shape == (10, D_MODEL)
    np.testing.assert_array_equal(first[0], table[:4])
    np.testing.assert_array_equal(to_numpy(layer(x, start=6))[0], table[6:10])  # last rows


PACKED_POSITIONS = np.array([[0, 1, 2, 0, 1, 0, 0], [0, 1, 2, 3, 4, 5, 6]], "int32")


def test_sinusoidal_layer_at_given_positions():
    layer, out = run_layer_test(
        SinusoidalPositionalEncoding, {}, normal((2, 7, D_MODEL), seed=4),
        call_kwargs={"positions": PACKED_POSITIONS}, expected_output_shape=(2, 7, D_MODEL),
        run_graph_check=True, expected_num_trainable_weights=0)
    full = to_numpy(layer(np.zeros((1, 7, D_MODEL), "float32")))[0]
    np.testing.assert_array_equal(out, full[PACKED_POSITIONS])


def test_learned_layer_at_given_positions():
    layer, out = run_layer_test(
        LearnedPositionalEmbedding, dict(max_length=10), normal((2, 7, D_MODEL), seed=5),
        call_kwargs={"positions": PACKED_POSITIONS}, expected_output_shape=(2, 7, D_MODEL),
        run_graph_check=True, expected_num_trainable_weights=1,
        expected_num_trainable_params=10 * D_MODEL)
    np.testing.assert_array_equal(out, to_numpy(layer.embeddings)[PACKED_POSITIONS])
