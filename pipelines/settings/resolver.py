"""The resolver: the run's `Recipe` from layers of settings merged once, each value with its
origin; then the derived settings and the refusal of flags that contradict the model dir."""

import dataclasses
import importlib.util
import os
import sys
from typing import Any, Mapping

from keras_transformer import learning_rate
from keras_transformer.config import PRESETS, TRAINING_FIELDS, TransformerConfig
from keras_transformer.decoding import MAX_BEAM_SIZE, BeamSearch, Sampling
from keras_transformer.model_dir import CONFIG_FILE, SETTINGS_FILE, check_vocabulary
from pipelines.durations import format_duration
from pipelines.model_dir import layout as md
from pipelines.errors import ConfigError
from pipelines.settings import device_policy, init_from as init_lib, table
from pipelines.settings.recipes import PRESET_RECIPES
from pipelines.settings.options import (SAMPLING_FLAGS, SCORED_FILES, TASK_OPTIONS, TRAINING_FILES,
                                        AverageOptions, DataOptions, DecodingOptions, EvalOptions,
                                        ExportOptions, IOOptions, ModelOptions, Recipe,
                                        TrainingOptions, place)
from pipelines.tasks import Task, get_task
from pipelines.tasks.registry import task_options

CHOSEN_ON_DEV = "chosen on dev"

Layer = tuple[str, Mapping[str, Any]]
"""(origin, {setting: value}) by the table's names and `max_length`; a None value says nothing."""


def fill(values: dict[str, Any], origins: dict[str, str], layer: Layer) -> None:
    """The merge's step, from the highest layer down: `layer` gives what no higher layer gave,
    of a dict setting (--config_override) the keys no higher layer gave, named in its origin."""
    origin, settings = layer
    for name, value in settings.items():
        if value is None:
            continue
        if name not in values:
            values[name], origins[name] = value, origin
        elif isinstance(value, dict) and value.keys() - values[name].keys():
            added = {k: v for k, v in value.items() if k not in values[name]}
            values[name] = {**values[name], **added}
            origins[name] = f"{origins[name]}; {', '.join(added)}: {origin}"


def resolve(given: Mapping[str, Any], *,
            device: device_policy.Device | None = None) -> Recipe:
    """The run's recipe from the flags (`given`), layers merged by precedence (`options`);
    `device`: what trains (None: a CPU without bfloat16). Raises ConfigError (a flag contradicts
    the model dir), ModelDirError (settings.json unreadable) or DataError (unknown task)."""
    table.check_bounds(given)
    model_dir = given.get("model_dir") or os.path.join(
        md.RUNS_DIR, given.get("task") or table.default("task"))
    saved = md.load_settings(model_dir)
    check_vocabulary(model_dir, saved.get("spm_sha256"))
    init = init_lib.resolve(given, model_dir, saved)
    flags = _flag_layer(given)
    check_against_saved(flags, saved, model_dir)
    test_files = _scored_files(flags, saved, model_dir)
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for layer in (("flag", flags), (SETTINGS_FILE, _saved_layer(saved)),
                  (CONFIG_FILE, _config_layer(model_dir)),
                  ("init_from", init.model_layer() if init else {}),
                  _plan_layer(given, model_dir)):
        fill(values, origins, layer)
    task = _task_and_preset(values, origins)
    fill(values, origins, ("default", paper_layer()))
    for name, value in md.load_dev_choice(model_dir).get("chosen", {}).items():
        if origins.get(name) == SETTINGS_FILE and values.get(name) == value:
            origins[name] = CHOSEN_ON_DEV
    _derive(values, origins, task, device or device_policy.Device())
    values.update(config_override=dict(values.get("config_override") or {}),
                  average_checkpoints=tuple(values.get("average_checkpoints") or ()))
    sections: dict[str, dict] = {}  # the values at their rows' `section` paths
    for row in table.SETTINGS:
        if row.section:
            place(sections, row.section, values.get(row.name))
    training = TrainingOptions(**sections["training"],
                               precision_policy=values["precision_policy"])
    _check_training(training, values["n_best"])
    init_lib.check_training(init, training.train_steps, training.accumulate_steps)
    sections["export"]["format"] = _export_format(values)
    decoding = sections["decoding"]
    return Recipe(
        model_dir=model_dir,
        data=DataOptions(**sections["data"], task_options=_given_task_options(values)),
        model=ModelOptions(**sections["model"], max_length=int(values["max_length"])),
        training=training, decoding=DecodingOptions(
            BeamSearch(**decoding.pop("beam")), **decoding, sampling=_sampling(values)),
        evaluation=EvalOptions(**sections["evaluation"], test_files=test_files),
        average=AverageOptions(**sections["average"]), export=ExportOptions(**sections["export"]),
        io=IOOptions(**sections["io"]),
        progress=1 if sys.stderr.isatty() else 2, init=init,  # a bar, or a line per epoch
        origins=origins, task=task, scored_task=get_task(
            task.name, **{**_given_task_options(values), **test_files}) if test_files else task)


