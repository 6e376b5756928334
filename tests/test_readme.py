"""The Keras script in README.md runs as written (with a tiny model and few steps), under
TensorFlow and under JAX, from a directory outside the checkout with the library alone."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def readme_script():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- keras-script -->\s*```python\n(.*?)```", text, re.S)
    assert match, "README.md lost its <!-- keras-script --> block"
    return match.group(1)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_readme_keras_script_runs(tmp_path, shared_data, backend):
    script = readme_script()
    # Only sizes change: a tiny vocabulary and model, a few steps, a temporary work dir.
    replacements = {
        "vocab_size=8000": "vocab_size=1000",
        'preset("multi30k_small", vocab_size=1000)':
            'preset("multi30k_small", vocab_size=1000, num_layers=1, d_model=32, d_ff=64, '
            'num_heads=2)',
        "steps_per_epoch=2000": "steps_per_epoch=30",
    }
    for old, new in replacements.items():
        assert old in script, f"README script no longer contains {old!r}"
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
