#!/usr/bin/env python
"""A model directory as a CTranslate2 model in two environments, and CTranslate2 decoding
timed and compared with ours.

The product path is `pipelines/run.py --mode export --format ctranslate2` (one environment
with ``pip install -e ".[ctranslate2]"``); the conversion and the decoding rules live in
export/ctranslate2.py and export/ct2_decoding.py, which this script uses. It adds what
benchmarks need: converting where CTranslate2 lives in its own virtual environment without
TensorFlow (the work split by interpreter), timing, and comparisons with our search:

    python benchmarks/ct2_convert.py convert --model_dir runs/m30q --output_dir /tmp/ct2_m30q \
        --ct2_python /tmp/venvs/ct2/bin/python        # dump (here), then build (CT2 venv)
    python benchmarks/ct2_convert.py check --model_dir runs/m30q --ct2_dir /tmp/ct2_m30q \
        --ct2_python /tmp/venvs/ct2/bin/python --input val.en --sentences 50
    CT2/bin/python benchmarks/ct2_convert.py translate --ct2_dir /tmp/ct2_m30q --input val.en
    python benchmarks/ct2_convert.py compare --saved_model M/export_f32/1 \
        --ct2_dir M/export_ct2 --input test_2016_flickr.en    # TensorFlow and ctranslate2

* `dump` (TensorFlow side): the float32 model's arrays under CTranslate2's variable paths
  (`export.ctranslate2.model_arrays`), the vocabulary, shape settings and spm.model, as .npz.
* `build` (CTranslate2 side): `export.ctranslate2.build_spec` and `save` on that .npz: the
  same directory as the product's export.
* `translate` (CTranslate2 side): raw sentences in, translations out, timed in wall-clock
  and CPU seconds; prints one JSON line (`benchmarks/serving_speed.py` runs it beside the
  SavedModel). CTranslate2's own search with --length_penalty, or with --gnmt
  `export.ct2_decoding.translate` (our length penalty; --patience).
* `check` (TensorFlow side): our in-process beam search against `translate` on the same
  sentences, one at a time; prints how many translations are identical token for token.
* `compare` (both in one environment): a float32 SavedModel's `serving_default` against
  `export.ct2_decoding.translate` (patience 1 and 2) and CTranslate2's own search, batches
  of 32: the share identical, and for each difference which side's translation scores
  higher by our penalty under CTranslate2's log-probabilities (which search missed it).

Why CTranslate2's own search differs from ours (the layout mapping is export/ctranslate2.py's
docstring, the remedy export/ct2_decoding.py's): it divides a finished hypothesis's
log-probability by length ** length_penalty, not by GNMT's ((5 + length) / 6) ** alpha; with
a non-zero penalty it stops a sentence once beam_size hypotheses have finished (ours stops
when no live beam can still win), with 0 when its best beam ends; its maximum length is per
batch (ours is per sentence: source tokens + 50; `--per_sentence` gives each sentence its
own), and at that length it stops without an EOS where ours forces one (so one token less is
asked for).
With length_penalty 0 and alpha 0 both searches are the same search (see `check`).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # both sides import export/ctranslate2.py
from export import ct2_decoding  # noqa: E402  (no TensorFlow)
from export import ctranslate2 as ct2  # noqa: E402  (numpy only until used)


# --------------------------------------------------------------------------- TensorFlow side
def load_model(model_dir):
    """The model directory's final model in float32, and its SentencePiece model's bytes."""
    from keras_transformer.model_dir import VOCAB_FILE
    from pipelines.model_dir import layout as md

    model = md.load_final_model(model_dir, "float32", log=lambda m: print(m, file=sys.stderr))
    return model, (pathlib.Path(model_dir) / VOCAB_FILE).read_bytes()


def dump(model_dir, npz_path):
    """Writes `model_dir`'s arrays in CTranslate2's names (export/ctranslate2.py), its
    vocabulary, shape settings and SentencePiece model to `npz_path`."""
    model, proto = load_model(model_dir)
    try:
        settings = ct2.model_settings(model.config)
        pieces = ct2.vocabulary(proto, model.config.vocab_size)
    except ct2.ConversionError as e:
        raise SystemExit(f"{model_dir}: {e}")
    np.savez(npz_path, __vocabulary__=np.array(pieces), __spm__=np.frombuffer(proto, np.uint8),
             __settings__=np.array(json.dumps(settings)), **ct2.model_arrays(model))
    return settings


# --------------------------------------------------------------------------- CTranslate2 side
def build(npz_path, output_dir, decoding):
    """Builds and saves (export/ctranslate2.py's layout) the model `dump` wrote."""
    import ctranslate2

    data = np.load(npz_path)
    settings = json.loads(str(data["__settings__"]))
    arrays = {path: data[path] for path in data.files if not path.startswith("__")}
    spec = ct2.build_spec(arrays, settings, [str(p) for p in data["__vocabulary__"]])
    info = {"decoding": decoding, "model": settings, "ctranslate2": ctranslate2.__version__}
    ct2.save(spec, data["__spm__"].tobytes(), info, output_dir, overwrite=True)
    return {"ctranslate2": ctranslate2.__version__, "output_dir": str(output_dir),
            "variables": len(arrays), **settings}


def _strip_end(tokens):
    return tokens[:-1] if tokens and tokens[-1] == "</s>" else tokens


def translate(args):
    """CTranslate2 decoding of the lines of `args.input`, timed as the served model is: raw
    text in (SentencePiece encode), `translate_batch` per batch, text out (decode). With
    --gnmt, `export.ct2_decoding.translate` (our length penalty, patience 2); else
    CTranslate2's own search with --length_penalty."""
    import ctranslate2
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=args.spm)
    lines = pathlib.Path(args.input).read_text(encoding="utf-8").splitlines()
    if args.sentences:
        lines = lines[:args.sentences]
    threads = args.threads or len(os.sched_getaffinity(0))
    start = time.perf_counter()
    translator = ctranslate2.Translator(args.ct2_dir, device="cpu",
                                        compute_type=args.compute_type, inter_threads=1,
                                        intra_threads=threads)
    load_s = time.perf_counter() - start
    decoding = {"beam_size": args.beam_size, "alpha": args.alpha,
                "extra_length": args.extra_length, "max_input_length": args.max_input_length}
    options = dict(beam_size=args.beam_size, length_penalty=args.length_penalty,
                   return_end_token=True, max_batch_size=0, num_hypotheses=1,
                   return_scores=True, max_input_length=0, min_decoding_length=0)
    size = 1 if args.per_sentence else args.batch
    batches = [lines[i:i + size] for i in range(0, len(lines), size)]

    def run(batch):
        if args.gnmt:
            out = ct2_decoding.translate(translator, sp, batch, decoding, args.output_cap,
                                args.patience)
            return ([o["pieces"] for o in out], [o["translation"] for o in out],
                    [o["score"] for o in out])
        pieces, limit = ct2_decoding.source_pieces(sp, batch, decoding, args.output_cap)
        results = translator.translate_batch(pieces, max_decoding_length=limit, **options)
        hypotheses = [_strip_end(r.hypotheses[0]) for r in results]
        return hypotheses, sp.decode_pieces(hypotheses), [r.scores[0] for r in results]

    start = time.perf_counter()
    run(batches[0])
    warmup_s = time.perf_counter() - start
    passes, cpu = [], []
    for _ in range(args.repeats):
        hypotheses, texts, scores = [], [], []
        start, start_cpu = time.perf_counter(), time.process_time()
        for batch in batches:
            h, t, s = run(batch)
            hypotheses += h
            texts += t
            scores += s
        passes.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    seconds, cpu_seconds = statistics.median(passes), statistics.median(cpu)
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(
            {"pieces": hypotheses, "translations": texts, "scores": scores}), encoding="utf-8")
    import resource

    pieces_out = sum(len(h) for h in hypotheses)
    return {
        "bench": "ct2_decode", "engine": "ctranslate2", "compute_type": args.compute_type,
        "ct2_dir": args.ct2_dir, "sentences": len(lines), "batch": size,
        "beam_size": args.beam_size,
        "length_penalty": f"gnmt, patience {args.patience}" if args.gnmt else args.length_penalty,
        "seconds": round(seconds, 3), "passes_s": [round(p, 3) for p in passes],
        "sentences_per_s": round(len(lines) / seconds, 2),
        "cpu_seconds": round(cpu_seconds, 3),
        "sentences_per_cpu_s": round(len(lines) / cpu_seconds, 2),
        "output_words_per_s": round(sum(len(t.split()) for t in texts) / seconds, 1),
        "output_pieces_per_sentence": round(pieces_out / len(lines), 2),
        "pad_in_output": sum("<pad>" in h for h in hypotheses),
        "warmup_s": round(warmup_s, 3), "load_s": round(load_s, 3), "intra_threads": threads,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ctranslate2": ctranslate2.__version__,
    }


