"""Shared SentencePiece vocabulary: in-graph tokenization equals Python, and round-trips."""
import os
import pathlib

import pytest
import sentencepiece as spm
import tensorflow as tf

from pipelines.data import text_io, vocab
from pipelines.errors import DataError

pytestmark = pytest.mark.xdist_group("test_vocab")  # its module fixtures: one worker

SMALL_VOCAB = 3000
SAMPLE_LINES = 20_000


def train_small_vocab(data_dir: pathlib.Path, out_dir: pathlib.Path) -> pathlib.Path:
    """A 3,000-piece model on a 20,000-line sample of Multi30k train (about a second)."""
    import gzip

    corpus = out_dir / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    files = []
    for lang in ("en", "de"):
        path = corpus / f"train.{lang}"
        with gzip.open(data_dir / "multi30k" / f"train.{lang}.gz", "rb") as f:
            path.write_bytes(f.read())
        files.append(path)
    return vocab.build_vocab(
        files, out_dir, SMALL_VOCAB, max_sentences=SAMPLE_LINES, log=lambda m: None
    )


@pytest.fixture(scope="module")
def model_path(shared_data, tmp_path_factory):
    return train_small_vocab(shared_data, tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def val_lines(shared_data):
    return {
        lang: text_io.read_lines(shared_data / "multi30k" / f"val.{lang}") for lang in ("en", "de")
    }


def test_model_is_stored_atomically_with_reserved_ids(model_path):
    assert model_path.name == "spm.model"
    assert [p.name for p in model_path.parent.iterdir() if p.name.startswith(".")] == []
    proto = vocab.read_model_proto(model_path.parent)
    assert proto == model_path.read_bytes()
    sp = spm.SentencePieceProcessor(model_proto=proto)
    assert sp.get_piece_size() == SMALL_VOCAB
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (
        vocab.PAD_ID, vocab.UNK_ID, vocab.BOS_ID, vocab.EOS_ID
    ) == (0, 1, 2, 3)


@pytest.mark.parametrize("lang", ["en", "de"])
def test_in_graph_tokenization_equals_python_sentencepiece(model_path, val_lines, lang):
    lines = val_lines[lang]
    assert len(lines) == 1014
    tokenizer = vocab.load_tokenizer(model_path)
    in_graph = tf.function(tokenizer.tokenize)(tf.constant(lines)).to_list()
    python = vocab.python_processor(model_path).encode(lines)
    assert in_graph == python


@pytest.mark.parametrize("lang", ["en", "de"])
def test_detokenize_tokenize_round_trips(model_path, val_lines, lang):
    lines = val_lines[lang]
    tokenizer = vocab.load_tokenizer(vocab.read_model_proto(model_path))
    ids = tokenizer.tokenize(tf.constant(lines))
    back = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
    assert back == lines
    assert vocab.UNK_ID not in ids.flat_values.numpy()


def test_unseen_characters_use_byte_fallback_not_unk(model_path):
    text = ["Ein Hund 🐕 läuft — 東京 ﬁ", "two  spaces and a tab\tend "]
    tokenizer = vocab.load_tokenizer(model_path)
    ids = tokenizer.tokenize(tf.constant(text))
    assert vocab.UNK_ID not in ids.flat_values.numpy()
    back = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
    assert back == text


def test_sample_is_seeded_bounded_and_reports_progress(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("".join(f"line {i}\n" for i in range(10_000)) + "\n  \n", encoding="utf-8")
    logs = []
    first = vocab.sample_lines([path], 100, seed=3, total_lines=10_002, log=logs.append,
                               progress_interval=0)
    again = vocab.sample_lines([path], 100, seed=3, log=lambda m: None)
    assert first == again and len(first) == 100 and len(set(first)) == 100
    assert vocab.sample_lines([path], 100, seed=4, log=lambda m: None) != first
    # A line every text_io.PROGRESS_EVERY lines once the interval has passed (here 0 s).
    assert [line.split(", ")[0] for line in logs[:2]] == [
        "vocab: sampling: 4,096 / 10,002 lines (41.0%)",
        "vocab: sampling: 8,192 / 10,002 lines (81.9%)"]
    assert all(" lines/s, ETA " in line for line in logs[:2])
    assert "read 10,000 lines in total, sampled 100" in logs[-1] and "(in 0s)" in logs[-1]


def test_bpe_training_reports_that_it_is_still_running(tmp_path, monkeypatch):
    """SentencePiece says nothing while it trains (minutes on WMT): a heartbeat line does."""
    import time

    def slow_train(*args, **kwargs):
        time.sleep(0.35)
        return real_train(*args, **kwargs)

    real_train = vocab.train_sentencepiece
    monkeypatch.setattr(vocab, "train_sentencepiece", slow_train)
    path = tmp_path / "f.txt"
    path.write_text("".join(f"line {i} of the text\n" for i in range(200)), encoding="utf-8")
    logs = []
    vocab.build_vocab([path], tmp_path, 300, log=logs.append, progress_interval=0.1)
    beats = [line for line in logs if line.startswith("vocab: training BPE: still running")]
    assert len(beats) >= 2, logs
    assert "trained in 0s" in logs[-1]


@pytest.mark.quick
def test_missing_model_and_empty_corpus_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="spm.model: SentencePiece model not found"):
        vocab.read_model_proto(tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="empty corpus"):
        vocab.build_vocab([empty], tmp_path, 100, log=lambda m: None)
    assert not os.path.exists(tmp_path / "spm.model")


def test_too_large_vocab_is_a_clear_error(tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("a b c\nd e f\n", encoding="utf-8")
    with pytest.raises(DataError, match="smaller vocab_size"):
        vocab.build_vocab([small], tmp_path, 5000, log=lambda m: None)


@pytest.mark.quick
def test_a_vocabulary_with_other_special_ids_is_refused(tmp_path):
    import io

    import sentencepiece as spm

    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["a dog runs in the snow", "two men play"] * 50),
        model_writer=writer, vocab_size=23, minloglevel=2)  # sentencepiece's own ids
    path = tmp_path / "spm.model"
    path.write_bytes(writer.getvalue())
    with pytest.raises(DataError, match=r"special ids pad/unk/bos/eos are \(-1, 0, 1, 2\)"):
        vocab.read_model_proto(path)
    path.write_bytes(b"not a model")
    with pytest.raises(DataError, match="not a SentencePiece model"):
        vocab.read_model_proto(path)
