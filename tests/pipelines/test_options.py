"""The one resolver: flag > settings.json > task default > the paper's, and refusals."""
import json

import pytest

from keras_transformer import BeamSearch
from pipelines.settings import describe, options, resolver
from pipelines.settings.device_policy import Device
from pipelines.errors import ConfigError, DataError, ModelDirError
from pipelines.model_dir import layout as md


@pytest.mark.quick
def test_a_new_model_dir_takes_task_then_paper_defaults(tmp_path):
    run = resolver.resolve({"model_dir": str(tmp_path / "m")})
    assert run.data.task == "multi30k_ende" and run.data.vocab_size == 8_000
    assert run.model.preset == "multi30k_small" and run.model.config_overrides == {}
    # Multi30k's own training defaults, else the paper's.
    assert (run.training.train_steps, run.training.batch_tokens) == (1000, 2048)
    assert (run.training.warmup_steps, run.training.lr_scale) == (400, 0.7)
    assert run.training.pack and run.origins["pack"] == "task multi30k_ende"
    assert (run.training.average_last, run.training.accumulate_steps) == (3, 1)
    assert run.decoding.beam == BeamSearch(4, 0.6, 50) and run.decoding.max_input_length == 128
    parser = resolver.resolve({"model_dir": str(tmp_path / "p"), "task": "ptb_parsing"})
    assert (parser.decoding.beam.beam_size, parser.decoding.beam.alpha) == (21, 0.3)
    assert parser.training.batch_tokens == 25_000  # the paper's
    assert parser.training.train_steps == 100_000  # the paper's (Table 3)


def test_precision_follows_training_unless_given(tmp_path):
    bfloat16_cpu = Device("cpu", cpu_flags=frozenset({"avx512_bf16"}))
    run = resolver.resolve({"model_dir": str(tmp_path)}, device=bfloat16_cpu)
    assert run.training.mixed_precision and run.decoding.precision == "bfloat16"
    assert not run.evaluation.jit_compile  # XLA does not speed bfloat16 up on CPUs
    run = resolver.resolve({"model_dir": str(tmp_path), "mixed_precision": False},
                          device=bfloat16_cpu)
    assert run.decoding.precision == "float32" and run.evaluation.jit_compile
    # float16 training decodes in float32 (decoding has no float16).
    run = resolver.resolve({"model_dir": str(tmp_path)}, device=Device("gpu", (7, 5)))
    assert run.training.precision_policy == "mixed_float16"
    assert run.decoding.precision == "float32"


def _trained(tmp_path, **given):
    run = resolver.resolve({"model_dir": str(tmp_path), "task": "ptb_parsing",
                           "config_override": {"d_model": 64}, "beam_size": 3, **given})
    md.save_settings(tmp_path, run.settings(trained=True))
    md.final_weights(tmp_path).write_bytes(b"weights")  # what makes the settings bind
    return run


def test_settings_json_is_the_truth_after_training(tmp_path):
    trained = _trained(tmp_path, train_steps=70, average_last=2)
    again = resolver.resolve({"model_dir": str(tmp_path)})  # no --task, no config flags
    assert again == trained
    # Run controls may change; the saved value is only their default.
    assert resolver.resolve({"model_dir": str(tmp_path), "train_steps": 90}).training.train_steps == 90


@pytest.mark.parametrize("given, message", [
    ({"task": "multi30k_ende"}, "--task 'multi30k_ende' differs from 'ptb_parsing'"),
    ({"config": "base"}, "--config 'base' differs from 'parsing_wsj'"),
    ({"config_override": {"d_model": 32}}, "--config_override {'d_model': 32} differs from "
                                           "{'d_model': 64}"),
    ({"accumulate_steps": 4}, "--accumulate_steps 4 differs from 1"),
    ({"vocab_size": 1000}, "--vocab_size 1000 differs from 16000"),
])
@pytest.mark.quick
def test_a_flag_that_contradicts_the_model_is_refused(tmp_path, given, message):
    _trained(tmp_path)
    with pytest.raises(ConfigError, match="drop the flag to continue this model") as error:
        resolver.resolve({"model_dir": str(tmp_path), **given})
    assert str(error.value).startswith(message)
    with pytest.raises(ConfigError):  # --override_saved is for decoding settings only
        resolver.resolve({"model_dir": str(tmp_path), "override_saved": True, **given})


