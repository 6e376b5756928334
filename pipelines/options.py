"""What a run does, grouped, and the one resolver that decides every value.

Precedence, for every setting: the flag > the model directory's settings.json (config.json
for the model's max_length) > the preset > the task's default > the paper's (or the tool's).
A preset speaks for the model it describes, so only what it declares counts, and only for
the model's size: its own `vocab_size` and `max_length` (`keras_transformer.config.PRESETS`;
`base` and the Table 3 rows declare neither, so the task's vocabulary and lengths apply). The
task's length limits filter its data; they never shrink a preset's positions. A preset's
`train_steps` is the paper's length for that model, the last default after the task's. Where
each value came from is kept (`RunOptions.origins`) and logged (`describe_origins`).
The defaults of mixed_precision and training's jit_compile are the device's
(`pipelines.device_policy`), logged with why (`describe_device`).
A fine-tuned model dir (`--init_from`, `pipelines.init_from`) takes its model (preset,
overrides, vocabulary size, max_length) from its source, where a flag may only agree.

After training, the model directory is the truth:
a flag that contradicts what the model was trained with stops the run with one line
(`ConfigError`), never silently wins or loses. Decoding settings may be changed for
evaluate/translate/export with `--override_saved`; they are never written back.

settings.json (format 2) holds what the first stages decided:

    {"format": 2, "task": ..., "task_options": {...}, "vocab_size": ...,        # prepare
     "model": {"preset": ..., "config_overrides": {...}},                     # train
     "training": {"train_steps": ..., "batch_tokens": ..., ...},
     "decoding": {"beam_size": ..., "alpha": ..., "extra_length": ...,
                  "max_input_length": ..., "precision": ...},
     "init_from": {"model_dir": ..., "weights_sha256": ..., ...}}          # fine-tuned only
"""
from __future__ import annotations

import dataclasses
import sys
import os
from typing import Any, Mapping

from export.quantize import QUANTIZE_MODES
from keras_transformer import PRESETS, TransformerConfig
from keras_transformer.decoding import MAX_BEAM_SIZE, DecodingSettings, SamplingSettings
from pipelines import device_policy
from pipelines.errors import ConfigError
from pipelines.model_dir import init_from as init_lib
from pipelines.model_dir import layout as md
from pipelines.tasks import Task, get_task

DEFAULT_TASK = "multi30k_ende"
SETTINGS_FORMAT = 2

# The paper's training settings (Section 5): ~25,000 source and target tokens per batch,
# warm-up 4,000 steps, Eq. 3 unscaled; checkpoints every 1,000 steps (~10 min on 8 P100s);
# the last 5 averaged (base; 20 for big). The rest are the tool's defaults.
TRAINING_DEFAULTS: dict[str, Any] = {
    "batch_tokens": 25_000, "warmup_steps": 4_000, "lr_scale": 1.0, "checkpoint_every": 1_000,
    "average_last": 5, "accumulate_steps": 1, "keep_checkpoints": 20, "seed": 0,
    "steps_per_execution": 1, "dev_metric_every": 0,
    "dev_metric_sentences": 200, "memory_limit_mb": None, "keep_best_by": "last",
    "early_stop_patience": 0, "pack": False,
}

# Departures for corpora far smaller than WMT, so that a CPU run finishes in minutes: the
# default job (`python pipelines/run.py`) is Multi30k with these.
TASK_TRAINING_DEFAULTS: dict[str, dict[str, Any]] = {
    "multi30k_ende": {"train_steps": 1000, "batch_tokens": 2048, "warmup_steps": 1000,
                      "checkpoint_every": 100},
}

# The paper's per-task departures from a preset (Section 6.1: "The Transformer (big) model
# trained for English-to-French used dropout rate P_drop = 0.1, instead of 0.3").
TASK_PRESET_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    ("wmt14_enfr", "big"): {"dropout": 0.1},
}

TASK_OPTION_FLAGS = ("data_dir", "manual_dir", "train_src", "train_tgt", "dev_src", "dev_tgt",
                     "test_src", "test_tgt", "train_trees", "dev_trees", "test_trees",
                     "target_form")
"""Flags that become task options. Those saying where the data is may change between runs
(data moves); the others say what the task is and are fixed once prepared."""
TASK_CONTENT_OPTIONS = ("target_form",)

FIXED = "fixed"        # what the model is: a different value needs a new model dir
DECODING = "decoding"  # how it decodes: a different value needs --override_saved
FREE = "free"          # how this run goes: the flag wins, the saved value is the default

