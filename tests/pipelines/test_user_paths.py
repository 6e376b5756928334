"""What a run prints about its settings is what it runs, on each path a user takes.

Each test runs one path of `pipelines/run.py` and checks every setting the run prints (the
task line, the options line, the training, evaluate and export lines) against what it used:
the vocabulary (the SentencePiece model's pieces), the steps (the last checkpoint), the preset
(settings.json and config.json), and the beam, alpha and precision (the eval and export
records). The models are made tiny with flags that none of those values depend on (the
architecture's sizes, the batch and its packing, the precision, checkpoints, steps per
execution, sentences decoded), so the paths keep their own vocabulary, steps, preset and
decoding.
"""
import json
import os
import pathlib
import re
import shutil

import pytest

from tests.pipelines.run_helpers import options_block, run_command

pytestmark = pytest.mark.xdist_group("test_user_paths")  # its module fixtures: one worker

SMALL = ["--config_override=num_layers=1", "--config_override=d_model=32",
         "--config_override=d_ff=64", "--config_override=num_heads=2", "--eval_sentences=8",
         "--nocheck_ops"]
"""A tiny model, 8 sentences evaluated, no op check: none of the checked values."""
MULTI30K_BATCH = "--batch_tokens=128"
"""The smallest budget that holds Multi30k's longest bucket (128): a step costs about its
tokens, and the presets train thousands."""
PRESET_MODEL = ["--config_override=d_model=8", "--config_override=d_ff=8",
                "--config_override=num_heads=1"]
"""Smaller still, for the presets' thousands of steps (after SMALL, whose sizes it replaces):
the output layer, d_model x the preset's vocabulary per token, is a step's largest layer."""
PARSER_STEP = ["--pack", "--nomixed_precision"]
"""The parser preset's 6,400 steps, cheaper: rows packed full, and float32 (a d_model 32 step
spends more on bfloat16 casts than it saves); the other runs keep the device's precision."""


