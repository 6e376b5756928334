#!/usr/bin/env python
"""Runs keras_transformer and the peer benchmarks side by side, one process at a time.

    python benchmarks/compare_peers.py --keras_hub_python /path/venv/bin/python \
        --model_garden_python /path/mg_venv/bin/python --ct2_python /path/ct2/bin/python \
        --peers_dir ../shared/bench

Each (config, mode) is measured for every TensorFlow implementation in float32 and bfloat16
(`--mixed_precision 0|1`) with XLA off and on, and for CTranslate2 (decoding only) in float32
and int8, never two processes at once. A peer is judged by its best cell: the table compares
our best cell with the best KerasHub / Model Garden cell of the same run, and with each
CTranslate2 compute type. Prints one JSON line per measurement, then the tables.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
CONFIGS = {
    "base": ["--vocab", "37000", "--layers", "6", "--d_model", "512", "--heads", "8",
             "--d_ff", "2048"],
    "small": ["--vocab", "8000", "--layers", "3", "--d_model", "256", "--heads", "4",
              "--d_ff", "1024"],
}
MODES = {
    ("base", "train"): ["--batch", "16", "--src_len", "32", "--tgt_len", "32",
                        "--warmup_steps", "5", "--steps", "20"],
    ("small", "train"): ["--batch", "64", "--src_len", "16", "--tgt_len", "16",
                         "--warmup_steps", "5", "--steps", "20"],
    ("base", "decode"): ["--batch", "8", "--src_len", "20", "--gen_len", "20", "--repeats", "3"],
    ("small", "decode"): ["--batch", "32", "--src_len", "16", "--gen_len", "20",
                          "--repeats", "3"],
}
FIGURE = {"train": "tgt_tokens_per_s", "decode": "sentences_per_s"}
PRECISION = {"0": "float32", "1": "bfloat16"}


def run(python, script, args):
    result = subprocess.run([python, str(script), *args], capture_output=True, text=True,
                            timeout=1800)
    if result.returncode != 0:
        return {"error": result.stderr[-500:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def cells(implementations, mode, precisions, jits):
    """(implementation, python, script, cell name, flags) for every cell of a mode.

    TensorFlow implementations run in each precision x XLA setting; CTranslate2 (decoding
    only) in each of its compute types, XLA not applying, and without --mode, which
    ct2_anchor.py does not have (argparse would take it for --model_dir).
    """
    for name, python, script in implementations:
        if name == "ctranslate2":
            if mode == "decode":
                for compute_type in ("float32", "int8"):
                    yield name, python, script, compute_type, [
                        "--compute_type", compute_type,
                        "--threads", str(len(os.sched_getaffinity(0)))]
            continue
        for precision in precisions:
            for jit in jits:
                yield (name, python, script, f"{PRECISION[precision]},xla{jit}",
                       ["--mode", mode, "--mixed_precision", precision, "--jit_compile", jit])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keras_hub_python", default=None)
    parser.add_argument("--model_garden_python", default=None)
    parser.add_argument("--ct2_python", default=None,
                        help="a Python with ctranslate2 (decoding ceiling, float32 and int8)")
    parser.add_argument("--peers_dir", default=str(HERE.parents[1] / "shared" / "bench"))
    parser.add_argument("--only", default="", help="e.g. small:train,base:decode")
    parser.add_argument("--ours_extra", default="", help="extra flags for our script")
    parser.add_argument("--precisions", default="0,1",
                        help="mixed_precision settings of every TensorFlow implementation "
                             "(0 float32, 1 bfloat16)")
    parser.add_argument("--jit", default="0,1",
                        help="XLA settings of every TensorFlow implementation")
    args = parser.parse_args()
    implementations = [("keras_transformer", sys.executable, HERE / "throughput.py")]
    peers = pathlib.Path(args.peers_dir)
    for name, python, script in (("keras_hub", args.keras_hub_python, "peer_keras_hub.py"),
                                 ("model_garden", args.model_garden_python,
                                  "peer_model_garden.py"),
                                 ("ctranslate2", args.ct2_python, "ct2_anchor.py")):
        if python:
            implementations.append((name, python, peers / script))
    precisions = args.precisions.split(",")
    jits = args.jit.split(",")
    wanted = set(filter(None, args.only.split(",")))
    rows = []
    for (config, mode), mode_args in MODES.items():
        if wanted and f"{config}:{mode}" not in wanted:
            continue
        figures = {}
        for name, python, script, cell, flags in cells(implementations, mode, precisions, jits):
            extra = args.ours_extra.split() if name == "keras_transformer" else []
            out = run(python, script, ["--config_name", config, *CONFIGS[config], *mode_args,
                                       *flags, *extra])
            out.update(implementation=name, config=config, cell=cell)
            print(json.dumps(out), flush=True)
            figures[(name, cell)] = out.get(FIGURE[mode])
        rows.append((config, mode, figures))
    print_table(rows)


def print_table(rows):
    """Every cell, then our best cell against the best TensorFlow peer cell and CTranslate2."""
    print("\n| config | mode | implementation | cell | figure |\n|---|---|---|---|---|")
    for config, mode, figures in rows:
        for (name, cell), value in figures.items():
            print(f"| {config} | {mode} | {name} | {cell} | "
                  f"{value if value else 'failed'} {FIGURE[mode]} |")
    print("\n| config | mode | ours (best cell) | best peer (cell) | ratio | vs CTranslate2 |"
          "\n|---|---|---|---|---|---|")
    for config, mode, figures in rows:
        ours = best(figures, lambda name: name == "keras_transformer")
        peer = best(figures, lambda name: name in ("keras_hub", "model_garden"))
        ct2 = {cell: v for (name, cell), v in figures.items() if name == "ctranslate2" and v}
        ratio = f"{ours[1] / peer[1]:.2f}x" if ours and peer else "-"
        anchor = ", ".join(f"{ours[1] / v:.2f}x of {cell}" for cell, v in ct2.items()) \
            if ours else ""
        print(f"| {config} | {mode} | {fmt(ours)} | {fmt(peer)} | {ratio} | {anchor or '-'} |")


def best(figures, which):
    """((implementation, cell), figure) of the fastest successful cell `which` accepts."""
    found = [(key, v) for key, v in figures.items() if which(key[0]) and v]
    return max(found, key=lambda kv: kv[1]) if found else None


def fmt(entry):
    return f"{entry[1]} ({entry[0][0]}, {entry[0][1]})" if entry else "-"


if __name__ == "__main__":
    main()
