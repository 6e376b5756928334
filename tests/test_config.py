"""Presets: the paper's Table 3 rows, their parameter counts, and the JSON round trip."""
import pytest

from keras_transformer import PRESETS, Transformer, TransformerConfig

PAPER_PARAMS_M = {  # the parameters Table 3 reports for each row (millions)
    "base": 65, "big": 213, "B1": 58, "B2": 60, "C1": 36, "C2": 50, "C3": 80, "C4": 28,
    "C5": 168, "C6": 53, "C7": 90,
}
TABLE3_ROWS = ["A1", "A2", "A3", "A4", "B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7",
               "D1", "D2", "D3", "D4", "E"]


def analytic_parameter_count(c: TransformerConfig) -> int:
    """Parameters of the model written out from the paper's architecture (Figure 1).

    Attention: Q, K (d x h*d_k + bias each), V (d x h*d_v + bias), O (h*d_v x d + bias).
    FFN: d x d_ff + d_ff, d_ff x d + d. LayerNorm: 2d. Encoder layer: 1 attention, 1 FFN,
    2 norms; decoder layer: 2 attentions, 1 FFN, 3 norms. One shared embedding (V x d);
    sinusoids have no weights, learned positions have max_length x d per side; pre-norm adds
    a final LayerNorm to each stack.
    """
    d, h = c.d_model, c.num_heads
    attention = 2 * (d * h * c.d_k + h * c.d_k) + (d * h * c.d_v + h * c.d_v) + (h * c.d_v * d + d)
    ffn = d * c.d_ff + c.d_ff + c.d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    embeddings = c.vocab_size * d * (1 if c.share_embeddings else 3)
    positions = 2 * c.max_length * d if c.positional == "learned" else 0
    final_norms = 2 * norm if c.norm == "pre" else 0
    return c.num_layers * (encoder_layer + decoder_layer) + embeddings + positions + final_norms


@pytest.mark.quick
def test_table3_rows_are_presets_in_paper_order():
    names = list(PRESETS)
    assert names[:2] == ["base", "big"]
    assert names[2:2 + len(TABLE3_ROWS)] == TABLE3_ROWS


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.quick) if name == "base"
                                  else name for name in PRESETS])
def test_parameter_count_matches_formula(name):
    config = TransformerConfig.preset(name, vocab_size=37000)
    model = Transformer(config)
    count = model.count_params()
    assert count == analytic_parameter_count(config)
    print(f"{name:15s} {count / 1e6:8.1f}M  paper {PAPER_PARAMS_M.get(name, '-')}")


@pytest.mark.parametrize("name,paper_millions", [("base", 65), ("big", 213)])
def test_base_and_big_match_table3_within_5_percent(name, paper_millions):
    config = TransformerConfig.preset(name, vocab_size=37000)
    assert abs(analytic_parameter_count(config) / 1e6 - paper_millions) <= 0.05 * paper_millions


@pytest.mark.quick
def test_preset_rows_change_only_what_the_paper_lists():
    base = TransformerConfig.preset("base")
    assert TransformerConfig.preset("A1").num_heads == 1 and TransformerConfig.preset("A1").d_k == 512
    assert TransformerConfig.preset("B1").d_k == 16 and TransformerConfig.preset("B1").d_v == 64
    assert TransformerConfig.preset("C4").d_model == 256 and TransformerConfig.preset("C4").d_k == 32
    assert PRESETS["D3"] == {}  # its label smoothing is the run's (pipelines' recipes)
    assert TransformerConfig.preset("E").positional == "learned"
    big = TransformerConfig.preset("big")
    assert (big.d_model, big.d_ff, big.num_heads, big.dropout) == (1024, 4096, 16, 0.3)
    assert (base.d_k, base.d_v, base.dropout, base.norm) == (64, 64, 0.1, "post")
    assert all(isinstance(value, dict) and set(value) <= set(base.to_dict())
               for value in PRESETS.values())  # a preset describes the model only


def test_an_older_config_json_with_training_fields_still_loads():
    """config.json files written before the training fields moved to the recipe."""
    base = TransformerConfig.preset("base")
    older = {**base.to_dict(), "label_smoothing": 0.1, "train_steps": 6000}
    assert TransformerConfig.from_dict(older) == base
    assert "label_smoothing" not in base.to_dict() and "train_steps" not in base.to_dict()


@pytest.mark.quick
def test_json_round_trip_and_overrides():
    config = TransformerConfig.preset("big", vocab_size=1234, norm="pre")
    assert TransformerConfig.from_json(config.to_json()) == config
    assert config.vocab_size == 1234 and config.norm == "pre"


@pytest.mark.quick
def test_bad_config_is_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="Unknown preset 'huge'"):
        TransformerConfig.preset("huge")
    with pytest.raises(ValueError, match="Unknown TransformerConfig field"):
        TransformerConfig.preset("base", d_modle=3)
    with pytest.raises(ValueError, match="norm must be"):
        TransformerConfig.preset("base", norm="middle")