def _task_and_preset(values: dict[str, Any], origins: dict[str, str]) -> Task:
    """Builds the task once and merges the preset's and task's layers under the others. A named
    preset's recipe may say what the task is (parsing's target form), so it comes first."""
    named, name = values.get("config"), values.get("task") or table.default("task")
    if named:  # of what says what a task is, only what this task takes
        takes = task_options(name)
        fill(values, origins, (f"preset {named}", {
            k: v for k, v in _preset_layer(named).items()
            if k not in TASK_OPTIONS or k in takes}))
    task = get_task(name, **_given_task_options(values))
    if not named:
        fill(values, origins, (f"preset {task.preset}", _preset_layer(task.preset)))
    fill(values, origins, (task.origin, _task_layer(task, values.get("config") or task.preset)))
    return task


def _given_task_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """The task options the merged layers give (a task is built from them)."""
    return {k: values[k] for k in TASK_OPTIONS if k in values}


def _scored_files(flags: dict[str, Any], saved: Mapping[str, Any], model_dir: str) -> dict:
    """Takes out of `flags` the test files (`SCORED_FILES`) a trained model dir scores once."""
    if not md.has_weights(model_dir):
        return {}
    saved_options = saved.get("task_options") or {}
    return {k: flags.pop(k) for k in SCORED_FILES
            if flags.get(k) is not None and flags[k] != saved_options.get(k)}


def paper_layer() -> dict[str, Any]:
    """The paper's and the tool's defaults: the table's, and the library's optimizer and search."""
    return {**{row.name: row.default for row in table.SETTINGS if row.option},
            "warmup_steps": learning_rate.WARMUP_STEPS, "adam_epsilon": learning_rate.ADAM_EPSILON,
            "config_override": {}, **dataclasses.asdict(BeamSearch())}


def _task_layer(task: Task, preset: str) -> dict[str, Any]:
    """What the task brings: preset (and what it changes in `preset`), vocabulary, decoding
    (sources cut as in training), recipe."""
    return {"config": task.preset, "config_override": task.preset_overrides.get(preset),
            "vocab_size": task.vocab_size,
            **dataclasses.asdict(task.decoding), "max_input_length": task.max_source_length,
            **task.recipe, **task.content_options()}


def _plan_layer(given: Mapping[str, Any], model_dir: str) -> Layer:
    """The steps a --time_budget run planned (pipelines/training/plan.py)."""
    if given.get("time_budget") and given.get("train_steps") is not None:
        raise ConfigError(f"--train_steps {given['train_steps']}: --time_budget plans the "
                          f"steps; give one or the other")
    plan = md.load_plan(model_dir)
    return (f"plan for {format_duration(plan['budget'])}", plan["settings"]) if plan \
        else ("plan", {})


def _preset_layer(name: str) -> dict[str, Any]:
    """What the preset declares: its own vocabulary and positions, and its recipe."""
    if name not in PRESETS:
        raise ConfigError(f"--config: Unknown preset {name!r}; choose one of: "
                          f"{', '.join(PRESETS)}")
    model = PRESETS[name]
    return {"vocab_size": model.get("vocab_size"), "max_length": model.get("max_length"),
            **PRESET_RECIPES.get(name, {})}


def _config_layer(model_dir: str) -> dict[str, Any]:
    """A trained model's positions, from its config.json."""
    trained = md.has_weights(model_dir) and os.path.isfile(os.path.join(model_dir, CONFIG_FILE))
    return {"max_length": md.read_config(model_dir).max_length} if trained else {}


def _saved_layer(saved: Mapping[str, Any]) -> dict[str, Any]:
    """settings.json's values by `saved` path (older dirs: training fields from overrides)."""
    layer = {}
    for name, row in table.saved_rows().items():
        try:
            layer[name] = _lookup(saved, row.saved)
        except KeyError:
            pass
    overrides = dict(layer.get("config_override") or {})
    layer.update({name: overrides.pop(name) for name in TRAINING_FIELDS if name in overrides})
    if "config_override" in layer:
        layer.update(config_override=overrides, max_length=overrides.get("max_length"))
    return layer


def _flag_layer(given: Mapping[str, Any]) -> dict[str, Any]:
    """The flags, and the positions a --config_override max_length sets."""
    return {**{k: v for k, v in given.items() if k in table.TABLE},
            "max_length": (given.get("config_override") or {}).get("max_length")}


def _default(values: dict, origins: dict, name: str, origin: str, value) -> None:
    """Sets `name` to `value` from `origin` where no layer gave it."""
    if values.get(name) is None:
        values[name], origins[name] = value, origin