def test_model_settings_bind_only_once_weights_exist(tmp_path):
    run = _trained(tmp_path)
    md.final_weights(tmp_path).unlink()  # a first run stopped before its first checkpoint
    again = resolver.resolve({"model_dir": str(tmp_path), "batch_tokens": 4096,
                             "config_override": {"d_model": 128}})
    assert again.training.batch_tokens == 4096 and again.model.config_overrides == {
        "d_model": 128}
    with pytest.raises(ConfigError, match="--task"):  # prepare's decisions still bind
        resolver.resolve({"model_dir": str(tmp_path), "task": "multi30k_ende"})
    assert run.training.batch_tokens == 25_000


@pytest.mark.quick
def test_decoding_flags_apply_to_their_run(tmp_path):
    """A model is not trained with a beam: decoding flags need no --override_saved."""
    _trained(tmp_path)
    run = resolver.resolve({"model_dir": str(tmp_path), "beam_size": 3})
    assert run.decoding.beam.beam_size == 3
    run = resolver.resolve({"model_dir": str(tmp_path), "beam_size": 5, "alpha": 0.0,
                            "stop_rule": "best_finished"})
    assert (run.decoding.beam.beam_size, run.decoding.beam.alpha) == (5, 0.0)
    assert run.decoding.beam.stop_rule == "best_finished"
    assert run.origins["beam_size"] == "flag"
    # The stop rule is a decoding setting like the others; a model dir saved before it
    # existed stops exactly.
    assert resolver.resolve({"model_dir": str(tmp_path)}).decoding.beam.stop_rule == "exact"


def test_test_files_given_to_a_trained_dir_are_scored_by_that_run_only(tmp_path):
    """--test_src/--test_tgt on a trained model dir: the run's evaluate scores them; the
    recorded task options keep the model dir's own test set. A task that cannot take an
    option says so in one line, naming the ones it takes."""
    translation, parsing = tmp_path / "translation", tmp_path / "parsing"
    _trained(translation, task="multi30k_ende")
    run = resolver.resolve({"model_dir": str(translation), "test_src": "my.en",
                            "test_tgt": "my.de"})
    assert run.evaluation.test_files == {"test_src": "my.en", "test_tgt": "my.de"}
    assert "test_src" not in run.data.task_options
    assert run.scored_task.test_files == ("my.en", "my.de")
    assert run.task.test_files == ()
    with pytest.raises(DataError, match="^--test_src and --test_tgt go together"):
        resolver.resolve({"model_dir": str(translation), "test_src": "my.en"})
    with pytest.raises(DataError, match=r"^task multi30k_ende takes no --test_trees; its data "
                                        r"flags are --data_dir$"):
        resolver.resolve({"model_dir": str(translation), "test_trees": "my.mrg"})
    _trained(parsing)
    run = resolver.resolve({"model_dir": str(parsing), "test_trees": "my.mrg"})
    assert run.evaluation.test_files == {"test_trees": "my.mrg"}
    assert dict(run.scored_task.tree_files)["test"] == "my.mrg"
    assert dict(run.task.tree_files)["test"] is None
    with pytest.raises(DataError, match=r"^task ptb_parsing takes no --test_src, --test_tgt; "
                                        r"its data flags are --data_dir, --train_trees, "):
        resolver.resolve({"model_dir": str(parsing), "test_src": "a", "test_tgt": "b"})


