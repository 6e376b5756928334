"""The per-request-options signatures of the exported SavedModel, as a server loads them:
`translate_with_options` / `translate_ids_with_options` (the six options of their first
release) and, for required phrases, `translate_with_all_options` /
`translate_ids_with_all_options`.

`serving_check.py` loads the export of the session fixtures (tests/export/conftest.py: a
tiny model trained briefly on Multi30k, exported with beam 4, alpha 0.6, extra length 10) in
a fresh process with the TF2 loader and the TF1 session loader, and runs every call below in
order on 20 real Multi30k validation sentences; each test checks one property for each
loader.
"""
import json

import numpy as np
import pytest
import tensorflow as tf

from export import op_check
from keras_transformer.serving.saved_model import (ALL_OPTIONS_SIGNATURE, EXPORT_INFO_FILE, EXTRA_DIR,
                                IDS_ALL_OPTIONS_SIGNATURE, IDS_OPTIONS_SIGNATURE,
                                IDS_SIGNATURE, OPTIONS_SIGNATURE, SERVING_SIGNATURE)
from keras_transformer.serving.functions import BEAM_SEARCH, MAX_BEAM_SIZE
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import score_ids
from tests.export.conftest import MAX_LENGTH, SETTINGS
from tests.export.test_saved_model import (_tokenize, serve_in_fresh_process,
                                           _val_lines)

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

LOADERS = ("tf2", "tf1")
COUNT = 20
BEAM, ALPHA, EXTRA = SETTINGS["beam_size"], SETTINGS["alpha"], SETTINGS["extra_length"]


def _sampling_inputs(topk=BEAM_SEARCH[0], topp=BEAM_SEARCH[1], temperature=BEAM_SEARCH[2],
                     seed=BEAM_SEARCH[3]):
    """The sampling inputs of the all-options signatures; by default beam search's values."""
    return {"sampling_topk": {"dtype": "int32", "value": topk},
            "sampling_topp": {"dtype": "float32", "value": topp},
            "sampling_temperature": {"dtype": "float32", "value": temperature},
            "seed": {"dtype": "int64", "value": seed}}


def _inputs(source, beam_size, alpha, num_results, max_extra_length, prefix=None):
    """The six inputs of `translate_with_options`."""
    prefix = [""] * len(source) if prefix is None else prefix
    return {"source": {"dtype": "string", "value": source},
            "beam_size": {"dtype": "int32", "value": beam_size},
            "alpha": {"dtype": "float32", "value": alpha},
            "num_results": {"dtype": "int32", "value": num_results},
            "max_extra_length": {"dtype": "int32", "value": max_extra_length},
            "target_prefix": {"dtype": "string", "value": prefix}}


def _all_inputs(source, beam_size, alpha, num_results, max_extra_length, prefix=None,
                terms=None, **sampling):
    """The inputs of `translate_with_all_options`: the six, sampling and terms."""
    return {**_inputs(source, beam_size, alpha, num_results, max_extra_length, prefix),
            "terms": {"dtype": "string", "value": [[""]] if terms is None else terms},
            **_sampling_inputs(**sampling)}


def _ids_inputs(source_ids, beam_size, alpha, num_results, max_extra_length, prefix_ids):
    """The six inputs of `translate_ids_with_options`."""
    return {"source_ids": {"dtype": "int32", "value": source_ids},
            "beam_size": {"dtype": "int32", "value": beam_size},
            "alpha": {"dtype": "float32", "value": alpha},
            "num_results": {"dtype": "int32", "value": num_results},
            "max_extra_length": {"dtype": "int32", "value": max_extra_length},
            "target_prefix_ids": {"dtype": "int32", "value": prefix_ids}}


def _ids_all_inputs(source_ids, beam_size, alpha, num_results, max_extra_length, prefix_ids,
                    terms_ids=None, **sampling):
    """The inputs of `translate_ids_with_all_options`: the six, sampling and terms."""
    return {**_ids_inputs(source_ids, beam_size, alpha, num_results, max_extra_length,
                          prefix_ids),
            "terms_ids": {"dtype": "int32", "value": [[[0]]] if terms_ids is None else terms_ids},
            **_sampling_inputs(**sampling)}


