"""Sampling through the exported all-options signatures (both loaders) and the translate CLI.

`serving_check.py` loads the export of the session fixtures (tests/export/conftest.py: a
tiny model trained briefly on Multi30k) in a fresh process with the TF2 loader and the TF1
session loader and runs the calls below in order on 12 Multi30k validation sentences; the
CLI runs `pipelines/run.py --mode translate` on the fixtures' model directory.
"""

import numpy as np
import pytest
import tensorflow as tf

from export import op_check
from keras_transformer.serving.saved_model import ALL_OPTIONS_SIGNATURE, IDS_ALL_OPTIONS_SIGNATURE
from keras_transformer.serving.functions import MAX_BEAM_SIZE
from keras_transformer.decoding import score_ids
from pipelines.stages.translate import chunk_seed
from tests.export.conftest import SETTINGS
from tests.export.test_saved_model import (_tokenize, serve_in_fresh_process,
                                           _val_lines)
from tests.export.test_serve_options import _all_inputs, _ids_all_inputs, _lengths, _out
from tests.export.test_serve_options import translator_piece_ids
from tests.pipelines.run_helpers import run_command, run_stages

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

LOADERS = ("tf2", "tf1")
COUNT = 12
BEAM, ALPHA, EXTRA = SETTINGS["beam_size"], SETTINGS["alpha"], SETTINGS["extra_length"]
NUCLEUS = dict(topk=0, topp=0.9, temperature=1.0)

BAD_SAMPLING = [
    ("temperature_negative", dict(temperature=-1.0), "sampling_temperature must be"),
    ("temperature_nan", dict(temperature=float("nan")), "sampling_temperature must be"),
    ("topk_negative", dict(topk=-1, temperature=1.0), "sampling_topk must be >= 0"),
    ("topp_0", dict(topp=0.0, temperature=1.0), "sampling_topp must be in (0, 1]"),
    ("topp_above_1", dict(topp=1.5, temperature=1.0), "sampling_topp must be in (0, 1]"),
    ("topk_without_temperature", dict(topk=5, temperature=0.0), "need sampling_temperature > 0"),
    ("topp_without_temperature", dict(topp=0.5, temperature=0.0),
     "need sampling_temperature > 0"),
]


@pytest.fixture(scope="module")
def case(exported, translator, shared_data, tmp_path_factory):
    """Runs serving_check.py once with every call; returns what the tests need."""
    sources = _val_lines(shared_data, COUNT)
    source_ids = _tokenize(translator, sources)
    no_prefix = [[0]] * COUNT

    def text(call_id, num_results=3, beam_size=BEAM, alpha=ALPHA, **sampling):
        return {"id": call_id, "signature": ALL_OPTIONS_SIGNATURE,
                "inputs": _all_inputs(sources, beam_size, alpha, num_results, EXTRA,
                                      **sampling)}

    calls = [
        text("seed1", **NUCLEUS, seed=1),
        text("seed1_again", **NUCLEUS, seed=1),
        text("seed2", **NUCLEUS, seed=2),
        {"id": "ids_seed1", "signature": IDS_ALL_OPTIONS_SIGNATURE,
         "inputs": _ids_all_inputs(source_ids.tolist(), BEAM, ALPHA, 3, EXTRA, no_prefix,
                                   **NUCLEUS, seed=1)},
        text("one_sample", num_results=1, **NUCLEUS, seed=1),  # what the CLI answers
        text("top1", num_results=1, alpha=0.0, topk=1, temperature=1.0, seed=5),
        text("greedy", num_results=1, beam_size=1, alpha=0.0),  # beam search, beam 1
        text("beyond_beam", num_results=MAX_BEAM_SIZE, beam_size=1, **NUCLEUS, seed=3),
        text("results_above_cap", num_results=MAX_BEAM_SIZE + 1, **NUCLEUS, seed=3),
    ]
    calls += [text(name, **dict(NUCLEUS, **change)) for name, change, _ in BAD_SAMPLING]
    calls.append(text("after", **NUCLEUS, seed=1))  # the model still answers, the same way
    result = serve_in_fresh_process(
        exported, {"sources": sources[:2], "source_ids": source_ids[:2].tolist(),
                    "calls": calls}, tmp_path_factory.mktemp("sampling_export"))
    return {"result": result, "sources": sources, "source_ids": source_ids}


