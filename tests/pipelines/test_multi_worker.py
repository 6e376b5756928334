"""Keras `fit` under MultiWorkerMirroredStrategy: 2 local worker processes stay identical,
each trains on its half of every global batch, and together they train as one process with
2 replicas."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import numpy as np
import tensorflow as tf

from tests.pipelines import multi_worker_batches

pytestmark = pytest.mark.xdist_group("multi_worker")  # one at a time: free ports

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


def run_two_workers(script, tmp_path):
    """Runs `script` as the 2 workers of a local cluster, each with argv[1] = its .npz path;
    returns the two loaded .npz files."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_CONFIG=json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / f"worker{index}.npz")], env=env,
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=400)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    return [np.load(tmp_path / f"worker{i}.npz") for i in range(2)]


@pytest.mark.quick
def test_two_workers_train_to_identical_weights(tmp_path):
    first, second = run_two_workers(SCRIPT, tmp_path)
    assert int(first["steps"]) == int(second["steps"]) == 6
    assert np.all(np.isfinite(first["loss"]))
    weights = [k for k in first.files if k.startswith("w")]
    assert len(weights) > 10
    for key in weights:
        np.testing.assert_array_equal(first[key], second[key])


def test_each_worker_gets_its_half_of_every_global_batch(tmp_path):
    """Bucketed and packed batches on 2 workers: at every step worker k's replica receives
    the k-th half of the rows of the global batch that one process builds (the same stream,
    the same `batch_tokens`), so that each worker's step holds at most half the budget of
    positions (and so of tokens) on each side, and the two halves are the global batch."""
    workers = run_two_workers(pathlib.Path(multi_worker_batches.__file__), tmp_path)
    budget = multi_worker_batches.BUDGET
    for kind, dataset in multi_worker_batches.global_streams(batch_multiple=2).items():
        shapes = set()
        for step, batch in enumerate(dataset.take(multi_worker_batches.STEPS)):
            arrays = [a.numpy() for a in tf.nest.flatten(batch)]  # target_out last
            half = len(arrays[0]) // 2
            assert half > 0 and len(arrays[0]) == 2 * half
            shapes.add(arrays[-1].shape)
            for index, worker in enumerate(workers):
                for i, array in enumerate(arrays):
                    part = worker[f"{kind}-{step}-{i}"]
                    np.testing.assert_array_equal(part, array[index * half:(index + 1) * half],
                                                  err_msg=f"{kind}, step {step}, worker {index}")
                    assert part.size <= budget // 2, (kind, step, part.shape)
        assert kind == "packed" or len(shapes) > 1  # batches of several buckets were drawn


def test_two_workers_through_run_py(prepared, tmp_path, shared_data):
    """`pipelines/run.py --mode train,average` on 2 workers: packed rows (the task's recipe),
    checkpoints in the model dir (chief) and workers/ (the other), identical weights that moved,
    equal within 1e-5 to one process with 2 replicas on the same global batches
    (`--batch_tokens` split between the workers, not drawn by each, in the same order however
    loaded the machine: `test_every_iterator_draws_the_same_batches`), and only the chief goes
    on to the later stages.

    Every variable is compared after 6 updates, the attention's key biases excepted
    (`without_key_bias`): the two workers equal each other to the bit, but two processes and
    two replicas in one process round differently, and a key bias's gradient is only rounding
    noise (softmax cancels it), which Adam scales up to steps of the learning rate's size.
    """
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

    # One process, 2 CPU replicas, the same global batches: the same weights (docstring).
    single_dir = copy_prepared(prepared, tmp_path / "single")
    single = run_command([f"--model_dir={single_dir}", *args, "--mode=train",
                          "--num_cpu_devices=2"], shared_data)
    assert single.returncode == 0, single.stderr[-3000:]
    alone = weights(single_dir / "checkpoints" / "ckpt-6")
    assert alone.keys() == chief.keys()
    for name in chief:
        np.testing.assert_allclose(*(without_key_bias(name, w[name]) for w in (chief, alone)),
                                   rtol=0, atol=1e-5, err_msg=name)


def without_key_bias(name, value):
    """`value` without the keys' part of an attention projection's bias (d_k = d_v here).

    softmax(q . (k + b)) = softmax(q . k) whatever b: the key bias changes no output, so its
    gradient is rounding noise, which Adam scales up to steps of the learning rate's size.
    Two processes and two replicas in one process round differently, so only there may the
    weights differ (0.5e-3 after 6 steps with the fused loss); every other weight must not.
    """
    if name.endswith("qkv.Sbias/.ATTRIBUTES/VARIABLE_VALUE"):  # [queries, keys, values]
        third = value.shape[0] // 3
        return np.concatenate([value[:third], value[2 * third:]])
    if name.endswith("kv.Sbias/.ATTRIBUTES/VARIABLE_VALUE"):  # cross-attention: [keys, values]
        return value[value.shape[0] // 2:]
    return value