@pytest.mark.quick
def test_the_requests_here_send_every_input_of_their_signature():
    """What the tests below send is, name for name, what each options signature takes
    (`keras_transformer.serving.functions`'s input specs): a renamed or added input fails here first."""
    from keras_transformer.serving.functions import OPTION_SPECS, SAMPLING_SPECS, TERMS_IDS_SPEC, TERMS_SPEC

    options = [spec.name for spec in OPTION_SPECS]
    sampling = [spec.name for spec in SAMPLING_SPECS]
    assert list(_inputs(["a"], 1, 0.0, 1, 0)) == ["source", *options, "target_prefix"]
    assert list(_ids_inputs([[5, 3]], 1, 0.0, 1, 0, [[0]])) == [
        "source_ids", *options, "target_prefix_ids"]
    assert sorted(_all_inputs(["a"], 1, 0.0, 1, 0)) == sorted(
        ["source", *options, "target_prefix", *sampling, TERMS_SPEC.name])
    assert sorted(_ids_all_inputs([[5, 3]], 1, 0.0, 1, 0, [[0]])) == sorted(
        ["source_ids", *options, "target_prefix_ids", *sampling, TERMS_IDS_SPEC.name])
    # Beam search's sampling values by default: temperature 0 (no sampling).
    assert _sampling_inputs()["sampling_temperature"]["value"] == BEAM_SEARCH[2] == 0.0


# (call id, options overrides, expected message fragment); all on the text signature.
BAD_OPTIONS = [
    ("beam_0", dict(beam_size=0), "beam_size must be in"),
    ("beam_above_cap", dict(beam_size=MAX_BEAM_SIZE + 1), "beam_size must be in"),
    ("results_0", dict(num_results=0), "num_results must be in"),
    ("results_above_beam", dict(beam_size=2, num_results=3), "num_results must be in"),
    ("alpha_negative", dict(alpha=-0.5), "alpha must be a finite number"),
    ("alpha_nan", dict(alpha=float("nan")), "alpha must be a finite number"),
    ("extra_negative", dict(max_extra_length=-1), "max_extra_length must be >= 0"),
]


