"""The one resolver: every value of a run from the flags, the model dir, the recipes and
the defaults, and the refusals of values that contradict them (see `pipelines.settings.options`
for the precedence and settings.json)."""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Mapping

from export.quantize import QUANTIZE_MODES
from keras_transformer import PRESETS, TransformerConfig
from keras_transformer.decoding import MAX_BEAM_SIZE, DecodingSettings, SamplingSettings
from pipelines.model_dir import init_from as init_lib
from pipelines.model_dir import layout as md
from pipelines.errors import ConfigError
from pipelines.settings import device_policy, table
from pipelines.settings.options import (SAMPLING_FLAGS, TASK_OPTIONS, DataOptions, EvalOptions,
                                        ExportOptions, IOOptions, ModelOptions, RunOptions,
                                        TrainingOptions)
from pipelines.settings.recipes import PRESET_RECIPES, TASK_RECIPES
from pipelines.tasks import Task, get_task


def _lookup(saved: Mapping[str, Any], path: tuple[str, ...]):
    """The value at `path` in settings.json, or KeyError."""
    value: Any = saved
    for key in path:
        if not isinstance(value, Mapping):
            raise KeyError(key)
        value = value[key]
    return value


def _show(value) -> str:
    return repr(value) if not isinstance(value, dict) else str(value or "{}")


def check_against_saved(given: Mapping[str, Any], saved: Mapping[str, Any], model_dir: str,
                        override_saved: bool = False) -> None:
    """Raises ConfigError for the first flag that contradicts settings.json (module doc).

    The model and training settings bind once a checkpoint exists: until then (a first run
    stopped by the memory check, say) they may still change.
    """
    trained = md.has_weights(model_dir)
    for name, row in table.saved_rows().items():
        path, kind = row.saved, row.binding
        if name not in given or kind == table.FREE:
            continue
        if path[0] in ("model", "training") and not trained:
            continue
        try:
            value = _lookup(saved, path)
        except KeyError:
            continue
        if given[name] == value or (kind == table.DECODING and override_saved):
            continue
        remedy = ("pass --override_saved to decode differently, or drop the flag"
                  if kind == table.DECODING else
                  "drop the flag to continue this model, or give a new --model_dir")
        raise ConfigError(
            f"--{name} {_show(given[name])} differs from {_show(value)}, what "
            f"{os.path.join(model_dir, md.SETTINGS_FILE)} says this model was trained with; "
            f"{remedy}")


