"""The one table of settings: every flag of both command lines, once, with its type, bounds,
default, help, command lines, settings.json path and binding. It imports nothing heavy: the
command lines read it before TensorFlow loads."""

import dataclasses
from typing import Any, Mapping

from keras_transformer.constants import QUANTIZE_MODES
from keras_transformer.learning_rate import BATCH_TOKENS, LABEL_SMOOTHING

FIXED = "fixed"        # what the model is: a different value needs a new model dir
DECODING = "decoding"  # how it decodes: a flag applies to its run; the saved value stays
FREE = "free"          # how this run goes: the flag wins, the saved value is the default

RUN, EXPORT = "run", "export"  # pipelines/run.py, export/run.py
BOTH = (RUN, EXPORT)
RECIPE = "the preset's or task's recipe"
TASKS_RECIPE = RECIPE + ", else the task's"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One row: a flag (`name`) and what the run does with it."""

    name: str
    type: str                   # absl's: string, integer, float, bool, enum, list, multi_string
    help: str
    default: Any = None         # the paper's or the tool's; None: see decided_by
    decided_by: str = ""        # who decides a None default, for --help
    at_least: float | None = None
    above: float | None = None  # exclusive lower bound
    at_most: float | None = None
    choices: tuple = ()
    saved: tuple = ()           # settings.json path; () when not saved
    binding: str = FREE         # FIXED, DECODING or FREE once saved
    fronts: tuple = (RUN,)      # the command lines that take it
    aliases: tuple = ()         # earlier names, (front, alias) pairs
    option: bool = True         # False: read by the command line itself, not `resolve`
    stages: tuple = ()          # the only --mode stages that read it (): any, or none
    stages_use: str = "use it"  # what they do with it, for the refusal without them
    section: tuple = ()         # where the run's Recipe holds it (options.py), field path

    def help_text(self) -> str:
        """The flag's help: the text and its default, written only here."""
        shown = ",".join(self.default) if isinstance(self.default, tuple) else self.default
        said = ", else ".join(str(part) for part in (self.decided_by, shown)
                             if part not in ("", None))
        return f"{self.help} (default: {said})" if said else self.help


def _s(name, type_, help_, **kw) -> Setting:
    return Setting(name, type_, help_, **kw)


def _training(name, type_, help_, binding=FREE, **kw) -> Setting:
    return Setting(name, type_, help_, saved=("training", name), binding=binding,
                   section=("training", name), **kw)


def _decoding(name, type_, help_, key=None, section=None, decided_by=TASKS_RECIPE, **kw):
    return Setting(name, type_, help_, saved=("decoding", key or name), binding=DECODING,
                   fronts=BOTH, section=section or ("decoding", "beam", name),
                   decided_by=decided_by, **kw)


def _task_option(name, help_, binding=FREE, **kw) -> Setting:
    return Setting(name, "string", help_, saved=("task_options", name), binding=binding, **kw)


def _io(name, type_, help_, key=None, **kw) -> Setting:
    return Setting(name, type_, help_, section=("io", key or name), **kw)


def _export(name, type_, help_, key=None, **kw) -> Setting:
    return Setting(name, type_, help_, fronts=BOTH, section=("export", key or name), **kw)


