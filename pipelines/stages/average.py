"""The average stage: checkpoints averaged into a weights file, redone only when one is new."""
import pathlib

from pipelines import Log
from pipelines.model_dir import checkpoints, layout as md
from pipelines.stages import choose, made_from
from pipelines.settings.options import Recipe


def run_average(options: Recipe, log: Log = print):
    """Averages the last (or best, or chosen) checkpoints into their file, after `choose`."""
    t, chosen, state = options.training, options.average.checkpoints, md.checkpoint_dir(
        options.model_dir)
    out = pathlib.Path(options.average.output or (
        md.average_weights(options.model_dir, chosen) if chosen
        else md.final_weights(options.model_dir)))
    final = out == md.final_weights(options.model_dir)
    choice = (choose.choose_on_dev(options, log) if final else None) or {}
    average_last = choice.get("average_last", t.average_last)
    inputs = {"checkpoints": made_from.content_identity(options,
        [p for p in (state / md.CHECKPOINT_INDEX, state / md.DEV_METRIC_LOG)
         if p.exists()]),
        "average_last": average_last, "keep_best_by": t.keep_best_by,
        **({} if final else {"chosen": list(chosen), "output": made_from.relative(options, out)})}
    record = "average" if final else f"average_{out.name}"
    if made_from.up_to_date(options, record, inputs):
        log(f"average: {out} is up to date (no checkpoint since); nothing to do")
        return
    model = md.build_model(md.read_config(options.model_dir))
    checkpoints.average_checkpoints(model, state, out, average_last,
                                    keep_best_by=t.keep_best_by, log=log, chosen=chosen)
    made_from.record(options, record, inputs, out)
