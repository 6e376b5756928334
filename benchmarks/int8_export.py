#!/usr/bin/env python
"""The int8 export beside float32 and CTranslate2: BLEU, size and speed, in one run.

    python benchmarks/int8_export.py --model_dir runs/multi30k_ende --work /tmp/int8_bench \
        --ct2_python /tmp/venvs/ct2/bin/python

1. Copies the model dir's config.json, settings.json, spm.model and final.weights.h5 to
   WORK/model: the source is only read (an export takes its model dir's lock, which writes).
2. Exports the copy with `export/run.py` (op check included) as float32 (`--decode_precision
   float32`) and int8 (the same with `--quantize int8`: int8 matrices,
   float32 compute); when the model dir decodes in bfloat16, also as bfloat16 and int8 with
   bfloat16 compute (its own settings, and `--quantize int8`).
3. Converts the copy to CTranslate2 (`benchmarks/ct2_convert.py convert`), float32 weights
   that CTranslate2 quantizes itself for its int8 run.
4. `benchmarks/serving_speed.py` decodes the test set's sources (test_2016_flickr: 1,000
   sentences) with every SavedModel through every `--loaders` loader and with CTranslate2
   float32 and int8, one process at a time, batch 32, beam 4, `--rounds` times round-robin
   (medians count), keeping the translations.
5. sacreBLEU of every engine's translations against the references.

Prints one JSON line per engine (`int8_export`: bytes on disk, BLEU, sentences per second
and per CPU second) and a summary line last (`int8_export_summary`): for each int8 export,
its size ratio to the float32 export (and to the bfloat16 one), its BLEU minus float32's,
and its speed ratios (sentences per CPU second, the figure to compare by on a shared core) to
the float32 export through the same loader, to the export of its compute precision, and to
CTranslate2 int8 and float32.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
MODEL_FILES = ("config.json", "settings.json", "spm.model", "final.weights.h5")


def directory_bytes(path: pathlib.Path) -> int:
    """Bytes of every file under `path`: what a server downloads and loads."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(command):
    """Runs `command` from the repository root; its stdout (stderr goes through)."""
    return subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True,
                          cwd=ROOT).stdout


def export(model_dir: pathlib.Path, export_dir: pathlib.Path, flags) -> pathlib.Path:
    """`export/run.py` into a fresh `export_dir`; the version directory it wrote."""
    shutil.rmtree(export_dir, ignore_errors=True)
    out = run([sys.executable, "export/run.py", "--model_dir", str(model_dir),
               "--export_dir", str(export_dir), *flags])
    return pathlib.Path(out.strip().splitlines()[-1])