AVERAGE_USE = "writes an average (then decode it with --checkpoint FILE.weights.h5)"
SETTINGS = (
    # The command line itself.
    _s("backend", "enum", "Keras backend that trains: tensorflow, or jax (pip install -e "
       "\".[jax]\"; jax.jit steps; keras.distribution.DataParallel over several devices). Under "
       "jax the stages run without --mode are prepare, train, average and evaluate; their "
       "checkpoints and final.weights.h5 are the same files, so export, translate and score run "
       "after them under tensorflow, and either backend resumes the other's run. tf.data feeds "
       "both.", default="tensorflow", choices=("tensorflow", "jax"),
       option=False),  # not PyTorch: its wheel brings CUDA's (gigabytes) to every install
    _s("mode", "list", "Stages to run, in order: prepare, train, average, evaluate, export, "
       "translate, score.", default=("prepare", "train", "average", "evaluate", "export"),
       option=False),
    _s("num_cpu_devices", "integer", "Split the CPU into N logical devices (MirroredStrategy "
       "with N replicas on a CPU machine; under --backend jax, N XLA CPU devices and "
       "DataParallel).", default=1, at_least=1, option=False),
    _s("verbose", "bool", "Show TensorFlow's C++ log lines (hidden unless TF_CPP_MIN_LOG_LEVEL "
       "is set) and every resolved option with its origin.", default=False, fronts=BOTH,
       option=False),
    # The model directory and what it starts from.
    _s("model_dir", "string", "Model directory (config.json, final.weights.h5, spm.model, "
       "settings.json).", decided_by="runs/<task>; export/run.py: required", fronts=BOTH),
    _s("init_from", "string", "Fine-tune: start the new --model_dir from this trained model "
       "dir's averaged weights (final.weights.h5), model config and vocabulary (reused, never "
       "retrained), with a fresh optimizer and this run's training flags (--warmup_steps, "
       "--train_steps, ...). Recorded in settings.json; later runs resume the new dir from its "
       "own checkpoints."),
    _s("init_optimizer", "bool", "With --init_from: also restore Adam's moments and step "
       "counter from the source's latest checkpoint, so that the step count and Eq. 3's "
       "schedule go on from the source's step S (--train_steps counts from 0: give S + the "
       "fine-tuning steps; no second warm-up once S >= --warmup_steps).", default=False),
    # The task and its data.
    _s("task", "string", "Task: multi30k_ende, wmt14_ende, wmt14_enfr, ptb_parsing or text. "
       "After prepare: the model dir's.", default="multi30k_ende", saved=("task",),
       binding=FIXED, section=("data", "task")),
    _task_option("data_dir", "Where the task's data is: the folder holding multi30k/, the tfds "
                 "data dir, or the WSJ tree dir.",
                 decided_by="$KT_DATA_DIR for multi30k_ende, else the task's"),
    _task_option("manual_dir", "tfds manual download dir."),
    *[_task_option(f"{split}_{side}", f"task=text: {split} {word} file" + (
        "; any translation task: your own test set, scored by a trained model dir's "
        "evaluate" if split == "test" else "") + ".",
        binding=FIXED if split == "train" else FREE)
      for split in ("train", "dev", "test") for side, word in (("src", "source"),
                                                               ("tgt", "target"))],
    _task_option("time_budget", "task=text: the time the whole run may take, e.g. 90s, 30m, "
                 "2h: a short probe measures a step on this machine, and the plan (recorded "
                 "in the model dir, kept on resume) sets the steps, warm-up and checkpoints "
                 "to fit; from an hour on it trains the tiny model's long recipe, below it the "
                 "small model's (pipelines/tasks/corpus_recipe.py).",
                 decided_by="none: the recipe sized to the corpus", binding=FIXED),
    *[_task_option(f"{split}_trees", f"task=ptb_parsing: {split} trees, a bracketed .mrg file "
                   f"or a directory of them.", decided_by="the WSJ sections below --data_dir",
                   binding=FIXED if split == "train" else FREE)
      for split in ("train", "dev", "test")],
    Setting("target_form", "enum", "task=ptb_parsing: what stands for a word in the target: "
            "its POS tag (tags, as the paper's code), XX (xx, Vinyals et al.), the word itself "
            "(words, copied from the source), or a tag or XX after which the decoder reads the "
            "next word (read_tags; read_xx).", decided_by=TASKS_RECIPE,
            choices=("tags", "xx", "words", "read_tags", "read_xx"),
            saved=("task_options", "target_form"), binding=FIXED),
    # The model.
    _s("config", "string", "Preset name (keras_transformer/config.py): base, big, the paper's "
       "Table 3 rows A1-A4, B1-B2, C1-C7, D1-D4, E; small, tiny, multi30k_small, "
       "multi30k_quality, multi30k_tiny, parsing_wsj, parsing_wsj_sample.",
       decided_by="the task's", saved=("model", "preset"), binding=FIXED,
       section=("model", "preset")),
    _s("config_override", "multi_string", "key=value overriding a config field; repeatable, "
       "e.g. --config_override dropout=0.3.", saved=("model", "config_overrides"),
       binding=FIXED, section=("model", "config_overrides")),
    _s("vocab_size", "integer", "Shared vocabulary size.", at_least=1,
       decided_by="the preset's own where it declares one, else the task's",
       saved=("vocab_size",), binding=FIXED, section=("data", "vocab_size")),
    # Training (defaults: the paper's Section 5, base).
    _training("train_steps", "integer", "Optimizer updates.", at_least=1, default=100_000,
              decided_by=RECIPE + " (big: 300,000), else the paper's base"),
    _training("label_smoothing", "float", "eps_ls of the training loss (Section 5.4).", FIXED,
              default=LABEL_SMOOTHING, at_least=0, decided_by=RECIPE + " (Table 3 D3, D4)"),
    _training("batch_tokens", "integer", "Global batch budget in tokens per side.", FIXED,
              at_least=1, default=BATCH_TOKENS, decided_by=RECIPE),
    _training("accumulate_steps", "integer", "Batches accumulated per update (reach the "
              "paper's batch on fewer devices).", FIXED, default=1, at_least=1),
    _training("warmup_steps", "integer", "Learning-rate warm-up (Eq. 3).", FIXED, at_least=1,
              decided_by=RECIPE + ", else the paper's (keras_transformer.schedules)"),
    _training("lr_scale", "float", "Constant factor on the Eq. 3 learning rate.", FIXED,
              default=1.0, at_least=0),
    _training("adam_epsilon", "float", "Adam's epsilon (fairseq's: 1e-8).", FIXED, above=0,
              decided_by="the paper's (keras_transformer.schedules)"),
    _training("clip_norm", "float", "Clip the gradients to this global norm before each "
              "update (0: no clipping, as the paper; fairseq's transformer recipes: 0 or 25).",
              FIXED, default=0.0, at_least=0),
    _training("checkpoint_every", "integer", "Steps between checkpoints.", at_least=1,
              default=1_000, decided_by=RECIPE),
    _training("keep_checkpoints", "integer", "Newest checkpoints kept (with --keep_best_by "
              "dev_metric the best ones are kept too).", default=20, at_least=1),
    _training("average_last", "integer", "Checkpoints averaged for evaluation and export (5 as "
              "for the paper's base; 20 for big).", default=5, at_least=1),
    _s("average_checkpoints", "list", "average: these checkpoints (ckpt-N names, comma "
       "separated) instead of the --average_last ones, into --average_output; final.weights.h5 "
       "is left as it is.", decided_by="the --average_last ones",
       stages=("average",), stages_use=AVERAGE_USE, section=("average", "checkpoints")),
    _s("average_output", "string", "average: the weights file to write instead of "
       "final.weights.h5 (NAME.weights.h5; decode it with --checkpoint).",
       decided_by="with --average_checkpoints, average.CKPTS.weights.h5 in the model dir, "
       "else final.weights.h5", stages=("average",), stages_use=AVERAGE_USE,
       section=("average", "output")),
    _training("seed", "integer", "Random seed (weights, data order, dropout; and translate's "
              "sampling: the same seed, the same samples).", default=0, at_least=0),
    _training("jit_compile", "bool", "Compile the training step with XLA.",
              decided_by="the device's: on GPUs, and on a CPU in float32 from d_model 512"),
    _training("mixed_precision", "bool", "Train in mixed precision (float32 weights): "
              "mixed_bfloat16 on a CPU and on GPUs of compute capability >= 8.0, mixed_float16 "
              "with loss scaling on older GPUs. bfloat16 training makes bfloat16 the decoding "
              "precision's default too.", decided_by="the device's: on where it is faster "
              "(bfloat16 CPU instructions, GPUs >= 7.0)"),
    _training("pack", "bool", "Train on packed rows, several pairs end to end in each row with "
              "attention kept within each pair, instead of length buckets: almost no padding "
              "(prepare's table shows both).", default=False),
    _training("steps_per_execution", "integer", "Training steps per tf.function call.",
              default=1, at_least=1),
    _training("dev_metric_every", "integer", "Steps between dev-metric evaluations (the task's "
              "metric: BLEU, F1 for parsing; 0: never).", at_least=0, default=0,
              decided_by=RECIPE, aliases=((RUN, "dev_bleu_every"),)),
    _training("dev_metric_sentences", "integer", "The first N dev sentences are decoded for "
              "the dev metric (0: all).", at_least=0, default=200, decided_by=RECIPE,
              aliases=((RUN, "dev_bleu_sentences"),)),
    _training("keep_best_by", "enum", "Checkpoints the average stage averages (--average_last "
              "of them): the last, or those with the best recorded dev metric, which are then "
              "kept on disk beside the --keep_checkpoints newest (needs --dev_metric_every).",
              choices=("last", "dev_metric"), default="last", decided_by=RECIPE),
    _training("choose_on_dev", "bool", "Before averaging into final.weights.h5, choose "
              "--average_last (1, 3, 5 or 10), --alpha (0.6, 1.0, 1.4) and --beam_size (the "
              "recipe's or 8) by the dev split's metric, where no flag gives them; keep the "
              "recipe's unless one scores higher. The test split is never read; the choice is "
              "recorded in the model dir (dev_choice.json, settings.json) for every later "
              "stage and the export.", default=False, decided_by=RECIPE),
    _training("early_stop_patience", "integer", "Stop training when this many dev-metric "
              "evaluations in a row have not improved on the best (needs --dev_metric_every; "
              "0: never). The later stages run as usual.", default=0, at_least=0),
    _s("memory_limit_mb", "integer", "Memory one training step may use; checked on the largest "
       "batch before training.", at_least=1,
       decided_by="on a CPU the RAM available, on a GPU no limit",
       section=("training", "memory_limit_mb")),
    # Decoding: both command lines; a flag decodes its run, settings.json keeps the first.
    _decoding("beam_size", "integer", "Beam size; fixed in an exported graph.", at_least=1),
    _decoding("alpha", "float", "Length penalty alpha.", at_least=0),
    _decoding("extra_length", "integer", "Max output = input length + this.", at_least=0),
    _decoding("max_input_length", "integer", "Longest source in tokens (EOS included); longer "
              "inputs keep their first pieces; at most the model's max_length.", at_least=1,
              decided_by="the task's limit", section=("decoding", "max_input_length")),
    _decoding("stop_rule", "enum", "When beam search stops a sentence: exact once no live "
              "hypothesis can beat its finished ones; best_finished once its best finished one "
              "beats the best live one as it stands (CTranslate2's rule: fewer steps, results "
              "may differ).", choices=("exact", "best_finished")),
    _decoding("decode_precision", "enum", "Precision of evaluate, translate and export.",
              key="precision", choices=("float32", "bfloat16"),
              decided_by="bfloat16 if trained with mixed precision, else float32",
              aliases=((EXPORT, "precision"),), section=("decoding", "precision")),
    _s("override_saved", "bool", "Accepted for older scripts; changes nothing: decoding "
       "flags apply to the run that gives them without it.", default=False, fronts=BOTH),
    _s("decode_jit_compile", "bool", "Compile evaluation's beam search with XLA.",
       decided_by="on in float32, off in bfloat16, which XLA's CPU backend does not speed up",
       section=("evaluation", "jit_compile")),
    # Evaluate.
    _s("eval_split", "enum", "Split the evaluate stage scores.", choices=("dev", "test"),
       default="test", decided_by=RECIPE, section=("evaluation", "split")),
    _s("eval_sentences", "integer", "Score only the first N sentences (0: all).", default=0,
       at_least=0, section=("evaluation", "sentences")),
    _s("checkpoint", "string", "evaluate, translate, score, export: decode this checkpoint "
       "(ckpt-N), or this weights file (NAME.weights.h5, as --average_output writes), instead "
       "of final.weights.h5.", section=("evaluation", "checkpoint")),
    # Translate and score.
    _io("input", "string", "translate: file of source sentences.", decided_by="stdin"),
    _io("output", "string", "translate: output file.", decided_by="stdout"),
    _io("n_best", "integer", "translate: the N best hypotheses of each line, as JSON lines (the "
        "beam is widened to N if smaller; sampling: N samples).", default=1, at_least=1),
    _s("sampling_topk", "integer", "translate: sample instead of beam search, each token from "
       "the K most likely (0: no cut). Any sampling flag turns sampling on; --seed seeds it.",
       at_least=0, stages=("translate",), stages_use="samples"),
    _s("sampling_topp", "float", "translate: sample (nucleus) from the smallest set of most "
       "likely tokens whose probability reaches P (1: no cut).", above=0, at_most=1,
       stages=("translate",), stages_use="samples"),
    _s("sampling_temperature", "float", "translate: sample from the model's distribution at "
       "temperature T.", above=0, decided_by="1 when sampling", stages=("translate",),
       stages_use="samples"),
    _io("with_scores", "bool", "translate: add each hypothesis's pieces and their "
        "log-probabilities (JSON lines).", default=False),
    _io("with_alignment", "bool", "translate: add, for each target piece, the source piece it "
        "attends to most (JSON lines).", default=False),
    _io("prefix_file", "string", "translate: target prefixes, line by line with the input "
        "(empty line: none); every hypothesis starts with its prefix."),
    _io("terms", "string", "translate: required target phrases, line by line with the input, "
        "tab-separated (empty line: none); every translation contains each (lexically "
        "constrained beam search, Post & Vilar 2018).", key="terms_file",
        stages=("translate",), stages_use="takes required phrases"),
    _io("target", "string", "score: file of translations, line by line with --input."),
    _io("plot_attention", "string", "translate: save the first sentence's encoder-decoder "
        "attention heat map to this PNG."),
    # Export: both command lines.
    _export("export_dir", "string", "SavedModel base dir, the model base path TensorFlow "
            "Serving watches.", decided_by="<model_dir>/export"),
    _export("export_version", "integer", "Version subdirectory to write.", key="version",
            at_least=0, decided_by="one more than the largest existing version, 1 if none",
            aliases=((EXPORT, "version"),)),
    _export("overwrite_export", "bool", "Replace an existing export version.", key="overwrite",
            default=False, aliases=((EXPORT, "overwrite"),)),
    _export("export_jit_compile", "bool", "XLA-compile the exported beam search (TensorFlow "
            "Serving then needs --xla_cpu_compilation_enabled on CPU).", key="jit_compile",
            default=False),
    _export("quantize", "enum", "export (and translate): int8 stores the model's matrices as "
            "int8, a quarter of float32's bytes, dequantized to the decode precision once per "
            "request (export/README.md).", decided_by="the weights as trained",
            choices=QUANTIZE_MODES, stages=("export", "translate"),
            stages_use="use it (evaluate decodes the weights as trained)"),
    _export("format", "enum", "export: saved_model (TensorFlow Serving), or ctranslate2: a "
            "CTranslate2 model in <model_dir>/export_ct2 (or --export_dir), float32, with "
            "spm.model (export/ctranslate2.py; needs pip install -e \".[ctranslate2]\").",
            choices=("saved_model", "ctranslate2"), default="saved_model",
            stages=("export",), stages_use="writes one"),
    _export("check_ops", "bool", "After exporting, check that every op is registered by core "
            "TensorFlow or tensorflow-text; exit 1 if not.", default=True),
)
TABLE: dict[str, Setting] = {row.name: row for row in SETTINGS}

