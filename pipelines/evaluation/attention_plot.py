"""The encoder-decoder attention heat map of one translation (the picture of Figure 3-5)."""

import numpy as np
import tensorflow as tf

from keras_transformer.data import text
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import BeamSearch, decode
from keras_transformer.atomic_files import atomic_files


def cross_attention(model, source_ids, target_ids):
    """Last decoder layer's cross-attention [heads, target_len, source_len]; targets end in EOS."""
    target_in = [BOS_ID] + target_ids[:-1]
    memory, mask = model.encode(tf.constant([source_ids]), training=False)
    _, weights = model.decode(tf.constant([target_in]), memory, mask,
                              return_attention_scores=True, training=False)
    return np.asarray(weights[0])


def plot_attention(model, tokenizer, sentence, path, search=BeamSearch(), *,
                   input_length=None, constraint=None):
    """Translates `sentence` (source cut to `input_length` pieces, default the model's
    `max_length`) and saves its attention (head mean + every head) as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    source_ids = text.sentences_to_ids(
        tokenizer, [sentence], input_length or model.config.max_length)
    source = source_ids.numpy()[0].tolist()
    ids = decode(model, source_ids, search, constraint=constraint).ids
    row = ids[0, 0].numpy()
    ends = np.flatnonzero((row == EOS_ID) | (row == PAD_ID))
    target = row[:ends[0] if ends.size else len(row)].tolist() + [EOS_ID]
    weights = cross_attention(model, source, target)
    label = lambda pieces: [tokenizer.id_to_string(tf.constant(p)).numpy().decode()  # noqa: E731
                            for p in pieces]
    source_labels, target_labels = label(source), label(target)
    heads = weights.shape[0]
    columns = min(4, heads)
    rows = 1 + -(-heads // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.2 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    panels = [(axes[0][0], "mean over heads", weights.mean(axis=0))] + [
        (axes[1 + h // columns][h % columns], f"head {h + 1}", weights[h]) for h in range(heads)]
    for ax, title, matrix in panels:
        ax.axis("on")
        ax.imshow(matrix, cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(len(source_labels)), source_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(target_labels)), target_labels, fontsize=7)
    figure.suptitle(sentence[:80], fontsize=10)
    figure.tight_layout()
    with atomic_files(path) as (tmp,):
        figure.savefig(tmp, dpi=110, format="png")
    plt.close(figure)
    return weights
