"""The served model's contract: signatures that never change, documented requests that keep
answering, answers that do not depend on the batch.

TensorFlow Serving has no optional inputs, so a signature that gains an input refuses every
request written before. `signatures.golden.json` records every signature's inputs and
outputs; a fresh export must equal it. The requests that export/README.md documented when
the options signatures were first released (commit 78dc353, the last before sampling widened
them), and every request example in today's export/README.md, are replayed through both
loaders (`serving_check.py`, a fresh process) on the session fixtures' export
(tests/export/conftest.py: a tiny model briefly trained on Multi30k, float32).
"""
import json
import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.serving.saved_model import (ALL_OPTIONS_SIGNATURE, IDS_ALL_OPTIONS_SIGNATURE,
                                IDS_OPTIONS_SIGNATURE, IDS_SIGNATURE, OPTIONS_SIGNATURE,
                                SERVING_SIGNATURE)
from keras_transformer.serving.functions import BEAM_SEARCH, SAMPLING_SPECS
from keras_transformer.constants import EOS_ID, PAD_ID
from tests.export.test_saved_model import (LONG_SENTENCE, ROOT, _tokenize, _val_lines,
                                           serve_in_fresh_process)
from tests.export.test_serve_options import _out

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

GOLDEN = json.loads(pathlib.Path(__file__).with_name("signatures.golden.json")
                    .read_text(encoding="utf-8"))["signatures"]
LOADERS = ("tf2", "tf1")

# The six-option requests of export/README.md at 78dc353 (REST, gRPC, REST for ids), as
# released: every client written from them must keep getting answers.
RELEASED_REQUESTS = {
    "released_rest": (OPTIONS_SIGNATURE, {
        "source": ["A dog runs through the snow.", "A man sleeping in a green room on a couch."],
        "beam_size": 4, "alpha": 0.6, "num_results": 2,
        "max_extra_length": 50, "target_prefix": ["", "Ein Mann"]}),
    "released_grpc": (OPTIONS_SIGNATURE, {
        "source": ["A dog runs through the snow."], "target_prefix": [""], "beam_size": 4,
        "alpha": 0.6, "num_results": 2, "max_extra_length": 50}),
    "released_ids": (IDS_OPTIONS_SIGNATURE, {
        "source_ids": [[52, 17, 9, 3]], "target_prefix_ids": [[0]],
        "beam_size": 2, "alpha": 0.6, "num_results": 1, "max_extra_length": 5}),
}
ALL_OPTIONS_OF = {OPTIONS_SIGNATURE: (ALL_OPTIONS_SIGNATURE, "terms", [[""]]),
                  IDS_OPTIONS_SIGNATURE: (IDS_ALL_OPTIONS_SIGNATURE, "terms_ids", [[[0]]])}
"""Six-option signature -> (its all-options signature, the terms input, no terms)."""
NEUTRAL_SAMPLING = {spec.name: value for spec, value in zip(SAMPLING_SPECS, BEAM_SEARCH)}

ALONE = 6  # validation sentences translated alone and inside the batches below
NBEST = dict(beam_size=4, alpha=0.6, num_results=2, max_extra_length=10)


def served_signatures(version: pathlib.Path) -> dict:
    """{name: {"method_name", "inputs", "outputs"}} of a SavedModel's signature defs, as
    TensorFlow Serving reads them from saved_model.pb (tensors as [dtype, shape])."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel.FromString((version / "saved_model.pb").read_bytes())

    def specs(tensors):
        return {name: [tf.dtypes.as_dtype(info.dtype).name,
                       [dim.size for dim in info.tensor_shape.dim]]
                for name, info in tensors.items()}

    return {name: {"method_name": signature.method_name, "inputs": specs(signature.inputs),
                   "outputs": specs(signature.outputs)}
            for name, signature in saved.meta_graphs[0].signature_def.items()
            if not name.startswith("__")}


def readme_requests() -> dict:
    """{call id: (signature, {input: value})} of every curl request in export/README.md, the
    row form (`instances`) turned into columns."""
    text = (ROOT / "export" / "README.md").read_text(encoding="utf-8")
    requests = {}
    for index, body in enumerate(re.findall(r"curl -X POST [^\n]*:predict[^`]*?-d '(\{.*?\})'",
                                            text, re.S)):
        body = json.loads(body)
        columns = body.get("inputs")
        if columns is None:
            rows = body["instances"]
            columns = ({"source": rows} if isinstance(rows[0], str) else
                       {name: [row[name] for row in rows] for name in rows[0]})
        requests[f"readme_{index}"] = (body.get("signature_name", SERVING_SIGNATURE), columns)
    return requests


def _call(call_id, signature, inputs):
    """A serving_check.py call: each value typed with its input's dtype in the golden file."""
    assert set(inputs) == set(GOLDEN[signature]["inputs"]), (call_id, sorted(inputs))
    return {"id": call_id, "signature": signature,
            "inputs": {name: {"dtype": GOLDEN[signature]["inputs"][name][0], "value": value}
                       for name, value in inputs.items()}}