def test_a_trained_dir_refuses_other_training_files(tmp_path):
    """What the weights were trained on is part of the model: other --train_src files are
    refused once trained (a fine-tune into a new dir trains on them), not before."""
    fresh = resolver.resolve({"model_dir": str(tmp_path), "task": "text",
                              "train_src": "a.en", "train_tgt": "a.de"})
    md.save_settings(tmp_path, fresh.settings(trained=False))
    again = resolver.resolve({"model_dir": str(tmp_path), "train_src": "b.en"})
    assert again.data.task_options["train_src"] == "b.en"  # not trained yet: may change
    md.save_settings(tmp_path, fresh.settings(trained=True))
    md.final_weights(tmp_path).write_bytes(b"weights")
    with pytest.raises(ConfigError, match=r"^--train_src 'b.en' differs from 'a.en', .*"
                                          r"fine-tune into a new dir: --init_from "):
        resolver.resolve({"model_dir": str(tmp_path), "train_src": "b.en"})
    assert resolver.resolve({"model_dir": str(tmp_path), "train_src": "a.en"}) == \
        resolver.resolve({"model_dir": str(tmp_path)})
    # Its own test files may be given again; other ones are this run's.
    md.save_settings(tmp_path, resolver.resolve({
        "model_dir": str(tmp_path), "test_src": "t.en", "test_tgt": "t.de"}
        ).settings(trained=True) | {"task_options": {
            **fresh.data.task_options, "test_src": "t.en", "test_tgt": "t.de"}})
    run = resolver.resolve({"model_dir": str(tmp_path), "test_src": "mine.en",
                            "test_tgt": "mine.de"})
    assert run.data.task_options["test_src"] == "t.en"
    assert dict((split, (src, tgt)) for split, src, tgt in run.scored_task.files)["test"] == (
        "mine.en", "mine.de")
    assert resolver.resolve({"model_dir": str(tmp_path), "test_src": "t.en"}
                            ).evaluation.test_files == {}


def test_a_run_shorter_than_its_warm_up_says_so_in_one_line(tmp_path):
    short = resolver.resolve({"model_dir": str(tmp_path), "train_steps": 40})
    assert describe.describe_short_run(short) == (
        "train: warning: --train_steps 40 ends inside the warm-up (--warmup_steps 400, "
        "task multi30k_ende): the learning rate rises all run and reaches 10% of "
        "its peak; give more steps or a shorter --warmup_steps")
    assert describe.describe_short_run(resolver.resolve(
        {"model_dir": str(tmp_path), "train_steps": 40, "warmup_steps": 10})) is None



