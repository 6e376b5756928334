"""Every command block of README.md, docs/*.md and export/README.md runs as printed, so that a
doc cannot drift from the code (issue 43).

A command block is a fenced block tagged `bash` or `sh`; untagged blocks are output. Each runs
with `bash -e` in one shared working directory, as a user runs it from a checkout: `pipelines/`,
`export/` and `benchmarks/` are there, `KT_DATA_DIR` points at the real data and
`TF_CPP_MIN_LOG_LEVEL` is unset. Before the first block the main job (`python
pipelines/run.py`, the README's first command) trains `runs/multi30k_ende`, and `M` names it
(the placeholder export/README.md uses for a trained model dir); `input.en` and
`in_domain.en/.de` hold Multi30k lines.

Training commands (`python pipelines/run.py` whose --mode trains) get `SMALL_MODEL` appended:
a tiny model, and the steps and XLA flags of `SMALL_RUN` that the command does not give
itself, so that each finishes in seconds (XLA's compiles take longer than 20 tiny steps; a
preset's XLA runs in its own test, tests/pipelines/test_user_paths.py); the main job's
checkpoints ckpt-900 and ckpt-1000 named in a command are the small run's last two, ckpt-10
and ckpt-20 (`SMALL_CHECKPOINTS`). Blocks that cannot run here (Docker, a server, other
virtual environments, downloads) carry the line `<!-- not run by tests/test_doc_commands.py:
REASON -->` just above their fence. Every command must exit 0, and the project's print no
library log line (TensorFlow's C++ or absl logging, SentencePiece's; a block that runs
another tool, `python -c`, is exempt).
"""
import os
import pathlib
import re
import subprocess

import pytest

from keras_transformer.native_logs import LIBRARY_LINE
from tests.pipelines.run_helpers import TINY_MODEL

pytestmark = pytest.mark.xdist_group("test_doc_commands")  # its module fixtures: one worker

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "export" / "README.md"]
BLOCK = re.compile(r"(?:<!-- (not run by tests/test_doc_commands\.py: [^>]*?) -->\n)?"
                   r"^```(bash|sh)\n(.*?)^```", re.S | re.M)
SMALL_MODEL = [*TINY_MODEL, "--extra_length=8", "--eval_sentences=20"]
SMALL_RUN = {"--train_steps": "20", "--checkpoint_every": "10", "--average_last": "2",
             "--keep_best_by": "last",  # 20 steps reach no dev metric (parsing's recipe)
             "--jit_compile": "false", "--decode_jit_compile": "false"}
SMALL_CHECKPOINTS = {"ckpt-900": "ckpt-10", "ckpt-1000": "ckpt-20"}
TRAINING = re.compile(r"^python pipelines/run\.py(?![^#]*--mode[ =](?![\w,]*train))[^#<>|]*")


def command_blocks():
    """(where, text, skip reason or None) of every command block, identical texts once."""
    found = {}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text[:match.start(2)].count("\n") + 1
            where = f"{doc.relative_to(ROOT)}:{line}"
            if match.group(3) in found:
                found[match.group(3)][0].append(where)
            else:
                found[match.group(3)] = ([where], match.group(1))
    return [(" ".join(where), text, skip) for text, (where, skip) in found.items()]


def small(block: str) -> str:
    """The block with its training commands made small (see the module docstring)."""
    for real, small_run in SMALL_CHECKPOINTS.items():
        block = re.sub(rf"\b{real}\b", small_run, block)
    lines = block.replace("\\\n", " ").splitlines()
    for i, line in enumerate(lines):
        match = TRAINING.match(line)
        if match:
            given = set(re.findall(r"--\w+", line))
            added = [f"{flag}={value}" for flag, value in SMALL_RUN.items() if flag not in given]
            lines[i] = " ".join([match.group(0).rstrip(), *SMALL_MODEL, *added,
                                 line[match.end():]])
    return "\n".join(lines) + "\n"


def run(block: str, cwd, data_dir, timeout=900) -> subprocess.CompletedProcess:
    """Runs `small(block)` in `cwd` with bash, as a user's shell would."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["KT_DATA_DIR"] = str(data_dir)
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", small(block)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, shared_data):
    """The shared working directory, with the main job's model (module docstring)."""
    work = tmp_path_factory.mktemp("docs")
    for name in ("pipelines", "export", "benchmarks"):
        (work / name).symlink_to(ROOT / name)
    multi30k = shared_data / "multi30k"
    for name, source in (("input.en", "test_2016_flickr.en"), ("in_domain.en", "val.en"),
                         ("in_domain.de", "val.de")):
        lines = (multi30k / source).read_text(encoding="utf-8").splitlines()[:40]
        (work / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run("python pipelines/run.py\n", work, shared_data)
    assert result.returncode == 0, result.stderr[-3000:]
    (work / "M").symlink_to(work / "runs" / "multi30k_ende")
    return work


@pytest.mark.quick
def test_the_doc_blocks_are_found():
    blocks = command_blocks()
    assert len(blocks) > 20
    assert sum(not skip for _, _, skip in blocks) >= 12  # the rest: Docker, servers, ...
    assert small("python pipelines/run.py --mode translate --model_dir M < a > b\n") == \
        "python pipelines/run.py --mode translate --model_dir M < a > b\n"
    assert small("python pipelines/run.py --train_steps 100  # x\n") == " ".join(
        ["python pipelines/run.py --train_steps 100", *SMALL_MODEL,
         *[f"{k}={v}" for k, v in SMALL_RUN.items() if k != "--train_steps"], "# x\n"])


@pytest.mark.parametrize("where, block, skip", command_blocks(),
                         ids=[where for where, _, _ in command_blocks()])
def test_doc_block_runs_as_printed(where, block, skip, workdir, shared_data):
    if skip:
        pytest.skip(skip)
    result = run(block, workdir, shared_data)
    assert result.returncode == 0, f"{where}:\n{small(block)}\n{result.stderr[-3000:]}"
    if "python -c" in block or block.lstrip().startswith("pdoc "):  # another tool: its own logging
        return
    noise = [line for line in (result.stdout + result.stderr).splitlines()
             if LIBRARY_LINE.match(line.encode())]
    assert not noise, f"{where}: library log lines: {noise[:3]}"