def _with_all_options(signature, inputs):
    """The all-options request that means the same: beam search's sampling values, no terms."""
    all_options, terms, no_terms = ALL_OPTIONS_OF[signature]
    return all_options, {**inputs, **NEUTRAL_SAMPLING, terms: no_terms}


@pytest.fixture(scope="module")
def case(exported, translator, shared_data, tmp_path_factory):
    """Runs serving_check.py once with every call; returns what the tests need."""
    readme = readme_requests()
    calls = []
    for call_id, (signature, inputs) in {**RELEASED_REQUESTS, **readme}.items():
        calls.append(_call(call_id, signature, inputs))
        if signature in ALL_OPTIONS_OF:
            calls.append(_call(f"{call_id}_all", *_with_all_options(signature, inputs)))

    lines = _val_lines(shared_data, 10)
    alone = lines[:ALONE]
    batches = {"batch_val": lines,  # other sentences after them
               "batch_mixed": [LONG_SENTENCE, *reversed(alone), "", "A dog."]}
    for name, sentences in {**{f"alone_{i}": [s] for i, s in enumerate(alone)},
                            **batches}.items():
        ids = _tokenize(translator, sentences).tolist()
        calls += [_call(f"{name}_text", SERVING_SIGNATURE, {"source": sentences}),
                  _call(f"{name}_ids", IDS_SIGNATURE, {"source_ids": ids}),
                  _call(f"{name}_nbest", OPTIONS_SIGNATURE,
                        {"source": sentences, "target_prefix": [""] * len(sentences), **NBEST})]
    result = serve_in_fresh_process(
        exported, {"sources": alone[:1], "source_ids": _tokenize(translator, alone[:1]).tolist(),
                   "calls": calls}, tmp_path_factory.mktemp("serving_contract"))
    return {"result": result, "readme": readme, "alone": alone, "batches": batches}


@pytest.mark.quick
def test_every_signature_equals_the_golden_file(exported):
    assert served_signatures(exported) == GOLDEN


@pytest.mark.quick
def test_the_golden_file_keeps_every_released_signature_as_released():
    """The released entries, spelled out once more: editing one of them in the golden file
    (instead of adding a signature) fails here too."""
    options = {"beam_size": ["int32", []], "alpha": ["float32", []],
               "num_results": ["int32", []], "max_extra_length": ["int32", []]}
    per_token = {"token_log_probs": ["float32", [-1, -1, -1]],
                 "alignment": ["int32", [-1, -1, -1]], "scores": ["float32", [-1, -1]]}
    released = {
        SERVING_SIGNATURE: ({"source": ["string", [-1]]},
                            {"translation": ["string", [-1]], "score": ["float32", [-1]]}),
        IDS_SIGNATURE: ({"source_ids": ["int32", [-1, -1]]},
                        {"ids": ["int32", [-1, -1]], "score": ["float32", [-1]]}),
        OPTIONS_SIGNATURE: (
            {"source": ["string", [-1]], "target_prefix": ["string", [-1]], **options},
            {"translations": ["string", [-1, -1]], "tokens": ["string", [-1, -1, -1]],
             **per_token}),
        IDS_OPTIONS_SIGNATURE: (
            {"source_ids": ["int32", [-1, -1]], "target_prefix_ids": ["int32", [-1, -1]],
             **options},
            {"ids": ["int32", [-1, -1, -1]], **per_token}),
    }
    for name, (inputs, outputs) in released.items():
        assert GOLDEN[name] == {"method_name": "tensorflow/serving/predict",
                                "inputs": inputs, "outputs": outputs}, name


