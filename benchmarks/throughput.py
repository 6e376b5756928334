#!/usr/bin/env python
"""Training and beam-search decoding throughput of keras_transformer, with peak memory.

Same flags, FLOP formula and JSON fields as the peer benchmarks in ../shared/bench
(peer_keras_hub.py, peer_model_garden.py), so the figures can be put side by side:

    python benchmarks/throughput.py --mode peak
    python benchmarks/throughput.py --mode train --config_name small --vocab 8000 --layers 3 \
        --d_model 256 --heads 4 --d_ff 1024 --batch 64 --src_len 16 --tgt_len 16
    python benchmarks/throughput.py --mode decode --config_name small --vocab 8000 --layers 3 \
        --d_model 256 --heads 4 --d_ff 1024 --batch 32 --src_len 16 --gen_len 20

Analytic model FLOPs (matmul only; 1 MAC = 2 FLOPs; causal mask not discounted):
  encoder layer : 8*B*S*d^2 + 4*B*S^2*d + 4*B*S*d*f
  decoder layer : 8*B*T*d^2 + 4*B*T^2*d + 4*B*T*d^2 + 4*B*S*d^2 + 4*B*T*S*d + 4*B*T*d*f
  output proj.  : 2*B*T*d*V;  forward = N*(enc + dec) + out;  train step = 3 * forward
Prints one JSON line (the last line of stdout).
"""
import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cli.startup import POOLED_CPU_ALLOCATOR, use_pooled_cpu_allocator  # noqa: E402

use_pooled_cpu_allocator()  # as pipelines/run.py trains (TF_CPU_ALLOCATOR_USE_BFC=false: off)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

from keras_transformer import LabelSmoothedCrossEntropy, Transformer, TransformerConfig  # noqa: E402
from keras_transformer.schedules import paper_optimizer  # noqa: E402
from keras_transformer.decoding import BeamSearch  # noqa: E402
from keras_transformer.decoding.beam import SearchOptions, beam_search  # noqa: E402

BOS, EOS = 2, 3


def forward_flops(B, S, T, d, f, N, V):
    enc = 8 * B * S * d * d + 4 * B * S * S * d + 4 * B * S * d * f
    dec = (8 * B * T * d * d + 4 * B * T * T * d + 4 * B * T * d * d + 4 * B * S * d * d
           + 4 * B * T * S * d + 4 * B * T * d * f)
    out = 2 * B * T * d * V
    return {"encoder": N * enc, "decoder": N * dec, "output_proj": out,
            "forward": N * (enc + dec) + out}


def peak_rss_mb():
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def build_model(args):
    config = TransformerConfig.preset(
        "base", vocab_size=args.vocab, num_layers=args.layers, d_model=args.d_model,
        num_heads=args.heads, d_ff=args.d_ff, dropout=args.dropout,
        max_length=max(args.src_len, args.tgt_len, args.gen_len) + 1)
    model = Transformer(config)
    return model


class StepTimer(keras.callbacks.Callback):
    """Wall time of every training batch, synchronised on the loss."""

    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])
        self.times.append(time.perf_counter() - self._start)


def run_train(args, result):
    model = build_model(args)
    rng = np.random.default_rng(args.seed)
    src = rng.integers(4, args.vocab, size=(args.num_batches, args.batch, args.src_len),
                       dtype=np.int32)
    tgt = rng.integers(4, args.vocab, size=(args.num_batches, args.batch, args.tgt_len + 1),
                       dtype=np.int32)
    data = tf.data.Dataset.from_tensor_slices(((src, tgt[:, :, :-1]), tgt[:, :, 1:]))
    model.compile(optimizer=paper_optimizer(args.d_model),
                  loss=LabelSmoothedCrossEntropy(0.1), jit_compile=bool(args.jit_compile))
    timer = StepTimer()
    model.fit(data.repeat().prefetch(2), steps_per_epoch=args.warmup_steps + args.steps,
              epochs=1, verbose=0, callbacks=[timer])
    timed = timer.times[args.warmup_steps:]
    median = statistics.median(timed)
    flops = forward_flops(args.batch, args.src_len, args.tgt_len, args.d_model, args.d_ff,
                          args.layers, args.vocab)
    result.update({
        "params": int(model.count_params()),
        "median_step_s": round(median, 5),
        "min_step_s": round(min(timed), 5),
        "first_step_s_incl_trace": round(timer.times[0], 3),
        "tgt_tokens_per_s": round(args.batch * args.tgt_len / median, 2),
        "src_tgt_tokens_per_s": round(args.batch * (args.src_len + args.tgt_len) / median, 2),
        "train_gflop_per_step": round(3 * flops["forward"] / 1e9, 4),
        "achieved_gflops": round(3 * flops["forward"] / median / 1e9, 3),
        "step_times_s": [round(t, 4) for t in timed],
    })


