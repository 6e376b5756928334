"""The encoder-decoder attention heat map of one translation (the picture of Figure 3-5)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.search import translate_ids
from pipelines.evaluate import ids_to_pieces
from pipelines.vocab import BOS_ID, EOS_ID


def cross_attention(model, source_ids, target_ids):
    """Last decoder layer's cross-attention weights [heads, target_len, source_len] for the
    teacher-forced target (the translation followed by EOS)."""
    target_in = [BOS_ID] + target_ids[:-1]
    memory, mask = model.encode(tf.constant([source_ids]), training=False)
    _, weights = model.decode(tf.constant([target_in]), memory, mask,
                              return_attention_scores=True, training=False)
    return np.asarray(weights[0])


def plot_attention(model, tokenizer, sentence, path, beam_size=4, alpha=0.6, extra_length=50):
    """Translates `sentence` and saves its attention (head average + every head) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    source = tokenizer.tokenize([sentence]).to_list()[0] + [EOS_ID]
    ids, _ = translate_ids(model, [source], beam_size=beam_size, alpha=alpha,
                           extra_length=extra_length, bos_id=BOS_ID, eos_id=EOS_ID)
    target = ids_to_pieces(ids[:, 0].numpy())[0] + [EOS_ID]
    weights = cross_attention(model, source, target)
    label = lambda pieces: [tokenizer.id_to_string(tf.constant(p)).numpy().decode()  # noqa: E731
                            for p in pieces]
    source_labels, target_labels = label(source), label(target)
    heads = weights.shape[0]
    columns = min(4, heads)
    rows = 1 + -(-heads // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.2 * rows),
                                squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    panels = [("mean over heads", weights.mean(axis=0))] + [
        (f"head {h + 1}", weights[h]) for h in range(heads)]
    positions = [(0, 0)] + [(1 + h // columns, h % columns) for h in range(heads)]
    for (title, matrix), (r, c) in zip(panels, positions):
        ax = axes[r][c]
        ax.axis("on")
        ax.imshow(matrix, cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(len(source_labels)), source_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(target_labels)), target_labels, fontsize=7)
    figure.suptitle(sentence[:80], fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return weights
