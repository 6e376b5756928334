"""The stages --mode may name, behind one interface (`Stage.run(recipe, context)`)."""
import contextlib
import dataclasses
import time
from typing import Any, Callable, Sequence, TextIO

from keras_transformer.model_dir import WEIGHTS_SUFFIX
from pipelines import Log
from pipelines.errors import ConfigError
from pipelines.model_dir import lock
from pipelines.settings import table
from pipelines.settings.options import SAMPLING_FLAGS, Recipe
from pipelines.stages import average, evaluate, export, prepare, train, translate
from pipelines.training import devices, plan


@dataclasses.dataclass(frozen=True)
class Context:
    """What the command line gives every stage beside its recipe."""

    log: Log = print
    out: TextIO | None = None  # results (scores, translations); None: stdout
    verbose: bool = False      # export: the whole table of ops
    started: float = 0.0       # when the run started (time.monotonic()): the plan's clock
    probe: Any = None          # a --time_budget run's probe (`pipelines.training.plan`)


@dataclasses.dataclass(frozen=True)
class Stage:
    """A stage of a run: `run(recipe, context)` does it and returns what the summary reports."""

    name: str
    run: Callable[[Recipe, Context], Any]
    any_backend: bool = False       # runs under every Keras backend (else TensorFlow's graph)
    starts_model_dir: bool = False  # may start a new model dir (the others need one)
    changes_settings: bool = False  # the later stages read the settings anew
    writes: Callable[[Recipe], bool] = lambda recipe: True  # needs the model dir's lock
    every_worker: bool = False      # multi-worker training: every worker runs it (else the chief)
    trains: bool = False            # a --time_budget run plans its steps just before it
    unneeded: Callable[[Recipe], str | None] = lambda recipe: None
    """Why the default job (no --mode) skips it for this recipe; None: it runs."""


def _no_split(recipe: Recipe) -> str | None:
    """Why the default job's evaluate skips a task without the split it scores."""
    split = recipe.evaluation.split
    return None if recipe.task.has_split(split) else (
        f"task {recipe.data.task} has no {split} data (--{split}_src/--{split}_tgt; --mode "
        f"evaluate asks for it)")


def _train(recipe: Recipe, context: Context):
    strategy = devices.make_strategy(recipe.training.jit_compile)
    return train.run_train(recipe, strategy, log=context.log)


def _plan(recipe: Recipe, context: Context):
    return plan.plan_training(recipe, context.probe, time.monotonic() - context.started,
                              context.log)


STAGES = {stage.name: stage for stage in (
    Stage("prepare", lambda r, c: prepare.run_prepare(r, log=c.log),
          any_backend=True, starts_model_dir=True),
    Stage("train", _train, any_backend=True, starts_model_dir=True, every_worker=True,
          trains=True),
    Stage("average", lambda r, c: average.run_average(r, log=c.log),
          any_backend=True, changes_settings=True),  # what --choose_on_dev chose
    Stage("evaluate", lambda r, c: evaluate.run_evaluate(r, log=c.log, out=c.out),
          any_backend=True, unneeded=_no_split),
    Stage("export", lambda r, c: export.run_export(r, log=c.log, ops_table=c.verbose)),
    Stage("translate", lambda r, c: translate.run_translate(r, log=c.log, out=c.out),
          writes=lambda r: bool(r.io.output or r.io.plot_attention)),
    Stage("score", lambda r, c: translate.run_score(r, log=c.log, out=c.out),
          writes=lambda r: False),
)}
PLAN = Stage("plan", _plan, any_backend=True, changes_settings=True, every_worker=True)
"""Before train in a --time_budget run: the steps the budget buys (not named by --mode)."""
ANY_BACKEND_STAGES = tuple(name for name, stage in STAGES.items() if stage.any_backend)


def run_stages(stages: Sequence[Stage], recipe: Recipe, context: Context,
               resolve: Callable[[], Recipe],
               skipped: Callable[[Stage, Recipe], str | None] = lambda stage, recipe: None
               ) -> tuple[Recipe, dict[str, Any]]:
    """Runs `stages` in order, each on the recipe, which `resolve()` makes anew after a stage
    that changes the settings; `skipped` says why a stage does not run (logged). Returns the
    last recipe and what each stage returned, by name (for the summary)."""
    done = {}
    for stage in stages:
        why = skipped(stage, recipe)
        if why:
            context.log(f"== {stage.name}: skipped, {why}")
            continue
        context.log(f"== {stage.name} ({recipe.data.task}, {recipe.model_dir})")
        done[stage.name] = stage.run(recipe, context)
        if stage.changes_settings:  # later stages run with what it chose
            recipe = resolve()
    return recipe, done


def check_modes(modes: Sequence[str], given: dict, backend: str, asked: bool) -> list[str]:
    """The stages to run for --mode `modes` (`asked`: given, not the default) under `backend`;
    ConfigError for a stage unknown or not for the backend, or a flag that no stage reads."""
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
    refused = table.used_without_its_stage(given, modes)
    if refused:
        raise ConfigError(refused)
    sampling = [name for name in SAMPLING_FLAGS if name in given]
    if "terms" in given and sampling:
        raise ConfigError(f"--terms: beam search only; drop --{sampling[0]} (sampling does "
                          "not take required phrases)")
    output = given.get("average_output")
    if output is not None and not output.endswith(WEIGHTS_SUFFIX):
        raise ConfigError(f"--average_output {output}: name a {WEIGHTS_SUFFIX} file (Keras "
                          f"writes weights only there)")
    return run


def model_dir_lock(stages: Sequence[Stage], options: Recipe):
    """A context holding the model dir's lock (`lock.hold`; ModelDirLocked if another run holds
    it) when one of `stages` writes and this process is the chief, else a null one."""
    if not (devices.is_chief() and any(stage.writes(options) for stage in stages)):
        return contextlib.nullcontext()
    return lock.hold(options.model_dir, create=any(stage.starts_model_dir for stage in stages))