@pytest.fixture(scope="module")
def case(exported, translator, shared_data, tmp_path_factory):
    """Runs serving_check.py once with every call; returns what the tests need."""
    sources = _val_lines(shared_data, COUNT)
    references = (shared_data / "multi30k" / "val.de").read_text("utf-8").splitlines()[:COUNT]
    prefixes = [" ".join(line.split()[:2]) for line in references]  # "Ein Mann", ...
    source_ids = _tokenize(translator, sources)
    # A required phrase per sentence: the longest word of its reference.
    terms = [[max(line.rstrip(".").split(), key=len)] for line in references]
    terms_ids = _piece_ids(translator, terms)
    two = sources[:2]
    good = dict(beam_size=BEAM, alpha=ALPHA, num_results=1, max_extra_length=EXTRA)
    calls = [
        {"id": "default", "signature": SERVING_SIGNATURE,
         "inputs": {"source": {"dtype": "string", "value": sources}}},
        {"id": "same", "signature": OPTIONS_SIGNATURE, "inputs": _inputs(sources, **good)},
        {"id": "nbest4", "signature": OPTIONS_SIGNATURE,
         "inputs": _inputs(sources, 4, 0.6, 4, EXTRA)},
        {"id": "prefix", "signature": OPTIONS_SIGNATURE,
         "inputs": _inputs(sources, 4, 0.6, 2, EXTRA, prefixes)},
        {"id": "empty", "signature": OPTIONS_SIGNATURE, "inputs": _inputs([], 4, 0.6, 2, EXTRA)},
        {"id": "ids_same", "signature": IDS_OPTIONS_SIGNATURE,
         "inputs": _ids_inputs(source_ids.tolist(), BEAM, ALPHA, 1, EXTRA, [[0]] * COUNT)},
        {"id": "greedy_ids", "signature": IDS_OPTIONS_SIGNATURE,
         "inputs": _ids_inputs(source_ids.tolist(), 1, 0.0, 1, EXTRA, [[0]] * COUNT)},
        {"id": "terms", "signature": ALL_OPTIONS_SIGNATURE,
         "inputs": _all_inputs(sources, 4, 0.6, 2, EXTRA, terms=terms)},
        {"id": "terms_ids", "signature": IDS_ALL_OPTIONS_SIGNATURE,
         "inputs": _ids_all_inputs(source_ids.tolist(), 4, 0.6, 2, EXTRA, [[0]] * COUNT,
                                   terms_ids.tolist())},
    ]
    for name, change, _ in BAD_OPTIONS:
        calls.append({"id": name, "signature": OPTIONS_SIGNATURE,
                      "inputs": _inputs(two, **dict(good, **change))})
    calls += [
        {"id": "prefix_rows", "signature": OPTIONS_SIGNATURE,
         "inputs": _inputs(two, **good, prefix=[""] * 3)},
        {"id": "prefix_id_too_big", "signature": IDS_OPTIONS_SIGNATURE,
         "inputs": _ids_inputs(source_ids[:2].tolist(), BEAM, ALPHA, 1, EXTRA, [[10 ** 6]] * 2)},
        {"id": "prefix_id_negative", "signature": IDS_OPTIONS_SIGNATURE,
         "inputs": _ids_inputs(source_ids[:2].tolist(), BEAM, ALPHA, 1, EXTRA, [[-4]] * 2)},
        {"id": "terms_too_long", "signature": ALL_OPTIONS_SIGNATURE,
         "inputs": _all_inputs(two, **good, terms=[["Hund " * MAX_LENGTH]] * 2)},
        {"id": "terms_rows", "signature": ALL_OPTIONS_SIGNATURE,
         "inputs": _all_inputs(two, **good, terms=[["Hund"]] * 3)},
        {"id": "terms_sampling", "signature": ALL_OPTIONS_SIGNATURE,
         "inputs": _all_inputs(two, **good, terms=[["Hund"]] * 2, temperature=1.0)},
        {"id": "terms_ids_eos", "signature": IDS_ALL_OPTIONS_SIGNATURE,
         "inputs": _ids_all_inputs(source_ids[:2].tolist(), BEAM, ALPHA, 1, EXTRA, [[0]] * 2,
                                   [[[EOS_ID]]] * 2)},
        # After every refusal, the same model still answers, and the same way.
        {"id": "after", "signature": OPTIONS_SIGNATURE, "inputs": _inputs(sources, **good)},
    ]
    result = serve_in_fresh_process(
        exported, {"sources": sources[:2], "source_ids": source_ids[:2].tolist(),
                    "calls": calls}, tmp_path_factory.mktemp("serve_options"))
    return {"result": result, "sources": sources, "prefixes": prefixes,
            "source_ids": source_ids, "terms": terms}


def _piece_ids(translator, phrases):
    """int32 [rows, phrases, length]: the SentencePiece ids of each phrase, 0-padded."""
    import tensorflow_text as tf_text

    tokenizer = tf_text.SentencepieceTokenizer(model=translator.spm_proto, out_type=tf.int32)
    return tokenizer.tokenize(tf.constant(phrases)).to_tensor().numpy()


def _out(case, loader, call_id):
    call = case["result"][loader]["calls"][call_id]
    assert "outputs" in call, call
    return {name: (np.array([bytes.fromhex(v) for v in value["values"]], dtype=object)
                   .reshape(value["shape"]) if value["dtype"] == "string"
                   else np.array(value["values"]).reshape(value["shape"]))
            for name, value in call["outputs"].items()}


def _lengths(tokens):
    """Pieces per hypothesis, EOS included ('' is padding)."""
    return np.vectorize(len)(tokens).astype(bool).sum(-1)


