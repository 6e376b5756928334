#!/usr/bin/env python
"""Decode speed of an exported SavedModel: raw sentences in, translations out, in batches.

    python benchmarks/serving_speed.py --saved_model runs/multi30k_ende/export/1 \
        --input $KT_DATA_DIR/multi30k/val.en --batch 32

Loads the SavedModel with plain TensorFlow (+ tensorflow_text for its ops), as a server
would, warms it up on one batch, then times one pass over all sentences. Prints one JSON line.
"""
import argparse
import json
import os
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the SentencePiece ops)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saved_model", required=True)
    parser.add_argument("--input", required=True, help="one source sentence a line")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    lines = open(args.input, encoding="utf-8").read().splitlines()
    serve = tf.saved_model.load(args.saved_model).signatures["serving_default"]
    batches = [lines[i:i + args.batch] for i in range(0, len(lines), args.batch)]
    start = time.perf_counter()
    serve(source=tf.constant(batches[0]))
    warmup = time.perf_counter() - start
    start = time.perf_counter()
    words = 0
    for batch in batches:
        out = serve(source=tf.constant(batch))
        words += sum(len(t.split()) for t in out["translation"].numpy())
    seconds = time.perf_counter() - start
    print(json.dumps({
        "bench": "saved_model_decode", "saved_model": args.saved_model,
        "sentences": len(lines), "batch": args.batch, "seconds": round(seconds, 2),
        "sentences_per_s": round(len(lines) / seconds, 2),
        "output_words_per_s": round(words / seconds, 1), "warmup_s": round(warmup, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tensorflow": tf.__version__}))


if __name__ == "__main__":
    main()