# --------------------------------------------------------------------------- both sides
def convert(args):
    """dump here, build with the CTranslate2 interpreter (the same directory as
    `pipelines/run.py --mode export --format ctranslate2` writes, decoding settings the
    model dir's)."""
    from pipelines.settings import resolver

    decoding = resolver.resolve({"model_dir": str(args.model_dir)}).decoding
    with tempfile.TemporaryDirectory() as work:
        npz = os.path.join(work, "weights.npz")
        settings = dump(args.model_dir, npz)
        out = subprocess.run([args.ct2_python, __file__, "build", "--npz", npz,
                              "--output_dir", args.output_dir, "--decoding", json.dumps(
                                  ct2.decoding_settings(decoding, settings["max_length"]))],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def ct2_translations(args, lines_path, beam_size, length_penalty, per_sentence,
                     compute_type="float32"):
    """Runs `translate` with the CTranslate2 interpreter; (its JSON line, its outputs)."""
    with tempfile.TemporaryDirectory() as work:
        output = os.path.join(work, "out.json")
        command = [args.ct2_python, __file__, "translate", "--ct2_dir", args.ct2_dir,
                   "--spm", args.spm, "--input", lines_path, "--beam_size", str(beam_size),
                   "--length_penalty", str(length_penalty), "--compute_type", compute_type,
                   "--extra_length", str(args.extra_length), "--output", output,
                   "--max_input_length", str(args.max_input_length),
                   "--output_cap", str(args.output_cap)]
        if per_sentence:
            command.append("--per_sentence")
        out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
        return json.loads(out.strip().splitlines()[-1]), json.loads(
            pathlib.Path(output).read_text(encoding="utf-8"))


def check(args):
    """Our beam search (in-process, float32) against CTranslate2 on the first sentences."""
    import tensorflow as tf

    from keras_transformer.data import text
    from keras_transformer.decoding import BeamSearch, decode

    model, proto = load_model(args.model_dir)
    pieces = ct2.vocabulary(proto, model.config.vocab_size)
    args.spm = args.spm or str(pathlib.Path(args.model_dir) / "spm.model")
    args.output_cap = args.output_cap or model.config.max_length
    lines = pathlib.Path(args.input).read_text(encoding="utf-8").splitlines()[:args.sentences]
    import tensorflow_text as tf_text

    tokenizer = tf_text.SentencepieceTokenizer(
        model=pathlib.Path(args.spm).read_bytes(), out_type=tf.int32)
    results = []
    with tempfile.TemporaryDirectory() as work:
        lines_path = os.path.join(work, "lines.txt")
        pathlib.Path(lines_path).write_text("\n".join(lines) + "\n", encoding="utf-8")
        for beam_size, alpha, penalty in ((1, 0.0, 0.0), (4, 0.0, 0.0),
                                          (4, args.alpha, args.length_penalty)):
            search = tf.function(
                lambda source, b=beam_size, a=alpha: decode(
                    model, text.sentences_to_ids(tokenizer, source, args.max_input_length),
                    BeamSearch(beam_size=b, alpha=a, extra_length=args.extra_length),
                    max_length=args.output_cap).ids,
                input_signature=[tf.TensorSpec([None], tf.string)])
            ours = []
            for line in lines:  # one at a time: each sentence's own maximum length
                row = [int(i) for i in search(tf.constant([line]))[0, 0].numpy()]
                ours.append([pieces[i] for i in row[:row.index(3)] if i != 0]
                            if 3 in row else [pieces[i] for i in row if i != 0])
            _, theirs = ct2_translations(args, lines_path, beam_size, penalty, True)
            same = sum(a == b for a, b in zip(ours, theirs["pieces"]))
            differ = [{"line": i, "ours": " ".join(a), "ct2": " ".join(b)}
                      for i, (a, b) in enumerate(zip(ours, theirs["pieces"])) if a != b]
            results.append({"beam_size": beam_size, "alpha": alpha,
                            "ct2_length_penalty": penalty, "sentences": len(lines),
                            "identical": same, "agreement": round(same / len(lines), 4),
                            "first_differences": differ[:3]})
    return {"bench": "ct2_check", "model_dir": args.model_dir, "ct2_dir": args.ct2_dir,
            "results": results}


def compare(args):
    """A float32 SavedModel's `serving_default` against `export.ct2_decoding.translate` (and
    CTranslate2's own search) on the same lines and batches: the share of identical
    translations, and for each difference which side's choice scores higher by our penalty
    under CTranslate2's own log-probabilities (`score_batch`): ours higher means CTranslate2's
    search missed it, CTranslate2's higher means ours did."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the export uses)

    lines = pathlib.Path(args.input).read_text(encoding="utf-8").splitlines()
    lines = lines[:args.sentences] if args.sentences else lines
    batches = [lines[i:i + args.batch] for i in range(0, len(lines), args.batch)]
    serve = tf.saved_model.load(args.saved_model).signatures["serving_default"]
    ours = [t.decode("utf-8") for b in batches
            for t in serve(source=tf.constant(b))["translation"].numpy()]
    translator, sp, info = ct2_decoding.load(args.ct2_dir, intra_threads=1)
    decoding, max_length = info["decoding"], info["model"]["max_length"]
    results = []
    for patience in sorted({1.0, 2.0, ct2_decoding.PATIENCE}):
        theirs = [o for b in batches for o in ct2_decoding.translate(
            translator, sp, b, decoding, max_length, patience)]
        differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b["translation"]]
        better = {"ours": 0, "ct2": 0, "equal": 0}
        for i in differ:
            pieces, _ = ct2_decoding.source_pieces(sp, [lines[i]], decoding, max_length)
            targets = [sp.encode(ours[i], out_type=str), theirs[i]["pieces"]]
            scored = translator.score_batch(pieces * 2, targets)
            gnmt = [sum(r.log_probs) / ((5.0 + len(r.log_probs)) / 6.0) ** decoding["alpha"]
                    for r in scored]
            better["ours" if gnmt[0] > gnmt[1] + 1e-5 else
                   "ct2" if gnmt[1] > gnmt[0] + 1e-5 else "equal"] += 1
        results.append({"search": f"gnmt, patience {patience}", "identical": len(lines) -
                        len(differ), "share": round(1 - len(differ) / len(lines), 4),
                        "higher_scoring_side": better, "differing_lines": differ,
                        "first_differences": [{"line": i, "ours": ours[i],
                                               "ct2": theirs[i]["translation"]}
                                              for i in differ[:3]]})
    for penalty in args.ct2_length_penalties:
        theirs = []
        for b in batches:
            pieces, limit = ct2_decoding.source_pieces(sp, b, decoding, max_length)
            out = translator.translate_batch(pieces, beam_size=decoding["beam_size"],
                                             length_penalty=penalty, max_decoding_length=limit,
                                             max_input_length=0, min_decoding_length=0)
            theirs += sp.decode_pieces([r.hypotheses[0] for r in out])
        same = sum(a == b for a, b in zip(ours, theirs))
        results.append({"search": f"ctranslate2's, length_penalty {penalty}",
                        "identical": same, "share": round(same / len(lines), 4)})
    return {"bench": "ct2_compare", "saved_model": args.saved_model, "ct2_dir": args.ct2_dir,
            "sentences": len(lines), "batch": args.batch, "decoding": decoding,
            "results": results}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dump", help="model dir -> .npz in CTranslate2's layout (TensorFlow)")
    p.add_argument("--model_dir", required=True)
    p.add_argument("--npz", required=True)
    p = sub.add_parser("build", help=".npz -> CTranslate2 model dir (CTranslate2)")
    p.add_argument("--npz", required=True)
    p.add_argument("--output_dir", required=True)
    p.add_argument("--decoding", default=json.dumps({"beam_size": 4, "alpha": 0.6,
                                                     "extra_length": 50,
                                                     "max_input_length": 128}),
                   help="JSON: the decoding settings recorded for `translate`")
    p = sub.add_parser("convert", help="dump, then build with --ct2_python")
    p.add_argument("--model_dir", required=True)
    p.add_argument("--output_dir", required=True)
    p.add_argument("--ct2_python", required=True)
    p = sub.add_parser("compare", help="a float32 SavedModel against the CTranslate2 model "
                                       "(one environment with TensorFlow and ctranslate2)")
    p.add_argument("--saved_model", required=True, help="a float32 export version dir")
    p.add_argument("--ct2_dir", required=True)
    p.add_argument("--input", required=True, help="one source sentence a line")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--sentences", type=int, default=0, help="the first N lines (0: all)")
    p.add_argument("--ct2_length_penalties", type=float, nargs="*", default=[0.6],
                   help="also CTranslate2's own search with these length penalties")
    for name in ("translate", "check"):
        p = sub.add_parser(name)
        p.add_argument("--ct2_dir", required=True)
        p.add_argument("--input", required=True, help="one source sentence a line")
        p.add_argument("--spm", default=None, help="spm.model (check: the model dir's)")
        p.add_argument("--extra_length", type=int, default=50,
                       help="at most source tokens + this many output tokens (ours: 50)")
        p.add_argument("--max_input_length", type=int, default=128,
                       help="sources keep their first max_input_length - 1 pieces + EOS")
        p.add_argument("--output_cap", type=int, default=0,
                       help="the model's max_length (0: from the model / ct2 dir)")
        p.add_argument("--length_penalty", type=float, default=0.6,
                       help="CTranslate2's: score / length ** length_penalty, EOS counted")
        p.add_argument("--alpha", type=float, default=0.6, help="our GNMT alpha")
    p = sub.choices["translate"]
    p.add_argument("--gnmt", action="store_true", help="our length penalty and stopping "
                                                       "(export.ct2_decoding.translate)")
    p.add_argument("--patience", type=float, default=ct2_decoding.PATIENCE,
                   help="--gnmt: CTranslate2 collects beam_size * patience finished hypotheses")
    p.add_argument("--compute_type", default="float32")
    p.add_argument("--beam_size", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--sentences", type=int, default=0, help="the first N lines (0: all)")
    p.add_argument("--repeats", type=int, default=1, help="timed passes; the median counts")
    p.add_argument("--threads", type=int, default=0, help="intra_threads (0: the cores "
                                                           "this process may use)")
    p.add_argument("--per_sentence", action="store_true",
                   help="one sentence per call: each gets its own maximum length")
    p.add_argument("--output", default=None, help="JSON file for pieces, texts and scores")
    p = sub.choices["check"]
    p.add_argument("--model_dir", required=True)
    p.add_argument("--ct2_python", required=True)
    p.add_argument("--sentences", type=int, default=50)
    args = parser.parse_args()

    if args.command == "dump":
        result = dump(args.model_dir, args.npz)
    elif args.command == "build":
        result = build(args.npz, args.output_dir, json.loads(args.decoding))
    elif args.command == "convert":
        result = convert(args)
    elif args.command == "compare":
        result = compare(args)
    elif args.command == "translate":
        saved = pathlib.Path(args.ct2_dir) / ct2.SETTINGS_FILE
        if not args.output_cap:
            if not saved.is_file():
                parser.error(f"--output_cap is needed: {saved} does not exist")
            args.output_cap = json.loads(saved.read_text(encoding="utf-8"))["model"]["max_length"]
        args.spm = args.spm or str(pathlib.Path(args.ct2_dir) / ct2.VOCAB_FILE)
        result = translate(args)
    else:
        result = check(args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
