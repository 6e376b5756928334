"""The attention picture: what it plots is the cross-attention of the translation shown."""
import pytest
import matplotlib.image
import numpy as np

from keras_transformer import BeamSearch
from pipelines.data import vocab
from pipelines.evaluation.attention_plot import plot_attention
from pipelines.model_dir.layout import build_model
from tests.helpers import tiny_config


@pytest.mark.quick
def test_plot_shows_every_heads_attention_rows_summing_to_one(tmp_path):
    lines = ["a dog runs in the snow", "two men play football", "a cat sleeps"] * 50
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    vocab.build_vocab([corpus], tmp_path, 300, log=lambda _: None)
    tokenizer = vocab.load_tokenizer(tmp_path / "spm.model")
    model = build_model(tiny_config(vocab_size=300, num_heads=4))
    path = tmp_path / "attention.png"
    weights = plot_attention(model, tokenizer, "a dog runs", path,
                             BeamSearch(beam_size=2, extra_length=4))
    source_pieces = len(tokenizer.tokenize(["a dog runs"]).to_list()[0]) + 1  # + EOS
    heads, target_length, source_length = weights.shape
    assert heads == 4 and source_length == source_pieces and 1 <= target_length <= 4 + source_pieces
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    image = matplotlib.image.imread(path)
    # 4 columns of 3.2 inches at 110 dpi; a row for the mean and one for the heads.
    assert image.shape[1] == round(4 * 3.2 * 110) and image.shape[0] == round(2 * 3.2 * 110)
    assert image[..., :3].std() > 0.05  # not a blank canvas
    assert not list(tmp_path.glob(".attention.png*"))  # written through a temporary file