def exports_to_make(model_dir: pathlib.Path) -> dict:
    """name -> export/run.py flags: float32 and int8 on float32, and bfloat16 and int8 on
    bfloat16 when the model dir decodes in bfloat16."""
    float32 = ["--decode_precision", "float32"]
    plan = {"float32": float32, "int8_float32": float32 + ["--quantize", "int8"]}
    settings = json.loads((model_dir / "settings.json").read_text(encoding="utf-8"))
    if settings.get("decoding", {}).get("precision") == "bfloat16":
        plan.update({"bfloat16": [], "int8_bfloat16": ["--quantize", "int8"]})
    return plan


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--work", required=True, help="scratch directory (replaced)")
    parser.add_argument("--data_dir", default=os.environ.get("KT_DATA_DIR", "../shared/data"))
    parser.add_argument("--source", default="multi30k/test_2016_flickr.en")
    parser.add_argument("--reference", default="multi30k/test_2016_flickr.de")
    parser.add_argument("--sentences", type=int, default=0, help="the first N (0: all)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--loaders", default="tf2,tf1")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ct2_python", default=None,
                        help="a Python with ctranslate2 and sentencepiece (none: no CTranslate2)")
    args = parser.parse_args()
    if args.ct2_python and not shutil.which(args.ct2_python):
        parser.error(f"--ct2_python {args.ct2_python}: no such program; make it with "
                     f"`python -m venv /tmp/venvs/ct2 && /tmp/venvs/ct2/bin/pip install "
                     f"ctranslate2 sentencepiece numpy`, or leave the flag out")

    work = pathlib.Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    model = work / "model"
    model.mkdir(parents=True)
    for name in MODEL_FILES:
        shutil.copyfile(pathlib.Path(args.model_dir) / name, model / name)

    exports = {name: export(model, work / name, flags)
               for name, flags in exports_to_make(model).items()}
    speed = [sys.executable, str(HERE / "serving_speed.py"),
             "--input", str(pathlib.Path(args.data_dir) / args.source),
             "--batch", str(args.batch), "--sentences", str(args.sentences),
             "--loaders", args.loaders, "--rounds", str(args.rounds),
             "--outputs_dir", str(work / "outputs")]
    for path in exports.values():
        speed += ["--saved_model", str(path)]
    if args.ct2_python:
        run([sys.executable, str(HERE / "ct2_convert.py"), "convert", "--model_dir",
             str(model), "--output_dir", str(work / "ct2"), "--ct2_python", args.ct2_python])
        speed += ["--ct2_dir", str(work / "ct2"), "--ct2_python", args.ct2_python]
    summary = json.loads(run(speed).strip().splitlines()[-1])

    sys.path.insert(0, str(ROOT))
    from pipelines.tasks.bleu import sacre_bleu

    references = (pathlib.Path(args.data_dir) / args.reference).read_text(
        encoding="utf-8").splitlines()[:summary["sentences"]]
    names = list(exports)
    rows = {}
    for row in summary["runs"]:
        # serving_speed's run names: "ct2_int8", or "<index>:<label>:<loader>" for exports.
        parts = row["run"].split(":")
        engine, loader = (names[int(parts[0])], parts[2]) if len(parts) == 3 else (parts[0],
                                                                                   None)
        hypotheses = (work / "outputs" / f"{row['run'].replace(':', '_')}.txt").read_text(
            encoding="utf-8").splitlines()
        score, signature = sacre_bleu(hypotheses, references)
        rows[(engine, loader)] = {
            "bench": "int8_export", "engine": engine, "loader": loader,
            "bytes": directory_bytes(exports[engine]) if engine in exports else
            directory_bytes(work / "ct2"),
            "sacrebleu": round(score, 2), "signature": signature,
            "sentences_per_s": row["sentences_per_s"],
            "sentences_per_cpu_s": row["sentences_per_cpu_s"]}
        print(json.dumps(rows[(engine, loader)]), flush=True)
    print(json.dumps(summarize(rows, summary)), flush=True)


def summarize(rows, speed_summary):
    """Ratios of every int8 export to float32, its compute precision and CTranslate2."""
    def ratio(a, b):
        return round(a / b, 3) if a and b else None

    def cpu_speed(engine, loader):
        return rows.get((engine, loader), {}).get("sentences_per_cpu_s")

    loaders = sorted({loader for _, loader in rows if loader})
    first = {engine: rows[(engine, loaders[0])] for engine, loader in rows
             if loader == loaders[0]}
    float32 = first["float32"]
    out = []
    for engine, row in first.items():
        if not engine.startswith("int8"):
            continue
        compute = engine.split("_", 1)[1]
        entry = {"engine": engine,
                 "size_ratio_float32_to_int8": ratio(float32["bytes"], row["bytes"]),
                 "sacrebleu": row["sacrebleu"], "sacrebleu_float32": float32["sacrebleu"],
                 "bleu_delta_to_float32": round(row["sacrebleu"] - float32["sacrebleu"], 2)}
        if "bfloat16" in first:
            entry["size_ratio_bfloat16_to_int8"] = ratio(first["bfloat16"]["bytes"],
                                                         row["bytes"])
        for loader in loaders:
            mine = cpu_speed(engine, loader)
            entry[f"speed_{loader}"] = {
                "sentences_per_cpu_s": mine,
                "ratio_to_float32": ratio(mine, cpu_speed("float32", loader)),
                f"ratio_to_{compute}": ratio(mine, cpu_speed(compute, loader)),
                "ratio_to_ct2_int8": ratio(mine, cpu_speed("ct2_int8", None)),
                "ratio_to_ct2_float32": ratio(mine, cpu_speed("ct2_float32", None))}
        out.append(entry)
    return {"bench": "int8_export_summary", "sentences": speed_summary["sentences"],
            "batch": speed_summary["batch"], "rounds": speed_summary["rounds"],
            "cpus": speed_summary["cpus"],
            "ct2": {name: {"sacrebleu": rows[(name, None)]["sacrebleu"],
                           "sentences_per_cpu_s": rows[(name, None)]["sentences_per_cpu_s"]}
                    for name in ("ct2_float32", "ct2_int8") if (name, None) in rows},
            "int8": out}


if __name__ == "__main__":
    main()
