"""Which stages --mode may run under its backend, which write, their lock, and their runners."""
import contextlib
import importlib
from typing import Callable, Sequence

from pipelines.errors import ConfigError
from pipelines.model_dir import layout as md
from pipelines.settings.options import Recipe

STAGES = ("prepare", "train", "average", "evaluate", "export", "translate", "score")
ANY_BACKEND_STAGES = ("prepare", "train", "average", "evaluate")
"""Stages that run under every Keras backend; the others serve TensorFlow's graph."""
STARTS_MODEL_DIR = ("prepare", "train")
"""Stages that may start a new model dir; the others need an existing one."""


def check_modes(modes: Sequence[str], given: dict, backend: str, asked: bool) -> list[str]:
    """The stages to run for --mode `modes` (`asked`: given, not the default) under `backend`.
    ConfigError for an unknown stage, one the backend cannot run, or a stage's flag (sampling,
    --terms, --quantize, --format, averaging) without its stage."""
    from pipelines.settings.options import SAMPLING_FLAGS

    unknown = [m for m in modes if m not in STAGES]
    if unknown:
        raise ConfigError(f"--mode {','.join(unknown)}: choose from {', '.join(STAGES)}")
    run = list(modes)
    if backend != "tensorflow":
        if not asked:  # the default job: the stages this backend runs
            run = [m for m in run if m in ANY_BACKEND_STAGES]
        later = [m for m in run if m not in ANY_BACKEND_STAGES]
        if later:
            raise ConfigError(f"--mode {later[0]}: runs TensorFlow's serving graph; under "
                              f"--backend {backend} run {','.join(ANY_BACKEND_STAGES)}, then "
                              f"--mode {','.join(later)} without --backend")
    sampling = [name for name in SAMPLING_FLAGS if name in given]
    if sampling and "translate" not in modes:
        raise ConfigError(f"--{sampling[0]}: only --mode translate samples")
    if "terms" in given and "translate" not in modes:
        raise ConfigError("--terms: only --mode translate takes required phrases")
    if "terms" in given and sampling:
        raise ConfigError(f"--terms: beam search only; drop --{sampling[0]} (sampling does "
                          "not take required phrases)")
    if "quantize" in given and not {"export", "translate"} & set(modes):
        raise ConfigError("--quantize: only --mode export and translate use it (evaluate "
                          "decodes the weights as trained)")
    if "format" in given and "export" not in modes:
        raise ConfigError("--format: only --mode export writes one")
    averaging = [name for name in ("average_checkpoints", "average_output") if name in given]
    if averaging and "average" not in modes:
        raise ConfigError(f"--{averaging[0]}: only --mode average writes an average (then "
                          f"decode it with --checkpoint FILE.weights.h5)")
    output = given.get("average_output")
    if output is not None and not output.endswith(md.WEIGHTS_SUFFIX):
        raise ConfigError(f"--average_output {output}: name a {md.WEIGHTS_SUFFIX} file (Keras "
                          f"writes weights only there)")
    return run


def writes(stage: str, options: Recipe) -> bool:
    """Whether `stage` writes, needing the model dir's lock: all but score, and translate only
    with --output or --plot_attention."""
    if stage == "score":
        return False
    if stage == "translate":
        return bool(options.io.output or options.io.plot_attention)
    return True


def model_dir_lock(modes: Sequence[str], options: Recipe):
    """A context holding the model dir's lock (`pipelines.model_dir.lock.hold`) when one of
    `modes` writes and this process is the chief, else a null one. Entering raises
    `ModelDirLocked` when another run holds the lock."""
    from pipelines.model_dir import lock
    from pipelines.training import devices

    if not (devices.is_chief() and any(writes(stage, options) for stage in modes)):
        return contextlib.nullcontext()
    return lock.hold(options.model_dir,
                     create=any(stage in STARTS_MODEL_DIR for stage in modes))


def runner(stage: str) -> Callable:
    """The function `run_<stage>` of `pipelines.stages.<stage>` (score's: of `translate`)."""
    module = "translate" if stage == "score" else stage
    return getattr(importlib.import_module(f"pipelines.stages.{module}"), f"run_{stage}")
