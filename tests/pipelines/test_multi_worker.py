"""Keras `fit` under MultiWorkerMirroredStrategy: 2 local worker processes stay identical."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np

SCRIPT = pathlib.Path(__file__).with_name("multi_worker_check.py")
ROOT = SCRIPT.parents[2]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_train_to_identical_weights(tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_CONFIG=json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen(
            [sys.executable, str(SCRIPT), str(tmp_path / f"worker{index}.npz")], env=env,
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=400)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    first, second = (np.load(tmp_path / f"worker{i}.npz") for i in range(2))
    assert int(first["steps"]) == int(second["steps"]) == 6
    assert np.all(np.isfinite(first["loss"]))
    weights = [k for k in first.files if k.startswith("w")]
    assert len(weights) > 10
    for key in weights:
        np.testing.assert_array_equal(first[key], second[key])


def test_two_workers_through_run_py(prepared, tmp_path, shared_data):
    """`pipelines/run.py --mode train,average` on 2 workers: token buckets, checkpoints in the
    model dir (chief) and workers/ (the other), identical weights that moved, equal to one
    process with 2 replicas on the same global batch, and only the chief goes on to the later
    stages."""
    import tensorflow as tf

    from tests.pipelines.run_helpers import TINY_MODEL, copy_prepared, run_command

    model_dir = copy_prepared(prepared, tmp_path / "model")
    args = [*TINY_MODEL, "--config_override=dropout=0.0", "--train_steps=6",
            "--checkpoint_every=3", "--average_last=2"]
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = [
        run_command([f"--model_dir={model_dir}", *args, "--mode=train,average"],
                    shared_data, wait=False, env={"TF_CONFIG": json.dumps(
                        {"cluster": {"worker": workers},
                         "task": {"type": "worker", "index": index}})})
        for index in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    assert "the chief runs the later stages" in outputs[1]
    assert "average:" in outputs[0] and "average:" not in outputs[1]
    assert (model_dir / "final.weights.h5").is_file()

    def weights(path):
        reader = tf.train.load_checkpoint(str(path))
        names = sorted(n for n in reader.get_variable_to_shape_map() if n.startswith("model/"))
        return {n: reader.get_tensor(n) for n in names}

    chief = weights(model_dir / "checkpoints" / "ckpt-6")
    other = weights(model_dir / "workers" / "worker-1" / "checkpoints" / "ckpt-6")
    earlier = weights(model_dir / "checkpoints" / "ckpt-3")
    assert len(chief) > 10 and chief.keys() == other.keys()
    for name in chief:
        np.testing.assert_array_equal(chief[name], other[name])
    assert any(not np.array_equal(chief[n], earlier[n]) for n in chief)  # training moved them

    # One process, 2 CPU replicas, the same global batches: the same weights, up to float
    # summation order, except the attention's key biases. Their gradient is zero in exact
    # arithmetic (a key bias adds the same q.b to every logit of a query, which the softmax
    # cancels), so each step's gradient there is rounding noise, and Adam, dividing by its
    # own running magnitude, turns noise of either sign into steps of the learning rate.
    single_dir = copy_prepared(prepared, tmp_path / "single")
    single = run_command([f"--model_dir={single_dir}", *args, "--mode=train",
                          "--num_cpu_devices=2"], shared_data)
    assert single.returncode == 0, single.stderr[-3000:]
    alone = weights(single_dir / "checkpoints" / "ckpt-6")
    assert alone.keys() == chief.keys()
    keys = 32  # d_model of TINY_MODEL: the key part of the fused projections' biases
    key_bias = {".Sqkv.Sbias/": slice(keys, 2 * keys), ".Skv.Sbias/": slice(0, keys)}
    for name in chief:
        want, got = alone[name], chief[name]
        for marker, key_part in key_bias.items():
            if marker in name:
                want, got = np.delete(want, key_part), np.delete(got, key_part)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=name)

