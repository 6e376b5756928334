"""The installed library alone, as a user's project gets it: `pip install .` (not editable) of the
checkout into a fresh virtual environment, run from a directory outside the checkout with
neither it nor `pipelines/` importable.
A model dir that the pipelines wrote loads in one call and translates as `--mode translate`
does, line for line; beam 8 with a 2-best list works; the SavedModel its `export` writes serves
the golden signatures, and TensorFlow 1's session loader answers as the in-process translator.
"""
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_transformer.native_logs import LIBRARY_LINE

from tests.export.test_saved_model import serve_in_fresh_process
from tests.export.test_serving_contract import GOLDEN, served_signatures

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINES = 40

SCRIPT = """
import json, pathlib, sys
import keras_transformer

model_dir, source, export_dir = sys.argv[1:]
library = pathlib.Path(keras_transformer.__file__)
assert library.is_relative_to(sys.prefix), library
for name in ("pipelines", "export", "cli"):
    try:
        __import__(name)
        raise SystemExit(f"{name} is importable: not the library alone")
    except ImportError:
        pass
lines = pathlib.Path(source).read_text(encoding="utf-8").splitlines()
translator = keras_transformer.load(model_dir)
print(json.dumps({"lines": translator.translate(lines),
                  "wide": translator.translate(lines[:3], beam_size=8, n_best=2),
                  "export": str(translator.export(export_dir))}))
"""


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory) -> pathlib.Path:
    """The interpreter of a fresh virtual environment where `pip install .` (not editable)
    installed the library from a copy of what setup.py packages (so that the build writes
    nothing into the checkout). The environment sees this interpreter's site-packages for
    the dependencies (TensorFlow and the rest), which pip would otherwise download; the
    script checks that the library it imports is the environment's own."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "keras_transformer", source / "keras_transformer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         str(source)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    return python


@pytest.fixture(scope="module")
def outside(venv_python, model_dir, shared_data, tmp_path_factory):
    """What the script printed, the source lines it read, and where it ran."""
    work = tmp_path_factory.mktemp("user_project")
    source = work / "test.en"
    lines = (shared_data / "multi30k" / "test_2016_flickr.en").read_text(
        encoding="utf-8").splitlines()[:LINES]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (work / "script.py").write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([str(venv_python), "script.py", str(model_dir), str(source),
                          str(work / "exports")], cwd=work, capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert not [line for line in run.stderr.splitlines()  # quiet, as the command line is
                if LIBRARY_LINE.match(line.encode())], run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), source, work


def test_loads_and_translates_as_the_translate_stage(outside, model_dir):
    from pipelines.settings import resolver
    from pipelines.stages import translate

    printed, source, _ = outside
    out = io.StringIO()
    translate.run_translate(resolver.resolve({"model_dir": str(model_dir),
                                              "input": str(source)}),
                            log=lambda _: None, out=out)
    assert printed["lines"] == out.getvalue().splitlines()
    assert len(printed["lines"]) == LINES and all(printed["lines"])
    wide = printed["wide"]
    assert [len(row) for row in wide] == [2, 2, 2]
    assert all(first[1] >= second[1] for first, second in wide)


def test_its_export_serves_the_golden_signatures_under_tf1(outside, translator):
    printed, source, work = outside
    version = pathlib.Path(printed["export"])
    assert version == work / "exports" / "1"
    assert served_signatures(version) == GOLDEN
    sources = source.read_text(encoding="utf-8").splitlines()[:8]
    result = serve_in_fresh_process(version, {"sources": sources, "source_ids": [[5, 3]]},
                                    work)
    expected = [bytes(t).hex() for t in translator.translate(
        tf.constant(sources))["translation"].numpy()]
    assert result["tf1"]["sources"]["translation"]["values"] == expected
    assert result["tf2"]["sources"]["translation"]["values"] == expected


@pytest.mark.quick
def test_save_then_load_translates_as_the_model(trained_model, spm_proto, tmp_path):
    """`keras_transformer.save` writes a model dir that `load` reads back: the same weights,
    vocabulary and decoding settings, so the same translations; a keyword of `load`
    overrides one recorded setting; a parsing model dir is refused in one line."""
    import keras_transformer
    from keras_transformer import BeamSearch
    from keras_transformer.errors import ModelDirError
    from keras_transformer.serving import Translator

    search = BeamSearch(beam_size=3, alpha=1.0, extra_length=7)
    saved = keras_transformer.save(tmp_path / "model", trained_model, spm_proto, search)
    loaded = keras_transformer.load(saved)
    assert loaded.search == search
    sentences = ["A dog runs through the snow.", "Two men play football.", "  "]
    assert loaded.translate(sentences) == Translator(trained_model, spm_proto,
                                                     search).translate(sentences)
    assert loaded.translate(sentences)[2] == ""
    assert keras_transformer.load(saved, beam_size=2).search.beam_size == 2
    from pipelines.settings import resolver
    from pipelines.stages import translate

    (tmp_path / "in.en").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    out = io.StringIO()  # the command line reads the saved dir too
    translate.run_translate(resolver.resolve({"model_dir": str(saved),
                                              "input": str(tmp_path / "in.en")}),
                            log=lambda _: None, out=out)
    assert out.getvalue().splitlines() == loaded.translate(sentences)
    settings = json.loads((saved / "settings.json").read_text())
    (saved / "settings.json").write_text(json.dumps({**settings, "task": "ptb_parsing"}))
    with pytest.raises(ModelDirError, match="task ptb_parsing: its decoding builds trees"):
        keras_transformer.load(saved)