def run(args, shared_data, env=None):
    result = run_command(args, shared_data, timeout=1200, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stderr


def printed(pattern, log):
    """Every match of `pattern` in the run's log (its groups), line by line."""
    return re.findall(pattern, log, re.M)


def last_checkpoint_step(model_dir) -> int:
    state = (model_dir / "checkpoints" / "checkpoint").read_text()
    return int(re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', state, re.M).group(1))


def check(log, model_dir, *, vocab=None, steps=None, preset=None, beam=None, alpha=None,
          exported=None):
    """Asserts that every value `log` prints equals the one the run used, and that those are
    the path's own (`vocab`, `steps`, ... where given; `beam` and `alpha` as the path sets them,
    before a dev choice). Exports decode with settings.json's beam and alpha, or `exported`."""
    from keras_transformer import TransformerConfig
    from pipelines.data import vocab as vocab_lib
    from pipelines.model_dir.layout import DEV_CHOICE_FILE

    settings = json.loads((model_dir / "settings.json").read_text())
    pieces = vocab_lib.vocab_size_of((model_dir / "spm.model").read_bytes())
    saved, choice = settings["decoding"], model_dir / DEV_CHOICE_FILE
    own = {**saved, **({key: value for key, value in json.loads(choice.read_text())["grid"][0]
                        .items() if key in saved} if choice.is_file() else {})}
    # The task line (prepare, before any dev choice) and the options line: the vocabulary and
    # the preset.
    for vocab_shown, preset_shown, beam_shown, alpha_shown, extra_shown in printed(
            r"task \w+: \S+, vocab ([\d,]+), max length \d+/\d+, preset (\w+), beam (\d+), "
            r"alpha ([\d.]+), extra length (\d+), ", log):
        assert (int(vocab_shown.replace(",", "")), preset_shown) == (
            pieces, settings["model"]["preset"])
        assert (int(beam_shown), float(alpha_shown), int(extra_shown)) == (
            own["beam_size"], own["alpha"], own["extra_length"])
    options = options_block(log)
    for shown in printed(r"\bvocab_size=(\d+)", options):
        assert int(shown) == pieces
    for shown in printed(r"\bconfig=(\w+)", options):
        assert shown == settings["model"]["preset"]
    config = json.loads((model_dir / "config.json").read_text())
    made = TransformerConfig.preset(settings["model"]["preset"], **{
        **settings["model"]["config_overrides"], "vocab_size": config["vocab_size"],
        "max_length": config["max_length"]})
    assert made == TransformerConfig.from_dict(config)  # config.json: the preset named
    # The training lines: the steps.
    steps_shown = printed(r"\btrain_steps[=:'\" ]+(\d+)", log) + [
        shown.replace(",", "") for shown in printed(r"steps [\d,]+ -> ([\d,]+)", log)]
    assert all(int(shown) == last_checkpoint_step(model_dir) for shown in steps_shown)
    # evaluate's and export's lines: the beam, alpha and precision of their records.
    decoding = r"beam (\d+), alpha ([\d.]+), extra length (\d+)"
    shown = printed(rf"evaluate: {decoding}, stop rule \w+, max input length \w+, (\w+), XLA",
                    log)
    written = printed(r"evaluate: [\d,]+ sentences in \S+; wrote (\S+\.json)", log)
    assert len(shown) == len(written)
    for (beam_shown, alpha_shown, extra_shown, precision), path in zip(shown, written):
        record = json.loads(pathlib.Path(path).read_text())["decoding"]
        assert (record["beam_size"], record["alpha"], record["extra_length"],
                record["precision"]) == (int(beam_shown), float(alpha_shown), int(extra_shown),
                                         precision)
    exports = printed(rf"export: wrote (\S+) \(.*default {decoding}, max input length \d+, "
                      rf"(\w+)\)", log)
    assert exports, "the run exported"
    for path, beam_shown, alpha_shown, extra_shown, precision in exports:
        record = json.loads((pathlib.Path(path) / "assets.extra" / "export.json").read_text()
                            )["decoding"]
        assert (record["beam_size"], record["alpha"], record["extra_length"],
                record["precision"]) == (int(beam_shown), float(alpha_shown), int(extra_shown),
                                         precision)
    # The path's own values.
    if steps is not None:
        assert last_checkpoint_step(model_dir) == steps and steps_shown
    assert vocab is None or pieces == vocab
    assert preset is None or settings["model"]["preset"] == preset
    assert {(int(shown[1]), float(shown[2])) for shown in exports} == {
        exported or (saved["beam_size"], saved["alpha"])}
    assert beam is None or own["beam_size"] == beam
    assert alpha is None or own["alpha"] == alpha


@pytest.mark.quick
def test_the_check_catches_a_printed_value_the_run_did_not_use(tmp_path):
    """`check` fails where a line says another vocabulary, preset or step count than the
    model dir's (what the release before the recipe printed), and passes where they agree."""
    from keras_transformer import TransformerConfig
    from pipelines.data import vocab
    from pipelines.model_dir import layout as md

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a dog runs in the snow\ntwo men play football\n" * 50)
    vocab.build_vocab([corpus], tmp_path, 300, log=lambda _: None)
    md.save_config(tmp_path, TransformerConfig.preset("multi30k_small", vocab_size=300))
    md.save_settings(tmp_path, {"model": {"preset": "multi30k_small", "config_overrides": {}},
                                "decoding": {"beam_size": 4, "alpha": 0.6, "extra_length": 50}})
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-20"\n')
    export = tmp_path / "export" / "1" / "assets.extra"
    export.mkdir(parents=True)
    export.joinpath("export.json").write_text(json.dumps({"decoding": {
        "beam_size": 4, "alpha": 0.6, "extra_length": 50, "precision": "float32"}}))
    task = ("task multi30k_ende: en->de, vocab {}, max length 128/128, preset {}, beam 4, "
            "alpha 0.6, extra length 50, stop rule exact, max input length 128, float32")
    lines = ["train: 1 replica(s), 9 batches per pass over the data, batch budget 512 tokens "
             "x 1 accumulated, steps 0 -> {}",
             f"export: wrote {export.parent} (signatures x; default beam 4, alpha 0.6, extra "
             f"length 50, max input length 128, float32)"]
    good = "\n".join([task.format(300, "multi30k_small"), *lines]).format(20)
    check(good, tmp_path, vocab=300, steps=20, preset="multi30k_small", beam=4, alpha=0.6)
    for lie in (task.format("8,000", "multi30k_small"), task.format(300, "base"),
                lines[0].format(6000)):
        with pytest.raises(AssertionError):
            check("\n".join([good, lie]), tmp_path)


@pytest.fixture(scope="module")
def default_job(tmp_path_factory, shared_data):
    """The default job (`python pipelines/run.py`), tiny: its 1,000 steps, 8,000 pieces."""
    model_dir = tmp_path_factory.mktemp("default") / "model"
    log = run([f"--model_dir={model_dir}", *SMALL, MULTI30K_BATCH, "--checkpoint_every=500",
               "--steps_per_execution=250"], shared_data)
    return model_dir, log


def test_the_default_job(default_job):
    model_dir, log = default_job
    check(log, model_dir, vocab=8000, steps=1000, preset="multi30k_small", beam=4, alpha=0.6)


def test_a_rerun_that_decodes_differently(default_job, shared_data):
    """`--override_saved --beam_size 6`: evaluate and export say beam 6 and use it; the
    model dir keeps its own beam."""
    model_dir, _ = default_job
    saved = json.loads((model_dir / "settings.json").read_text())["decoding"]
    log = run([f"--model_dir={model_dir}", "--mode=evaluate,export", "--override_saved",
               "--beam_size=6", "--eval_sentences=8", "--nocheck_ops"], shared_data)
    check(log, model_dir, exported=(6, saved["alpha"]))
    assert "evaluate: beam 6," in log
    assert json.loads((model_dir / "settings.json").read_text())["decoding"] == saved


@pytest.fixture(scope="module")
def small_vocabulary(tmp_path_factory, shared_data):
    """`--vocab_size 1000 --train_steps 20`."""
    model_dir = tmp_path_factory.mktemp("vocab") / "model"
    log = run([f"--model_dir={model_dir}", "--vocab_size=1000", "--train_steps=20", *SMALL,
               MULTI30K_BATCH, "--checkpoint_every=10"], shared_data)
    return model_dir, log


def test_a_smaller_vocabulary_and_fewer_steps(small_vocabulary):
    model_dir, log = small_vocabulary
    assert "vocab 1,000," in log and "train_steps=20" in log
    check(log, model_dir, vocab=1000, steps=20, preset="multi30k_small", beam=4, alpha=0.6)


def test_a_fine_tune_with_init_from(small_vocabulary, tmp_path, shared_data):
    """The README's fine-tune: the source's vocabulary and preset, this run's steps."""
    source, _ = small_vocabulary
    for lang in ("en", "de"):
        lines = (shared_data / "multi30k" / f"val.{lang}").read_text(encoding="utf-8")
        (tmp_path / f"in_domain.{lang}").write_text(lines, encoding="utf-8")
    model_dir = tmp_path / "tuned"
    log = run([f"--init_from={source}", f"--model_dir={model_dir}", "--task=text",
               f"--train_src={tmp_path / 'in_domain.en'}",
               f"--train_tgt={tmp_path / 'in_domain.de'}", "--warmup_steps=50",
               "--lr_scale=0.1", "--train_steps=5", "--batch_tokens=512", "--nocheck_ops"],
              shared_data)
    assert "vocab 1,000," in log and "preset multi30k_small" in log
    check(log, model_dir, vocab=1000, steps=5, preset="multi30k_small", beam=4, alpha=0.6)


def test_a_model_dir_of_the_previous_release(small_vocabulary, tmp_path, shared_data):
    """A model dir as the release before the recipe wrote it (config.json with train_steps
    and label_smoothing, settings.json without a label smoothing) evaluates and exports, and
    reads its training settings back as they were."""
    from pipelines.settings import resolver

    source, _ = small_vocabulary
    model_dir = tmp_path / "older"
    shutil.copytree(source, model_dir, ignore=shutil.ignore_patterns("eval", "export",
                                                                     "made_from"))
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps(
        {**config, "label_smoothing": 0.1, "train_steps": 6000}))
    settings = json.loads((model_dir / "settings.json").read_text())
    del settings["training"]["label_smoothing"]
    (model_dir / "settings.json").write_text(json.dumps(settings))
    log = run([f"--model_dir={model_dir}", "--mode=evaluate,export", "--eval_sentences=8",
               "--nocheck_ops"], shared_data)
    check(log, model_dir, beam=4, alpha=0.6)
    recipe = resolver.resolve({"model_dir": str(model_dir)})
    assert (recipe.training.train_steps, recipe.training.label_smoothing) == (20, 0.1)
    assert recipe.origins["label_smoothing"] == "default"


def test_the_quality_preset(tmp_path, shared_data):
    """`--config multi30k_quality`: its recipe's 8,000 steps, beam 5 and alpha 1.0, and its
    model's 10,000 pieces, not its task's 1,000 steps and 8,000 pieces. With the preset's XLA,
    optimised as a user's is (the tests' quick compiles would make its 8,000 steps slower)."""
    model_dir = tmp_path / "model"
    optimised = {"XLA_FLAGS": os.environ.get("XLA_FLAGS", "").replace(
        "--xla_backend_optimization_level=0", "")}
    log = run([f"--model_dir={model_dir}", "--config=multi30k_quality", *SMALL, *PRESET_MODEL,
               MULTI30K_BATCH, "--checkpoint_every=2000", "--steps_per_execution=400"],
              shared_data, optimised)
    check(log, model_dir, vocab=10000, steps=8000, preset="multi30k_quality", beam=5, alpha=1.0)


def test_the_parser_preset(tmp_path, shared_data):
    """`--task ptb_parsing --config parsing_wsj_sample`: the preset's 4,000 pieces, 6,400
    steps and beam 4, the task's alpha 0.3 and extra length 300."""
    trees = shared_data / "ptb_sample"
    model_dir = tmp_path / "model"
    log = run([f"--model_dir={model_dir}", "--task=ptb_parsing", "--config=parsing_wsj_sample",
               f"--train_trees={trees / 'train.mrg'}", f"--dev_trees={trees / 'dev.mrg'}",
               *SMALL, *PRESET_MODEL, "--batch_tokens=512", "--checkpoint_every=3200",
               "--dev_metric_every=3200", "--dev_metric_sentences=4", "--steps_per_execution=400",
               *PARSER_STEP], shared_data)
    assert "preset parsing_wsj_sample, beam 4, alpha 0.3, extra length 300" in log
    check(log, model_dir, vocab=4000, steps=6400, preset="parsing_wsj_sample", beam=4,
          alpha=0.3)