def test_own_files_from_scratch_get_a_recipe_sized_to_their_corpus(tmp_path):
    """--task text without a preset: a vocabulary the corpus can fill, a small model with a
    batch that fits, several passes, packed rows, a warm-up of 40% of the run (the paper's
    4,000 steps at most) at 0.7 times Eq. 3's rate, the last 3 checkpoints averaged, each with
    the task as its origin; given --train_steps, the warm-up follows them; a corpus as large as
    WMT's keeps the paper's recipe."""
    words = [f"w{i}" for i in range(20_000)]
    lines = [" ".join(words[(7 * n + k) % len(words)] for k in range(12)) for n in range(6000)]
    (tmp_path / "a.src").write_text("\n".join(lines) + "\n")
    (tmp_path / "a.tgt").write_text("\n".join(reversed(lines)) + "\n")
    run = resolver.resolve({"model_dir": str(tmp_path / "m"), "task": "text",
                            "train_src": str(tmp_path / "a.src"),
                            "train_tgt": str(tmp_path / "a.tgt")})
    t = run.training
    assert (run.model.preset, run.data.vocab_size) == ("small", 4000)  # 20,000 words
    assert (t.batch_tokens, t.train_steps, t.warmup_steps, t.checkpoint_every) == (
        2048, 1000, 400, 100)  # 6,000 pairs of ~16.6 pieces: 49 batches a pass; 1,000 at least
    assert (t.pack, t.lr_scale, t.average_last) == (True, 0.7, 3)
    origin = "task text (sized to 6,000 pairs and 20,000 distinct words)"
    assert {run.origins[k] for k in ("config", "vocab_size", "train_steps", "warmup_steps",
                                     "batch_tokens", "checkpoint_every", "pack", "lr_scale",
                                     "average_last")} == {origin}
    assert describe.describe_short_run(run) is None
    short = resolver.resolve({"model_dir": str(tmp_path / "s"), "task": "text",
                              "train_src": str(tmp_path / "a.src"),
                              "train_tgt": str(tmp_path / "a.tgt"), "train_steps": 300})
    assert (short.training.train_steps, short.training.warmup_steps) == (300, 120)
    assert short.origins["warmup_steps"] == f"{origin}, for 300 steps"
    assert describe.describe_short_run(short) is None
    bigger = [line + " " + line for line in lines] * 10  # 60,000 pairs of 24 words
    (tmp_path / "b.tgt").write_text("\n".join(bigger) + "\n")
    (tmp_path / "b.src").write_text("\n".join(bigger) + "\n")
    t = resolver.resolve({"model_dir": str(tmp_path / "n"), "task": "text",
                          "train_src": str(tmp_path / "b.src"),
                          "train_tgt": str(tmp_path / "b.tgt")}).training
    assert (t.train_steps, t.warmup_steps, t.checkpoint_every) == (3800, 1520, 380)
    # 60,000 x (1.3 x 24 + 1) / 2,048 x 4 passes = 3,773: ten checkpoints of 380.
    flags = {"model_dir": str(tmp_path / "o"), "task": "text", "config": "base",
             "train_src": str(tmp_path / "a.src"), "train_tgt": str(tmp_path / "a.tgt")}
    assert resolver.resolve(flags).model.preset == "base"  # a preset given wins
    paper = resolver.resolve({**flags, "train_src": "missing.src", "config": None})
    assert (paper.model.preset, paper.data.vocab_size, paper.training.train_steps) == (
        "base", 32_000, 100_000)  # unreadable files (prepare names them): the paper's
def test_settings_of_earlier_versions_are_read(tmp_path):
    (tmp_path / "settings.json").write_text(json.dumps(
        {"task": "multi30k_ende", "beam_size": 2, "alpha": 1.0, "extra_length": 5,
         "training": {"accumulate_steps": 4}}))
    run = resolver.resolve({"model_dir": str(tmp_path)})
    beam = run.decoding.beam
    assert (beam.beam_size, beam.alpha, beam.extra_length) == (2, 1.0, 5)


@pytest.mark.quick
def test_corrupt_settings_and_bad_numbers_are_user_errors(tmp_path):
    (tmp_path / "settings.json").write_text("{not json")
    with pytest.raises(ModelDirError, match="settings.json: unreadable"):
        resolver.resolve({"model_dir": str(tmp_path)})
    for name in ("beam_size", "average_last", "checkpoint_every", "accumulate_steps"):
        with pytest.raises(ConfigError, match=f"--{name} 0: must be >= 1"):
            resolver.resolve({"model_dir": str(tmp_path / "new"), name: 0})
    with pytest.raises(ConfigError, match="--config: Unknown preset 'huge'"):
        resolver.resolve({"model_dir": str(tmp_path / "new"), "config": "huge"})


@pytest.mark.parametrize("given, message", [
    ({"checkpoint_every": 100, "dev_metric_every": 150},
     "--dev_metric_every 150 is not a multiple of --checkpoint_every 100"),
    ({"checkpoint_every": 10, "steps_per_execution": 3}, "--steps_per_execution 3 must divide"),
    ({"checkpoint_every": 10, "train_steps": 25, "steps_per_execution": 2},
     "--steps_per_execution 2 must divide"),
    ({"keep_checkpoints": 2, "average_last": 5}, "--keep_checkpoints 2 is below --average_last 5"),
    ({"config_override": {"dmodel": 64}}, "--config_override: dmodel is not a TransformerConfig"),
    ({"keep_best_by": "dev_metric"}, "--keep_best_by dev_metric needs --dev_metric_every N"),
    ({"early_stop_patience": 2}, "--early_stop_patience 2 needs --dev_metric_every N"),
    ({"early_stop_patience": -1}, "--early_stop_patience -1: must be >= 0"),
])
def test_training_flags_that_would_not_do_what_they_say(tmp_path, given, message):
    with pytest.raises(ConfigError, match=message):
        resolver.resolve({"model_dir": str(tmp_path), **given})
    # Steps per execution that divide both are fine.
    run = resolver.resolve({"model_dir": str(tmp_path), "checkpoint_every": 10,
                           "train_steps": 40, "steps_per_execution": 5})
    assert run.training.steps_per_execution == 5