def _in_process(translator, sources, num_results, seed):
    out = translator.translate_with_all_options(
        tf.constant(sources), tf.constant(BEAM), tf.constant(ALPHA), tf.constant(num_results),
        tf.constant(EXTRA), tf.constant([""] * len(sources)), tf.constant(NUCLEUS["topk"]),
        tf.constant(NUCLEUS["topp"]), tf.constant(NUCLEUS["temperature"]),
        tf.constant(seed, tf.int64), tf.constant([[""]]))
    return {name: value.numpy() for name, value in out.items()}


def test_same_seed_same_samples_in_both_loaders_and_in_process(case, translator):
    want = _in_process(translator, case["sources"], 3, seed=1)
    for loader in LOADERS:
        for call_id in ("seed1", "seed1_again", "after"):
            got = _out(case, loader, call_id)
            assert got["translations"].tolist() == want["translations"].tolist(), call_id
            assert got["tokens"].tolist() == want["tokens"].tolist(), call_id
            np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loader", LOADERS)
def test_other_seeds_and_other_draws_give_other_samples(case, loader):
    one, two = _out(case, loader, "seed1"), _out(case, loader, "seed2")
    assert one["translations"].tolist() != two["translations"].tolist()
    distinct = [len(set(row)) for row in one["translations"].tolist()]
    assert max(distinct) > 1, one["translations"]  # a sentence's 3 samples are not copies
    greedy = _out(case, loader, "greedy")["translations"][:, 0]
    assert np.any(one["translations"] != greedy[:, None])  # not beam search in disguise


@pytest.mark.parametrize("loader", LOADERS)
def test_the_ids_signature_samples_the_same_pieces(case, loader, translator):
    pieces = _out(case, loader, "seed1")["tokens"]
    ids = _out(case, loader, "ids_seed1")["ids"]
    want = np.array([[translator_piece_ids(translator, hyp) for hyp in row] for row in pieces])
    assert ids.tolist() == want.tolist()