def make_generate(model, args):
    """Beam search for exactly gen_len tokens (no early finish), as the peers measure it."""

    def generate(source_ids):
        batch = tf.shape(source_ids)[0]
        memory, mask = model.encode(source_ids, training=False)
        cache, memory_state = model.initial_decode_state(memory, mask, args.beams, args.gen_len)

        def step(ids, position, cache, sentences):
            return model.decode_step(ids, position, cache, memory_state)

        ids = beam_search(step, tf.fill([batch], BOS), cache, BeamSearch(args.beams, 0.6),
                          args.gen_len, EOS, SearchOptions(early_finish=False)).ids
        return ids[:, 0]

    return generate


def run_decode(args, result):
    model = build_model(args)
    rng = np.random.default_rng(args.seed)
    src = tf.constant(rng.integers(4, args.vocab, size=(args.batch, args.src_len),
                                   dtype=np.int32))
    generate = tf.function(make_generate(model, args), jit_compile=bool(args.jit_compile))
    start = time.perf_counter()
    out = generate(src).numpy()
    warm = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        out = generate(src).numpy()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    result.update({
        "params": int(model.count_params()),
        "beams": args.beams,
        "warmup_call_s_incl_trace": round(warm, 3),
        "median_s_per_batch": round(median, 4),
        "min_s_per_batch": round(min(times), 4),
        "times_s": [round(t, 4) for t in times],
        "sentences_per_s": round(args.batch / median, 3),
        "generated_tokens_per_s": round(args.batch * args.gen_len / median, 2),
        "output_shape": list(out.shape),
        "decoder": "keras_transformer.decoding.beam.beam_search, self-attention KV cache "
                   "reordered, "
                   "cross-attention K/V once per sentence",
    })


def run_peak(args, result):
    """matmul_n x matmul_n matmul GFLOP/s in float32 and in bfloat16: the two ceilings.

    bfloat16 is fast only where the CPU multiplies it natively (AVX512_BF16, AMX); elsewhere
    oneDNN emulates it, and this figure says by how much that loses.
    """
    for dtype in ("float32", "bfloat16"):
        median, best = _matmul_seconds(args.matmul_n, dtype, args.repeats)
        prefix = "" if dtype == "float32" else "bfloat16_"
        result.update({f"{prefix}median_s": round(median, 5),
                       f"{prefix}gflops_median": round(2 * args.matmul_n ** 3 / median / 1e9, 2),
                       f"{prefix}gflops_best": round(2 * args.matmul_n ** 3 / best / 1e9, 2)})
    result["matmul_n"] = args.matmul_n


def _matmul_seconds(n, dtype, repeats):
    """(median, best) seconds of one n x n matmul in `dtype`, after 3 warm-up calls."""
    a = tf.cast(tf.random.normal((n, n), seed=1), dtype)
    b = tf.cast(tf.random.normal((n, n), seed=2), dtype)
    matmul = tf.function(lambda x, y: tf.matmul(x, y))
    for _ in range(3):
        matmul(a, b)[0, 0].numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b)[0, 0].numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def argument_parser(description=__doc__):
    """The model, batch and mode flags, shared with the peers' scripts and profile_ops.py."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["train", "decode", "peak"], required=True)
    p.add_argument("--config_name", default="")
    p.add_argument("--vocab", type=int, default=37000)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d_model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d_ff", type=int, default=2048)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src_len", type=int, default=32)
    p.add_argument("--tgt_len", type=int, default=32)
    p.add_argument("--warmup_steps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--num_batches", type=int, default=4)
    p.add_argument("--gen_len", type=int, default=20)
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--jit_compile", type=int, default=0)
    p.add_argument("--mixed_precision", type=int, default=-1,
                   help="1: bfloat16 (train: mixed_bfloat16; decode: bfloat16 weights, as "
                        "pipelines/run.py decodes), 0: float32, -1: the project's default "
                        "(bfloat16 where pipelines/settings/device_policy.py trains in mixed_bfloat16)")
    p.add_argument("--matmul_n", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv=None):
    args = argument_parser().parse_args(argv)
    if args.repeats is None:
        args.repeats = 20 if args.mode == "peak" else 3
    keras.utils.set_random_seed(args.seed)
    if args.mixed_precision < 0:
        from pipelines.settings import device_policy

        args.mixed_precision = int(args.mode != "peak" and device_policy.precision(
            device_policy.detect())[0] == "mixed_bfloat16")
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if args.mode == "train" else "bfloat16")
    result = {"bench": "keras_transformer", "mode": args.mode, "config_name": args.config_name,
              "versions": {"python": platform.python_version(), "tensorflow": tf.__version__,
                           "keras": keras.__version__},
              "cpu_count": os.cpu_count(),
              "pooled_cpu_allocator": os.environ[POOLED_CPU_ALLOCATOR[0]],
              "jit_compile": bool(args.jit_compile),
              "mixed_precision": bool(args.mixed_precision)}
    {"train": run_train, "decode": run_decode, "peak": run_peak}[args.mode](args, result)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
