"""The evaluate stage, and the dev metric that training reports, which decodes the same way."""
import dataclasses
import json
import sys
import time
from typing import Callable, TextIO

import keras

from pipelines import Log
from pipelines.data import prepare, vocab as vocab_lib
from pipelines.evaluation import evaluate, results
from pipelines.model_dir import layout as md
from pipelines.stages import made_from
from pipelines.settings import describe
from pipelines.settings.options import Recipe
from pipelines.tasks import Task


def dev_metric_evaluator(options: Recipe, task: Task, max_length: int, log: Log = print
                         ) -> Callable:
    """`model -> score`: the task's metric on the first `dev_metric_sentences` (0: all) of dev."""
    data, tokenizer, constraint, proto = eval_inputs(
        options, task, "dev", max_length, options.training.dev_metric_sentences, log)

    def dev_metric(model):  # float32 weights (bfloat16 compute when mixed): decoded as is
        translate = evaluate.make_translator(model, options.decoding.beam, proto,
                                             constraint=constraint)
        texts, _ = evaluate.translate_batches(translate, data.batches, tokenizer, verbose=0)
        scores = task.score(data.sources, texts, data.references, split="dev",
                            work_dir=options.model_dir)
        log(f"\ndev {task.metric_name} {scores[task.metric_name]:.2f} on {len(texts):,} "
            f"sentences")
        return scores[task.metric_name]

    dev_metric.metric_name = f"dev_{task.metric_name}"
    return dev_metric


def eval_inputs(options: Recipe, task: Task, split: str, max_length: int, count: int,
                 log: Log):
    """(the first `count` sentences of `split` (0: all), tokenizer, constraint, spm proto)."""
    proto = vocab_lib.read_model_proto(prepare.vocab_path(options.model_dir))
    data = prepare.eval_input(task, split, options.model_dir,
                              max_source_length=options.decoding.input_length(max_length),
                              log=log)
    return (evaluate.first_sentences(data, count), vocab_lib.load_tokenizer(proto),
            task.decoding_constraint(proto), proto)


def run_evaluate(options: Recipe, log: Log = print, out: TextIO | None = None) -> dict:
    """Decodes and scores the eval split (or test files), writes both, prints the scores."""
    task, evaluation = options.scored_task, options.evaluation
    split, decoding = evaluation.split, options.decoding
    jit = options.evaluation.jit_compile or keras.backend.backend() != "tensorflow"  # jax.jit
    inputs = {"weights": made_from.weights_identity(options),
              "decoding": decoding.record(), "split": split,
              "sentences": options.evaluation.sentences, "jit_compile": jit,
              "data": json.loads(json.dumps(dataclasses.asdict(options.data), default=str))}
    result = results.result_name(
        split, inputs["decoding"], md.load_settings(options.model_dir).get("decoding"),
        sentences=evaluation.sentences, checkpoint=evaluation.checkpoint,
        files=[path for _, path in sorted(evaluation.test_files.items())
               if split == "test"])
    done = made_from.up_to_date(options, f"evaluate_{result}", inputs)
    if done:
        log(f"evaluate: {done['product']} is up to date (the same weights and decoding "
            f"settings); its scores:")
        print("".join(done["printed"]), end="", file=out or sys.stdout, flush=True)
        return done["scores"]
    model = md.load_final_model(options.model_dir, decoding.precision,
                                options.evaluation.checkpoint, log=log)
    log(f"evaluate: {describe.describe_decoding(options)}, XLA {'on' if jit else 'off'}")
    data, tokenizer, constraint, proto = eval_inputs(
        options, task, split, model.config.max_length, options.evaluation.sentences, log)
    translate = evaluate.make_translator(model, decoding.beam, proto, jit_compile=jit,
                                         constraint=constraint)
    start = time.perf_counter()
    hypotheses, _ = evaluate.translate_batches(translate, data.batches, tokenizer, log=log,
                                               verbose=options.progress)
    seconds = time.perf_counter() - start
    scores = task.score(data.sources, hypotheses, data.references, split=split,
                        work_dir=options.model_dir)
    extra = {"split": split, "sentences": len(hypotheses), "decode_seconds": round(seconds, 2),
             "decoding": decoding.record()}
    written = evaluate.write_results(options.model_dir, result, hypotheses, scores, extra)
    printed = []
    for name, value in scores.items():
        if not name.endswith("signature"):
            signature = scores.get(f"{name}_signature")
            shown = f"{value:,}" if isinstance(value, int) else f"{value:.2f}"
            printed.append(f"{task.score_label(split)} {name}: {shown}"
                           + (f"  ({signature})\n" if signature else "\n"))
    print("".join(printed), end="", file=out or sys.stdout, flush=True)
    index = results.update_index(options.model_dir, result, {
        k: v for k, v in extra.items() if k != "decode_seconds"} | {"scores": scores})
    made_from.record(options, f"evaluate_{result}", inputs, written / f"{result}.json",
                     scores=scores, printed=printed)  # last: marks the result complete
    log(f"evaluate: {len(hypotheses):,} sentences in {seconds:.1f}s; wrote "
        f"{written / result}.json and .hyp (every result: {index})")
    return scores
