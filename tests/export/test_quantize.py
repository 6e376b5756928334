"""The int8 export (`--quantize int8`, keras_transformer/serving/quantize.py): what it stores, that it serves.

Uses the export tests' briefly trained tiny model (tests/export/conftest.py): exported once
with int8 matrices through `export/run.py`, beside the float32 export of the same model.
"""
import collections
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from export import op_check
from keras_transformer.serving.quantize import INT8_MAX, Int8Weights, quantize_int8, quantized_matrices
from keras_transformer.serving.saved_model import EXPORT_INFO_FILE, EXTRA_DIR
from keras_transformer.constants import BOS_ID, PAD_ID
from pipelines.settings import resolver
from pipelines.stages import export as stages
from pipelines.model_dir import layout as md
from tests.export.test_saved_model import ODD_INPUTS, _tokenize, _val_lines, serve_in_fresh_process
from tests.export.test_serving_contract import GOLDEN, served_signatures
from tests.pipelines.run_helpers import run_command, run_stages

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _cli(program, *args, cwd):
    return run_command(list(args), env_data_dir=False, script=ROOT / program, cwd=cwd)


@pytest.fixture(scope="module")
def int8_exported(model_dir, tmp_path_factory) -> pathlib.Path:
    """The export stage with `--quantize int8` of the model dir (op check included)."""
    export_dir = tmp_path_factory.mktemp("int8_export")
    ran = run_stages("export", model_dir=str(model_dir), export_dir=str(export_dir),
                     quantize="int8", decode_precision="float32")  # the float32 export's
    assert "OK: every op is registered by core TensorFlow or tensorflow-text" in ran.log
    assert ran.done["export"] == export_dir / "1"
    return export_dir / "1"


@pytest.fixture(scope="module")
def int8_translator(model_dir):
    """The in-process serving functions of the int8 export (what the export stage writes)."""
    run = resolver.resolve({"model_dir": str(model_dir), "quantize": "int8"})
    return stages.make_translator(run, run.task).functions


def _saved_variables(version: pathlib.Path) -> list[tuple[str, tuple]]:
    """(dtype, shape) of every variable a SavedModel stores."""
    reader = tf.train.load_checkpoint(str(version / "variables" / "variables"))
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    return [(dtypes[key].name, tuple(shapes[key])) for key in shapes
            if key.endswith("VARIABLE_VALUE")]


def _bytes(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ---------------------------------------------------------------------- the rule
@pytest.mark.quick
def test_quantize_int8_rounds_each_channel_to_its_own_step():
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(6, 5)).astype(np.float32) * np.array([1, 10, 0.01, 0, 3],
                                                                   np.float32)
    q, step = quantize_int8(matrix, axis=0)  # a Dense kernel: one step per output column
    assert q.dtype == np.int8 and step.shape == (1, 5) and step.dtype == np.float32
    assert np.all(np.abs(q) <= INT8_MAX)
    assert np.all(np.max(np.abs(q[:, [0, 1, 2, 4]]), axis=0) == INT8_MAX)  # full range used
    assert np.all(q[:, 3] == 0)  # an all-zero channel stays zero (no division by zero)
    assert np.all(np.abs(q * step - matrix) <= step / 2 + 1e-7)
    q_rows, step_rows = quantize_int8(matrix, axis=1)  # an embedding: one step per row
    assert step_rows.shape == (6, 1)
    assert np.all(np.abs(q_rows * step_rows - matrix) <= step_rows / 2 + 1e-7)


