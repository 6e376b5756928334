"""`--mode export --format ctranslate2` (export/ctranslate2.py): the converted model decodes
(export/ct2_decoding.py) as our float32 beam search does, and without the optional extra the
flag is refused.

The tiny trained model of conftest.py, its model directory and its serving functions
(float32); CTranslate2 decodes one sentence per call, so that both searches have the same
maximum length (CTranslate2 sets it per batch).
"""
import json
import pathlib
import subprocess
import sys

import pytest

from tests.export.conftest import SETTINGS
from tests.pipelines.run_helpers import run_stages

pytestmark = pytest.mark.xdist_group("export")  # one worker builds the session model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SENTENCES = 24


def _run_cli(args, hide_ctranslate2=False):
    """pipelines/run.py with `args` in a subprocess; with `hide_ctranslate2`, as if the
    extra were not installed (`sys.modules` entry None: find_spec answers None)."""
    hide = "sys.modules['ctranslate2'] = None; " if hide_ctranslate2 else ""
    code = (f"import runpy, sys; {hide}sys.argv = ['run.py'] + {args!r}; "
            f"runpy.run_path({str(ROOT / 'pipelines' / 'run.py')!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_without_the_extra_the_format_is_refused_before_any_work(model_dir, tmp_path):
    output = tmp_path / "ct2"
    result = _run_cli([f"--model_dir={model_dir}", "--mode=export", "--format=ctranslate2",
                       f"--export_dir={output}"], hide_ctranslate2=True)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and 'pip install -e ".[ctranslate2]"' in last, last
    assert not output.exists()


@pytest.mark.quick
def test_format_mistakes(model_dir):
    """--quantize (CTranslate2 quantizes when it loads) and --format outside export."""
    from pipelines.settings import resolver
    from pipelines.errors import ConfigError

    pytest.importorskip("ctranslate2")
    with pytest.raises(ConfigError, match="--quantize: not with --format ctranslate2"):
        resolver.resolve({"model_dir": str(model_dir), "format": "ctranslate2",
                         "quantize": "int8"})
    result = _run_cli([f"--model_dir={model_dir}", "--mode=evaluate", "--format=ctranslate2"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--format: only --mode export" in result.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def ct2_dir(model_dir, tmp_path_factory):
    """The model directory exported by the export stage (settings.json's decoding settings)."""
    pytest.importorskip("ctranslate2")
    output = tmp_path_factory.mktemp("ct2") / "export_ct2"
    run_stages("export", model_dir=str(model_dir), format="ctranslate2", export_dir=str(output))
    return output


def test_the_directory_holds_what_a_user_translates_with(ct2_dir, model_dir):
    from export import ctranslate2 as ct2

    assert {"model.bin", "config.json", "spm.model", ct2.SETTINGS_FILE} <= {
        p.name for p in ct2_dir.iterdir()}
    assert (ct2_dir / "spm.model").read_bytes() == (model_dir / "spm.model").read_bytes()
    info = json.loads((ct2_dir / ct2.SETTINGS_FILE).read_text(encoding="utf-8"))
    assert {k: info["decoding"][k] for k in SETTINGS} == SETTINGS
    assert info["decoding"]["stop_rule"] == "exact"
    # A second export refuses to replace it: one line, exit 2, the model unchanged.
    before = (ct2_dir / "model.bin").read_bytes()
    result = _run_cli([f"--model_dir={model_dir}", "--mode=export", "--format=ctranslate2",
                       f"--export_dir={ct2_dir}"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "already exists: pass --overwrite_export" in result.stderr.strip().splitlines()[-1]
    assert (ct2_dir / "model.bin").read_bytes() == before


def test_a_stop_rule_ctranslate2_cannot_give_is_refused(model_dir, tmp_path):
    """best_finished compares finished and live hypotheses under our length penalty, which
    CTranslate2's search cannot see: refused in one line, before anything is written; with
    alpha 0 it is the exact rule, and carried as it is."""
    from export import ct2_decoding, ctranslate2 as ct2
    from keras_transformer.decoding import BeamSearch

    pytest.importorskip("ctranslate2")
    output = tmp_path / "ct2"
    result = _run_cli([f"--model_dir={model_dir}", "--mode=export", "--format=ctranslate2",
                       f"--export_dir={output}", "--stop_rule=best_finished", "--alpha=0.6"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --format ctranslate2: CTranslate2 cannot stop sentences by --stop_rule "
        "best_finished with alpha 0.6; pass --stop_rule exact (or --alpha 0) to this export")
    assert not output.exists()
    greedy = ct2.decoding_settings(BeamSearch(alpha=0.0, stop_rule="best_finished"), 30)
    assert greedy["stop_rule"] == "best_finished"
    with pytest.raises(ct2.ConversionError, match="--stop_rule best_finished"):
        ct2_decoding.translate(None, None, ["a"], dict(greedy, alpha=0.6), 64)


def _ours(translator, line, beam_size, alpha):
    """Our float32 search through the served function: (pieces, score)."""
    import tensorflow as tf

    out = translator.translate_with_options(
        tf.constant([line]), tf.constant(beam_size), tf.constant(alpha), tf.constant(1),
        tf.constant(SETTINGS["extra_length"]), tf.constant([""]))
    pieces = [p.decode("utf-8") for p in out["tokens"].numpy()[0, 0] if p]
    return pieces[:-1] if pieces[-1:] == ["</s>"] else pieces, float(out["scores"][0, 0])


@pytest.mark.parametrize("beam_size, alpha", [(1, 0.0), (4, 0.0), (4, 0.6)])
def test_ctranslate2_translates_as_our_float32_search(ct2_dir, translator, corpus, beam_size,
                                                     alpha):
    """Greedy and beam 4 without penalty are the same search in both engines; with alpha 0.6
    `translate` picks by our penalty among CTranslate2's finished hypotheses. Only where
    ours ran to the maximum length (its forced end token) may a translation differ."""
    from export import ct2_decoding as ct2

    assert translator.settings()["precision"] == "float32"
    engine, sp, info = ct2.load(ct2_dir, intra_threads=1)
    decoding = dict(info["decoding"], beam_size=beam_size, alpha=alpha)
    lines = corpus["en"][-SENTENCES:]  # sentences the model was trained on, but varied
    cap = info["model"]["max_length"]
    differ = []
    for line in lines:
        theirs = ct2.translate(engine, sp, [line], decoding, cap)[0]
        pieces, score = _ours(translator, line, beam_size, alpha)
        _, limit = ct2.source_pieces(sp, [line], decoding, cap)
        if theirs["pieces"] != pieces:
            differ.append((line, pieces, theirs["pieces"]))
            assert len(pieces) >= limit, differ[-1]  # only at the maximum length
        else:
            assert theirs["score"] == pytest.approx(score, rel=1e-3, abs=1e-3)  # float32 sums
    assert len(differ) <= SENTENCES // 8, differ


def test_ctranslate2_gives_an_empty_line_for_a_blank_one(ct2_dir, corpus):
    """A blank or whitespace-only line has no pieces: "" and score 0, as our search gives,
    in its place among real lines, which never come back empty."""
    from export import ct2_decoding as ct2

    engine, sp, info = ct2.load(ct2_dir, intra_threads=1)
    lines = ["", corpus["en"][0], "   ", "\t", corpus["en"][1]]
    out = ct2.translate(engine, sp, lines, info["decoding"], info["model"]["max_length"])
    assert [(o["translation"], o["score"]) for o in out[::2][:2]] == [("", 0.0), ("", 0.0)]
    assert (out[3]["translation"], out[3]["score"]) == ("", 0.0)
    assert out[1]["translation"] and out[4]["translation"]
    assert ct2.translate(engine, sp, [" "], info["decoding"], 64)[0]["pieces"] == []
