"""SharedEmbedding: embeddings times sqrt(d_model), tied with the pre-softmax projection (3.4)."""
import pytest
import keras
import numpy as np
from keras import ops

from keras_transformer.layers import SharedEmbedding
from tests.helpers import gradients
from tests.layers.harness import dtype, normal, run_layer_test, to_numpy

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)

VOCAB, D_MODEL = 20, 16
IDS = np.array([[5, 7, 0, 19, 3], [1, 1, 2, 0, 0]], "int32")


def test_shared_embedding_layer():
    run_layer_test(
        SharedEmbedding, dict(vocab_size=VOCAB, d_model=D_MODEL), IDS,
        expected_output_shape=(2, 5, D_MODEL),
        run_graph_check=True,
        expected_num_trainable_weights=1,  # one matrix for input and output
        expected_num_trainable_params=VOCAB * D_MODEL)


def test_embeddings_are_scaled_by_sqrt_d_model():
    layer = SharedEmbedding(VOCAB, D_MODEL)
    out = to_numpy(layer(IDS))
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(out, table[IDS] * np.sqrt(D_MODEL), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(layer(IDS.astype("int64"))), out)


def test_scaled_embeddings_have_unit_variance_at_init():
    """Initialised with stddev d_model^-0.5, so that times sqrt(d_model) they match the
    unit scale of the positional encodings they are added to."""
    layer = SharedEmbedding(1000, 64)
    out = to_numpy(layer(np.arange(1000, dtype="int32")[None]))
    assert abs(out.std() - 1.0) < 0.05


def test_projection_is_tied_to_the_embedding_matrix():
    layer = SharedEmbedding(VOCAB, D_MODEL)
    layer.build()  # `project` alone does not build the layer
    x = normal((2, 3, D_MODEL), seed=1)
    logits = layer.project(x)
    assert tuple(logits.shape) == (2, 3, VOCAB)
    np.testing.assert_allclose(to_numpy(logits), x @ to_numpy(layer.embeddings).T, atol=1e-5)
    assert len(layer.trainable_weights) == 1  # project added no weight
    # Embedding lookup and projection train the same variable.
    def loss(table):
        with keras.StatelessScope(state_mapping=[(layer.embeddings, table)]):
            return ops.sum(layer.project(layer(IDS)))

    (gradient,) = gradients(loss, to_numpy(layer.embeddings).astype("float32"))
    unused = np.setdiff1d(np.arange(VOCAB), IDS)
    assert np.all(np.any(gradient[unused] != 0, axis=-1))  # reached through project only


def test_project_follows_the_input_dtype():
    layer = SharedEmbedding(VOCAB, D_MODEL, dtype="mixed_bfloat16")
    x = layer(IDS)
    assert dtype(x) == "bfloat16" and layer.embeddings.dtype == "float32"
    assert dtype(layer.project(x)) == "bfloat16"