def _derive(values: dict, origins: dict, task: Task, device: device_policy.Device) -> None:
    """Fills in what no layer gave: max_length, the device's choices, the decode precision."""
    _default(values, origins, "max_length", task.origin, max(
        task.max_length, task.max_source_length + values["extra_length"] + 1))
    _follow_train_steps(values, origins, task)
    policy, why = device_policy.precision(device)
    _default(values, origins, "mixed_precision", f"device: {why}", policy != "float32")
    # --mixed_precision says whether; the device says which mixed policy.
    values["precision_policy"] = (device_policy.mixed_policy(device)
                                  if values["mixed_precision"] else "float32")
    origins["precision_policy"] = origins["mixed_precision"]
    d_model = _d_model(values)
    on, why = device_policy.jit_compile(device, d_model, values["precision_policy"])
    _default(values, origins, "jit_compile", f"device: {why}", on)
    if device.backend != "tensorflow" and origins["jit_compile"] != "flag":
        # settings.json holds TensorFlow's choice; under JAX only the flag turns XLA off.
        on, why = device_policy.jit_compile(device, d_model, "float32")
        values["jit_compile"], origins["jit_compile"] = on, f"device: {why}"
    # bfloat16 decoding only after bfloat16 training; then no XLA, whose CPU kernels ignore it.
    _default(values, origins, "decode_precision", "default",
             "bfloat16" if values["precision_policy"] == "mixed_bfloat16" else "float32")
    _default(values, origins, "decode_jit_compile", "default",
             values["decode_precision"] == "float32")


def _follow_train_steps(values: dict, origins: dict, task: Task) -> None:
    """A sized task's warm-up follows --train_steps given above it (its fraction of the run)."""
    if origins.get("warmup_steps") != task.origin or origins.get("train_steps") == task.origin:
        return
    warmup = task.warmup_for(values["train_steps"])
    if warmup is not None:
        values["warmup_steps"] = warmup
        origins["warmup_steps"] = f"{task.origin}, for {values['train_steps']:,} steps"


def _d_model(values: Mapping[str, Any]) -> int:
    """The model's width (what the XLA default reads), checking the config overrides."""
    overrides = dict(values.get("config_override") or {})
    unknown = set(overrides) - {f.name for f in dataclasses.fields(TransformerConfig)}
    if unknown:
        raise ConfigError(f"--config_override: {', '.join(sorted(unknown))} is not a "
                          f"TransformerConfig field (see keras_transformer/config.py)")
    try:
        return TransformerConfig.preset(values["config"], **overrides).d_model
    except (ValueError, TypeError) as e:
        raise ConfigError(f"--config {values['config']} with --config_override "
                          f"{overrides}: {e}") from None


def _sampling(values: Mapping[str, Any]) -> Sampling | None:
    """Translate's `Sampling` when a `SAMPLING_FLAGS` flag is given; None: beam search."""
    chosen = {name.removeprefix("sampling_"): values[name] for name in SAMPLING_FLAGS
              if values.get(name) is not None}
    if chosen and not -2 ** 63 <= values["seed"] < 2 ** 63:
        raise ConfigError(f"--seed {values['seed']}: sampling needs a 64-bit seed")
    return Sampling(**chosen, seed=values["seed"], alpha=values["alpha"],
                    extra_length=values["extra_length"]) if chosen else None


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


def check_against_saved(flags: Mapping[str, Any], saved: Mapping[str, Any],
                        model_dir: str) -> None:
    """ConfigError for the first flag that contradicts a FIXED row of settings.json (model and
    training rows only once a checkpoint exists)."""
    trained = md.has_weights(model_dir)
    for name, row in table.saved_rows().items():
        if flags.get(name) is None or row.binding != table.FIXED:
            continue
        if (row.saved[0] in ("model", "training") or name in TRAINING_FILES) and not trained:
            continue
        try:
            value = _lookup(saved, row.saved)
        except KeyError:
            continue
        if flags[name] != value:
            remedy = ("; to train on other files, fine-tune into a new dir: --init_from "
                      f"{model_dir} --model_dir NEW" if name in TRAINING_FILES else "")
            raise ConfigError(
                f"--{name} {_show(flags[name])} differs from {_show(value)}, what "
                f"{os.path.join(model_dir, SETTINGS_FILE)} says this model was trained "
                f"with; drop the flag to continue this model, or give a new --model_dir"
                f"{remedy}")


def _export_format(values: Mapping[str, Any]) -> str:
    """--format; ctranslate2 needs its optional extra installed, and no --quantize."""
    value = values["format"]
    if value == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
        raise ConfigError('--format ctranslate2 needs the ctranslate2 package: pip install -e '
                          '".[ctranslate2]"')
    if value == "ctranslate2" and values.get("quantize") is not None:
        raise ConfigError("--quantize: not with --format ctranslate2 (CTranslate2 quantizes "
                          "when it loads: ctranslate2.Translator(..., compute_type='int8'))")
    return value


def _check_training(t: TrainingOptions, n_best: int) -> None:
    """Refuses settings that would not do what they say."""
    if n_best > MAX_BEAM_SIZE:
        raise ConfigError(f"--n_best {n_best}: at most {MAX_BEAM_SIZE}, the largest beam the "
                          f"translate_with_options function accepts")
    if t.label_smoothing >= 1:
        raise ConfigError(f"--label_smoothing {t.label_smoothing}: must be below 1")
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
