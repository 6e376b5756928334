"""The Transformer model: causality, padding invariance, cached decoding, saving, learning,
packed rows."""
import numpy as np
import pytest
import keras
from keras import ops

from keras_transformer import BOS_ID, EOS_ID, LabelSmoothedCrossEntropy, TokenAccuracy, Transformer
from keras_transformer import tf_internals
from keras_transformer.model import PACKED_INPUTS
from keras_transformer.schedules import paper_optimizer
from tests.helpers import gradients, random_ids, tiny_config


@pytest.mark.quick
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_is_causal(norm):
    model = Transformer(tiny_config(norm=norm))
    source, target = random_ids(2, 7, seed=1), random_ids(2, 9, seed=2)
    logits = ops.convert_to_numpy(model((source, target)))
    for t in (1, 4, 8):
        changed = target.copy()
        changed[:, t:] = random_ids(2, 9 - t, seed=3 + t)
        other = ops.convert_to_numpy(model((source, changed)))
        np.testing.assert_allclose(other[:, :t], logits[:, :t], atol=1e-5)
        assert not np.allclose(other[:, t:], logits[:, t:], atol=1e-3)


@pytest.mark.parametrize("norm", [pytest.param("post", marks=pytest.mark.quick), "pre"])
def test_source_padding_does_not_change_logits(norm):
    model = Transformer(tiny_config(norm=norm))
    source, target = random_ids(2, 6, seed=4), random_ids(2, 5, seed=5)
    padded = np.concatenate([source, np.zeros((2, 4), "int32")], axis=1)
    np.testing.assert_allclose(ops.convert_to_numpy(model((padded, target))),
                               ops.convert_to_numpy(model((source, target))), atol=1e-5)


@pytest.mark.parametrize("overrides", [{}, {"norm": "pre"}, {"positional": "learned"},
                                       {"share_embeddings": False, "d_k": 4, "d_v": 12}])
def test_cached_decoding_reproduces_full_forward(overrides):
    model = Transformer(tiny_config(**overrides))
    source, target = random_ids(3, 6, seed=6), random_ids(3, 7, seed=7)
    source[1, 4:] = 0  # a padded sentence in the batch
    full = ops.convert_to_numpy(model((source, target)))
    memory, mask = model.encode(source)
    # Two rows per sentence (as beams): row 0 follows `target`, row 1 a reversed copy.
    rows = np.stack([target, target[:, ::-1]], axis=1)
    cache, memory_state = model.initial_decode_state(memory, mask, num_rows=2, max_length=10)
    for position in range(target.shape[1]):
        logits, cache = model.decode_step(rows[:, :, position], position, cache, memory_state)
        np.testing.assert_allclose(ops.convert_to_numpy(logits)[:, 0], full[:, position],
                                   atol=1e-4)
    reversed_full = ops.convert_to_numpy(model((source, target[:, ::-1].copy())))
    np.testing.assert_allclose(ops.convert_to_numpy(logits)[:, 1], reversed_full[:, -1], atol=1e-4)


def test_keras_save_and_load_give_identical_logits(tmp_path):
    model = Transformer(tiny_config(norm="pre"))
    source, target = random_ids(2, 5, seed=8), random_ids(2, 4, seed=9)
    expected = ops.convert_to_numpy(model((source, target)))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, Transformer) and loaded.config == model.config
    np.testing.assert_array_equal(ops.convert_to_numpy(loaded((source, target))), expected)


