#!/usr/bin/env python
"""Runs keras_transformer and the peer benchmarks side by side, alternating, and prints ratios.

    python benchmarks/compare_peers.py --keras_hub_python /path/venv/bin/python \
        --model_garden_python /path/mg_venv/bin/python --peers_dir ../shared/bench

Each (config, mode) is measured for every implementation, in both XLA settings, one process at
a time (never two at once on this 2-core machine). The project's figure is compared with the
best peer figure of the same run. Prints one JSON line per measurement, then a table.
"""
import argparse
import json
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


def run(python, script, args):
    result = subprocess.run([python, str(script), *args], capture_output=True, text=True,
                            timeout=1200)
    if result.returncode != 0:
        return {"error": result.stderr[-500:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keras_hub_python", default=None)
    parser.add_argument("--model_garden_python", default=None)
    parser.add_argument("--peers_dir", default=str(HERE.parents[1] / "shared" / "bench"))
    parser.add_argument("--only", default="", help="e.g. small:train,base:decode")
    parser.add_argument("--ours_extra", default="", help="extra flags for our script")
    parser.add_argument("--jit", default="0,1",
                        help="XLA settings to measure every implementation in (e.g. 1 to "
                             "compare only compiled decoding)")
    args = parser.parse_args()
    implementations = [("keras_transformer", sys.executable, HERE / "throughput.py")]
    peers = pathlib.Path(args.peers_dir)
    if args.keras_hub_python:
        implementations.append(("keras_hub", args.keras_hub_python, peers / "peer_keras_hub.py"))
    if args.model_garden_python:
        implementations.append(("model_garden", args.model_garden_python,
                                peers / "peer_model_garden.py"))
    wanted = set(filter(None, args.only.split(",")))
    rows = []
    for (config, mode), mode_args in MODES.items():
        if wanted and f"{config}:{mode}" not in wanted:
            continue
        figures = {}
        for jit in args.jit.split(","):
            for name, python, script in implementations:
                extra = args.ours_extra.split() if name == "keras_transformer" else []
                out = run(python, script, ["--mode", mode, "--config_name", config,
                                           *CONFIGS[config], *mode_args, "--jit_compile", jit,
                                           *extra])
                out.update(implementation=name, config=config, jit=jit)
                print(json.dumps(out), flush=True)
                figures[(name, jit)] = out.get(FIGURE[mode])
        ours = max(v for (n, _), v in figures.items() if n == "keras_transformer" and v)
        peer_values = {k: v for k, v in figures.items() if k[0] != "keras_transformer" and v}
        best_peer = max(peer_values.items(), key=lambda kv: kv[1]) if peer_values else None
        rows.append((config, mode, figures, ours, best_peer))
    print(f"\n{'config':6} {'mode':6} {'figure':18} " + " ".join(
        f"{n}:xla{j}".rjust(22) for n, _, _ in implementations for j in "01") + "  ratio")
    for config, mode, figures, ours, best_peer in rows:
        cells = " ".join(f"{figures.get((n, j)) or 'n/a':>22}" for n, _, _ in implementations
                         for j in "01")
        ratio = f"{ours / best_peer[1]:.2f}x vs {best_peer[0][0]} xla{best_peer[0][1]}" \
            if best_peer else "-"
        print(f"{config:6} {mode:6} {FIGURE[mode]:18} {cells}  {ratio}")


if __name__ == "__main__":
    main()
