"""The run's `Recipe`: every setting, typed, in sections, with its origin; and its settings.json.

Precedence: the paper's defaults < the task's < the preset's recipe < the model dir
(settings.json, config.json for max_length; an untrained fine-tuned dir's `--init_from` source)
< the flags. Once trained, a flag that contradicts what the model is raises `ConfigError`;
decoding flags and test files (`SCORED_FILES`) apply to their run only (docs/training.md)."""

import dataclasses
import functools
from typing import Any

from keras_transformer import TransformerConfig
from keras_transformer.decoding import BeamSearch, Sampling
from keras_transformer.model_dir import SETTINGS_FORMAT
from pipelines.errors import ConfigError
from pipelines.settings import init_from as init_lib, table
from pipelines.tasks import Task

TASK_OPTIONS = tuple(name for name, row in table.saved_rows().items()
                     if row.saved[0] == "task_options")  # where its data is, what it is
TRAINING_FILES = ("train_src", "train_tgt", "train_trees")  # a trained model dir keeps them
SCORED_FILES = ("test_src", "test_tgt", "test_trees")  # given to a trained dir: this run's
SAMPLING_FLAGS = ("sampling_topk", "sampling_topp", "sampling_temperature")  # any: sampling
SHOWN = (("data",), ("model",), ("training",), ("decoding",))
"""The sections settings.json and the options block show: what the model is and how it decodes."""


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """Which task, where its data is, and the shared vocabulary size."""

    task: str
    task_options: dict
    vocab_size: int


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """The preset, its config overrides, and `max_length` (config.json's once trained)."""

    preset: str
    config_overrides: dict
    max_length: int


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """How evaluate, translate, the dev metric and export decode: search, precision, max input."""

    beam: BeamSearch
    precision: str                # the model's weights and compute: float32 or bfloat16
    max_input_length: int | None  # longest source, EOS included; None: the model's
    sampling: Sampling | None     # translate samples with these (None: beam search)

    def input_length(self, model_max_length: int) -> int:
        """The source truncation length for a model of `model_max_length` positions."""
        return min(self.max_input_length or model_max_length, model_max_length)

    def record(self) -> dict[str, Any]:
        """The beam search settings as eval/*.json and made_from.json record them."""
        return {**dataclasses.asdict(self.beam), "max_input_length": self.max_input_length,
                "precision": self.precision}


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """The training run: a field per training row of the table, and the Keras dtype policy."""

    train_steps: int
    label_smoothing: float
    batch_tokens: int
    accumulate_steps: int
    warmup_steps: int
    lr_scale: float
    adam_epsilon: float
    clip_norm: float
    checkpoint_every: int
    keep_checkpoints: int
    average_last: int
    seed: int
    jit_compile: bool
    mixed_precision: bool
    pack: bool
    steps_per_execution: int
    dev_metric_every: int
    dev_metric_sentences: int
    keep_best_by: str
    choose_on_dev: bool
    early_stop_patience: int
    memory_limit_mb: int | None = None
    precision_policy: str = "float32"


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """What the evaluate stage scores and how it compiles the search."""

    split: str
    sentences: int            # 0: the whole split
    jit_compile: bool
    checkpoint: str | None    # "ckpt-N" or a .weights.h5 to decode, not final.weights.h5
    test_files: dict = dataclasses.field(default_factory=dict)  # this run's `SCORED_FILES`


@dataclasses.dataclass(frozen=True)
class AverageOptions:
    """The chosen checkpoints and output; empty: --average_last ones into final.weights.h5."""

    checkpoints: tuple[str, ...] = ()   # ckpt-N names
    output: str | None = None           # a .weights.h5 path instead of final.weights.h5


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """Where and how the export stage writes the SavedModel (the table's rows)."""

    export_dir: str | None
    version: int | None
    overwrite: bool
    jit_compile: bool
    check_ops: bool
    quantize: str | None      # "int8" (keras_transformer.serving.quantize); None: as trained
    format: str               # saved_model, or ctranslate2 (export/ctranslate2.py)


@dataclasses.dataclass(frozen=True)
class IOOptions:
    """The translate and score stages' files (None: stdin/stdout) and outputs."""

    input: str | None
    output: str | None
    target: str | None        # score: the translations to score, line by line with input
    plot_attention: str | None
    n_best: int               # translate: hypotheses per input line (JSON lines when > 1)
    with_scores: bool         # translate: pieces and their log-probabilities (JSON lines)
    with_alignment: bool      # translate: source piece of each target piece (JSON lines)
    prefix_file: str | None   # translate: forced target prefixes, line by line
    terms_file: str | None    # translate: required target phrases, tab-separated, by line

    @property
    def detailed(self) -> bool:
        """Whether translate writes JSON lines (anything beyond one translation a line)."""
        return (self.n_best > 1 or self.with_scores or self.with_alignment
                or self.prefix_file is not None)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Everything a stage needs, resolved once; the run log renders it (`settings.describe`)."""

    model_dir: str
    data: DataOptions
    model: ModelOptions
    training: TrainingOptions
    decoding: DecodingOptions
    evaluation: EvalOptions
    average: AverageOptions
    export: ExportOptions
    io: IOOptions
    progress: int  # Keras' progress display: 1 a bar (a terminal), 2 a line a minute
    init: init_lib.InitFrom | None  # where a fine-tuned model starts (--init_from)
    origins: dict = dataclasses.field(default_factory=dict, compare=False)  # name -> origin
    task: Task | None = dataclasses.field(default=None, compare=False)
    scored_task: Task | None = dataclasses.field(default=None, compare=False)  # with test_files

    def values(self) -> dict[str, Any]:
        """The value of each setting in the `SHOWN` sections, read at its `section` path."""
        shown = {row.name: functools.reduce(getattr, row.section, self)
                 for row in table.SETTINGS if row.section[:1] in SHOWN}
        return {**shown, "max_length": self.model.max_length,
                "precision_policy": self.training.precision_policy,
                "decode_jit_compile": self.evaluation.jit_compile}

    def settings(self, *, trained: bool) -> dict[str, Any]:
        """settings.json by `saved` paths: what prepare decides; once `trained`, everything."""
        saved: dict[str, Any] = {"format": SETTINGS_FORMAT, "task_options": self.data.task_options}
        values = self.values()
        for name, row in table.saved_rows().items():
            if row.saved[0] in ("task", "vocab_size") or (trained and row.saved[0] in (
                    "model", "training", "decoding")):
                place(saved, row.saved, values[name])
        if trained:
            saved["training"]["precision_policy"] = self.training.precision_policy  # a record
        if self.init is not None:
            saved[init_lib.RECORD] = self.init.record()
        return saved


def place(tree: dict, path: tuple, value) -> None:
    """Sets the entry of nested dicts `tree` at `path` (settings.json's, a Recipe's sections)."""
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def config_for(options: Recipe, vocab_size: int) -> TransformerConfig:
    """A new model dir's config: the preset with the merged overrides (flags', the task's)."""
    overrides = {**options.model.config_overrides, "vocab_size": vocab_size,
                 "max_length": options.model.max_length}
    try:
        return TransformerConfig.preset(options.model.preset, **overrides)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"--config {options.model.preset} with --config_override "
                          f"{options.model.config_overrides}: {e}") from None