def resolve(given: Mapping[str, Any], *,
            device: device_policy.Device | None = None) -> RunOptions:
    """The run's options from the flags the user gave (`given`, name -> value).

    Args:
        given: flag values the user set; flags left out take the saved, task or paper value.
        device: what training runs on (`device_policy.detect()`), which decides the
            defaults of mixed_precision, the dtype policy it means, and jit_compile; None:
            a CPU without bfloat16 instructions.
    Raises:
        ConfigError: a flag contradicts the model directory, or names an unknown preset.
        ModelDirError: settings.json is unreadable.
        DataError: an unknown task or task option.
    """
    table.check_bounds(given)
    model_dir = given.get("model_dir") or os.path.join("runs", given.get("task")
                                                       or table.default("task"))
    saved = md.load_settings(model_dir)
    check_against_saved(given, saved, model_dir, bool(given.get("override_saved")))
    md.check_vocabulary(model_dir, saved.get("spm_sha256"))
    init = init_lib.resolve(given, model_dir, saved)

    def from_source(name: str) -> tuple[str, Any]:
        """(origin, value) of a model flag in the --init_from source (None without one)."""
        return "init_from", init and init.model_default(name)

    origins: dict[str, str] = {}

    def value(name: str):
        """The flag, else the table's default (a setting no model dir or recipe decides)."""
        return given[name] if given.get(name) is not None else table.default(name)

    def pick(name: str, *defaults: tuple[str, Any]):
        """The flag, else settings.json's value, else the first of `defaults` ((origin,
        value), in order of precedence) that is not None; records the value's origin."""
        if given.get(name) is not None:
            origins[name] = "flag"
            return given[name]
        if table.TABLE[name].saved:
            try:
                value = _lookup(saved, table.TABLE[name].saved)
                origins[name] = md.SETTINGS_FILE
                return value
            except KeyError:
                pass
        for origin, value in defaults:
            if value is not None:
                break
        origins[name] = origin
        return value

    task_options = dict(saved.get("task_options") or {})
    task_options.update({k: given[k] for k in TASK_OPTIONS if given.get(k) is not None})
    task = get_task(pick("task", ("default", table.default("task"))), **task_options)
    from_task = f"task {task.name}"
    model = ModelOptions(preset=pick("config", from_source("config"), (from_task, task.preset)),
                         config_overrides=dict(pick("config_override",
                                                    from_source("config_override"),
                                                    ("default", {}))))
    recipe, from_preset = PRESET_RECIPES.get(model.preset, {}), f"preset {model.preset}"
    task_recipe = TASK_RECIPES.get(task.name, {})

    def recipe_default(name: str, *later: tuple[str, Any]):
        """pick() with the preset's recipe, then the task's, before `later` defaults."""
        return pick(name, (from_preset, recipe.get(name)), (from_task, task_recipe.get(name)),
                    *later)

    for name in task.content_options():  # a recipe may say what the task is (parsing's form)
        if name not in task_options and name in recipe:
            task_options[name] = recipe_default(name)
            task = get_task(task.name, **task_options)
    try:
        preset = TransformerConfig.preset(model.preset)
    except ValueError as e:
        raise ConfigError(f"--config: {e}") from None
    declared = PRESETS[model.preset]
    data = DataOptions(task=task.name, task_options={**task_options, **task.content_options()},
                       vocab_size=pick("vocab_size", from_source("vocab_size"),
                                       (from_preset, declared.get("vocab_size")),
                                       (from_task, task.vocab_size)))
    unknown = set(model.config_overrides) - {f.name for f in dataclasses.fields(TransformerConfig)}
    if unknown:
        raise ConfigError(f"--config_override: {', '.join(sorted(unknown))} is not a "
                          f"TransformerConfig field (see keras_transformer/config.py)")
    try:  # the model's width, which the XLA default depends on
        d_model = TransformerConfig.preset(model.preset, **model.config_overrides).d_model
    except (ValueError, TypeError) as e:
        raise ConfigError(f"--config {model.preset} with --config_override "
                          f"{model.config_overrides}: {e}") from None
    device = device or device_policy.Device()

    def training_default(name: str) -> tuple[str, Any]:
        for origin, source in ((from_preset, recipe), (from_task, task_recipe)):
            if name in source:
                return origin, source[name]
        if name == "train_steps":
            return from_preset, preset.train_steps
        if name == "mixed_precision":
            policy, why = device_policy.precision(device)
            return f"device: {why}", policy != "float32"
        if name == "jit_compile":
            mixed = pick("mixed_precision", training_default("mixed_precision"))
            policy = device_policy.mixed_policy(device) if mixed else "float32"
            on, why = device_policy.jit_compile(device, d_model, policy)
            return f"device: {why}", on
        return "default", table.default(name)

    training = TrainingOptions(**{f.name: pick(f.name, training_default(f.name))
                                  for f in dataclasses.fields(TrainingOptions)
                                  if f.name != "precision_policy"})
    if device.backend != "tensorflow" and given.get("jit_compile") is None:
        # What settings.json says is TensorFlow's choice; under JAX not compiling would run
        # every op eagerly. Only the flag turns it off.
        on, why = device_policy.jit_compile(device, d_model, "float32")
        training = dataclasses.replace(training, jit_compile=on)
        origins["jit_compile"] = f"device: {why}"
    # --mixed_precision says whether; the device says which mixed policy.
    training = dataclasses.replace(training, precision_policy=(
        device_policy.mixed_policy(device) if training.mixed_precision else "float32"))
    origins["precision_policy"] = origins["mixed_precision"]

    _check_training(training)
    init_lib.check_training(init, training.train_steps, training.accumulate_steps)
    if value("n_best") > MAX_BEAM_SIZE:
        raise ConfigError(f"--n_best {given['n_best']}: at most {MAX_BEAM_SIZE}, the largest "
                          f"beam the translate_with_options function accepts")
    task_decoding = task.decoding_defaults()
    decoding = DecodingSettings(**{name: recipe_default(name, (from_task, getattr(
        task_decoding, name))) for name in ("beam_size", "alpha", "extra_length",
                                            "max_input_length", "stop_rule")},
        # bfloat16 only after bfloat16 training: DecodingSettings has no float16.
        precision=pick("decode_precision", ("default", "bfloat16" if training.precision_policy
                                            == "mixed_bfloat16" else "float32")))
    model = dataclasses.replace(model, max_length=_max_length(
        model, declared, task, decoding, model_dir, origins, init))
    return RunOptions(
        model_dir=model_dir, data=data, model=model, training=training, decoding=decoding,
        evaluation=EvalOptions(
            split=recipe_default("eval_split", ("default", table.default("eval_split"))),
            sentences=value("eval_sentences"),
            # XLA's CPU backend does not use bfloat16 hardware: without it bfloat16 decodes
            # faster (benchmarks/compare_peers.py); float32 decodes faster with it.
            jit_compile=pick("decode_jit_compile",
                             ("default", decoding.precision == "float32")),
            checkpoint=given.get("checkpoint")),
        export=ExportOptions(export_dir=given.get("export_dir"),
                             version=given.get("export_version"),
                             overwrite=value("overwrite_export"),
                             jit_compile=value("export_jit_compile"),
                             check_ops=value("check_ops"),
                             quantize=_quantize(given), format=_export_format(given)),
        io=IOOptions(input=given.get("input"), output=given.get("output"),
                     target=given.get("target"), plot_attention=given.get("plot_attention"),
                     n_best=value("n_best"), with_scores=value("with_scores"),
                     with_alignment=value("with_alignment"),
                     prefix_file=given.get("prefix_file"), terms_file=given.get("terms")),
        # Progress bars on a terminal; in a file or pipe a plain line per epoch (checkpoint).
        verbose=given.get("verbose", 1 if sys.stderr.isatty() else 2), init=init,
        sampling=_sampling(given, training.seed), origins=origins)