SAVED_FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "task": (("task",), FIXED),
    **{name: (("task_options", name), FIXED) for name in TASK_CONTENT_OPTIONS},
    "vocab_size": (("vocab_size",), FIXED),
    "config": (("model", "preset"), FIXED),
    "config_override": (("model", "config_overrides"), FIXED),
    "accumulate_steps": (("training", "accumulate_steps"), FIXED),
    "batch_tokens": (("training", "batch_tokens"), FIXED),
    "warmup_steps": (("training", "warmup_steps"), FIXED),
    "lr_scale": (("training", "lr_scale"), FIXED),
    **{name: (("training", name), FREE) for name in (
        "train_steps", "checkpoint_every", "keep_checkpoints", "average_last", "seed",
        "jit_compile", "mixed_precision", "steps_per_execution", "dev_metric_every",
        "dev_metric_sentences", "keep_best_by", "early_stop_patience", "pack")},
    **{name: (("decoding", name), DECODING) for name in (
        "beam_size", "alpha", "extra_length", "max_input_length", "stop_rule")},
    "decode_precision": (("decoding", "precision"), DECODING),
}
"""Flag -> (where settings.json keeps its value, how a differing flag is treated)."""

RECORDED_TRAINING = ("precision_policy",)
"""Training options written to settings.json for the record but never read back: each run
derives them anew (the dtype policy from --mixed_precision and the device it runs on)."""


AT_LEAST = {**{name: 1 for name in (
    "vocab_size", "train_steps", "batch_tokens", "accumulate_steps", "warmup_steps",
    "checkpoint_every", "keep_checkpoints", "average_last", "steps_per_execution",
    "num_cpu_devices", "beam_size", "max_input_length", "memory_limit_mb", "n_best")},
    **{name: 0 for name in ("lr_scale", "alpha", "extra_length", "dev_metric_every",
                            "dev_metric_sentences", "eval_sentences", "export_version", "seed",
                            "early_stop_patience", "sampling_topk")}}
"""Lower bounds of numeric flags, checked before anything runs (both CLIs)."""

SAMPLING_FLAGS = ("sampling_topk", "sampling_topp", "sampling_temperature")
"""Any of these makes translate sample (`keras_transformer.decoding.sampling`) instead of beam search."""


def check_bounds(given: Mapping[str, Any]) -> None:
    """Raises ConfigError for the first numeric flag below its bound (`AT_LEAST`)."""
    for name, low in AT_LEAST.items():
        value = given.get(name)
        if value is not None and value < low:
            raise ConfigError(f"--{name} {value}: must be >= {low}")


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """Which task, where its data is, and the shared vocabulary size."""

    task: str
    task_options: dict
    vocab_size: int


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """The preset, the config fields overriding it, and the resolved `max_length` of a new
    model (before config.json exists; after, config.json's)."""

    preset: str
    config_overrides: dict
    max_length: int = TransformerConfig.max_length


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """The training run: schedule, batches, checkpoints, precision, dev metric."""

    train_steps: int
    batch_tokens: int
    accumulate_steps: int
    warmup_steps: int
    lr_scale: float
    checkpoint_every: int
    keep_checkpoints: int
    average_last: int
    seed: int
    jit_compile: bool
    mixed_precision: bool
    steps_per_execution: int
    dev_metric_every: int
    dev_metric_sentences: int
    memory_limit_mb: int | None
    keep_best_by: str          # "last" or "dev_metric": which checkpoints are averaged
    early_stop_patience: int   # dev-metric evaluations without improvement; 0: never stop
    pack: bool = False         # several pairs per row (pipelines.packing), not buckets
    precision_policy: str = "float32"  # Keras dtype policy: mixed_precision on this device


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """What the evaluate stage scores and how it compiles the search."""

    split: str = "test"
    sentences: int = 0        # 0: the whole split
    jit_compile: bool = False
    checkpoint: str | None = None  # "ckpt-N": decode this checkpoint, not final.weights.h5


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """Where and how the export stage writes the SavedModel."""

    export_dir: str | None = None
    version: int | None = None
    overwrite: bool = False
    jit_compile: bool = False
    check_ops: bool = True
    quantize: str | None = None  # "int8": int8 matrices (export.quantize); None: as trained
    format: str = "saved_model"  # or "ctranslate2" (export/ctranslate2.py)