def test_keep_best_by_and_patience_are_saved_run_controls(tmp_path):
    """Saved with the model, so a later `--mode average` averages the same way; a flag still
    wins (they change which weights are averaged and when training ends, not the model)."""
    trained = _trained(tmp_path, checkpoint_every=100, dev_metric_every=200,
                       keep_best_by="dev_metric", early_stop_patience=3)
    assert resolver.resolve({"model_dir": str(tmp_path)}) == trained
    assert (trained.training.keep_best_by, trained.training.early_stop_patience) == (
        "dev_metric", 3)
    run = resolver.resolve({"model_dir": str(tmp_path), "keep_best_by": "last",
                           "early_stop_patience": 0})
    assert (run.training.keep_best_by, run.training.early_stop_patience) == ("last", 0)
    fresh = resolver.resolve({"model_dir": str(tmp_path / "new")})
    assert (fresh.training.keep_best_by, fresh.training.early_stop_patience) == ("last", 0)


def test_a_preset_s_own_vocabulary_wins_over_the_task_s(tmp_path):
    """Precedence: flag > settings.json > the preset's own value > the task's > the paper's."""
    for given in ({"task": "ptb_parsing"}, {}):  # the WSJ task (16,000) and Multi30k (8,000)
        run = resolver.resolve({"model_dir": str(tmp_path / "p"), **given,
                               "config": "parsing_wsj_sample"})
        assert run.data.vocab_size == 4_000
        assert run.origins["vocab_size"] == "preset parsing_wsj_sample"
        assert "vocab_size 4000 (preset parsing_wsj_sample)" in describe.describe_origins(run)
    run = resolver.resolve({"model_dir": str(tmp_path / "p"), "config": "parsing_wsj_sample",
                           "vocab_size": 1000})
    assert (run.data.vocab_size, run.origins["vocab_size"]) == (1000, "flag")
    # `base` (and every Table 3 row) declares no vocabulary of its own: the task's applies,
    # not the paper's 37,000 that the dataclass default holds.
    run = resolver.resolve({"model_dir": str(tmp_path / "b"), "task": "ptb_parsing",
                           "config": "base"})
    assert (run.data.vocab_size, run.origins["vocab_size"]) == (16_000, "task ptb_parsing")
    # Once prepared, the model dir's value wins over the preset's.
    (tmp_path / "s").mkdir()
    md.save_settings(tmp_path / "s", {"format": 2, "task": "multi30k_ende", "vocab_size": 500})
    run = resolver.resolve({"model_dir": str(tmp_path / "s"), "config": "parsing_wsj_sample"})
    assert (run.data.vocab_size, run.origins["vocab_size"]) == (500, "settings.json")


