#!/usr/bin/env python
"""Decode speed of exported SavedModels beside CTranslate2, on the same sentences.

    python benchmarks/serving_speed.py --saved_model runs/multi30k_ende/export/1 \
        --input $KT_DATA_DIR/multi30k/val.en --batch 32

    python benchmarks/serving_speed.py --saved_model /tmp/serve_f32/1 \
        --saved_model /tmp/serve_bf16/1 --input val.en --batch 32 --loaders tf2,tf1 \
        --ct2_dir /tmp/ct2_m30q --ct2_python /tmp/venvs/ct2/bin/python --profile

Every SavedModel is timed through each loader a server uses: `tf.saved_model.load` and its
`serving_default` signature ("tf2"), and the TF1 session loader
(`tf.compat.v1.saved_model.loader.load` with the serve tag, feeding and fetching the
signature's tensors: what TensorFlow Serving's C++ loader does; "tf1"). With `--ct2_dir` (a
CTranslate2 conversion of the same weights, `benchmarks/ct2_convert.py convert`) CTranslate2
decodes the same sentences in each `--ct2_compute_types`, through `ct2_convert.py translate`
run by the CTranslate2 interpreter: SentencePiece encode, `translate_batch`, decode, the same
beam size, at most source tokens + 50 output tokens (its length penalty is not GNMT's; see
ct2_convert.py).

Each measurement is its own process, one at a time, with the threads of the cores this
process may use (run it under `taskset -c 0` for one core): it loads the model, warms up
on the first batch, then times `--repeats` passes over all sentences in batches of `--batch`
(file order, as requests come), the median pass counting. Raw sentences in, translations
out, for every engine. Prints one JSON line per measurement ("saved_model_decode" for ours,
with the fields this script always printed; "ct2_decode" for CTranslate2) and a summary line
last: sentences/s, the ratio to CTranslate2 float32, and the share of translations identical
to CTranslate2 float32's and to the first measurement's (`--outputs_dir` keeps the
translations themselves; `benchmarks/int8_export.py` scores them).

The machine may be shared: wall-clock speed then depends on what else runs, so every
measurement also reports its CPU time (`time.process_time`, all threads of the process) and
sentences per CPU second, the figure to compare engines by on a busy core; `--rounds`
repeats the whole set round-robin and the summary takes medians. `--source_tokens N` keeps
only sentences of exactly N source tokens (pieces + EOS), a whole number of batches: every
batch then has one shape, [batch, N], as in ../shared/bench/ct2_anchor.py, and an XLA export
compiles once instead of once per padded width.

`--profile` adds a profile of the first SavedModel through the TF1 session loader (a
FULL_TRACE `RunMetadata` over `--profile_batches` batches): op time summed by op type from
the step stats (ops inside the search's functions and loop included), and the number of
beam search steps (matmuls whose output is vocabulary-wide: one a step).
"""
import argparse
import collections
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = pathlib.Path(__file__).resolve().parent
SIGNATURE = "serving_default"


# --------------------------------------------------------------------------- workers
def _export_info(saved_model):
    """Precision and XLA setting recorded by the export (assets.extra/export.json)."""
    path = pathlib.Path(saved_model) / "assets.extra" / "export.json"
    if not path.is_file():
        return {}
    decoding = json.loads(path.read_text(encoding="utf-8")).get("decoding", {})
    return {k: decoding.get(k)
            for k in ("precision", "quantize", "jit_compile", "beam_size", "alpha")}


def tf2_translator(saved_model):
    """`serving_default` of `tf.saved_model.load`: list of str -> list of bytes."""
    import tensorflow as tf

    serve = tf.saved_model.load(saved_model).signatures[SIGNATURE]
    return lambda batch: list(serve(source=tf.constant(batch))["translation"].numpy())