@pytest.mark.parametrize("loader", LOADERS)
def test_the_released_six_option_requests_answer(case, loader):
    assert case["result"]["tf1"]["signature_defs"] == GOLDEN  # as the TF1 loader sees them
    text, one = _out(case, loader, "released_rest"), _out(case, loader, "released_grpc")
    for out, batch in ((text, 2), (one, 1)):
        assert out["translations"].shape == out["scores"].shape == (batch, 2)
        assert out["tokens"].shape[:2] == (batch, 2)
        assert np.all(np.isfinite(out["scores"])) and np.all(out["scores"] <= 0)
        assert np.all(np.diff(out["scores"], axis=1) <= 0)  # best first
    assert all(t.decode("utf-8").startswith("Ein Mann") for t in text["translations"][1])
    # One sentence alone answers as it does beside another (the gRPC and REST examples).
    assert one["translations"][0].tolist() == text["translations"][0].tolist()
    ids = _out(case, loader, "released_ids")
    assert ids["ids"].shape[:2] == ids["scores"].shape == (1, 1)
    row = ids["ids"][0, 0]
    length = np.count_nonzero(row)
    assert row[length - 1] == EOS_ID and np.all(row[length:] == PAD_ID) and length > 1


@pytest.mark.parametrize("loader", LOADERS)
def test_six_options_answer_as_all_options_with_beam_search_and_no_terms(case, loader):
    six_option_calls = [call_id for call_id, (signature, _) in
                        {**RELEASED_REQUESTS, **case["readme"]}.items()
                        if signature in ALL_OPTIONS_OF]
    assert len(six_option_calls) >= 5, six_option_calls  # 3 released, 2 in today's README
    for call_id in six_option_calls:
        six, every = _out(case, loader, call_id), _out(case, loader, f"{call_id}_all")
        assert six.keys() == every.keys()
        for name in six:
            assert np.array_equal(six[name], every[name]), (call_id, name)


@pytest.mark.parametrize("loader", LOADERS)
def test_every_request_example_of_the_export_readme_answers(case, loader):
    signatures = {signature for signature, _ in case["readme"].values()}
    assert {SERVING_SIGNATURE, *ALL_OPTIONS_OF,
            *(all_options for all_options, _, _ in ALL_OPTIONS_OF.values())} <= signatures
    for call_id, (signature, _) in case["readme"].items():
        assert set(_out(case, loader, call_id)) == set(GOLDEN[signature]["outputs"]), call_id


def _answer(out, kind, row):
    """Row `row`'s answer without its padding (the batch's longest answer sets the width),
    and its scores."""
    if kind == "text":
        return out["translation"][row], out["score"][row]
    if kind == "ids":
        ids = out["ids"][row]
        return ids[:np.count_nonzero(ids)].tolist(), out["score"][row]
    lengths = np.vectorize(len)(out["tokens"][row]).astype(bool).sum(-1)
    return ([(out["translations"][row, n], out["tokens"][row, n, :length].tolist(),
              out["alignment"][row, n, :length].tolist()) for n, length in enumerate(lengths)],
            out["scores"][row])


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("kind", ["text", "ids", "nbest"])
def test_a_sentence_gets_the_same_answer_alone_and_inside_any_batch(case, loader, kind):
    """float32, beam search: the same translations, ids, pieces and alignments exactly;
    scores within 1e-5 (the float32 kernels round differently with the batch's size and
    padded length, so they are not equal to the bit)."""
    for batch_name, sentences in case["batches"].items():
        batch = _out(case, loader, f"{batch_name}_{kind}")
        for index, sentence in enumerate(case["alone"]):
            answer, scores = _answer(batch, kind, sentences.index(sentence))
            alone, alone_scores = _answer(_out(case, loader, f"alone_{index}_{kind}"), kind, 0)
            assert answer == alone, (batch_name, index)
            np.testing.assert_allclose(scores, alone_scores, rtol=0, atol=1e-5,
                                       err_msg=f"{batch_name}, sentence {index}")