def _quantize(given: Mapping[str, Any]) -> str | None:
    """--quantize, checked against `export.quantize.QUANTIZE_MODES` (None: not given)."""
    value = given.get("quantize")
    if value is not None and value not in QUANTIZE_MODES:
        raise ConfigError(f"--quantize {value!r}: must be {' or '.join(QUANTIZE_MODES)}, or "
                          f"left out for the weights as trained")
    return value


def _export_format(given: Mapping[str, Any]) -> str:
    """--format; ctranslate2 only where the optional extra is installed (checked here,
    before any stage runs) and without --quantize (CTranslate2 quantizes when it loads)."""
    from export import ctranslate2

    value = given.get("format") or table.default("format")
    if value == "ctranslate2" and not ctranslate2.available():
        raise ConfigError(ctranslate2.missing_message())
    if value == "ctranslate2" and given.get("quantize") is not None:
        raise ConfigError("--quantize: not with --format ctranslate2 (CTranslate2 quantizes "
                          "when it loads: ctranslate2.Translator(..., compute_type='int8'))")
    return value


def _sampling(given: Mapping[str, Any], seed: int) -> SamplingSettings | None:
    """The translate stage's sampling settings when a `SAMPLING_FLAGS` flag is given (the
    others default to no cut and temperature 1), seeded by --seed (the training seed's
    resolution: flag > settings.json > 0); None otherwise (beam search)."""
    if all(given.get(name) is None for name in SAMPLING_FLAGS):
        return None
    topp, temperature = given.get("sampling_topp"), given.get("sampling_temperature")
    if not -2 ** 63 <= seed < 2 ** 63:
        raise ConfigError(f"--seed {seed}: sampling needs a 64-bit seed")
    return SamplingSettings(topk=given.get("sampling_topk") or 0,
                            topp=1.0 if topp is None else topp,
                            temperature=1.0 if temperature is None else temperature, seed=seed)


def _max_length(model: ModelOptions, declared: Mapping[str, Any], task: Task,
                decoding: DecodingSettings, model_dir: str, origins: dict[str, str],
                init: init_lib.InitFrom | None = None) -> int:
    """The model's positions (`TransformerConfig.max_length`), by the module's precedence:
    --config_override, a trained model's config.json (or its --init_from source's), the
    preset's own, else enough for the
    task's longest sentence and longest output (source + extra_length + EOS)."""
    trained = (md.has_weights(model_dir)
               and os.path.isfile(os.path.join(model_dir, md.CONFIG_FILE)))
    candidates = (
        (origins["config_override"], model.config_overrides.get("max_length")),
        (md.CONFIG_FILE, md.load_config(model_dir).max_length if trained else None),
        ("init_from", init.config.max_length if init and init.pending else None),
        (f"preset {model.preset}", declared.get("max_length")),
        (f"task {task.name}", max(task.max_length,
                                  task.max_source_length + decoding.extra_length + 1)))
    origin, value = next((o, v) for o, v in candidates if v is not None)
    origins["max_length"] = origin
    return int(value)


def _check_training(t: TrainingOptions) -> None:
    """Refuses training settings that would not do what they say."""
    if t.keep_checkpoints < t.average_last:
        raise ConfigError(f"--keep_checkpoints {t.keep_checkpoints} is below --average_last "
                          f"{t.average_last}: averaging could only use {t.keep_checkpoints}; "
                          f"keep at least as many as you average")
    for name, value, active in (("keep_best_by", t.keep_best_by, t.keep_best_by != "last"),
                                ("early_stop_patience", t.early_stop_patience,
                                 t.early_stop_patience > 0)):
        if active and not t.dev_metric_every:
            raise ConfigError(f"--{name} {value} needs --dev_metric_every N (steps between "
                              f"dev-metric evaluations, a multiple of --checkpoint_every): "
                              f"without it there is no dev metric to go by")
    if t.dev_metric_every % t.checkpoint_every:
        raise ConfigError(f"--dev_metric_every {t.dev_metric_every} is not a multiple of "
                          f"--checkpoint_every {t.checkpoint_every}: the dev metric runs when a "
                          f"checkpoint is written")
    batches = t.checkpoint_every * t.accumulate_steps
    if batches % t.steps_per_execution or (t.train_steps * t.accumulate_steps
                                           ) % t.steps_per_execution:
        raise ConfigError(
            f"--steps_per_execution {t.steps_per_execution} must divide the batches between "
            f"checkpoints ({batches}: --checkpoint_every x --accumulate_steps) and of the "
            f"whole run ({t.train_steps * t.accumulate_steps}): Keras runs whole chunks, so "
            f"checkpoints would be skipped and --train_steps overshot")
