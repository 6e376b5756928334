#!/usr/bin/env python
"""Fine-tuning acceptance: held-back BLEU of a trained model before and after `--init_from`.

    python benchmarks/fine_tune.py --source runs/multi30k_ende --work /tmp/fine_tune

Multi30k's test_2016_flickr stands for "in-domain" text: its first `--fine_tune_pairs`
pairs (part A) fine-tune the `--source` model (the default job's model dir, trained on
Multi30k's train set) for `--steps` updates through `pipelines/run.py --init_from`, with a
fresh optimizer, `--warmup_steps` and `--lr_scale` of its own; its last 1000 -
`--fine_tune_pairs` pairs are held back. Both models translate the held-back sources with the
source's decoding settings (the fine-tuned dir is given them), through the translate stage;
sacreBLEU scores them against the references. Logs go to stderr; one JSON line on stdout:
BLEU before and after, the sacreBLEU signature, the settings and the fine-tuning's seconds.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RUN = ROOT / "pipelines" / "run.py"
TEST_PAIRS = 1000
DECODING_FLAGS = {"beam_size": "beam_size", "alpha": "alpha", "extra_length": "extra_length",
                  "max_input_length": "max_input_length", "precision": "decode_precision"}
"""settings.json's decoding key -> the run.py flag that sets it."""


def run(args, stdout=None) -> str:
    """run.py with `args`, logs to stderr; its stdout (translations) returned."""
    result = subprocess.run([sys.executable, str(RUN), *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE if stdout is None else stdout)
    if result.returncode:
        sys.exit(f"fine_tune: run.py {' '.join(args)} failed (exit {result.returncode})")
    return result.stdout or ""


def split_test_set(data_dir: pathlib.Path, work: pathlib.Path, fine_tune_pairs: int) -> dict:
    """{"a": (en, de), "held": (en, de)}: test_2016_flickr's first `fine_tune_pairs` pairs and
    the rest, written under `work/data`."""
    folder = work / "data"
    folder.mkdir(parents=True, exist_ok=True)
    files = {"a": [], "held": []}
    for lang in ("en", "de"):
        lines = (data_dir / "multi30k" / f"test_2016_flickr.{lang}").read_text(
            encoding="utf-8").splitlines(True)
        if len(lines) != TEST_PAIRS:
            sys.exit(f"fine_tune: {data_dir}/multi30k/test_2016_flickr.{lang} has {len(lines)} "
                     f"lines, not {TEST_PAIRS}")
        for name, part in (("a", lines[:fine_tune_pairs]), ("held", lines[fine_tune_pairs:])):
            path = folder / f"{name}.{lang}"
            path.write_text("".join(part), encoding="utf-8")
            files[name].append(path)
    return files


def held_back_bleu(model_dir, held) -> tuple[float, str]:
    """sacreBLEU of `model_dir`'s translations of the held-back sources (translate stage)."""
    from pipelines.tasks.bleu import sacre_bleu

    source, reference = held
    hypotheses = run([f"--model_dir={model_dir}", "--mode=translate", f"--input={source}"])
    return sacre_bleu(hypotheses.splitlines(), reference.read_text(encoding="utf-8").splitlines())


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="trained Multi30k model dir "
                        "(with final.weights.h5), e.g. the default job's runs/multi30k_ende")
    parser.add_argument("--work", required=True, help="new folder for the split and the "
                        "fine-tuned model dir (<work>/model)")
    parser.add_argument("--data_dir", default=os.environ.get("KT_DATA_DIR",
                                                             str(ROOT.parent / "shared" / "data")),
                        help="folder holding multi30k/ (default $KT_DATA_DIR, else "
                        "../shared/data)")
    parser.add_argument("--fine_tune_pairs", type=int, default=800)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup_steps", type=int, default=50)
    parser.add_argument("--lr_scale", type=float, default=0.1)
    parser.add_argument("--batch_tokens", type=int, default=2048)
    parser.add_argument("--checkpoint_every", type=int, default=20)
    parser.add_argument("--average_last", type=int, default=5)
    args = parser.parse_args()
    source, work = pathlib.Path(args.source), pathlib.Path(args.work)
    model_dir = work / "model"
    if model_dir.exists():
        sys.exit(f"fine_tune: {model_dir} exists; give a new --work")
    settings = json.loads((source / "settings.json").read_text(encoding="utf-8"))
    files = split_test_set(pathlib.Path(args.data_dir), work, args.fine_tune_pairs)
    before, signature = held_back_bleu(source, files["held"])
    decoding = [f"--{DECODING_FLAGS[k]}={v}" for k, v in settings["decoding"].items()
                if k in DECODING_FLAGS]
    start = time.perf_counter()
    (a_en, a_de) = files["a"]
    run([f"--init_from={source}", f"--model_dir={model_dir}", "--task=text",
         f"--train_src={a_en}", f"--train_tgt={a_de}", "--mode=prepare,train,average",
         f"--train_steps={args.steps}", f"--warmup_steps={args.warmup_steps}",
         f"--lr_scale={args.lr_scale}", f"--batch_tokens={args.batch_tokens}",
         f"--checkpoint_every={args.checkpoint_every}", f"--average_last={args.average_last}",
         *decoding], stdout=sys.stderr)
    seconds = time.perf_counter() - start
    after, _ = held_back_bleu(model_dir, files["held"])
    print(json.dumps({
        "benchmark": "fine_tune", "source": str(source.resolve()),
        "fine_tune_pairs": args.fine_tune_pairs,
        "held_back_pairs": TEST_PAIRS - args.fine_tune_pairs, "steps": args.steps,
        "warmup_steps": args.warmup_steps, "lr_scale": args.lr_scale,
        "batch_tokens": args.batch_tokens, "average_last": args.average_last,
        "bleu_before": round(before, 2), "bleu_after": round(after, 2),
        "bleu_gain": round(after - before, 2), "signature": signature,
        "fine_tune_seconds": round(seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