@pytest.mark.parametrize("loader", LOADERS)
def test_export_settings_through_options_equal_serving_default(case, loader):
    assert (BEAM, ALPHA) == (4, 0.6)  # the paper's settings, as the issue asks
    default, same = _out(case, loader, "default"), _out(case, loader, "same")
    assert same["translations"].shape == (COUNT, 1) and same["scores"].shape == (COUNT, 1)
    assert list(same["translations"][:, 0]) == list(default["translation"])
    np.testing.assert_allclose(same["scores"][:, 0], default["score"], rtol=1e-5, atol=1e-5)
    # The ids signature answers the same for the same pieces.
    ids_same = _out(case, loader, "ids_same")
    ids = case["result"][loader]["ids"]  # translate_ids on the first two sentences
    width = len(ids["ids"]["values"][0])
    got = ids_same["ids"][:2, 0]
    assert np.all(got[:, width:] == 0)
    assert got[:, :width].tolist() == ids["ids"]["values"]
    np.testing.assert_allclose(ids_same["scores"][:, 0], same["scores"][:, 0], atol=1e-5)


@pytest.mark.parametrize("loader", LOADERS)
def test_n_best_are_distinct_sorted_and_led_by_the_one_best(case, loader):
    nbest, best = _out(case, loader, "nbest4"), _out(case, loader, "same")
    assert nbest["translations"].shape == (COUNT, 4) and nbest["scores"].shape == (COUNT, 4)
    for row in range(COUNT):
        hypotheses = {tuple(t for t in tokens if t) for tokens in nbest["tokens"][row]}
        assert len(hypotheses) == 4, nbest["tokens"][row]
        scores = nbest["scores"][row]
        assert np.all(np.diff(scores) <= 0) and np.all(scores > -1e6), scores
    assert list(nbest["translations"][:, 0]) == list(best["translations"][:, 0])
    np.testing.assert_allclose(nbest["scores"][:, 0], best["scores"][:, 0], atol=1e-5)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("call_id", ["nbest4", "prefix"])
