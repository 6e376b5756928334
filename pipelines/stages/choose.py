"""The dev choice (`--choose_on_dev`): how many checkpoints to average, the length penalty and
the beam, by the dev metric; a value changes only where it scores strictly higher than the
recipe's, and the test split is never read. The choice goes into settings.json and
`layout.DEV_CHOICE_FILE`, whose record makes the options block name its origin "chosen on dev".
"""
import dataclasses
import json
import pathlib
import tempfile

import keras

from keras_transformer.model_dir import WEIGHTS_SUFFIX
from pipelines import Log
from pipelines.evaluation import evaluate
from pipelines.model_dir import checkpoints, layout as md
from pipelines.settings import table
from pipelines.settings.options import Recipe
from pipelines.stages import made_from
from pipelines.stages.evaluate import eval_inputs

AVERAGE_COUNTS = (1, 3, 5, 10)
ALPHAS = (0.6, 1.0, 1.4)
"""The paper's alpha, the published Multi30k protocol's (fairseq's lenpen 1) and its dev choice
(docs/data.md)."""
BEAMS = (8,)
"""A wider beam than the recipes' 4 and 5 (docs/data.md)."""
CHOSEN = ("average_last", "alpha", "beam_size")


def wanted(options: Recipe) -> tuple[str, ...]:
    """The settings of `CHOSEN` this run chooses on dev: with --choose_on_dev, no flag's."""
    if not options.training.choose_on_dev or not options.task.has_split("dev"):
        return ()
    return tuple(name for name in CHOSEN if options.origins.get(name) != "flag")


def choose_on_dev(options: Recipe, log: Log = print) -> dict | None:
    """Chooses and records `wanted` on dev (redone after a new checkpoint); None: nothing."""
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
    checkpoints on disk. A choice made again starts from its grid's first row, so that it takes
    the same path; one model takes each average's weights, so one compiled search serves all."""
    start = {k: v for k, v in (md.load_dev_choice(options.model_dir).get("grid") or [{}])[0]
             .items() if k in names}
    recipe = dataclasses.replace(options.decoding.beam, **{
        k: v for k, v in start.items() if k in ("alpha", "beam_size")})
    count = start.get("average_last", options.training.average_last)
    counts = [count] + [c for c in AVERAGE_COUNTS if c <= kept and c != count
                        and "average_last" in names]
    task, grid = options.task, []
    jit = options.evaluation.jit_compile or keras.backend.backend() != "tensorflow"
    with tempfile.TemporaryDirectory(dir=options.model_dir) as tmp:
        averages = {each: _average(options, each, pathlib.Path(tmp)) for each in counts}
        model = md.load_final_model(options.model_dir, options.decoding.precision,
                                    str(averages[count]))
        data, tokenizer, constraint, proto = eval_inputs(
            options, task, "dev", model.config.max_length, 0, log)

        def translator(search):
            return evaluate.make_translator(model, search, proto, jit_compile=jit,
                                            constraint=constraint)

        def score(count, search, translate=None):
            """A grid row: dev decoded with `search` (the last `count` averaged)."""
            texts, _ = evaluate.translate_batches(translate or translator(search), data.batches,
                                                  tokenizer, verbose=0)
            value = task.score(data.sources, texts, data.references, split="dev",
                               work_dir=options.model_dir)[task.metric_name]
            log(f"choose: the last {count} averaged, alpha {search.alpha}, beam "
                f"{search.beam_size}: dev {task.metric_name} {value:.2f} ({len(texts):,} "
                f"sentences)")
            return {"average_last": count, "alpha": search.alpha, "beam_size": search.beam_size,
                    "score": round(float(value), 4)}

        translate = translator(recipe)
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
    """The last `count` checkpoints averaged, as the average stage would, into `folder`."""
    weights = folder / f"last{count}{WEIGHTS_SUFFIX}"
    checkpoints.average_checkpoints(
        md.build_model(md.read_config(options.model_dir)), md.checkpoint_dir(options.model_dir),
        weights, count, options.training.keep_best_by, log=lambda _: None)
    return weights