@dataclasses.dataclass(frozen=True)
class IOOptions:
    """The translate and score stages' files (None: stdin/stdout)."""

    input: str | None = None
    output: str | None = None
    target: str | None = None  # score: the translations to score, line by line with input
    plot_attention: str | None = None
    n_best: int = 1            # translate: hypotheses per input line (JSON lines when > 1)
    with_scores: bool = False  # translate: pieces and their log-probabilities (JSON lines)
    with_alignment: bool = False  # translate: source piece of each target piece (JSON lines)
    prefix_file: str | None = None  # translate: forced target prefixes, line by line
    terms_file: str | None = None  # translate: required target phrases, tab-separated, by line

    @property
    def detailed(self) -> bool:
        """Whether translate writes JSON lines (anything beyond one translation a line)."""
        return (self.n_best > 1 or self.with_scores or self.with_alignment
                or self.prefix_file is not None)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Everything a stage needs, resolved once (see `resolve`)."""

    model_dir: str
    data: DataOptions
    model: ModelOptions
    training: TrainingOptions
    decoding: DecodingSettings
    evaluation: EvalOptions = EvalOptions()
    export: ExportOptions = ExportOptions()
    io: IOOptions = IOOptions()
    verbose: int = 1
    init: init_lib.InitFrom | None = None  # where a fine-tuned model starts (--init_from)
    sampling: SamplingSettings | None = None  # translate samples with these (None: beam)
    origins: dict = dataclasses.field(default_factory=dict, compare=False)
    """Option name -> where its value came from: "flag", "settings.json", "config.json",
    "preset NAME", "task NAME", "device: <why>" (`pipelines.device_policy`) or "default"
    (the paper's or the tool's)."""

    def make_task(self) -> Task:
        return get_task(self.data.task, **self.data.task_options)

    def settings(self, *, trained: bool) -> dict[str, Any]:
        """settings.json for this run: what prepare decides, and after training everything."""
        saved: dict[str, Any] = {"format": SETTINGS_FORMAT, "task": self.data.task,
                                 "task_options": self.data.task_options,
                                 "vocab_size": self.data.vocab_size}
        if self.init is not None:
            saved[init_lib.RECORD] = self.init.record()
        if trained:
            saved["model"] = {"preset": self.model.preset,  # max_length is config.json's
                              "config_overrides": self.model.config_overrides}
            saved["training"] = {  # not the machine's memory limit
                k: v for k, v in dataclasses.asdict(self.training).items()
                if k in SAVED_FLAGS or k in RECORDED_TRAINING}
            saved["decoding"] = dataclasses.asdict(self.decoding)
        return saved


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
    for name, (path, kind) in SAVED_FLAGS.items():
        if name not in given or kind == FREE:
            continue
        if path[0] in ("model", "training") and not trained:
            continue
        try:
            value = _lookup(saved, path)
        except KeyError:
            continue
        if given[name] == value or (kind == DECODING and override_saved):
            continue
        remedy = ("pass --override_saved to decode differently, or drop the flag"
                  if kind == DECODING else
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
    check_bounds(given)
    model_dir = given.get("model_dir") or os.path.join("runs", given.get("task") or DEFAULT_TASK)
    saved = md.load_settings(model_dir)
    check_against_saved(given, saved, model_dir, bool(given.get("override_saved")))
    md.check_vocabulary(model_dir, saved.get("spm_sha256"))
    init = init_lib.resolve(given, model_dir, saved)

    def from_source(name: str) -> tuple[str, Any]:
        """(origin, value) of a model flag in the --init_from source (None without one)."""
        return "init_from", init and init.model_default(name)

    origins: dict[str, str] = {}

    def pick(name: str, *defaults: tuple[str, Any]):
        """The flag, else settings.json's value, else the first of `defaults` ((origin,
        value), in order of precedence) that is not None; records the value's origin."""
        if given.get(name) is not None:
            origins[name] = "flag"
            return given[name]
        if name in SAVED_FLAGS:
            try:
                value = _lookup(saved, SAVED_FLAGS[name][0])
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
    task_options.update({k: given[k] for k in TASK_OPTION_FLAGS if given.get(k) is not None})
    task = get_task(pick("task", ("default", DEFAULT_TASK)), **task_options)
    from_task = f"task {task.name}"
    model = ModelOptions(preset=pick("config", from_source("config"), (from_task, task.preset)),
                         config_overrides=dict(pick("config_override",
                                                    from_source("config_override"),
                                                    ("default", {}))))
    try:
        preset = TransformerConfig.preset(model.preset)
    except ValueError as e:
        raise ConfigError(f"--config: {e}") from None
    declared, from_preset = PRESETS[model.preset], f"preset {model.preset}"
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
    task_training = TASK_TRAINING_DEFAULTS.get(task.name, {})
    device = device or device_policy.Device()

    def training_default(name: str) -> tuple[str, Any]:
        if name in task_training:
            return from_task, task_training[name]
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
        return "default", TRAINING_DEFAULTS[name]

    training = TrainingOptions(**{f.name: pick(f.name, training_default(f.name))
                                  for f in dataclasses.fields(TrainingOptions)
                                  if f.name not in RECORDED_TRAINING})
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
    if (given.get("n_best") or 1) > MAX_BEAM_SIZE:
        raise ConfigError(f"--n_best {given['n_best']}: at most {MAX_BEAM_SIZE}, the largest "
                          f"beam the translate_with_options function accepts")
    task_decoding = task.decoding_defaults()
    decoding = DecodingSettings(
        beam_size=pick("beam_size", (from_task, task_decoding.beam_size)),
        alpha=pick("alpha", (from_task, task_decoding.alpha)),
        extra_length=pick("extra_length", (from_task, task_decoding.extra_length)),
        max_input_length=pick("max_input_length", (from_task, task_decoding.max_input_length)),
        stop_rule=pick("stop_rule", (from_task, task_decoding.stop_rule)),
        # bfloat16 only after bfloat16 training: DecodingSettings has no float16.
        precision=pick("decode_precision", ("default", "bfloat16" if training.precision_policy
                                            == "mixed_bfloat16" else "float32")))
    model = dataclasses.replace(model, max_length=_max_length(
        model, declared, task, decoding, model_dir, origins, init))
    return RunOptions(
        model_dir=model_dir, data=data, model=model, training=training, decoding=decoding,
        evaluation=EvalOptions(
            split=given.get("eval_split") or "test", sentences=given.get("eval_sentences") or 0,
            # XLA's CPU backend does not use bfloat16 hardware: without it bfloat16 decodes
            # faster (benchmarks/compare_peers.py); float32 decodes faster with it.
            jit_compile=pick("decode_jit_compile",
                             ("default", decoding.precision == "float32")),
            checkpoint=given.get("checkpoint")),
        export=ExportOptions(export_dir=given.get("export_dir"),
                             version=given.get("export_version"),
                             overwrite=bool(given.get("overwrite_export")),
                             jit_compile=bool(given.get("export_jit_compile")),
                             check_ops=given.get("check_ops", True),
                             quantize=_quantize(given), format=_export_format(given)),
        io=IOOptions(input=given.get("input"), output=given.get("output"),
                     target=given.get("target"), plot_attention=given.get("plot_attention"),
                     n_best=given.get("n_best") or 1,
                     with_scores=bool(given.get("with_scores")),
                     with_alignment=bool(given.get("with_alignment")),
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

    value = given.get("format") or "saved_model"
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
    if topp is not None and not 0 < topp <= 1:
        raise ConfigError(f"--sampling_topp {topp}: must be in (0, 1]")
    if temperature is not None and not 0 < temperature < float("inf"):
        raise ConfigError(f"--sampling_temperature {temperature}: must be > 0")
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


def describe_origins(options: RunOptions, every: bool = True) -> str:
    """One log line of the resolved values and where each came from (see the module doc):
    `every` value, or only those not at the paper's defaults, grouped by origin (a device
    default by "device": `describe_device` gives its reason)."""
    values = {"task": options.data.task, "config": options.model.preset,
              "config_override": options.model.config_overrides,
              "vocab_size": options.data.vocab_size, "max_length": options.model.max_length,
              **dataclasses.asdict(options.training), **dataclasses.asdict(options.decoding),
              "decode_precision": options.decoding.precision,
              "decode_jit_compile": options.evaluation.jit_compile}
    named = [(name, origin) for name, origin in options.origins.items() if name in values]
    if every:
        return ", ".join(f"{name} {values[name]!r} ({origin})" for name, origin in named)
    paper = dataclasses.asdict(DecodingSettings())
    groups: dict[str, list[str]] = {}
    for name, origin in named:
        if origin != "default" and values[name] != paper.get(name, ...):
            groups.setdefault(origin.split(":")[0], []).append(f"{name}={values[name]}")
    changed = "; ".join(f"{origin}: {' '.join(items)}" for origin, items in groups.items())
    return f"{changed or 'all'} (the rest: the paper's defaults; --verbose lists every value)"


def describe_device(options: RunOptions, device: device_policy.Device) -> str:
    """One log line: the device, the training precision and XLA setting, and why each
    (`device: <why>` for the device's defaults, else the flag or settings.json)."""
    t, origins = options.training, options.origins
    return (f"device: {device.describe()}: {t.precision_policy} "
            f"({origins['precision_policy']}); XLA {'on' if t.jit_compile else 'off'} "
            f"({origins['jit_compile']})")


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


def config_for(options: RunOptions, task: Task, vocab_size: int) -> TransformerConfig:
    """The model config of a new model dir: preset + the paper's task departures + flags.

    `vocab_size` is the trained SentencePiece model's; `max_length` the resolver's
    (`ModelOptions.max_length`: the flag, else the preset's, else the task's lengths).
    """
    overrides = dict(TASK_PRESET_OVERRIDES.get((task.name, options.model.preset), {}))
    overrides.update(options.model.config_overrides)
    overrides["vocab_size"] = vocab_size
    overrides["max_length"] = options.model.max_length
    try:
        return TransformerConfig.preset(options.model.preset, **overrides)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"--config {options.model.preset} with --config_override "
                          f"{options.model.config_overrides}: {e}") from None