@pytest.mark.parametrize("loader", LOADERS)
def test_top_k_one_is_beam_one_greedy_decoding(case, loader):
    top1, greedy = _out(case, loader, "top1"), _out(case, loader, "greedy")
    assert top1["tokens"].tolist() == greedy["tokens"].tolist()
    np.testing.assert_allclose(top1["scores"], greedy["scores"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loader", LOADERS)
def test_samples_are_scored_like_hypotheses_best_first(case, loader, trained_model,
                                                       translator):
    out = _out(case, loader, "seed1")
    lengths = _lengths(out["tokens"])
    assert np.all(np.diff(out["scores"], axis=1) <= 0)
    assert np.all(out["tokens"][np.arange(COUNT)[:, None], np.arange(3), lengths - 1]
                  == b"</s>")
    penalty = ((5.0 + lengths) / 6.0) ** ALPHA
    np.testing.assert_allclose(out["token_log_probs"].sum(-1), out["scores"] * penalty,
                               rtol=1e-4, atol=1e-3)
    # The model's own log-probabilities: the full forward pass gives the scores back.
    targets = np.array([[translator_piece_ids(translator, hyp) for hyp in row]
                        for row in out["tokens"]], np.int32)
    for n in range(3):
        rescored = score_ids(trained_model, case["source_ids"], targets[:, n], alpha=ALPHA)
        np.testing.assert_allclose(rescored.numpy(), out["scores"][:, n], rtol=1e-4, atol=1e-4)
    alignment, padding = out["alignment"], out["tokens"] == b""
    assert np.all(alignment[padding] == -1) and np.all(alignment[~padding] >= 0)


@pytest.mark.parametrize("loader", LOADERS)
def test_sampling_options_are_checked_and_the_model_still_answers(case, loader):
    assert _out(case, loader, "beyond_beam")["translations"].shape == (COUNT, MAX_BEAM_SIZE)
    calls = case["result"][loader]["calls"]
    expected = {name: message for name, _, message in BAD_SAMPLING}
    expected["results_above_cap"] = f"(sampling: [1, {MAX_BEAM_SIZE}])"
    for name, message in expected.items():
        assert calls[name].get("error") == "InvalidArgumentError", (name, calls[name])
        assert message in calls[name]["message"], (name, calls[name]["message"][:300])


def test_signatures_take_the_sampling_inputs_and_use_stock_ops(case, exported):
    sampling = {"sampling_topk": ["int32", []], "sampling_topp": ["float32", []],
                "sampling_temperature": ["float32", []], "seed": ["int64", []]}
    signatures = case["result"]["tf1"]["signature_defs"]
    for name in (ALL_OPTIONS_SIGNATURE, IDS_ALL_OPTIONS_SIGNATURE):
        assert sampling.items() <= signatures[name]["inputs"].items()
    report = op_check.check_ops(exported)
    assert report.ok, report.format()
    assert report.ops.get("StatelessMultinomial") == op_check.CORE


# ---------------------------------------------------------------------- the translate CLI
def _translate(model_dir, input_path, shared_data, **given):
    return run_stages("translate", shared_data, model_dir=str(model_dir), input=str(input_path),
                      **given)


def test_translate_cli_samples_as_the_saved_model_does_per_seed(case, model_dir, shared_data,
                                                                tmp_path):
    input_path = tmp_path / "input.en"
    input_path.write_text("\n".join(case["sources"]) + "\n", encoding="utf-8")
    # float32, as the exported fixture (this CPU's default would be bfloat16).
    runs = [_translate(model_dir, input_path, shared_data, sampling_topp=0.9, seed=s,
                       decode_precision="float32") for s in (1, 1, 2)]
    for run in runs:
        assert "sampling instead of beam search" in run.log
    lines = [run.out.splitlines() for run in runs]
    assert len(lines[0]) == COUNT and lines[0] == lines[1] and lines[0] != lines[2]
    for loader in LOADERS:
        served = _out(case, loader, "one_sample")["translations"][:, 0]
        assert lines[0] == [t.decode("utf-8") for t in served]


@pytest.mark.quick
def test_chunk_seeds_start_at_the_seed_and_differ_per_chunk():
    assert chunk_seed(7, 0) == 7
    assert len({chunk_seed(7, i) for i in range(100)} | {chunk_seed(8, i) for i in range(100)}
               ) == 200
    assert chunk_seed(2 ** 63 - 1, 1) == -2 ** 63 + 2 ** 32 - 1  # wrapped into int64


@pytest.mark.parametrize("flags,message", [
    (["--sampling_topk=-1"], "--sampling_topk -1: must be >= 0"),
    (["--sampling_topp=0"], "--sampling_topp 0.0: must be in (0, 1]"),
    (["--sampling_topp=1.5"], "--sampling_topp 1.5: must be in (0, 1]"),
    (["--sampling_temperature=0"], "--sampling_temperature 0.0: must be > 0"),
    (["--sampling_temperature=-2", "--mode=evaluate"],
     "--sampling_temperature: only --mode translate samples"),
])
def test_bad_sampling_flags_exit_2_with_one_line_naming_the_flag(model_dir, shared_data,
                                                                 tmp_path, flags, message):
    input_path = tmp_path / "input.en"
    input_path.write_text("A dog.\n", encoding="utf-8")
    run = run_command(["--mode=translate", f"--model_dir={model_dir}", f"--input={input_path}",
                       *flags], shared_data)
    assert run.returncode == 2, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {message}"], run.stderr[-3000:]
    assert run.stdout == ""
