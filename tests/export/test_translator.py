"""The serving functions' ids signatures: truncation as for sentences, ids checked; and
`ExportError` as a user error."""
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import text
from keras_transformer.serving.functions import ExportError, ServingFunctions
from keras_transformer import BeamSearch, Transformer
from tests.export.conftest import VOCAB_SIZE
from tests.helpers import ROOT, tiny_config

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

MAX_LENGTH = 16  # the model's positions: what the ids signatures cut sources to
LONG = ("A man in a blue shirt is standing on a ladder cleaning the windows of a tall "
        "building while two women in red coats watch him from the street below.")
OPTIONS = [tf.constant(2), tf.constant(0.6), tf.constant(1), tf.constant(4)]


@pytest.fixture(scope="module")
def translator(spm_proto):
    """A random tiny model's serving functions: enough to see what the search is fed."""
    model = Transformer(tiny_config(vocab_size=VOCAB_SIZE, max_length=MAX_LENGTH))
    return ServingFunctions(model, spm_proto, BeamSearch(beam_size=2, alpha=0.6, extra_length=4))


def test_a_long_id_row_keeps_its_eos_as_a_long_sentence_does(translator, spm_proto):
    from pipelines.data import vocab

    tokenizer = vocab.load_tokenizer(spm_proto)
    full = text.sentences_to_ids(tokenizer, [LONG, "A dog."], 1000)  # every piece + EOS
    as_sentences = text.sentences_to_ids(tokenizer, [LONG, "A dog."], MAX_LENGTH)
    assert full.shape[1] > MAX_LENGTH
    np.testing.assert_array_equal(text.truncate_ids(full, MAX_LENGTH), as_sentences)
    # What `translate` feeds the search for the sentences, the ids signatures feed it for
    # the full rows: the same translations and scores.
    for got, want in ((translator.translate_ids(full), translator.translate_ids(as_sentences)),
                      (translator.translate_ids_with_options(
                          full, *OPTIONS, tf.zeros([2, 1], tf.int32)),
                       translator.translate_ids_with_options(
                           as_sentences, *OPTIONS, tf.zeros([2, 1], tf.int32)))):
        np.testing.assert_array_equal(got["ids"], want["ids"])
        score = "score" if "score" in got else "scores"
        np.testing.assert_allclose(got[score], want[score], rtol=1e-6)


@pytest.mark.parametrize("bad", [-1, VOCAB_SIZE])
def test_ids_outside_the_vocabulary_are_invalid_argument(translator, bad):
    source = tf.constant([[5, bad, 3]], tf.int32)
    message = rf"source ids must be in \[0, {VOCAB_SIZE}\)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        translator.translate_ids(source)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        translator.translate_ids_with_options(source, *OPTIONS, tf.zeros([1, 1], tf.int32))


@pytest.mark.quick
def test_export_error_is_a_user_error_and_export_imports_no_pipelines():
    from pipelines.errors import UserError

    assert issubclass(ExportError, UserError)
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, export; print(sorted({m.split('.')[0] for m in "
         "sys.modules} & {'pipelines'}))"], cwd=ROOT, capture_output=True, text=True,
        timeout=120)
    assert imported.stdout.strip() == "[]", imported.stderr[-2000:]