def tf1_session(saved_model):
    """The TF1 session loader (TensorFlow Serving's path): (session, feed name, fetch name)."""
    import tensorflow as tf

    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
        meta_graph = tf.compat.v1.saved_model.loader.load(
            session, [tf.saved_model.SERVING], saved_model)
    signature = meta_graph.signature_def[SIGNATURE]
    return session, signature.inputs["source"].name, signature.outputs["translation"].name


def tf1_translator(saved_model):
    """`serving_default` through the TF1 session loader: list of str -> list of bytes."""
    import numpy as np

    session, feed, fetch = tf1_session(saved_model)
    return lambda batch: list(session.run(
        fetch, {feed: np.array([s.encode("utf-8") for s in batch], dtype=object)}))


def time_passes(translate, batches, repeats):
    """Warm-up on the first batch, then `repeats` timed passes: (warm-up s, pass seconds,
    pass CPU seconds, outputs of the last pass as str)."""
    start = time.perf_counter()
    translate(batches[0])
    warmup = time.perf_counter() - start
    passes, cpu = [], []
    for _ in range(repeats):
        outputs = []
        start, start_cpu = time.perf_counter(), time.process_time()
        for batch in batches:
            outputs += translate(batch)
        passes.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return warmup, passes, cpu, [o.decode("utf-8") for o in outputs]


def worker(args, lines):
    """One SavedModel through one loader: the JSON line; translations to `args.out`."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    make = tf1_translator if args.worker == "tf1" else tf2_translator
    start = time.perf_counter()
    translate = make(args.saved_model[0])
    load_s = time.perf_counter() - start
    batches = [lines[i:i + args.batch] for i in range(0, len(lines), args.batch)]
    warmup, passes, cpu, outputs = time_passes(translate, batches, args.repeats)
    seconds, cpu_seconds = statistics.median(passes), statistics.median(cpu)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(outputs), encoding="utf-8")
    words = sum(len(t.split()) for t in outputs)
    return {
        "bench": "saved_model_decode", "saved_model": args.saved_model[0],
        "loader": args.worker, **_export_info(args.saved_model[0]),
        "sentences": len(lines), "batch": args.batch, "seconds": round(seconds, 2),
        "passes_s": [round(p, 2) for p in passes],
        "sentences_per_s": round(len(lines) / seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "sentences_per_cpu_s": round(len(lines) / cpu_seconds, 2),
        "output_words_per_s": round(words / seconds, 1), "warmup_s": round(warmup, 2),
        "load_s": round(load_s, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tensorflow": tf.__version__}


def op_type_of(node_stats):
    """The op type of a step-stats node: its timeline label is "name = OpType(inputs)"."""
    label = node_stats.timeline_label
    if " = " in label:
        return label.split(" = ", 1)[1].split("(", 1)[0]
    return node_stats.node_name.split(":")[-1]


def profile(args, lines):
    """Op time by op type of `serving_default` through the TF1 session loader."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    session, feed, fetch = tf1_session(args.saved_model[0])
    batches = [lines[i:i + args.batch] for i in range(0, len(lines), args.batch)]
    batches = batches[:args.profile_batches]

    def feed_of(batch):
        return {feed: np.array([s.encode("utf-8") for s in batch], dtype=object)}

    session.run(fetch, feed_of(batches[0]))  # warm-up
    plain = []
    for batch in batches:
        start = time.perf_counter()
        session.run(fetch, feed_of(batch))
        plain.append(time.perf_counter() - start)
    vocab = json.loads((pathlib.Path(args.saved_model[0]) / "assets.extra" / "export.json")
                       .read_text(encoding="utf-8"))["model_config"]["vocab_size"]
    totals, counts = collections.Counter(), collections.Counter()
    traced, steps = [], 0
    for batch in batches:
        metadata = tf.compat.v1.RunMetadata()
        start = time.perf_counter()
        session.run(fetch, feed_of(batch), run_metadata=metadata, options=tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE))
        traced.append(time.perf_counter() - start)
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                op_type = op_type_of(node)
                if op_type in ("_SOURCE", "_Recv", "_Send"):
                    continue
                totals[op_type] += node.op_end_rel_micros - node.op_start_rel_micros
                counts[op_type] += 1
                shape = node.output[0].tensor_description.shape.dim if node.output else []
                steps += "MatMul" in op_type and len(shape) > 0 and shape[-1].size == vocab
    total = sum(totals.values())
    n = len(batches)
    top = totals.most_common(args.top)
    return {
        "bench": "serving_profile", "saved_model": args.saved_model[0], "loader": "tf1",
        **_export_info(args.saved_model[0]), "batches": n, "batch": args.batch,
        "wall_ms_per_batch": round(1e3 * sum(plain) / n, 1),
        "traced_wall_ms_per_batch": round(1e3 * sum(traced) / n, 1),
        "op_ms_per_batch": round(total / 1e3 / n, 1),
        "search_steps_per_batch": round(steps / n, 1),
        "ops_per_batch": round(sum(counts.values()) / n),
        "top_ops": [{"op": op, "ms_per_batch": round(us / 1e3 / n, 2),
                     "share": round(us / total, 4), "runs_per_batch": round(counts[op] / n, 1),
                     "us_per_run": round(us / counts[op], 1)} for op, us in top]}