def test_every_matrix_is_quantized_once_from_the_float32_weights(trained_model):
    config = trained_model.config
    matrices = list(quantized_matrices(trained_model))
    # Encoder: fused qkv, output, two feed-forward; decoder: qkv, output, query, kv,
    # output, two feed-forward; the embedding shared by source, target and projection.
    assert len(matrices) == 4 * config.num_layers + 7 * config.num_layers + 1
    assert sum(len(v.shape) == 2 for v in trained_model.weights) == len(matrices)
    embedding = [(v, axis) for v, axis in matrices if v.shape[0] == config.vocab_size]
    assert len(embedding) == 1 and embedding[0][1] == 1

    bf16 = md.build_model(config, dtype="bfloat16")
    bf16.set_weights(trained_model.get_weights())
    weights = Int8Weights(bf16, trained_model)
    for (variable, axis), q, step in zip(matrices, weights.values, weights.steps):
        want_q, want_step = quantize_int8(variable.numpy(), axis)  # float32, not bfloat16
        np.testing.assert_array_equal(q.numpy(), want_q)
        np.testing.assert_array_equal(step.numpy(), want_step)
    dequantized = dict((id(v), value) for v, value in weights.dequantized())
    assert {dequantized[id(v)].dtype for v in bf16.weights if id(v) in dequantized} == {
        tf.bfloat16}


# ---------------------------------------------------------------------- the SavedModel
def test_int8_export_stores_every_matrix_as_int8(int8_exported, exported, trained_model):
    info = json.loads((int8_exported / EXTRA_DIR / EXPORT_INFO_FILE).read_text("utf-8"))
    assert info["decoding"]["quantize"] == "int8" and info["decoding"]["precision"] == "float32"
    stored = collections.Counter(_saved_variables(int8_exported))
    matrices = collections.Counter(("int8", tuple(v.shape))
                                   for v, _ in quantized_matrices(trained_model))
    assert collections.Counter({k: n for k, n in stored.items() if k[0] == "int8"}) == matrices
    # No float copy of a matrix: the float variables are the steps, biases and layer norms.
    shapes = {shape for _, shape in matrices}
    assert not [k for k in stored if k[0] != "int8" and k[1] in shapes]
    # The float32 export stores each weight once (Keras' ExportArchive stored two copies).
    assert sorted(_saved_variables(exported)) == sorted(
        (v.dtype, tuple(v.shape)) for v in trained_model.weights)


def test_int8_export_is_smaller_and_stores_each_function_once(int8_exported, exported,
                                                              trained_model):
    float_vars, int8_vars = _bytes(exported / "variables"), _bytes(int8_exported / "variables")
    # Every matrix element takes 1 byte instead of 4; one float32 step per output channel
    # comes back. (benchmarks/int8_export.py: 3.9x smaller variables for the default job's
    # model; this d_model 32 model has relatively more biases and layer norms.)
    elements = sum(int(np.prod(v.shape)) for v, _ in quantized_matrices(trained_model))
    assert float_vars - int8_vars > 0.9 * 3 * elements, (float_vars, int8_vars, elements)
    # The graph grows only by the dequantization (a Cast and a Mul or two per matrix), so
    # the directory shrinks by nearly all the variables save.
    float_pb = (exported / "saved_model.pb").stat().st_size
    int8_pb = (int8_exported / "saved_model.pb").stat().st_size
    assert int8_pb < 1.1 * float_pb, (float_pb, int8_pb)
    assert _bytes(int8_exported) < _bytes(exported)

    from tensorflow.core.protobuf import saved_model_pb2

    for version in (exported, int8_exported):
        saved = saved_model_pb2.SavedModel.FromString((version / "saved_model.pb").read_bytes())
        names = collections.Counter(
            f.signature.name.rsplit("_", 1)[0] for f in saved.meta_graphs[0].graph_def.library
            .function if f.signature.name.startswith("__inference_"))
        for name in ("__inference__translate", "__inference__translate_ids",
                     "__inference__translate_with_options",
                     "__inference__translate_ids_with_options",
                     "__inference__translate_with_all_options",
                     "__inference__translate_ids_with_all_options", "__inference__search_ids",
                     "__inference__search_with_options_fn"):
            assert names[name] == 1, (version, names)


def test_int8_export_serves_the_golden_signatures(int8_exported):
    assert served_signatures(int8_exported) == GOLDEN


