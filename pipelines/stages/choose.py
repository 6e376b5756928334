"""The dev choice: how many checkpoints to average, the length penalty and the beam, by the dev
metric.

A recipe with `--choose_on_dev` (the sized `--task text` recipe, the default job's) leaves these
to the user's own dev split: before averaging, the last `AVERAGE_COUNTS` checkpoints are
averaged in turn and decode dev at the recipe's alpha; the best count then decodes it at each of
`ALPHAS`, and the best of those with each of `BEAMS`. A value changes only where it scores
strictly higher than the recipe's, so the dev score never drops. The test split is never read.
The choice goes into settings.json (which every later stage and the export read) and
`layout.DEV_CHOICE_FILE`, whose record makes the options block name its origin "chosen on
dev".
"""
import dataclasses
import json
import pathlib
import tempfile

import keras

from keras_transformer.model_dir import WEIGHTS_SUFFIX
from pipelines import Log
from pipelines.evaluation import evaluate
from pipelines.model_dir import checkpoints
from pipelines.model_dir import layout as md
from pipelines.settings import table
from pipelines.settings.options import Recipe
from pipelines.stages import made_from
from pipelines.stages.evaluate import eval_inputs

AVERAGE_COUNTS = (1, 3, 5, 10)
ALPHAS = (0.6, 1.0, 1.4)
"""The paper's alpha, the published Multi30k protocol's (fairseq's lenpen 1) and its dev choice
(Multi30k's dev, the two-hour run's model: 1.8 scored 40.48 and 2.2 32.71 against 1.4's 40.51)."""
BEAMS = (8,)
"""A wider beam than the recipes' 4 and 5 (Multi30k's dev at alpha 1.4: the two-hour run's
model 40.75 against 40.51 with 5, and 40.69 with 12; the default recipe's 36.18 against 36.06
with 4)."""
CHOSEN = ("average_last", "alpha", "beam_size")


def wanted(options: Recipe) -> tuple[str, ...]:
    """The settings this run chooses on dev: those of `CHOSEN` no flag gives, when
    --choose_on_dev is on and the task has a dev split."""
    if not options.training.choose_on_dev or not options.task.has_split("dev"):
        return ()
    return tuple(name for name in CHOSEN if options.origins.get(name) != "flag")


def choose_on_dev(options: Recipe, log: Log = print) -> dict | None:
    """Chooses `wanted` on dev and records the choice (redone only after a new checkpoint);
    returns {setting: value}, or None when nothing is chosen."""
    names, state = wanted(options), md.checkpoint_dir(options.model_dir)
    kept = len(md.checkpoint_paths(state))
    if not names or not kept:  # without checkpoints the average stage says what to do
        return None
    inputs = {"checkpoints": made_from.content_identity(options,
                                                        [state / md.CHECKPOINT_INDEX]),
              "names": list(names),
              "candidates": [list(AVERAGE_COUNTS), list(ALPHAS), list(BEAMS)],
              "data": json.loads(json.dumps(dataclasses.asdict(options.data), default=str))}
    done = made_from.up_to_date(options, "dev_choice", inputs)
    if done:
        log(f"choose: {done['product']} is up to date (no checkpoint since)")
        return md.load_dev_choice(options.model_dir)["chosen"]
    grid = _search(options, names, kept, log)
    best = max(grid, key=lambda row: row["score"])  # the first best: the recipe's on a tie
    chosen = {name: best[name] for name in names}
    path = md.save_dev_choice(options.model_dir, chosen, grid)
    settings = md.load_settings(options.model_dir)
    for name, value in chosen.items():
        section, key = table.TABLE[name].saved
        settings.setdefault(section, {})[key] = value
    md.save_settings(options.model_dir, settings)
    made_from.record(options, "dev_choice", inputs, path)
    log(f"choose: {', '.join(f'{k}={v}' for k, v in chosen.items())} (chosen on dev: "
        f"{best['score']:.2f} against {grid[0]['score']:.2f} with the values before)")
    return chosen


def _search(options: Recipe, names, kept: int, log: Log) -> list[dict]:
    """Dev scores, the recipe's values first: each average at the recipe's alpha and beam, then
    each alpha at the best average, then each beam at the best of those; `kept`: the
    checkpoints on disk. A choice made again (after new checkpoints) starts from the values the
    first one started from (its grid's first row), not from what it chose, so that it takes the
    same path. One model takes each average's weights in turn, so that a compiled search
    serves every average."""
    start = {k: v for k, v in (md.load_dev_choice(options.model_dir).get("grid") or [{}])[0]
             .items() if k in names}
    recipe = dataclasses.replace(options.decoding.beam, **{
        k: v for k, v in start.items() if k in ("alpha", "beam_size")})
    count = start.get("average_last", options.training.average_last)
    counts = [count] + [c for c in AVERAGE_COUNTS if c <= kept and c != count
                        and "average_last" in names]
    task, grid = options.task, []
    with tempfile.TemporaryDirectory(dir=options.model_dir) as tmp:
        averages = {each: _average(options, each, pathlib.Path(tmp)) for each in counts}
        model = md.load_final_model(options.model_dir, options.decoding.precision,
                                    str(averages[count]))
        inputs = eval_inputs(options, task, "dev", model.config.max_length, 0, log)

        def score(count, search, translate=None):
            translate = translate or _translator(options, model, search, inputs)
            return _score(options, task, translate, inputs, count, search, log)

        translate = _translator(options, model, recipe, inputs)
        for each in counts:
            model.load_weights(averages[each])
            grid.append(score(each, recipe, translate))
        count = max(grid, key=lambda row: row["score"])["average_last"]
        model.load_weights(averages[count])
        grid += [score(count, dataclasses.replace(recipe, alpha=alpha)) for alpha in ALPHAS
                 if alpha != recipe.alpha and "alpha" in names]
        alpha = max(grid, key=lambda row: row["score"])["alpha"]
        grid += [score(count, dataclasses.replace(recipe, alpha=alpha, beam_size=beam))
                 for beam in BEAMS if beam != recipe.beam_size and "beam_size" in names]
    return grid


def _average(options: Recipe, count: int, folder: pathlib.Path) -> pathlib.Path:
    """The last `count` checkpoints averaged into a weights file in `folder`, as the average
    stage would average them."""
    weights = folder / f"last{count}{WEIGHTS_SUFFIX}"
    checkpoints.average_checkpoints(
        md.build_model(md.read_config(options.model_dir)), md.checkpoint_dir(options.model_dir),
        weights, count, options.training.keep_best_by, log=lambda _: None)
    return weights


def _translator(options: Recipe, model, search, inputs):
    """Evaluate's translator of `model` with the beam search `search`."""
    jit = options.evaluation.jit_compile or keras.backend.backend() != "tensorflow"
    _, _, constraint, proto = inputs
    return evaluate.make_translator(model, search, proto, jit_compile=jit,
                                    constraint=constraint)


def _score(options: Recipe, task, translate, inputs, count: int, search, log: Log) -> dict:
    """One grid row: dev decoded by `translate` (the last `count` averaged, with `search`)."""
    data, tokenizer, _, _ = inputs
    texts, _ = evaluate.translate_batches(translate, data.batches, tokenizer, verbose=0)
    score = task.score(data.sources, texts, data.references, split="dev",
                       work_dir=options.model_dir)[task.metric_name]
    log(f"choose: the last {count} averaged, alpha {search.alpha}, beam {search.beam_size}: "
        f"dev {task.metric_name} {score:.2f} ({len(texts):,} sentences)")
    return {"average_last": count, "alpha": search.alpha, "beam_size": search.beam_size,
            "score": round(float(score), 4)}