def test_a_preset_s_positions_are_not_shrunk_to_the_task_s_lengths(tmp_path):
    """multi30k_small has 256 positions through run.py as through docs/library.md's Keras script
    (`TransformerConfig.preset`), though Multi30k sentences stop at 128 + 50 + EOS."""
    from keras_transformer import TransformerConfig

    run = resolver.resolve({"model_dir": str(tmp_path / "m")})
    config = options.config_for(run, 8_000)
    assert config.max_length == TransformerConfig.preset("multi30k_small").max_length == 256
    assert run.origins["max_length"] == "preset multi30k_small"
    # A preset without its own (base) gets enough for the task: 128 + 50 + EOS.
    run = resolver.resolve({"model_dir": str(tmp_path / "b"), "config": "base"})
    assert (run.model.max_length, run.origins["max_length"]) == (179, "task multi30k_ende")
    run = resolver.resolve({"model_dir": str(tmp_path / "o"),
                           "config_override": {"max_length": 300}})
    assert options.config_for(run, 8_000).max_length == 300
    # A trained model keeps the positions its config.json has.
    trained = tmp_path / "t"
    trained.mkdir()
    md.save_config(trained, TransformerConfig.preset("multi30k_small", max_length=179))
    md.final_weights(trained).write_bytes(b"weights")
    run = resolver.resolve({"model_dir": str(trained)})
    assert (run.model.max_length, run.origins["max_length"]) == (179, "config.json")


def test_every_value_has_an_origin_and_every_default_one_value(tmp_path):
    """What a run shows with its origin is every value it runs with; the paper's optimizer
    defaults of the library's API are the run's (`keras_transformer.schedules`)."""
    import inspect

    from keras_transformer import schedules

    run = resolver.resolve({"model_dir": str(tmp_path / "m")})
    decided = {name for name, value in run.values().items() if value is not None}
    assert decided <= set(run.origins), decided - set(run.origins)
    # Decided when training starts, and said there (`memory_check`): the RAM available.
    assert {name for name, value in run.values().items() if value is None} == {
        "memory_limit_mb"}
    paper = resolver.paper_layer()
    for function, names in [
            (schedules.NoamSchedule, {"warmup_steps": "warmup_steps"}),
            (schedules.paper_optimizer, {"warmup_steps": "warmup_steps",
                                         "epsilon": "adam_epsilon", "scale": "lr_scale"})]:
        defaults = inspect.signature(function).parameters
        for parameter, setting in names.items():
            assert defaults[parameter].default == (paper[setting] or False), (function,
                                                                               parameter)
    assert (run.training.warmup_steps, run.origins["warmup_steps"]) == (400, "task multi30k_ende")
    assert (run.training.adam_epsilon, run.origins["adam_epsilon"]) == (1e-9, "default")


def test_the_run_log_says_where_each_value_came_from(tmp_path, shared_data):
    from tests.pipelines.run_helpers import options_block, run_command

    result = run_command([f"--model_dir={tmp_path / 'm'}", "--config=parsing_wsj_sample",
                          "--mode=score", "--verbose"], shared_data, timeout=120)
    assert result.returncode == 2  # score needs --input: the log line comes before
    options_line = options_block(result.stderr)
    assert "vocab_size 4000 (preset parsing_wsj_sample)" in options_line
    assert "max_length 1024 (preset parsing_wsj_sample)" in options_line
    assert "config 'parsing_wsj_sample' (flag)" in options_line


def test_a_task_s_preset_change_goes_through_the_merge_with_its_origin(tmp_path):
    """WMT14 En->Fr's big model drops out 0.1 (Section 6.1): the task's change of the preset
    is a --config_override key below the flags', and the options block names where it came
    from; a flag's key wins, and another preset gets no change."""
    run = resolver.resolve({"model_dir": str(tmp_path / "b"), "task": "wmt14_enfr",
                            "config": "big", "config_override": {"num_layers": 2}})
    assert run.model.config_overrides == {"num_layers": 2, "dropout": 0.1}
    assert run.origins["config_override"] == "flag; dropout: task wmt14_enfr"
    assert options.config_for(run, 8_000).dropout == 0.1
    run = resolver.resolve({"model_dir": str(tmp_path / "f"), "task": "wmt14_enfr",
                            "config": "big", "config_override": {"dropout": 0.2}})
    assert (run.model.config_overrides, run.origins["config_override"]) == (
        {"dropout": 0.2}, "flag")
    run = resolver.resolve({"model_dir": str(tmp_path / "n"), "task": "wmt14_enfr"})
    assert (run.model.preset, run.model.config_overrides) == ("base", {})