SETTINGS_RECORDS = ("format", "spm_sha256", "init_from", ("training", "precision_policy"))
"""settings.json's records, not settings: format, vocabulary hash, init source, dtype policy."""


def rows(front: str = RUN) -> list[Setting]:
    """The settings one command line takes, in the table's order."""
    return [row for row in SETTINGS if front in row.fronts]


def used_without_its_stage(given: Mapping[str, Any], modes) -> str | None:
    """The refusal of the first given flag that none of --mode's stages reads, else None."""
    for name in given:
        row = TABLE.get(name)
        if row is not None and row.stages and not set(row.stages) & set(modes):
            return f"--{name}: only --mode {' and '.join(row.stages)} {row.stages_use}"
    return None


def default(name: str) -> Any:
    """A setting's fixed default (None: decided by its `decided_by`)."""
    return TABLE[name].default


def saved_rows() -> dict[str, Setting]:
    """The settings settings.json keeps, by name."""
    return {row.name: row for row in SETTINGS if row.saved}


def check_bounds(given: Mapping[str, Any]) -> None:
    """Raises ConfigError for the first given value outside its row's bounds or choices."""
    from pipelines.errors import ConfigError  # TensorFlow's import: not before --help

    for row in SETTINGS:
        value = given.get(row.name)
        if value is not None and row.type == "enum" and value not in row.choices:
            raise ConfigError(f"--{row.name} {value!r}: must be one of "
                              f"{', '.join(map(str, row.choices))}")
        if value is None or row.type not in ("integer", "float"):
            continue
        if row.at_least is not None and value < row.at_least:
            raise ConfigError(f"--{row.name} {value}: must be >= {row.at_least:g}")
        if row.above is not None and not value > row.above or (
                row.at_most is not None and value > row.at_most):  # at_most comes with above
            bound = (f"in ({row.above:g}, {row.at_most:g}]" if row.at_most is not None
                     else f"> {row.above:g}")
            raise ConfigError(f"--{row.name} {value}: must be {bound}")
