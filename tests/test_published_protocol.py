"""benchmarks/multi30k_published_protocol.py: the data, schedule and model it promises."""
import importlib.util

import pytest

from keras_transformer import NoamSchedule, TransformerConfig
from keras_transformer.learning_rate import scale_for_peak
from pipelines.settings import table
from pipelines.settings.recipes import PRESET_RECIPES
from tests.conftest import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "multi30k_published_protocol", ROOT / "benchmarks" / "multi30k_published_protocol.py")
protocol = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(protocol)


def real_lines(shared_data, name, numbers):
    lines = (shared_data / "multi30k" / name).read_text(encoding="utf-8").splitlines()
    return [lines[n - 1] for n in numbers]


def test_preprocessing_lowercases_normalizes_and_moses_tokenizes(shared_data):
    """Real test_2016_flickr lines come out as in the published (BPE-removed) files."""
    pytest.importorskip("sacremoses")
    english = real_lines(shared_data, "test_2016_flickr.en", [30, 383])
    german = real_lines(shared_data, "test_2016_flickr.de", [1, 2, 226])
    assert english[1] == 'A kid crosscountry skis wearing the number "93".'
    assert protocol.moses_preprocessor("en")(english) == [
        "one man holds another man &apos;s head down and prepares to punch him in the face .",
        "a kid crosscountry skis wearing the number &quot; 93 . &quot;",  # English: ." moves
    ]
    assert protocol.moses_preprocessor("de")(german) == [
        "ein mann mit einem orangefarbenen hut , der etwas anstarrt .",
        "ein boston terrier läuft über saftig-grünes gras vor einem weißen zaun .",
        "eine frau auf einem boot namens &quot; el corazon &quot; lässt schwarze gewichte ins "
        "wasser fallen .",
    ]
    detokenized = protocol.moses_detokenizer("de")(protocol.moses_preprocessor("de")(german))
    assert detokenized == [line.lower() for line in german]


def test_bpe_pieces_never_cross_moses_tokens(shared_data):
    """The product's SentencePiece BPE, trained on tokenized text, keeps every piece inside
    one token, and detokenizing the pieces gives the tokenized text back (--remove-bpe)."""
    pytest.importorskip("sacremoses")
    import gzip

    from pipelines.data import vocab

    lines = []
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt",
                       encoding="utf-8") as f:
            raw = [next(f).rstrip("\n") for _ in range(1500)]
        lines += protocol.moses_preprocessor(lang)(raw)
    processor = vocab.python_processor(vocab.train_sentencepiece(lines, 1000))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    assert not [p for p in pieces if "\u2581" in p[1:]], "a piece spans a space"
    for line in lines[:200] + lines[-200:]:
        encoded = processor.encode(line, out_type=str)
        assert "".join(encoded).replace("\u2581", " ").strip() == line
        assert processor.decode(processor.encode(line)) == line


@pytest.mark.quick
def test_the_quality_presets_rate_peaks_at_0005_on_step_2000():
    """fairseq's inverse_sqrt (peak 0.005 at update 2,000) as the preset's Eq. 3 scale."""
    recipe = PRESET_RECIPES[protocol.PRESET]
    d_model = TransformerConfig.preset(protocol.PRESET).d_model
    assert recipe["lr_scale"] == scale_for_peak(0.005, d_model, 2000) == pytest.approx(
        0.005 * (128 * 2000) ** 0.5)
    schedule = NoamSchedule(d_model, warmup_steps=recipe["warmup_steps"], scale=recipe["lr_scale"])
    rate = {step: float(schedule(step - 1)) for step in (1, 1000, 1999, 2000, 2001, 8000)}
    assert rate[2000] == pytest.approx(0.005, rel=1e-6)
    assert rate[1999] < rate[2000] and rate[2001] < rate[2000]
    assert rate[1000] == pytest.approx(0.0025, rel=1e-6)  # linear warm-up
    assert rate[8000] == pytest.approx(0.005 * (2000 / 8000) ** 0.5, rel=1e-6)  # inverse sqrt


def test_run_flags_carry_the_protocol(tmp_path):
    """The published run's recipe, through the preset; the script's steps flags where given."""
    flags = protocol.run_flags(protocol.data_paths(tmp_path), tmp_path,
                               protocol.parse_args([])[0])
    value = {name: flags[i + 1] for i, name in enumerate(flags[:-1]) if name.startswith("--")
             and not flags[i + 1].startswith("--")}
    assert value == {**value, "--task": "text", "--config": "multi30k_quality",
                     "--eval_split": "test"}
    assert f"--test_tgt={tmp_path / 'data' / 'test_2016_flickr.de'}" in flags
    assert not [flag for flag in flags if flag.startswith("--train_steps")]
    recipe = PRESET_RECIPES["multi30k_quality"]
    assert recipe == {**recipe, "batch_tokens": 8192, "adam_epsilon": 1e-8, "warmup_steps": 2000,
                      "train_steps": 8000, "checkpoint_every": 125, "average_last": 10,
                      "beam_size": 5, "alpha": 1.0,
                      "jit_compile": True,  # the faster setting over 8,000 updates
                      "mixed_precision": False}  # fairseq's float32
    smoke = protocol.run_flags(protocol.data_paths(tmp_path), tmp_path,
                               protocol.parse_args(["--train_steps", "20"])[0])
    assert smoke == [*flags, "--train_steps=20"]


def test_multi30k_tiny_has_the_published_shape():
    config = TransformerConfig.preset("multi30k_tiny")
    assert (config.num_layers, config.d_model, config.d_ff, config.num_heads) == (4, 128, 256, 4)
    assert (config.dropout, config.share_embeddings) == (0.3, True)
    assert (config.attention_dropout, config.relu_dropout, config.norm, config.positional) == (
        0.0, 0.0, "post", "sinusoidal")
    assert config.vocab_size == 10_000 and PRESET_RECIPES["multi30k_tiny"] == {"train_steps": 8000}
    assert TransformerConfig.preset(protocol.PRESET) == config
    assert table.default("label_smoothing") == 0.1  # the preset's recipe leaves it to the paper


@pytest.mark.quick
def test_bad_flag_is_one_line_and_exit_2(capsys):
    assert protocol.main(["--train_steps", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "multi30k_published_protocol.py: error: --train_steps 0: must be >= 1"]
    with pytest.raises(SystemExit) as exit_info:
        protocol.main(["--train_steps", "many"])
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
