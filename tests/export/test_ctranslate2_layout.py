"""The CTranslate2 layout export/ctranslate2.py writes, checked without CTranslate2.

A numpy forward pass that reads only the dumped arrays, the way CTranslate2's post-norm
Transformer uses them (linears [out, in], fused Q|K|V and K|V, embeddings times sqrt(d),
the saved position table added, LayerNorm epsilon 1e-6, tied output projection), must give
our model's logits: if a transpose, a split order or the positions were wrong, it would not.
"""
import math

import numpy as np
import pytest

from export import ctranslate2 as ct2
from keras_transformer import Transformer, TransformerConfig

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

HEADS, D = 2, 16


@pytest.fixture(scope="module")
def model_and_arrays():
    config = TransformerConfig.preset("base", vocab_size=40, num_layers=2, d_model=D, d_ff=24,
                                      num_heads=HEADS, dropout=0.0, max_length=12)
    model = Transformer(config)
    return model, ct2.model_arrays(model)


@pytest.mark.quick
def test_names_and_shapes(model_and_arrays):
    _, arrays = model_and_arrays
    assert arrays["encoder/embeddings_0/weight"].shape == (40, D)
    assert arrays["encoder/position_encodings/encodings"].shape == (12, D)
    assert arrays["encoder/layer_1/self_attention/linear_0/weight"].shape == (3 * D, D)
    assert arrays["decoder/layer_0/attention/linear_0/weight"].shape == (D, D)
    assert arrays["decoder/layer_0/attention/linear_1/weight"].shape == (2 * D, D)
    assert arrays["decoder/layer_1/ffn/linear_0/weight"].shape == (24, D)
    assert arrays["decoder/layer_1/ffn/linear_1/bias"].shape == (D,)
    # Tied embeddings: the same matrix under the three names (CTranslate2 aliases them).
    assert np.array_equal(arrays["decoder/projection/weight"],
                          arrays["encoder/embeddings_0/weight"])
    assert not any(name.endswith("layer_norm/gamma") and name.count("/") == 2
                   for name in arrays)  # post-norm: no final norms
    assert all(a.dtype == np.float32 for a in arrays.values())


def test_positions_are_the_papers_interleaved_from_zero(model_and_arrays):
    _, arrays = model_and_arrays
    table = arrays["decoder/position_encodings/encodings"]
    pos, i = np.arange(12)[:, None], np.arange(D // 2)[None, :]
    angles = pos / 10000 ** (2 * i / D)
    np.testing.assert_allclose(table[:, 0::2], np.sin(angles), atol=1e-5)
    np.testing.assert_allclose(table[:, 1::2], np.cos(angles), atol=1e-5)


def _norm(x, arrays, name):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-6) * arrays[f"{name}/gamma"] + arrays[f"{name}/beta"]


def _linear(x, arrays, name):
    return x @ arrays[f"{name}/weight"].T + arrays[f"{name}/bias"]


def _attend(q, k, v, mask):
    """q [len_q, D], k/v [len_k, D], heads split as reshape(len, heads, depth)."""
    split = lambda t: t.reshape(len(t), HEADS, -1).transpose(1, 0, 2)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(D // HEADS)
    scores = np.where(mask, scores, -1e9)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return (weights @ v).transpose(1, 0, 2).reshape(len(q[0]), D)


def _block(x, arrays, prefix, sublayer):
    """Post-norm: LayerNorm(x + sublayer(x))."""
    return _norm(x + sublayer(x), arrays, f"{prefix}/layer_norm")


def _ffn(arrays, prefix):
    return lambda x: _linear(np.maximum(_linear(x, arrays, f"{prefix}/linear_0"), 0), arrays,
                             f"{prefix}/linear_1")


def _forward(arrays, source, target):
    """CTranslate2's computation, from the dumped arrays only -> logits [tgt_len, vocab]."""
    def embed(ids, stack, table):
        return arrays[table][ids] * math.sqrt(D) + arrays[
            f"{stack}/position_encodings/encodings"][:len(ids)]

    x = embed(source, "encoder", "encoder/embeddings_0/weight")
    for i in range(2):
        p = f"encoder/layer_{i}"

        def self_attention(h, p=p):
            q, k, v = np.split(_linear(h, arrays, f"{p}/self_attention/linear_0"), 3, axis=-1)
            return _linear(_attend(q, k, v, np.ones((len(h), len(h)), bool)), arrays,
                           f"{p}/self_attention/linear_1")

        x = _block(x, arrays, f"{p}/self_attention", self_attention)
        x = _block(x, arrays, f"{p}/ffn", _ffn(arrays, f"{p}/ffn"))
    memory = x
    y = embed(target, "decoder", "decoder/embeddings/weight")
    causal = np.tril(np.ones((len(target), len(target)), bool))
    for i in range(2):
        p = f"decoder/layer_{i}"

        def self_attention(h, p=p):
            q, k, v = np.split(_linear(h, arrays, f"{p}/self_attention/linear_0"), 3, axis=-1)
            return _linear(_attend(q, k, v, causal), arrays, f"{p}/self_attention/linear_1")

        def cross_attention(h, p=p):
            q = _linear(h, arrays, f"{p}/attention/linear_0")
            k, v = np.split(_linear(memory, arrays, f"{p}/attention/linear_1"), 2, axis=-1)
            return _linear(_attend(q, k, v, np.ones((len(h), len(memory)), bool)), arrays,
                           f"{p}/attention/linear_2")

        y = _block(y, arrays, f"{p}/self_attention", self_attention)
        y = _block(y, arrays, f"{p}/attention", cross_attention)
        y = _block(y, arrays, f"{p}/ffn", _ffn(arrays, f"{p}/ffn"))
    return y @ arrays["decoder/projection/weight"].T


def test_ctranslate2_computation_on_the_arrays_gives_our_logits(model_and_arrays):
    model, arrays = model_and_arrays
    source = np.array([5, 9, 17, 33, 3])
    target = np.array([2, 7, 11, 30, 8, 21])
    ours = model((source[None], target[None]), training=False)[0].numpy()
    np.testing.assert_allclose(_forward(arrays, source, target), ours, atol=2e-4, rtol=1e-4)
