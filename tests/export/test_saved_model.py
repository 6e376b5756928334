"""The exported SavedModel: layout and versions, serving loaders, op check, robustness, CLI.

Fixtures (tests/export/conftest.py) train a tiny model on real Multi30k text and export it
once; `serving_check.py` loads that export in a fresh process that imports only TensorFlow
and tensorflow-text, with both the TF2 loader and the TF1 session loader TensorFlow Serving
uses, and its outputs must equal the in-process `ServingFunctions`'s.
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from export import op_check
from keras_transformer.data import text
from keras_transformer import BeamSearch
from keras_transformer.serving import Translator
from keras_transformer.serving.functions import ExportError, ServingFunctions
from keras_transformer.serving.saved_model import (EXPORT_INFO_FILE, EXTRA_DIR, IDS_SIGNATURE,
                                                   SERVING_SIGNATURE, VOCAB_COPY_FILE,
                                                   next_version, write_saved_model)
from pipelines.settings import resolver
from pipelines.stages import export as stages
from tests.export.conftest import MAX_LENGTH, SETTINGS
from tests.pipelines.run_helpers import run_command

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVING_CHECK = pathlib.Path(__file__).with_name("serving_check.py")

LONG_SENTENCE = " ".join(["A man in a blue shirt is standing on a ladder"] * 100)  # 1,000 words
ODD_INPUTS = [
    "",
    "   ",
    "\t \n ",
    LONG_SENTENCE,  # longer than the model's max_length: truncated
    "🙂🚀 👍🏽 🇩🇪",  # emoji, with a skin-tone modifier and a flag
    "一个男人在街上骑自行车。東京タワー",  # CJK: absent from the English/German text
    "ʘ‿ʘ ∰ ⍼ Ꙭ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u200b\ufeff",  # outside the vocabulary (byte fallback)
    "A dog runs through the snow.",
]


def _val_lines(shared_data, count):
    path = shared_data / "multi30k" / "val.en"
    return path.read_text(encoding="utf-8").splitlines()[:count]


def _strings(tensor):
    assert tensor.dtype == tf.string
    return [bytes(x) for x in tensor.numpy()]


def _tokenize(translator, sources):
    """Source ids as the text signature makes them (`keras_transformer.data.text`)."""
    import tensorflow_text as tf_text

    tokenizer = tf_text.SentencepieceTokenizer(model=translator.spm_proto, out_type=tf.int32)
    return text.sentences_to_ids(tokenizer, tf.constant(sources), translator.max_length).numpy()


def _detokenize(translator, ids):
    import tensorflow_text as tf_text

    tokenizer = tf_text.SentencepieceTokenizer(model=translator.spm_proto, out_type=tf.int32)
    return text.ids_to_sentences(tokenizer, ids)


def _lengths(ids):
    """Tokens per row, EOS included (rows are 0-padded after it)."""
    return np.count_nonzero(np.asarray(ids), axis=1)


# ---------------------------------------------------------------------- layout and versions
def test_export_writes_a_servable_version_with_settings_from_the_model_dir(
        exported, export_base, spm_proto):
    assert exported == export_base / "1"
    assert (exported / "saved_model.pb").is_file()
    assert (exported / "variables" / "variables.index").is_file()
    assert (exported / EXTRA_DIR / VOCAB_COPY_FILE).read_bytes() == spm_proto
    info = json.loads((exported / EXTRA_DIR / EXPORT_INFO_FILE).read_text(encoding="utf-8"))
    for key, value in SETTINGS.items():  # read from settings.json
        assert info["decoding"][key] == value
    assert info["decoding"]["max_input_length"] == MAX_LENGTH
    assert info["versions"]["tensorflow"] == tf.__version__
    assert {SERVING_SIGNATURE, IDS_SIGNATURE} <= set(info["signatures"])
    # Nothing but version directories: no temporary directory left for the server to see.
    assert sorted(p.name for p in export_base.iterdir()) == ["1"]


def test_versions_are_numbered_and_never_silently_replaced(translator, model_dir, tmp_path):
    base = tmp_path / "serving"
    assert next_version(base) == 1  # missing directory
    for name in ("1", "3", "notes", ".tmp-4-abc"):
        (base / name).mkdir(parents=True)
    assert next_version(base) == 4  # only directories named by a number count

    # An existing version is refused before any work, with what to do about it.
    with pytest.raises(ExportError, match=r"already exists: pass overwrite=True"):
        Translator(translator.model, translator.spm_proto).export(base, version=1)
    options = resolver.resolve({"model_dir": str(model_dir), "export_dir": str(base),
                                   "export_version": 3})
    with pytest.raises(ExportError, match=r"already exists: pass --overwrite_export"):
        stages.run_export(options)

    # overwrite=True swaps the whole directory (nothing of the old version survives) and
    # leaves no temporary directory behind; the new version is readable by other users.
    (base / "3" / "stale_marker").write_text("old")
    replaced = write_saved_model(translator, base, version=3, overwrite=True, log=lambda m: None)
    assert replaced == base / "3" and (replaced / "saved_model.pb").is_file()
    assert not (replaced / "stale_marker").exists()
    assert sorted(p.name for p in base.iterdir()) == [".tmp-4-abc", "1", "3", "notes"]
    assert replaced.stat().st_mode & 0o755 == 0o755


@pytest.mark.parametrize("kwargs, message", [
    (dict(beam_size=0), "beam_size must be an integer >= 1"),
    (dict(extra_length=-1), "extra_length must be an integer >= 0"),
    (dict(alpha=-0.5), "alpha must be a number >= 0"),
])
@pytest.mark.quick
def test_invalid_decoding_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BeamSearch(**kwargs)


def test_input_length_is_capped_by_the_model(trained_model, spm_proto):
    translator = ServingFunctions(trained_model, spm_proto, max_input_length=MAX_LENGTH + 100)
    assert translator.max_length == MAX_LENGTH
    assert ServingFunctions(trained_model, spm_proto, max_input_length=10).max_length == 10


def test_invalid_version_is_refused(trained_model, spm_proto, tmp_path):
    with pytest.raises(ExportError, match="non-negative integer"):
        Translator(trained_model, spm_proto).export(tmp_path, version=-1)


# ---------------------------------------------------------------------- serving loaders
def _env_without_repo():
    """The environment for a process that must not be able to import this project."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
             if p and pathlib.Path(p).resolve() != ROOT]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def serve_in_fresh_process(exported, request: dict, work: pathlib.Path) -> dict:
    """Runs tests/export/serving_check.py on `request` in a process that cannot import this
    project (as TensorFlow Serving would load the model) and returns its result, after
    checking it ran and imported none of the project's modules."""
    request_path, result_path = work / "request.json", work / "result.json"
    request_path.write_text(json.dumps(request), encoding="utf-8")
    run = subprocess.run([sys.executable, str(SERVING_CHECK), str(exported), str(request_path),
                          str(result_path)], cwd=work, env=_env_without_repo(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-5000:]
    result = json.loads(result_path.read_text(encoding="utf-8"))
    assert result["project_modules"] == []
    return result


def test_tf2_and_tf1_session_loaders_serve_the_same_translations(
        exported, translator, shared_data, tmp_path):
    sources = ODD_INPUTS + _val_lines(shared_data, 8)
    source_ids = _tokenize(translator, sources)
    expected = translator.translate(tf.constant(sources))
    expected_ids = translator.translate_ids(tf.constant(source_ids))

    result = serve_in_fresh_process(
        exported, {"sources": sources, "source_ids": source_ids.tolist()}, tmp_path)

    want_text = [t.hex() for t in _strings(expected["translation"])]
    for loader in ("tf2", "tf1"):
        got = result[loader]
        assert got["sources"]["translation"]["dtype"] == "string"
        assert got["sources"]["translation"]["values"] == want_text, loader
        np.testing.assert_allclose(got["sources"]["score"]["values"],
                                   expected["score"].numpy(), atol=1e-4)
        assert got["ids"]["ids"]["values"] == expected_ids["ids"].numpy().tolist(), loader
        np.testing.assert_allclose(got["ids"]["score"]["values"],
                                   expected_ids["score"].numpy(), atol=1e-4)
        assert got["empty"]["translation"]["shape"] == [0]
        assert got["empty"]["score"]["shape"] == [0]

    signatures = result["tf1"]["signature_defs"]
    assert signatures[SERVING_SIGNATURE] == {
        "method_name": "tensorflow/serving/predict",
        "inputs": {"source": ["string", [-1]]},
        "outputs": {"translation": ["string", [-1]], "score": ["float32", [-1]]}}
    assert signatures[IDS_SIGNATURE] == {
        "method_name": "tensorflow/serving/predict",
        "inputs": {"source_ids": ["int32", [-1, -1]]},
        "outputs": {"ids": ["int32", [-1, -1]], "score": ["float32", [-1]]}}


# ---------------------------------------------------------------------- op check
def test_every_op_is_core_tensorflow_or_tensorflow_text(exported):
    report = op_check.check_ops(exported)
    assert report.ok, report.format()
    text_ops = {op for op, where in report.ops.items() if where == op_check.TENSORFLOW_TEXT}
    assert text_ops == {"SentencepieceOp", "SentencepieceTokenizeOp",
                        "SentencepieceDetokenizeOp", "SentencepieceIdToStringOp"}
    assert all("_sentencepiece_tokenizer" in report.libraries[op] for op in text_ops)
    assert {"While", "TopKV2", "StatefulPartitionedCall"} <= set(report.ops)
    assert not set(report.ops) & op_check.FORBIDDEN_OPS


def test_op_check_fails_on_python_callbacks_and_unregistered_ops(tmp_path, capsys):
    from tensorflow.core.protobuf import saved_model_pb2

    class Callbacks(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x):
            y = tf.py_function(lambda v: v * 2.0, [x], tf.float32)
            return {"y": tf.numpy_function(lambda v: v + 1.0, [y], tf.float32)}

    path = tmp_path / "callbacks"
    module = Callbacks()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    # Add a node of an op no library registers, as a custom-op model would have.
    pb = path / "saved_model.pb"
    saved_model = saved_model_pb2.SavedModel.FromString(pb.read_bytes())
    saved_model.meta_graphs[0].graph_def.node.add(name="custom", op="MyCustomSentenceOp")
    pb.write_bytes(saved_model.SerializeToString())

    status = op_check.main([str(path)])  # the CLI: table, verdict, exit status
    lines = capsys.readouterr().out.splitlines()
    assert status == 1
    failing = {line.split()[0]: line for line in lines if "FAIL:" in line}
    assert set(failing) == {"EagerPyFunc", "PyFunc", "MyCustomSentenceOp"}
    assert "Python callback" in failing["PyFunc"] and "Python callback" in failing["EagerPyFunc"]
    assert "not registered" in failing["MyCustomSentenceOp"]
    assert lines[-1].startswith("FAILED: 3 op type(s)")
    assert any(line.split()[:2] == ["Placeholder", "core"] for line in lines)


# ---------------------------------------------------------------------- robustness
def test_odd_inputs_translate_to_bounded_strings(translator):
    sources = tf.constant(ODD_INPUTS)
    out = translator.translate(sources)
    assert out["translation"].shape == [len(ODD_INPUTS)] and out["score"].shape == [len(ODD_INPUTS)]
    translations = _strings(out["translation"])
    assert len(translations) == len(ODD_INPUTS)
    for translation in translations:
        translation.decode("utf-8")  # valid UTF-8, whatever came in
    assert np.all(np.isfinite(out["score"].numpy())) and np.all(out["score"].numpy() <= 0)

    source_ids = _tokenize(translator, ODD_INPUTS)
    # The 1,000-word sentence is cut to max_length tokens, the last one EOS.
    long_row = source_ids[ODD_INPUTS.index(LONG_SENTENCE)]
    assert source_ids.shape[1] == MAX_LENGTH == _lengths([long_row])[0]
    assert long_row[-1] == 3
    ids = translator.translate_ids(tf.constant(source_ids))["ids"].numpy()
    bound = np.minimum(_lengths(source_ids) + SETTINGS["extra_length"], MAX_LENGTH)
    assert np.all(_lengths(ids) <= bound)
    assert np.all(_lengths(ids) <= MAX_LENGTH + SETTINGS["extra_length"])
    # The text signature is tokenize -> translate_ids -> detokenize.
    assert _strings(_detokenize(translator, ids)) == _strings(out["translation"])


def test_empty_in_empty_out(translator):
    """A blank or all-space line translates to an empty line with score 0 in every
    signature (the ids ones: a source of EOS alone gives EOS alone); the others in the batch
    are translated as they are alone."""
    sources = ["", "A dog runs.", "   ", "\t"]
    out = translator.translate(tf.constant(sources))
    alone = translator.translate(tf.constant(["A dog runs."]))
    assert _strings(out["translation"]) == [b"", *_strings(alone["translation"]), b"", b""]
    scores = out["score"].numpy()
    assert scores[0] == scores[2] == scores[3] == 0
    assert scores[1] == pytest.approx(alone["score"].numpy()[0], abs=1e-4)
    assert scores[1] < 0
    options = translator.translate_with_all_options(
        tf.constant(sources), 2, 0.6, 2, 10, tf.constant([""] * 4), 0, 1.0, 0.0, 0,
        tf.constant([[""]]))
    assert options["translations"].numpy()[[0, 2, 3]].tolist() == [[b"", b""]] * 3
    assert np.all(options["scores"].numpy()[[0, 2, 3]] == 0)
    assert np.all(options["token_log_probs"].numpy()[[0, 2, 3]] == 0)
    assert np.all(options["scores"].numpy()[1] < 0)
    ids = translator.translate_ids(tf.constant([[3, 0, 0], [0, 0, 0]]))
    assert ids["ids"].numpy().tolist() == [[3], [3]]
    assert ids["score"].numpy().tolist() == [0, 0]


def test_empty_batch_and_batch_of_64(translator, shared_data):
    empty = translator.translate(tf.constant([], tf.string))
    assert empty["translation"].dtype == tf.string
    assert empty["translation"].shape == [0] and empty["score"].shape == [0]
    empty_ids = translator.translate_ids(tf.zeros([0, 5], tf.int32))
    assert empty_ids["ids"].shape[0] == 0 and empty_ids["score"].shape == [0]

    lines = _val_lines(shared_data, 64)
    out = translator.translate(tf.constant(lines))
    translations = _strings(out["translation"])
    assert len(translations) == 64 and out["score"].shape == [64]
    # The briefly trained model says different things about different sentences.
    assert len(set(translations)) > 10
    ids = translator.translate_ids(_tokenize(translator, lines))["ids"].numpy()
    assert np.all(_lengths(ids) <= MAX_LENGTH + SETTINGS["extra_length"])


def test_xla_compiled_search_gives_the_same_translations(translator, trained_model, spm_proto):
    # XLA compiles once per distinct input (the search's shapes depend on the source
    # lengths), so this stays one small batch; export/README.md has the details.
    jit = ServingFunctions(trained_model, spm_proto, BeamSearch(SETTINGS["beam_size"], SETTINGS["alpha"],
                     SETTINGS["extra_length"]), jit_compile=True)
    sources = tf.constant(["A dog runs through the snow.", ""])
    want, got = translator.translate(sources), jit.translate(sources)
    assert _strings(got["translation"]) == _strings(want["translation"])
    np.testing.assert_allclose(got["score"].numpy(), want["score"].numpy(), atol=1e-4)


# ---------------------------------------------------------------------- command line
def _export_cli(*args, cwd):
    return run_command(list(args), env_data_dir=False, script=ROOT / "export" / "run.py",
                       cwd=cwd, timeout=300)


def test_command_line_export(model_dir, tmp_path):
    export_dir = tmp_path / "cli_export"
    # A decoding flag decodes this export; settings.json keeps its value.
    settings = (model_dir / "settings.json").read_bytes()
    run = _export_cli(f"--model_dir={model_dir}", f"--export_dir={export_dir}", "--version=5",
                      "--beam_size=2", "--nocheck_ops", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-5000:]
    assert run.stdout.strip().splitlines() == [str(export_dir / "5")]
    info = json.loads((export_dir / "5" / EXTRA_DIR / EXPORT_INFO_FILE).read_text("utf-8"))
    assert info["decoding"]["beam_size"] == 2  # the flag
    assert info["decoding"]["extra_length"] == SETTINGS["extra_length"]  # settings.json
    assert (model_dir / "settings.json").read_bytes() == settings  # kept as it was

    run = _export_cli(f"--model_dir={tmp_path / 'missing'}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "no such model directory" in run.stderr
