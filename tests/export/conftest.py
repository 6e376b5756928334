"""Fixtures for the export tests: a real vocabulary, a briefly trained tiny model, its export.

Everything is built once per test session from 2,000 lines of Multi30k train (English ->
German): a 600-piece SentencePiece model, a 1-layer d_model 32 Transformer trained for 124
steps (a few seconds) so that translations differ from sentence to sentence, a model
directory as training leaves it, its serving functions and one exported version of them.
"""
import gzip
import itertools
import pathlib

import numpy as np
import pytest

NUM_LINES = 2000
VOCAB_SIZE = 600
MAX_LENGTH = 64        # the model's max_length: the input truncation length of the export
TRAIN_LENGTH = 32      # training examples are cut to this many tokens
BATCH_SIZE = 32
# Decoding settings written to settings.json; the export must pick them up from there (the
# extra length differs from the paper's 50, so a test sees where it came from). Beam 4 and
# alpha 0.6 are the paper's: the options signature is checked against serving_default there.
SETTINGS = {"beam_size": 4, "alpha": 0.6, "extra_length": 10}


def _read_head(path: pathlib.Path, count: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, count)]


@pytest.fixture(scope="session")
def corpus(shared_data):
    """The first NUM_LINES English and German lines of Multi30k train."""
    return {lang: _read_head(shared_data / "multi30k" / f"train.{lang}.gz", NUM_LINES)
            for lang in ("en", "de")}


@pytest.fixture(scope="session")
def spm_proto(corpus, tmp_path_factory) -> bytes:
    from pipelines.data import vocab

    work = tmp_path_factory.mktemp("export_vocab")
    files = []
    for lang, lines in corpus.items():
        path = work / f"train.{lang}"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(path)
    return vocab.build_vocab(files, work, VOCAB_SIZE, log=lambda message: None).read_bytes()


def _encode_pairs(spm_proto, corpus):
    """(source, target_in, target_out) int32 arrays [NUM_LINES, TRAIN_LENGTH], 0-padded."""
    from keras_transformer.constants import BOS_ID, EOS_ID
    from pipelines.data.vocab import python_processor

    processor = python_processor(spm_proto)
    arrays = np.zeros([3, NUM_LINES, TRAIN_LENGTH], np.int32)
    for row, (en, de) in enumerate(zip(corpus["en"], corpus["de"])):
        source = processor.encode(en)[:TRAIN_LENGTH - 1] + [EOS_ID]
        target = processor.encode(de)[:TRAIN_LENGTH - 1]
        for index, ids in enumerate((source, [BOS_ID] + target, target + [EOS_ID])):
            arrays[index, row, :len(ids)] = ids
    return arrays


def train_briefly(model, spm_proto, corpus) -> list[float]:
    """Trains `model` for 2 epochs (124 steps) on the pairs; returns the step losses.

    A plain `tf.function` step rather than `fit`: tracing Keras' train function would cost
    more than the training itself.
    """
    import keras
    import tensorflow as tf

    from keras_transformer import LabelSmoothedCrossEntropy

    optimizer = keras.optimizers.Adam(3e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = LabelSmoothedCrossEntropy(0.1)

    @tf.function
    def train_step(source, target_in, target_out):
        with tf.GradientTape() as tape:
            loss = loss_fn(target_out, model((source, target_in), training=True))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    source, target_in, target_out = _encode_pairs(spm_proto, corpus)
    losses = []
    for _ in range(2):
        # Whole batches only: a smaller last batch would trace the step a second time.
        for start in range(0, NUM_LINES - BATCH_SIZE + 1, BATCH_SIZE):
            rows = slice(start, start + BATCH_SIZE)
            losses.append(float(train_step(source[rows], target_in[rows], target_out[rows])))
    return losses


@pytest.fixture(scope="session")
def trained_model(spm_proto, corpus):
    """A 1-layer, d_model 32 Transformer trained for 2 epochs (124 steps) on the pairs."""
    import keras

    from keras_transformer import Transformer, TransformerConfig

    keras.utils.set_random_seed(1234)
    config = TransformerConfig.preset("base", vocab_size=VOCAB_SIZE, num_layers=1, d_model=32,
                                      d_ff=64, num_heads=2, dropout=0.0, max_length=MAX_LENGTH)
    model = Transformer(config)
    losses = train_briefly(model, spm_proto, corpus)
    assert losses[-1] < losses[0] - 1.0, losses[::20]  # it did learn something
    return model


@pytest.fixture(scope="session")
def model_dir(trained_model, spm_proto, tmp_path_factory) -> pathlib.Path:
    """A model directory as training leaves it: config, settings, vocabulary, final weights."""
    from keras_transformer.model_dir import FINAL_WEIGHTS_FILE, VOCAB_FILE
    from pipelines.model_dir import layout as md

    path = tmp_path_factory.mktemp("export_model_dir")
    md.save_config(path, trained_model.config)
    md.save_settings(path, dict(SETTINGS, task="multi30k_ende"))
    (path / VOCAB_FILE).write_bytes(spm_proto)
    trained_model.save_weights(path / FINAL_WEIGHTS_FILE)
    return path


@pytest.fixture(scope="session")
def export_base(tmp_path_factory) -> pathlib.Path:
    """The model base path TensorFlow Serving would watch."""
    return tmp_path_factory.mktemp("export_base") / "transformer"


@pytest.fixture(scope="session")
def translator(model_dir):
    """The in-process serving functions of the model directory, as the export stage makes
    them: final weights, vocabulary and settings.json's decoding settings."""
    from pipelines.settings import resolver
    from pipelines.stages import export as stages

    run = resolver.resolve({"model_dir": str(model_dir)})
    return stages.make_translator(run, run.task).functions


@pytest.fixture(scope="session")
def exported(translator, export_base) -> pathlib.Path:
    """Version 1 of `translator` (the CLI test covers the export stage itself)."""
    from keras_transformer.serving.saved_model import write_saved_model

    return write_saved_model(translator, export_base, log=lambda message: None)
