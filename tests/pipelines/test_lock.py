"""One writer per model directory: the lock module, and the CLI that takes it."""
import json
import os
import socket
import subprocess
import sys

import pytest

from pipelines.model_dir import layout as md
from pipelines.model_dir import lock
from tests.pipelines.run_helpers import ROOT, run_command

HOLD = """import sys, time
from pipelines.model_dir import lock
with lock.hold(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """A child process holding `tmp_path/model`'s lock (killed with SIGKILL at the end)."""
    model_dir = tmp_path / "model"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(model_dir)], cwd=ROOT,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        yield child, model_dir
    finally:
        child.kill()
        child.wait(timeout=60)


@pytest.mark.quick
def test_a_second_writer_is_refused_and_a_released_lock_is_taken(tmp_path):
    with lock.hold(tmp_path) as path:
        record = json.loads(path.read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        # flock conflicts between two opens even in one process: the same as two runs.
        with pytest.raises(lock.ModelDirLocked, match=f"pid {os.getpid()} on host "
                                                      f"{socket.gethostname()}"):
            with lock.hold(tmp_path):
                pass
    with lock.hold(tmp_path):  # released at the end of the block
        pass
    with lock.hold(tmp_path / "missing", create=False) as path:
        assert path is None  # nothing to protect: nothing created
    assert not (tmp_path / "missing").exists()


def test_a_failed_run_leaves_no_directory_holding_only_its_lock(tmp_path):
    """The directory the run made goes with its lock when nothing else was written in it;
    one that existed before, or that got files, stays."""
    with pytest.raises(RuntimeError):
        with lock.hold(tmp_path / "new"):
            raise RuntimeError("the run failed")
    assert not (tmp_path / "new").exists()
    with lock.hold(tmp_path / "kept"):
        (tmp_path / "kept" / "config.json").write_text("{}")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [".lock", "config.json"]
    (tmp_path / "old").mkdir()
    with lock.hold(tmp_path / "old"):
        pass
    assert [p.name for p in (tmp_path / "old").iterdir()] == [".lock"]


def _error_line(result):
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def test_cli_writers_wait_for_no_one_and_a_killed_holder_frees_the_dir(holder, shared_data):
    child, model_dir = holder
    who = f"pid {child.pid} on host {socket.gethostname()}"
    # A writing stage stops at once with one line naming the holder.
    refused = run_command([f"--model_dir={model_dir}", "--mode=average"], shared_data,
                          timeout=120)
    assert refused.returncode == 2
    line = _error_line(refused)
    assert line.startswith("error: ") and f"is in use by another run, {who}" in line, line
    assert "== average" not in refused.stderr  # refused before any stage ran

    # Read-only stages do not take the lock (they fail here for want of a model, not of it).
    source = model_dir.parent / "source.txt"
    source.write_text("A dog.\n", encoding="utf-8")
    for args in (["--mode=translate", f"--input={source}"],
                 ["--mode=score", f"--input={source}", f"--target={source}"]):
        result = run_command([f"--model_dir={model_dir}", *args], shared_data, timeout=120)
        assert "in use by another run" not in result.stderr, args
        assert f"== {args[0][7:]}" in result.stderr, result.stderr[-2000:]

    # A multi-worker worker other than the chief neither takes the lock nor writes.
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    worker = run_command([f"--model_dir={model_dir}", "--mode=prepare,average"], shared_data,
                         timeout=120, env={"TF_CONFIG": json.dumps(
                             {"cluster": cluster, "task": {"type": "worker", "index": 1}})})
    assert worker.returncode == 0, worker.stderr[-2000:]
    assert "== prepare: skipped, a worker other than the chief only trains" in worker.stderr
    assert sorted(p.name for p in model_dir.iterdir()) == [md.LOCK_FILE]

    # kill -9 leaves the file behind, but the kernel has released the lock: the next run
    # takes it (and records itself) without anyone cleaning up.
    child.kill()
    child.wait(timeout=60)
    process = run_command([f"--model_dir={model_dir}", "--mode=average"], shared_data,
                          wait=False)
    output, _ = process.communicate(timeout=120)
    assert "in use by another run" not in output and "== average" in output, output[-2000:]
    assert json.loads((model_dir / md.LOCK_FILE).read_text())["pid"] == process.pid


@pytest.mark.quick
def test_which_stages_write():
    from pipelines.settings import resolver
    from pipelines.stages import modes as stages

    run = resolver.resolve({"model_dir": "unused"})
    assert [name for name, stage in stages.STAGES.items() if stage.writes(run)] == [
        "prepare", "train", "average", "evaluate", "export"]
    with_output = resolver.resolve({"model_dir": "unused", "output": "out.txt"})
    assert stages.STAGES["translate"].writes(with_output)
    assert not stages.STAGES["score"].writes(with_output)