def test_a_model_made_from_its_config_loads_weights_and_summarises(tmp_path):
    """As a user does with a model dir's config.json and final.weights.h5: no call and no
    build() first; summary() shows each part's output shape and the parameter count."""
    config = tiny_config(share_embeddings=False, positional="learned")
    trained = Transformer(config)
    source, target = random_ids(2, 5, seed=8), random_ids(2, 4, seed=9)
    expected = ops.convert_to_numpy(trained((source, target)))
    trained.save_weights(tmp_path / "final.weights.h5")
    model = Transformer(config)
    model.load_weights(tmp_path / "final.weights.h5")
    np.testing.assert_array_equal(ops.convert_to_numpy(model((source, target))), expected)
    lines = []
    Transformer(config).summary(print_fn=lines.append)
    rows = "\n".join(lines)
    assert "?" not in rows and "unbuilt" not in rows, rows
    d, vocab = config.d_model, config.vocab_size
    for part, shape in [("embedding", f"(None, None, {d})"),
                        ("output_projection", f"(None, None, {vocab})"),
                        ("source_positions", f"(1, None, {d})"),
                        ("encoder", f"(None, None, {d})"), ("decoder", f"(None, None, {d})")]:
        assert any(line.lstrip("│ ").startswith(part) and shape in line
                   for line in rows.splitlines()), (part, rows)
    assert f"Total params: {trained.count_params():,}" in rows


@pytest.mark.quick
def test_every_layer_config_round_trips():
    model = Transformer(tiny_config())
    seen = 0
    for layer in tf_internals.sublayers(model):
        config = layer.get_config()
        clone = type(layer).from_config(config)
        assert clone.get_config() == config, type(layer).__name__
        seen += 1
    assert seen > 20


def test_model_learns_sequence_reversal():
    """A tiny model reaches > 95% token accuracy reversing random sequences, with fit."""
    vocab, length, n = 20, 8, 4096
    rng = np.random.default_rng(0)
    source = rng.integers(4, vocab, size=(n, length)).astype("int32")
    target = source[:, ::-1]
    target_in = np.concatenate([np.full((n, 1), 2, "int32"), target[:, :-1]], axis=1)
    config = tiny_config(vocab_size=vocab, d_model=64, d_ff=128, num_heads=4, num_layers=2)
    model = Transformer(config)
    model.compile(optimizer=paper_optimizer(config.d_model, warmup_steps=200, scale=2.0),
                  loss=LabelSmoothedCrossEntropy(0.0), metrics=[TokenAccuracy()])
    history = model.fit((source, target_in), target, batch_size=64, epochs=8, verbose=0)
    assert history.history["token_accuracy"][-1] > 0.95


# ---------------------------------------------------------------------- packed rows
PAIRS_BY_ROW = [[0, 1, 2], [3, 4]]  # row 0 is full on the target side, row 1 ends in padding
ROW_LENGTHS = (26, 28)  # source, target


def example_pairs(seed=20):
    """Five (source, target_in, target_out) pairs of different lengths."""
    pairs = []
    for k, (source_length, target_length) in enumerate([(7, 9), (5, 8), (10, 8), (3, 4),
                                                         (12, 10)]):
        source = random_ids(1, source_length, seed=seed + 2 * k)[0]
        target = random_ids(1, target_length, seed=seed + 2 * k + 1)[0]
        pairs.append((np.append(source, EOS_ID).astype("int32"),
                      np.insert(target, 0, BOS_ID).astype("int32"),
                      np.append(target, EOS_ID).astype("int32")))
    return pairs


def packed_rows(pairs, pairs_by_row, source_length, target_length):
    """The pairs laid out end to end in rows (`PACKED_INPUTS`), and their target_out."""
    rows = len(pairs_by_row)
    inputs = {key: np.zeros((rows, source_length if key.startswith("source") else
                             target_length), "int32") for key in PACKED_INPUTS}
    target_out = np.zeros((rows, target_length), "int32")
    for row, members in enumerate(pairs_by_row):
        starts = {"source": 0, "target": 0}
        for segment, k in enumerate(members, start=1):
            source, target_in, out = pairs[k]
            for side, ids in (("source", source), ("target", target_in)):
                span = slice(starts[side], starts[side] + len(ids))
                inputs[f"{side}_ids" if side == "source" else "target_in_ids"][row, span] = ids
                inputs[f"{side}_segments"][row, span] = segment
                inputs[f"{side}_positions"][row, span] = np.arange(len(ids))
                starts[side] += len(ids)
            target_out[row, starts["target"] - len(out):starts["target"]] = out
    return inputs, target_out