# --------------------------------------------------------------------------- orchestration
def run_json(command):
    """Runs a measurement process; its last stdout line, parsed (or the error)."""
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return {"error": result.stderr.strip()[-1500:], "command": command}
    return json.loads(result.stdout.strip().splitlines()[-1])


def read_lines(args):
    """The sentences to translate: the first `--sentences` lines of `--input` (.gz too), or
    with `--source_tokens N` the first of those whose source is exactly N tokens (pieces +
    EOS, by the first SavedModel's vocabulary), a whole number of batches: every batch then
    has the same shape, as in ct2_anchor.py (XLA compiles once)."""
    import gzip

    path = pathlib.Path(args.input)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    if args.source_tokens and not args.worker:
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(
            pathlib.Path(args.saved_model[0]) / "assets.extra" / "spm.model"))
        lines = [line for line, ids in zip(lines, sp.encode(lines))
                 if len(ids) + 1 == args.source_tokens]
        wanted = args.sentences or len(lines)
        lines = lines[:min(wanted, len(lines)) // args.batch * args.batch]
    elif args.sentences:
        lines = lines[:args.sentences]
    return lines


def identical(a, b):
    return round(sum(x == y for x, y in zip(a, b)) / len(a), 4) if a and b else None


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saved_model", action="append", required=True,
                        help="a SavedModel version directory (repeatable)")
    parser.add_argument("--input", required=True, help="one source sentence a line")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sentences", type=int, default=0, help="the first N lines (0: all)")
    parser.add_argument("--repeats", type=int, default=1, help="timed passes; median counts")
    parser.add_argument("--source_tokens", type=int, default=0,
                        help="only sentences of exactly this many source tokens (fixed shapes)")
    parser.add_argument("--loaders", default="tf2", help="tf2, tf1 or tf2,tf1")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every engine this many times, round-robin; medians count")
    parser.add_argument("--ct2_dir", default=None)
    parser.add_argument("--ct2_python", default=sys.executable)
    parser.add_argument("--ct2_compute_types", default="float32,int8")
    parser.add_argument("--ct2_length_penalty", type=float, default=0.6,
                        help="CTranslate2's (length ** penalty, EOS counted), not GNMT's")
    parser.add_argument("--outputs_dir", default=None,
                        help="write each run's translations (its last round) to "
                             "DIR/<run>.txt, one line a sentence (':' in a run name is '_')")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile_batches", type=int, default=4)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--worker", default=None, choices=("tf2", "tf1", "profile"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    lines = read_lines(args)
    if args.worker:
        print(json.dumps(profile(args, lines) if args.worker == "profile"
                         else worker(args, lines)), flush=True)
        return

    runs = collections.defaultdict(list)  # name -> [(result, translations)], one a round
    with tempfile.TemporaryDirectory() as work:
        # Every measurement reads exactly these sentences.
        selected = os.path.join(work, "sentences.txt")
        pathlib.Path(selected).write_text("".join(f"{line}\n" for line in lines),
                                          encoding="utf-8")
        common = ["--input", selected, "--batch", str(args.batch), "--repeats",
                  str(args.repeats)]
        plan = []  # (name, command, output file flag)
        if args.ct2_dir:
            for compute_type in args.ct2_compute_types.split(","):
                plan.append((f"ct2_{compute_type}", [
                    args.ct2_python, str(HERE / "ct2_convert.py"), "translate",
                    "--ct2_dir", args.ct2_dir, "--compute_type", compute_type,
                    "--length_penalty", str(args.ct2_length_penalty), *common], "--output"))
        for index, saved_model in enumerate(args.saved_model):
            info = _export_info(saved_model)
            label = (f"{info.get('precision')}{'+int8' if info.get('quantize') else ''}"
                     f"{'+xla' if info.get('jit_compile') else ''}")
            for loader in args.loaders.split(","):
                plan.append((f"{index}:{label}:{loader}", [
                    sys.executable, __file__, "--worker", loader, "--saved_model",
                    saved_model, *common], "--out"))
        # Round-robin: a change in the machine's load falls on every engine alike.
        for _ in range(args.rounds):
            for name, command, flag in plan:
                out = os.path.join(work, "out.json")
                result = run_json(command + [flag, out])
                print(json.dumps({"run": name, **result}), flush=True)
                translations = None
                if "error" not in result:
                    data = json.loads(pathlib.Path(out).read_text(encoding="utf-8"))
                    translations = data["translations"] if isinstance(data, dict) else data
                runs[name].append((result, translations))
                if args.outputs_dir and translations is not None:
                    os.makedirs(args.outputs_dir, exist_ok=True)
                    pathlib.Path(args.outputs_dir, f"{name.replace(':', '_')}.txt").write_text(
                        "".join(f"{t}\n" for t in translations), encoding="utf-8")
        if args.profile:
            print(json.dumps(run_json([sys.executable, __file__, "--worker", "profile",
                                       "--saved_model", args.saved_model[0], *common,
                                       "--profile_batches", str(args.profile_batches),
                                       "--top", str(args.top)])), flush=True)
    print(json.dumps(summarize(args, lines, runs)), flush=True)


def summarize(args, lines, runs):
    """Median speeds over rounds, ratios to CTranslate2 float32, identical translations."""
    def median(results, key):
        values = [r[key] for r, _ in results if key in r]
        return statistics.median(values) if values else None

    def last_output(results):
        return next((out for _, out in reversed(results) if out), None)

    reference = runs.get("ct2_float32")
    first = last_output(next(iter(runs.values()), []))
    summary = []
    for name, results in runs.items():
        row = {"run": name}
        for key in ("sentences_per_s", "sentences_per_cpu_s"):
            row[key] = median(results, key)
            row[key] = None if row[key] is None else round(row[key], 2)
            if reference and row[key] and median(reference, key):
                row[f"{key}_ratio_to_ct2_float32"] = round(row[key] / median(reference, key), 3)
        out = last_output(results)
        if reference:
            row["identical_to_ct2_float32"] = identical(out, last_output(reference))
        row["identical_to_first"] = identical(out, first)
        row["errors"] = sum("error" in r for r, _ in results)
        summary.append(row)
    return {"bench": "serving_speed", "input": args.input, "sentences": len(lines),
            "source_tokens": args.source_tokens or None, "batch": args.batch,
            "repeats": args.repeats, "rounds": args.rounds,
            "cpus": len(os.sched_getaffinity(0)), "runs": summary}


if __name__ == "__main__":
    main()
