"""The Keras script of docs/library.md runs as written (with a tiny model and few steps), under
TensorFlow and under JAX, from a directory outside the checkout with the library alone; and
README.md stays a front door: short, its links and docs/'s links alive, its test command
the one CI runs."""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


LIBRARY_DOC = ROOT / "docs" / "library.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def readme_script(name="keras-script"):
    text = LIBRARY_DOC.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {name} -->\s*```python\n(.*?)```", text, re.S)
    assert match, f"docs/library.md lost its <!-- {name} --> block"
    return match.group(1)


@pytest.mark.quick
def test_readme_is_at_most_200_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/"


@pytest.mark.quick
def test_every_relative_link_in_readme_and_docs_points_at_a_file():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(files) > 1, "docs/ has no .md files"
    broken = []
    for doc in files:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (http:, mailto:, ...) or an anchor in the same file
            path = target.split("#", 1)[0]
            if not (doc.parent / path).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken


@pytest.mark.quick
def test_readme_test_command_is_the_one_ci_runs():
    """.ci/run installs the test extra and runs the command under its "README's test command"
    comment; the README's quick start shows both on its "# the tests" line."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for line in readme.splitlines() if line.rstrip().endswith("# the tests")]
    assert len(lines) == 1, lines
    install, command = (part.strip() for part in lines[0].split("#")[0].split("&&"))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    marker = [i for i, line in enumerate(ci) if line.startswith("# README's test command")]
    assert len(marker) == 1, "the .ci/run line marking README's test command is gone"
    assert ci[marker[0] + 1].strip() == command
    assert install in [line.strip() for line in ci[:marker[0]]]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_readme_keras_script_runs(tmp_path, shared_data, backend):
    script = readme_script()
    if backend == "tensorflow":  # the SavedModel's backend: save, load, translate, export
        script += readme_script("keras-script-export")
    # Only sizes change: a tiny vocabulary and model, a few steps, a temporary work dir.
    replacements = {
        "vocab_size=8000": "vocab_size=1000",
        'preset("multi30k_small", vocab_size=1000)':
            'preset("multi30k_small", vocab_size=1000, num_layers=1, d_model=32, d_ff=64, '
            'num_heads=2)',
        "steps_per_epoch=2000": "steps_per_epoch=30",
    }
    for old, new in replacements.items():
        assert old in script, f"docs/library.md's script no longer contains {old!r}"
        script = script.replace(old, new)
    path = tmp_path / "script.py"
    path.write_text(script, encoding="utf-8")
    # Outside the checkout, with only the library importable: the application packages
    # (pipelines, export) fail to import, so the script cannot lean on them.
    shim = tmp_path / "shim"
    for name in ("pipelines", "export"):
        (shim / name).mkdir(parents=True)
        (shim / name / "__init__.py").write_text("raise ImportError('not the library')\n")
    env = dict(os.environ, KT_DATA_DIR=str(shared_data), TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)]), KERAS_BACKEND=backend,
               JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    translation = result.stdout.strip().splitlines()[-1]
    assert translation and "<" not in translation  # a real (if poor) German string
    if backend == "tensorflow":
        from export.op_check import check_ops

        export = tmp_path / result.stdout.strip().splitlines()[-2]
        assert export == tmp_path / "ende_export" / "1"
        best = ast.literal_eval(result.stdout.strip().splitlines()[-3])  # the 2-best list
        assert len(best[0]) == 2 and best[0][0][0] == translation, best
        report = check_ops(export)
        assert report.ok, report.format()