def test_token_log_probs_sum_to_the_unnormalised_score(case, loader, call_id):
    out = _out(case, loader, call_id)
    lengths = _lengths(out["tokens"])
    eos_piece = out["tokens"][0, 0, lengths[0, 0] - 1]
    for row in range(COUNT):
        for n, length in enumerate(lengths[row]):
            tokens = out["tokens"][row, n]
            assert tokens[length - 1] == eos_piece and b"" not in set(tokens[:length])
    assert eos_piece == b"</s>"
    log_probs = out["token_log_probs"]
    assert np.all(log_probs[out["tokens"] == b""] == 0) and np.all(log_probs <= 0)
    penalty = ((5.0 + lengths) / 6.0) ** 0.6
    np.testing.assert_allclose(log_probs.sum(-1), out["scores"] * penalty, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("loader", LOADERS)
def test_alignment_is_the_head_averaged_cross_attention_argmax_inside_the_source(
        case, loader, trained_model, translator):
    out = _out(case, loader, "nbest4")
    alignment, padding = out["alignment"], out["tokens"] == b""
    assert np.all(alignment[padding] == -1)
    source_lengths = np.count_nonzero(case["source_ids"], axis=1)
    assert np.all(alignment[~padding] >= 0)
    assert np.all(alignment < source_lengths[:, None, None])
    assert len(set(alignment[~padding].tolist())) > 3  # not one constant position
    # The same argmax, recomputed teacher-forced over the whole output (1-layer decoder:
    # the penultimate layer is the only one).
    source = tf.constant(case["source_ids"])
    pieces = [[translator_piece_ids(translator, hyp) for hyp in row] for row in out["tokens"]]
    memory, mask = trained_model.encode(source, training=False)
    for n in range(4):
        target = np.array([p[n] for p in pieces], np.int32)
        target_in = np.concatenate([np.full([COUNT, 1], BOS_ID, np.int32), target[:, :-1]], 1)
        _, weights = trained_model.decode(target_in, memory, mask, return_attention_scores=True)
        want = tf.argmax(tf.reduce_mean(weights, axis=1), -1).numpy()
        keep = target != PAD_ID
        assert np.array_equal(want[keep], alignment[:, n][keep])


def translator_piece_ids(translator, tokens):
    import tensorflow_text as tf_text

    tokenizer = tf_text.SentencepieceTokenizer(model=translator.spm_proto, out_type=tf.int32)
    ids = tokenizer.string_to_id(tf.constant([t for t in tokens if t])).numpy()
    return np.pad(ids, (0, len(tokens) - len(ids)))


@pytest.mark.parametrize("loader", LOADERS)
def test_prefix_starts_every_result_and_its_log_probs_count(case, loader, trained_model,
                                                           translator):
    import tensorflow_text as tf_text

    out = _out(case, loader, "prefix")
    tokenizer = tf_text.SentencepieceTokenizer(model=translator.spm_proto, out_type=tf.int32)
    prefix_pieces = tokenizer.id_to_string(tokenizer.tokenize(case["prefixes"])).to_list()
    for row, prefix in enumerate(case["prefixes"]):
        pieces = prefix_pieces[row]
        for n in range(2):
            assert out["translations"][row, n].decode("utf-8").startswith(prefix), (
                prefix, out["translations"][row, n])
            assert list(out["tokens"][row, n, :len(pieces)]) == pieces
    # The scores are the model's (prefix included): rescoring the outputs with the full
    # forward pass gives them back.
    targets = np.array([[translator_piece_ids(translator, hyp) for hyp in row]
                        for row in out["tokens"]], np.int32)
    for n in range(2):
        rescored = score_ids(trained_model, case["source_ids"], targets[:, n], alpha=0.6)
        np.testing.assert_allclose(rescored.numpy(), out["scores"][:, n], rtol=1e-4, atol=1e-4)
    first = np.array([out["token_log_probs"][row, 0, 0] for row in range(COUNT)])
    assert np.all(first < 0)  # the forced first piece is not free


@pytest.mark.parametrize("loader", LOADERS)
def test_every_result_contains_its_required_phrase(case, loader):
    out, ids_out, plain = (_out(case, loader, name) for name in ("terms", "terms_ids", "nbest4"))
    for row, (term,) in enumerate(case["terms"]):
        assert all(term in t.decode("utf-8") for t in out["translations"][row]), (
            term, out["translations"][row])
    # Without the phrases the model often misses them: the search put them there.
    missed = sum(term not in plain["translations"][row, 0].decode("utf-8")
                 for row, (term,) in enumerate(case["terms"]))
    assert missed >= COUNT // 4, missed
    # The ids signature, given the phrases' pieces, finds the same translations.
    assert out["scores"].shape == ids_out["scores"].shape == (COUNT, 2)
    np.testing.assert_allclose(ids_out["scores"], out["scores"], atol=1e-5)


def _greedy(model, source_ids, max_lengths):
    """Arg-max over non-padding ids with the full forward pass; EOS forced at the limit."""
    target = np.full([len(source_ids), 1], BOS_ID, np.int32)
    done = np.zeros(len(source_ids), bool)
    for step in range(max(max_lengths)):
        logits = model((source_ids, target), training=False).numpy()[:, -1]
        token = logits[:, 1:].argmax(-1).astype(np.int32) + 1
        token[step + 1 >= max_lengths] = EOS_ID
        token[done] = PAD_ID
        done |= token == EOS_ID
        target = np.concatenate([target, token[:, None]], 1)
        if done.all():
            break
    return target[:, 1:]


@pytest.mark.parametrize("loader", LOADERS)
def test_beam_one_alpha_zero_is_greedy_decoding(case, loader, trained_model):
    source_ids = case["source_ids"]
    max_lengths = np.minimum(np.count_nonzero(source_ids, 1) + EXTRA, MAX_LENGTH)
    want = _greedy(trained_model, source_ids, max_lengths)
    got = _out(case, loader, "greedy_ids")["ids"][:, 0]
    width = max(want.shape[1], got.shape[1])
    pad = lambda a: np.pad(a, [(0, 0), (0, width - a.shape[1])])  # noqa: E731
    assert np.array_equal(pad(got), pad(want))


@pytest.mark.parametrize("loader", LOADERS)
def test_bad_options_are_invalid_argument_and_the_model_still_answers(case, loader):
    calls = case["result"][loader]["calls"]
    expected = {name: message for name, _, message in BAD_OPTIONS}
    expected.update(prefix_rows="one row per source row", prefix_id_too_big="target prefix ids",
                    prefix_id_negative="target prefix ids",
                    terms_too_long="required phrases do not fit",
                    terms_rows="terms must have one row per source row",
                    terms_sampling="terms need beam search", terms_ids_eos="term ids must be")
    for name, message in expected.items():
        assert calls[name].get("error") == "InvalidArgumentError", (name, calls[name])
        assert message in calls[name]["message"], (name, calls[name]["message"][:300])
    after, same = _out(case, loader, "after"), _out(case, loader, "same")
    assert list(after["translations"][:, 0]) == list(same["translations"][:, 0])
    empty = _out(case, loader, "empty")
    assert empty["translations"].shape == (0, 2) and empty["tokens"].shape[:2] == (0, 2)


def test_signature_defs_export_json_and_op_check(case, exported):
    signatures = case["result"]["tf1"]["signature_defs"]
    scalars = {"beam_size": ["int32", []], "alpha": ["float32", []],
               "num_results": ["int32", []], "max_extra_length": ["int32", []]}
    sampling = {"sampling_topk": ["int32", []], "sampling_topp": ["float32", []],
                "sampling_temperature": ["float32", []], "seed": ["int64", []]}
    per_token = {"token_log_probs": ["float32", [-1, -1, -1]],
                 "alignment": ["int32", [-1, -1, -1]]}
    text_outputs = {"translations": ["string", [-1, -1]], "scores": ["float32", [-1, -1]],
                    "tokens": ["string", [-1, -1, -1]], **per_token}
    ids_outputs = {"ids": ["int32", [-1, -1, -1]], "scores": ["float32", [-1, -1]],
                   **per_token}
    # The six options of the first release, exactly; the rest only in the all-options ones.
    assert signatures[OPTIONS_SIGNATURE] == {
        "method_name": "tensorflow/serving/predict",
        "inputs": {"source": ["string", [-1]], "target_prefix": ["string", [-1]], **scalars},
        "outputs": text_outputs}
    assert signatures[IDS_OPTIONS_SIGNATURE] == {
        "method_name": "tensorflow/serving/predict",
        "inputs": {"source_ids": ["int32", [-1, -1]],
                   "target_prefix_ids": ["int32", [-1, -1]], **scalars},
        "outputs": ids_outputs}
    assert signatures[ALL_OPTIONS_SIGNATURE] == {
        "method_name": "tensorflow/serving/predict",
        "inputs": {"source": ["string", [-1]], "target_prefix": ["string", [-1]],
                   "terms": ["string", [-1, -1]], **scalars, **sampling},
        "outputs": text_outputs}
    assert signatures[IDS_ALL_OPTIONS_SIGNATURE] == {
        "method_name": "tensorflow/serving/predict",
        "inputs": {"source_ids": ["int32", [-1, -1]],
                   "target_prefix_ids": ["int32", [-1, -1]],
                   "terms_ids": ["int32", [-1, -1, -1]], **scalars, **sampling},
        "outputs": ids_outputs}
    info = json.loads((exported / EXTRA_DIR / EXPORT_INFO_FILE).read_text(encoding="utf-8"))
    assert set(info["signatures"]) == set(signatures) == {
        SERVING_SIGNATURE, IDS_SIGNATURE, OPTIONS_SIGNATURE, IDS_OPTIONS_SIGNATURE,
        ALL_OPTIONS_SIGNATURE, IDS_ALL_OPTIONS_SIGNATURE}
    for name, signature in signatures.items():  # export.json describes what is served
        assert set(info["signatures"][name]["inputs"]) == set(signature["inputs"]), name
        assert set(info["signatures"][name]["outputs"]) == set(signature["outputs"]), name
    assert info["options_limits"]["max_beam_size"] == MAX_BEAM_SIZE
    report = op_check.check_ops(exported)
    assert report.ok, report.format()
    # The pieces output comes from tensorflow-text's id -> piece op; the checks are core.
    assert report.ops.get("SentencepieceIdToStringOp") == op_check.TENSORFLOW_TEXT
    assert "Assert" in report.ops and not set(report.ops) & op_check.FORBIDDEN_OPS