def unpacked_batch(pairs):
    """The same pairs one a row, 0-padded: ((source, target_in), target_out)."""
    def pad(arrays):
        batch = np.zeros((len(arrays), max(len(a) for a in arrays)), "int32")
        for row, array in enumerate(arrays):
            batch[row, :len(array)] = array
        return batch

    return (pad([p[0] for p in pairs]), pad([p[1] for p in pairs])), pad([p[2] for p in pairs])


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_each_packed_pair_gets_the_logits_it_gets_alone(positional, norm):
    """Attention stays within a pair and positions restart with each pair: a pair's logits in
    a packed row are those of the pair run alone."""
    model = Transformer(tiny_config(norm=norm, positional=positional))
    pairs = example_pairs()
    inputs, _ = packed_rows(pairs, PAIRS_BY_ROW, *ROW_LENGTHS)
    packed = ops.convert_to_numpy(model(inputs))
    assert packed.shape == (2, ROW_LENGTHS[1], 50) and packed.dtype == np.float32
    for row, members in enumerate(PAIRS_BY_ROW):
        start = 0
        for k in members:
            source, target_in, _ = pairs[k]
            alone = ops.convert_to_numpy(model((source[None], target_in[None])))[0]
            np.testing.assert_allclose(packed[row, start:start + len(target_in)], alone,
                                       atol=1e-5, err_msg=f"pair {k} in row {row}")
            start += len(target_in)
    # Not vacuous: as one long pair (one segment, running positions) row 0's later pairs differ.
    merged = dict(inputs, source_segments=np.minimum(inputs["source_segments"], 1),
                  target_segments=np.minimum(inputs["target_segments"], 1),
                  source_positions=np.tile(np.arange(ROW_LENGTHS[0]), (2, 1)),
                  target_positions=np.tile(np.arange(ROW_LENGTHS[1]), (2, 1)))
    second = slice(len(pairs[0][1]), len(pairs[0][1]) + len(pairs[1][1]))
    assert not np.allclose(ops.convert_to_numpy(model(merged))[0, second],
                           packed[0, second], atol=1e-3)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_a_packed_batch_gives_the_gradients_of_the_same_pairs_unpacked(positional):
    """One training step's loss and gradients are those of the pairs batched one a row.

    No rescaling is needed: the loss is the mean over non-pad target tokens (id 0 in
    target_out is padding in both layouts), and both batches hold exactly the same tokens,
    so the sum and the count it divides by are the same.
    """
    model = Transformer(tiny_config(positional=positional, norm="pre"))
    loss_fn = LabelSmoothedCrossEntropy(0.1)
    pairs = example_pairs()
    model(unpacked_batch(pairs)[0])  # builds the weights

    def loss_and_gradients(inputs, target_out):
        non_trainable = [v.value for v in model.non_trainable_variables]

        def loss(*trainable):
            logits, _ = model.stateless_call(list(trainable), non_trainable, inputs,
                                             training=True)
            return loss_fn(target_out, logits)

        trainable = [v.value for v in model.trainable_variables]
        return float(loss(*trainable)), gradients(loss, *trainable)

    packed_loss, packed = loss_and_gradients(*packed_rows(pairs, PAIRS_BY_ROW, *ROW_LENGTHS))
    unpacked_loss, unpacked = loss_and_gradients(*unpacked_batch(pairs))
    assert packed_loss == pytest.approx(unpacked_loss, rel=1e-6)
    for variable, a, b in zip(model.trainable_variables, packed, unpacked):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=variable.path)


@pytest.mark.quick
def test_a_packed_batch_without_segments_is_refused():
    model = Transformer(tiny_config())
    inputs, _ = packed_rows(example_pairs(), PAIRS_BY_ROW, *ROW_LENGTHS)
    del inputs["target_segments"]
    with pytest.raises(ValueError, match="missing: \\['target_segments'\\]"):
        model(inputs)
