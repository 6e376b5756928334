"""Both command lines, `pipelines/run.py` and `export/run.py`, are fronts of `main`: flags ->
options (`pipelines.settings.resolver`) -> stages; results go to stdout, logs to stderr, and a
user error is one line on stderr and exit status 2 (a failed op check 1, Ctrl-C 130)."""
import contextlib
import os
import pathlib
import sys
import time

from absl import app

from cli import flags as cli_flags, startup, summary
from pipelines import RunLog
from pipelines.settings.table import EXPORT, RUN

FLAGS = cli_flags.FLAGS
PREFIX = {RUN: "", EXPORT: "export/run.py: "}  # each front's error line, before "error: "


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(front: str) -> None:
    """Runs `front`'s command line on sys.argv and exits with its status."""
    started = time.monotonic()  # the summary's wall time
    if front == RUN:
        startup.select_backend(sys.argv)
    else:  # the SavedModel is TensorFlow's graph, whatever backend trained the weights
        os.environ["KERAS_BACKEND"] = "tensorflow"
    cli_flags.define(front)
    body = run_stages if front == RUN else run_export

    def guarded(argv) -> int:
        if len(argv) > 1:
            log(f"{PREFIX[front]}error: unexpected arguments: {' '.join(argv[1:])}")
            return startup.USAGE_EXIT
        startup.import_tensorflow(FLAGS.verbose)
        from pipelines.errors import UserError
        from pipelines.stages.export import OpCheckError

        try:
            return body(started)
        except (UserError, OpCheckError) as e:
            log(f"{PREFIX[front]}error: {e}")
            return 1 if isinstance(e, OpCheckError) else startup.USAGE_EXIT
        except KeyboardInterrupt as e:  # every file is written under a temporary name first
            log(f"interrupted {e.args[0] if e.args else 'by the user'}; run the same command "
                f"to resume")
            return 130

    app.run(guarded, flags_parser=startup.parse_flags)


def run_export(started: float) -> int:
    """export/run.py: the export stage of a trained model dir; prints the version's path."""
    from pipelines.errors import ModelDirError
    from pipelines.settings import resolver
    from pipelines.stages import modes

    if not FLAGS.model_dir:
        raise ModelDirError("--model_dir is required (the trained model's directory)")
    if not pathlib.Path(FLAGS.model_dir).is_dir():
        raise ModelDirError(f"{FLAGS.model_dir}: no such model directory (train one with "
                            f"pipelines/run.py, or check the path)")
    options = resolver.resolve(cli_flags.given(EXPORT))
    stage = modes.STAGES["export"]
    with modes.model_dir_lock([stage], options), contextlib.redirect_stdout(sys.stderr):
        path = stage.run(options, modes.Context(log=log, verbose=FLAGS.verbose))
    print(path, flush=True)
    log("\n".join(summary.lines(started, options.model_dir, {"export": path})))
    return 0


def run_stages(started: float) -> int:
    """pipelines/run.py: the stages of --mode, in order."""
    from pipelines.training import devices

    backend = FLAGS.backend
    devices.configure_devices(FLAGS.num_cpu_devices, backend)  # before TensorFlow starts
    import keras

    from pipelines.settings import describe, device_policy, resolver
    from pipelines.stages import modes as stage_modes
    from pipelines.training import plan as planning

    given = cli_flags.given(RUN)
    modes = stage_modes.check_modes(FLAGS.mode, given, backend, FLAGS["mode"].present)
    device = device_policy.detect(FLAGS.num_cpu_devices, backend)
    options = resolver.resolve(given, device=device)
    log(describe.describe_origins(options, every=FLAGS.verbose))
    stages = [stage_modes.STAGES[name] for name in modes]
    training = [stage for stage in stages if stage.trains]
    if training:
        log(describe.describe_device(options, device))
    probe = (planning.check_budget(options, modes, time.monotonic() - started, log)
             if planning.needs_plan(options, modes) else None)
    keras.utils.set_random_seed(options.training.seed)
    chief = devices.is_chief()  # the model dir's one writer (the others train into workers/)
    if not chief and training:  # a worker only trains; the chief runs the rest
        stages = stages[:stages.index(training[0]) + 1]
    if probe is not None:  # the steps the budget buys, planned just before training
        stages.insert(stages.index(training[0]), stage_modes.PLAN)
    context = stage_modes.Context(log=RunLog(log), out=sys.stdout, verbose=FLAGS.verbose,
                                  started=started, probe=probe)
    # Keras draws its progress bars on stdout: send them, and all logs, to stderr.
    with stage_modes.model_dir_lock(stages, options), contextlib.redirect_stdout(sys.stderr):
        options, done = stage_modes.run_stages(
            stages, options, context, lambda: resolver.resolve(given, device=device),
            lambda stage, recipe: _skipped(stage, recipe, chief))
    context.out.flush()
    if not chief:
        log("train: done; the chief runs the later stages")
        return 0
    _finish(started, modes, options, done, done.get("plan"))
    return 0


def _skipped(stage, options, chief: bool) -> str | None:
    """Why `stage` does not run (logged), or None: a worker other than the chief only trains;
    the default job skips a stage its recipe does not need."""
    if not chief and not stage.every_worker:
        return "a worker other than the chief only trains"
    return None if FLAGS["mode"].present else stage.unneeded(options)


def _finish(started: float, modes, options, done: dict, plan) -> None:
    """The run's last lines: stages left to TensorFlow, the plan's ETA, the summary."""
    from pipelines.durations import format_duration

    if modes != FLAGS.mode:
        log(f"export under TensorFlow: python pipelines/run.py --mode "
            f"{','.join(m for m in FLAGS.mode if m not in modes)} --model_dir "
            f"{options.model_dir}")
    if plan is not None:
        log(f"plan: the run took {format_duration(time.monotonic() - started)} against its "
            f"ETA of {format_duration(plan.eta)} (budget {format_duration(plan.budget)})")
    metric = options.task.metric_name if "evaluate" in done else None
    log("\n".join(summary.lines(started, options.model_dir, done, metric,
                                options.scored_task.score_label(options.evaluation.split),
                                output=options.io.output)))
