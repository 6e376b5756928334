"""Speed of `translate_with_options` against `serving_default` (not a test: run by hand).

    python benchmarks/serving_options_speed.py [--d_model 32] [--layers 1]

Builds the export fixtures' vocabulary and model (600 SentencePiece pieces from 2,000 lines
of Multi30k train; a Transformer trained for 2 epochs, 124 steps, as tests/export/conftest.py
does, optionally wider/deeper), makes one `ServingFunctions` with beam 4, alpha 0.6, extra length
50 (the paper's settings) and times, on batches of real Multi30k validation sentences, the
in-process functions the SavedModel serves: `translate` (serving_default) and
`translate_with_options` with the same settings and one result. Each batch is timed
`--repeats` times per function, alternating the two, after a warm-up call; the medians are
summed over batches.
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--d_model", type=int, default=32)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--default_only", action="store_true",
                        help="time serving_default only (e.g. on an older checkout)")
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    from keras_transformer.serving.functions import ServingFunctions
    from keras_transformer import BeamSearch, Transformer, TransformerConfig
    from pipelines.data import vocab
    from tests.conftest import data_dir
    from tests.export import conftest as fx

    data = data_dir() / "multi30k"
    corpus = {lang: fx._read_head(data / f"train.{lang}.gz", fx.NUM_LINES)
              for lang in ("en", "de")}
    with tempfile.TemporaryDirectory() as work:
        files = []
        for lang, lines in corpus.items():
            path = pathlib.Path(work) / f"train.{lang}"
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            files.append(path)
        spm_proto = vocab.build_vocab(files, pathlib.Path(work), fx.VOCAB_SIZE,
                                      log=lambda m: None).read_bytes()

    keras.utils.set_random_seed(1234)
    config = TransformerConfig.preset(
        "base", vocab_size=fx.VOCAB_SIZE, num_layers=args.layers, d_model=args.d_model,
        d_ff=2 * args.d_model, num_heads=2, dropout=0.0, max_length=fx.MAX_LENGTH)
    model = Transformer(config)
    fx.train_briefly(model, spm_proto, corpus)

    translator = ServingFunctions(model, spm_proto, BeamSearch(beam_size=4, alpha=0.6,
                                                         extra_length=50))
    lines = (data / "val.en").read_text(encoding="utf-8").splitlines()
    batches = [tf.constant(lines[i * args.batch_size:(i + 1) * args.batch_size])
               for i in range(args.batches)]

    def default(batch):
        return translator.translate(batch)["translation"]

    def options(batch):
        n = tf.shape(batch)[0]
        return translator.translate_with_options(
            batch, tf.constant(4), tf.constant(0.6), tf.constant(1), tf.constant(50),
            tf.fill([n], ""))["translations"][:, 0]

    functions = [("serving_default", default), ("translate_with_options", options)]
    if args.default_only:
        functions = functions[:1]
    for batch in batches:  # warm-up (tracing) and the equality the timing relies on
        if args.default_only:
            default(batch)
        else:
            assert default(batch).numpy().tolist() == options(batch).numpy().tolist()
    times = {name: [] for name, _ in functions}
    for batch in batches:
        per = {name: [] for name in times}
        for _ in range(args.repeats):
            for name, fn in functions:
                start = time.perf_counter()
                fn(batch).numpy()
                per[name].append(time.perf_counter() - start)
        for name in times:
            times[name].append(statistics.median(per[name]))
    total = {name: sum(values) for name, values in times.items()}
    sentences = args.batches * args.batch_size
    print(f"model: {args.layers} layer(s), d_model {args.d_model}; {args.batches} batches of "
          f"{args.batch_size} Multi30k val sentences; beam 4, alpha 0.6, extra 50; median of "
          f"{args.repeats} per batch; TensorFlow {tf.__version__}")
    for name, seconds in total.items():
        print(f"{name:24s} {seconds:7.3f} s  ({sentences / seconds:6.1f} sentences/s)  "
              f"per batch: {', '.join(f'{t:.3f}' for t in times[name])}")
    if not args.default_only:
        ratio = total["translate_with_options"] / total["serving_default"]
        print(f"translate_with_options / serving_default = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
