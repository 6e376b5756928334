#!/usr/bin/env python
"""Where the time goes: a TensorFlow profile of training steps or beam search, by op type.

Takes the same model flags as `throughput.py`, runs a few warm-up steps, records a profile
(`tf.profiler.experimental`) of the timed steps, and sums the host CPU time of every executed
op by its type (MatMul, _MklSoftmax, Transpose, ...), so a reader sees which kernels a step
spends its time in without TensorBoard's profile plugin:

    python benchmarks/profile_ops.py --mode train --config_name small --vocab 8000 \
        --layers 3 --d_model 256 --heads 4 --d_ff 1024 --batch 64 --src_len 16 --tgt_len 16
    python benchmarks/profile_ops.py --mode decode --config_name small --vocab 8000 \
        --layers 3 --d_model 256 --heads 4 --d_ff 1024 --batch 32 --src_len 16 --gen_len 20

Op times are summed over threads (inter-op parallelism makes their total exceed wall time);
shares are of that total. The raw profile stays in --logdir for TensorBoard. Prints a table
and one JSON line (the last line of stdout).
"""
import argparse
import collections
import json
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import throughput  # noqa: E402  (sets up paths, TF logging and the model flags)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from keras_transformer import LabelSmoothedCrossEntropy  # noqa: E402
from keras_transformer.schedules import paper_optimizer  # noqa: E402


def op_times(logdir: pathlib.Path) -> collections.Counter:
    """Microseconds per op type from the host plane of the newest profile under `logdir`."""
    planes = sorted(logdir.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not planes:
        raise SystemExit(f"no profile written under {logdir}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(planes[-1].read_bytes())
    totals = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            # Executor threads record one event per op kernel: "scope/name:OpType".
            for event in line.events:
                # Kernels are "scope/name:OpType"; runtime events are "Class::Method".
                scope, colon, op_type = names.get(event.metadata_id, "").rpartition(":")
                if (scope and colon and ":" not in scope
                        and (op_type[:1].isupper() or op_type[:1] == "_")):
                    totals[op_type] += event.duration_ps / 1e6
    return totals


def profile_train(args, logdir):
    model = throughput.build_model(args)
    rng = np.random.default_rng(args.seed)
    src = rng.integers(4, args.vocab, size=(args.batch, args.src_len), dtype=np.int32)
    tgt = rng.integers(4, args.vocab, size=(args.batch, args.tgt_len + 1), dtype=np.int32)
    model.compile(optimizer=paper_optimizer(args.d_model),
                  loss=LabelSmoothedCrossEntropy(0.1), jit_compile=bool(args.jit_compile))
    batch = ((src, tgt[:, :-1]), tgt[:, 1:])
    for _ in range(args.warmup_steps):
        model.train_on_batch(*batch)
    tf.profiler.experimental.start(str(logdir))
    start = time.perf_counter()
    for _ in range(args.steps):
        model.train_on_batch(*batch)
    seconds = time.perf_counter() - start
    tf.profiler.experimental.stop()
    return seconds / args.steps


def profile_decode(args, logdir):
    model = throughput.build_model(args)
    rng = np.random.default_rng(args.seed)
    src = tf.constant(rng.integers(4, args.vocab, size=(args.batch, args.src_len),
                                   dtype=np.int32))
    generate = tf.function(throughput.make_generate(model, args),
                           jit_compile=bool(args.jit_compile))
    generate(src).numpy()
    tf.profiler.experimental.start(str(logdir))
    start = time.perf_counter()
    for _ in range(args.repeats):
        generate(src).numpy()
    seconds = time.perf_counter() - start
    tf.profiler.experimental.stop()
    return seconds / args.repeats


def main():
    parser = throughput.argument_parser(__doc__)
    parser.add_argument("--logdir", default=None, help="profile directory (default: a temp dir)")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if args.mode == "peak":
        parser.error("--mode must be train or decode")
    args.repeats = args.repeats or 3
    logdir = pathlib.Path(args.logdir or tempfile.mkdtemp(prefix="kt-profile-"))
    if args.mixed_precision > 0:
        import keras

        keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if args.mode == "train" else "bfloat16")
    seconds = (profile_train if args.mode == "train" else profile_decode)(args, logdir)
    totals = op_times(logdir)
    total = sum(totals.values())
    print(f"{args.mode} {args.config_name}: {seconds * 1e3:.1f} ms per "
          f"{'step' if args.mode == 'train' else 'batch'} (wall); op time summed over threads "
          f"{total / 1e3 / (args.steps if args.mode == 'train' else args.repeats):.1f} ms")
    print(f"{'op type':<32}{'ms':>10}{'share':>8}")
    top = totals.most_common(args.top)
    for op_type, micros in top:
        print(f"{op_type:<32}{micros / 1e3:>10.1f}{micros / total:>8.1%}")
    print(json.dumps({"mode": args.mode, "config_name": args.config_name,
                      "jit_compile": args.jit_compile, "mixed_precision": args.mixed_precision,
                      "wall_s_per_call": round(seconds, 5), "logdir": str(logdir),
                      "op_ms": {k: round(v / 1e3, 2) for k, v in top},
                      "op_share": {k: round(v / total, 4) for k, v in top}}))


if __name__ == "__main__":
    main()
