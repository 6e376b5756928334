#!/usr/bin/env python
"""Terminology acceptance: term usage and BLEU with required phrases beside without them.

    python benchmarks/terminology.py --model_dir runs/multi30k_ende --work /tmp/terms

Each source of Multi30k's test_2016_flickr gets `--terms_per_sentence` required target
phrases drawn from its reference: its longest words (letters only, at least
`--min_term_chars`, first occurrence wins ties), as a user's glossary would supply the
domain words a model gets wrong. The model dir's final model translates the sources twice
through the translate stage (`pipelines/run.py --mode translate`, the served graph's
search): without terms and with `--terms`. Term usage is the share of terms found in their
translation (exact, case-sensitive substring); BLEU is sacreBLEU against the references.
Logs go to stderr; one JSON line on stdout.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import sacrebleu

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUN = ROOT / "pipelines" / "run.py"
WORD = re.compile(r"[^\W\d_]+")


def reference_terms(reference: str, count: int, min_chars: int) -> list[str]:
    """The `count` longest distinct words of `reference` with >= `min_chars` letters."""
    words = []
    for word in WORD.findall(reference):
        if len(word) >= min_chars and word not in words:
            words.append(word)
    return sorted(words, key=len, reverse=True)[:count]  # sorted() is stable: ties keep order


def translate(model_dir: str, source: pathlib.Path, *extra: str) -> tuple[list[str], float]:
    """The translate stage's output lines for `source`, and its wall seconds."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(RUN), "--mode", "translate", "--model_dir",
                             model_dir, "--input", str(source), *extra], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE)
    if result.returncode:
        sys.exit(f"terminology: run.py --mode translate {' '.join(extra)} failed "
                 f"(exit {result.returncode})")
    return result.stdout.splitlines(), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--work", required=True, help="folder for the source and terms files")
    parser.add_argument("--data_dir", default=os.environ.get("KT_DATA_DIR", ROOT.parent /
                                                             "shared" / "data"))
    parser.add_argument("--sentences", type=int, default=0, help="the first N (0: all)")
    parser.add_argument("--terms_per_sentence", type=int, default=1)
    parser.add_argument("--min_term_chars", type=int, default=4)
    parser.add_argument("--beam_size", type=int, default=None,
                        help="decode both ways with this beam (default: the model dir's)")
    args = parser.parse_args()

    data = pathlib.Path(args.data_dir) / "multi30k"
    sources = (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    references = (data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    if args.sentences:
        sources, references = sources[:args.sentences], references[:args.sentences]
    terms = [reference_terms(r, args.terms_per_sentence, args.min_term_chars)
             for r in references]
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    source_path, terms_path = work / "source.en", work / "terms.tsv"
    source_path.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    terms_path.write_text("".join("\t".join(t) + "\n" for t in terms), encoding="utf-8")

    results, metric = {}, sacrebleu.BLEU()
    beam = () if args.beam_size is None else (f"--beam_size={args.beam_size}",)
    for name, extra in (("unconstrained", ()), ("terms", ("--terms", str(terms_path)))):
        print(f"terminology: translating {len(sources)} sentences, {name}", file=sys.stderr)
        outputs, seconds = translate(args.model_dir, source_path, *beam, *extra)
        if len(outputs) != len(sources):
            sys.exit(f"terminology: {len(outputs)} translations for {len(sources)} sources")
        used = sum(t in out for out, row in zip(outputs, terms) for t in row)
        bleu = metric.corpus_score(outputs, [references])
        results[name] = {"bleu": round(bleu.score, 2),
                         "term_usage": round(100.0 * used / max(sum(map(len, terms)), 1), 2),
                         "seconds": round(seconds, 1)}
        print(f"terminology: {name}: {results[name]}", file=sys.stderr)
    print(json.dumps({
        "model_dir": args.model_dir, "sentences": len(sources), "beam_size": args.beam_size,
        "term_count": sum(map(len, terms)), "terms_per_sentence": args.terms_per_sentence,
        **results,
        "bleu_delta": round(results["terms"]["bleu"] - results["unconstrained"]["bleu"], 2),
        "sacrebleu": str(metric.get_signature())}))


if __name__ == "__main__":
    main()