def test_int8_op_check_passes(int8_exported, exported):
    report = op_check.check_ops(int8_exported)
    assert report.ok, report.format()
    added = set(report.ops) - set(op_check.check_ops(exported).ops)
    assert added <= {"Cast", "Mul"} and all(report.ops[op] == op_check.CORE for op in added)


def test_int8_export_serves_through_both_loaders_close_to_float32(
        int8_exported, int8_translator, translator, shared_data, tmp_path):
    sources = ODD_INPUTS + _val_lines(shared_data, 40)
    source_ids = _tokenize(int8_translator, sources)
    result = serve_in_fresh_process(
        int8_exported, {"sources": sources, "source_ids": source_ids.tolist()}, tmp_path)

    int8 = int8_translator.translate(tf.constant(sources))
    want = [t.hex() for t in int8["translation"].numpy()]
    int8_ids = int8_translator.translate_ids(tf.constant(source_ids))
    for loader in ("tf2", "tf1"):  # the served model is the in-process int8 translator
        assert result[loader]["sources"]["translation"]["values"] == want, loader
        np.testing.assert_allclose(result[loader]["sources"]["score"]["values"],
                                   int8["score"].numpy(), atol=1e-4)
        # The ids signature: rounding in another order can send one beam down another path
        # (on an AVX512_BF16 CPU, row 33 of 48 in both loaders: two tokens swapped, a score
        # 0.014 lower, a near tie); every other row has the same ids and the same score.
        served = result[loader]["ids"]
        got_ids = np.reshape(served["ids"]["values"], served["ids"]["shape"])
        same = np.all(got_ids == int8_ids["ids"].numpy(), axis=-1)
        assert np.count_nonzero(~same) <= 1, (loader, np.flatnonzero(~same))
        scores = np.array(served["score"]["values"])
        np.testing.assert_allclose(scores[same], int8_ids["score"].numpy()[same], atol=1e-4)
        np.testing.assert_allclose(scores[~same], int8_ids["score"].numpy()[~same], atol=0.05)

    # Close to float32. This model is briefly trained: its distributions are flat, and beam
    # search turns small differences into other (equally poor) outputs, so most but not all
    # translations are identical; the model's distributions themselves, teacher-forced on
    # float32's translations, are within 0.1 nats.
    count = len(ODD_INPUTS)
    full = translator.translate(tf.constant(sources))
    same = np.mean(int8["translation"].numpy()[count:] == full["translation"].numpy()[count:])
    assert same >= 0.7, same
    assert np.median(np.abs(int8["score"].numpy() - full["score"].numpy())) < 0.05
    assert len(set(int8["translation"].numpy())) > 20  # still says different things
    source = tf.constant(source_ids[count:])
    target = translator.translate_ids(source)["ids"].numpy()
    target_in = np.pad(target[:, :-1], [[0, 0], [1, 0]], constant_values=BOS_ID)
    target_in[target == PAD_ID] = PAD_ID
    model = int8_translator.model
    want = tf.nn.log_softmax(model((source, tf.constant(target_in)))).numpy()
    with int8_translator.weights.scope():
        got = tf.nn.log_softmax(model((source, tf.constant(target_in)))).numpy()
    real = target != PAD_ID
    assert np.abs(got - want).max(axis=-1)[real].max() < 0.1
    assert np.mean((got.argmax(-1) == want.argmax(-1))[real]) > 0.98


def test_bad_quantize_value_exits_2_with_one_line_before_writing(model_dir, tmp_path):
    export_dir = tmp_path / "never_written"
    for program in ("export/run.py", "pipelines/run.py"):
        mode = ["--mode=export"] if program == "pipelines/run.py" else []
        run = _cli(program, *mode, f"--model_dir={model_dir}", f"--export_dir={export_dir}",
                   "--quantize=int4", cwd=tmp_path)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
        assert run.stderr.strip().splitlines()[-1].endswith(
            "error: flag --quantize=int4: value should be one of <int8> (--help lists every "
            "flag)")
        assert not export_dir.exists()
