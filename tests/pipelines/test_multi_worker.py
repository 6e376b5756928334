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
