"""Beam search beats greedy decoding on a model trained on the real Multi30k data."""
import pytest
import numpy as np
import tensorflow as tf

from keras_transformer.decoding import BeamSearch, decode, score_ids
from pipelines.data.vocab import EOS_ID, python_processor

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model


@pytest.mark.quick
def test_beam_four_scores_at_least_greedy_on_most_validation_sentences(trained_model,
                                                                       spm_proto, shared_data):
    processor = python_processor(spm_proto)
    lines = (shared_data / "multi30k" / "val.en").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1014
    encoded = [processor.encode(line)[:40] + [EOS_ID] for line in lines]
    search = tf.function(lambda s, k, a: decode(trained_model, s,
                                                BeamSearch(beam_size=k, alpha=a, extra_length=10)))
    greedy_scores, beam_scores = [], []
    for start in range(0, len(encoded), 256):
        chunk = encoded[start:start + 256]
        source = np.zeros((len(chunk), max(map(len, chunk))), np.int32)
        for row, ids in enumerate(chunk):
            source[row, :len(ids)] = ids
        greedy_ids, *_ = decode(trained_model, source,
                                BeamSearch(beam_size=1, alpha=0.0, extra_length=10))
        # Greedy output, scored with the same length penalty beam search optimises.
        greedy_scores.append(score_ids(trained_model, source, greedy_ids[:, 0], alpha=0.6).numpy())
        beam_scores.append(search(source, 4, 0.6)[1][:, 0].numpy())
    greedy, beam = np.concatenate(greedy_scores), np.concatenate(beam_scores)
    at_least = np.mean(beam >= greedy - 1e-4)
    print(f"beam >= greedy on {at_least:.1%} of 1014 sentences; mean {beam.mean():.3f} vs "
          f"{greedy.mean():.3f}")
    assert at_least > 0.8
    assert beam.mean() > greedy.mean()
