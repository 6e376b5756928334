"""What a run does, grouped (`RunOptions`), and the settings.json it writes.

Precedence (`pipelines.settings.resolver.resolve`): the flag > the model dir's settings.json
(config.json for max_length) > the preset's recipe > the task's recipe > the settings
table's default. A preset counts only for what it declares (`keras_transformer.config.
PRESETS`: its vocab_size, max_length and recipe); a fine-tuned dir takes its model from its
`--init_from` source. Once trained, a flag that contradicts the model dir stops the run
(`ConfigError`); decoding settings may differ with `--override_saved`, never written back.
settings.json (format 2) is laid out by the table's `saved` paths; docs/training.md says more.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from keras_transformer import TransformerConfig
from keras_transformer.decoding import DecodingSettings, SamplingSettings
from pipelines.model_dir import init_from as init_lib
from pipelines.errors import ConfigError
from pipelines.settings import table
from pipelines.settings.recipes import TASK_PRESET_OVERRIDES
from pipelines.tasks import Task, get_task

SETTINGS_FORMAT = 2
TASK_OPTIONS = tuple(name for name, row in table.saved_rows().items()
                     if row.saved[0] == "task_options")
"""The settings that become task options (where its data is, and what it is)."""
SAMPLING_FLAGS = ("sampling_topk", "sampling_topp", "sampling_temperature")
"""Any of these makes translate sample (`keras_transformer.decoding.sampling`) instead of
beam search."""


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


TrainingOptions = dataclasses.make_dataclass("TrainingOptions", [
    *((name, Any) for name, row in table.saved_rows().items() if row.saved[0] == "training"),
    ("memory_limit_mb", Any), ("precision_policy", str, "float32")], frozen=True)
TrainingOptions.__doc__ = """The training run: a field for each training row of the settings
table, and the Keras dtype policy that --mixed_precision means on this device."""


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
    "preset NAME", "task NAME", "device: <why>" (`pipelines.settings.device_policy`) or "default"
    (the paper's or the tool's)."""

    def make_task(self) -> Task:
        return get_task(self.data.task, **self.data.task_options)

    def values(self) -> dict[str, Any]:
        """The resolved value of each setting that settings.json or the run log shows."""
        return {"task": self.data.task, "vocab_size": self.data.vocab_size,
                "config": self.model.preset, "config_override": self.model.config_overrides,
                "max_length": self.model.max_length, **dataclasses.asdict(self.training),
                **dataclasses.asdict(self.decoding),
                "decode_precision": self.decoding.precision,
                "decode_jit_compile": self.evaluation.jit_compile}

    def settings(self, *, trained: bool) -> dict[str, Any]:
        """settings.json for this run, laid out by the settings table's `saved` paths: what
        prepare decides, and after training everything."""
        saved: dict[str, Any] = {"format": SETTINGS_FORMAT,
                                 "task_options": self.data.task_options}
        values = self.values()
        for name, row in table.saved_rows().items():
            if row.saved[0] in ("task", "vocab_size") or (trained and row.saved[0] in (
                    "model", "training", "decoding")):
                _place(saved, row.saved, values[name])
        if trained:
            saved["training"]["precision_policy"] = self.training.precision_policy  # a record
        if self.init is not None:
            saved[init_lib.RECORD] = self.init.record()
        return saved


def _place(saved: dict, path: tuple, value) -> None:
    """Sets settings.json's entry at `path` to `value`."""
    for key in path[:-1]:
        saved = saved.setdefault(key, {})
    saved[path[-1]] = value


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
