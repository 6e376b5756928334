#!/usr/bin/env python
"""What an int8 matmul costs in TensorFlow on this CPU, against float32 and bfloat16.

    taskset -c 0 python benchmarks/int8_kernels.py [--rows 128 --d_model 256 --units 768,1024,8000]

One decode step of the default job's model multiplies [rows, d_model] by [d_model, N]: rows
= batch 32 x beam 4, N = 768 (fused QKV), 1,024 (feed-forward) or 8,000 (the tied output
projection). For each N it times, as `tf.function`s, CPU microseconds per call (median of
`--repeats` runs of `--calls` calls):

* float32 and bfloat16 `MatMul` on a variable: what an unquantized export runs;
* `keras_int8`: `keras.layers.Dense` after `quantize("int8")` (int8 x int8 -> int32 matmul,
  activations quantized per call);
* `keras_int8_weight_only`: the same with `Int8QuantizationConfig(activation_quantizer=None)`
  (the int8 kernel cast to float at every call);
* `onednn_int8`: `QuantizedMatMulWithBiasAndDequantize` (TensorFlow's oneDNN int8 kernel:
  quint8 activations, qint8 weights, float output), activations quantized per call.

`export --quantize int8` (keras_transformer/serving/quantize.py) stores int8 and dequantizes once per request,
so each step runs the bfloat16 (or float32) row. Prints one JSON line per N.
"""
import argparse
import json
import os
import resource
import statistics

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def time_call(function, argument, calls, repeats):
    """Median CPU microseconds per call, after a warm-up."""
    for _ in range(10):
        function(argument)
    runs = []
    for _ in range(repeats):
        start = cpu_seconds()
        for _ in range(calls):
            function(argument)
        runs.append((cpu_seconds() - start) / calls * 1e6)
    return round(statistics.median(runs), 1)


def kernels(rows, d_model, units, seed=0):
    """name -> (tf.function, its input) for one [rows, d_model] x [d_model, units] matmul."""
    import keras
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    weights = (rng.standard_normal((d_model, units)) * d_model ** -0.5).astype(np.float32)
    x = tf.constant(rng.standard_normal((rows, d_model)).astype(np.float32))
    float32 = tf.Variable(weights)
    bfloat16 = tf.Variable(tf.cast(weights, tf.bfloat16))
    out = {"float32": (tf.function(lambda v: tf.matmul(v, float32)), x),
           "bfloat16": (tf.function(lambda v: tf.matmul(v, bfloat16)),
                        tf.cast(x, tf.bfloat16))}
    for name, config in (("keras_int8", None), ("keras_int8_weight_only",
                         keras.quantizers.Int8QuantizationConfig(activation_quantizer=None))):
        layer = keras.layers.Dense(units, use_bias=False)
        layer.build((None, d_model))
        layer.kernel.assign(weights)
        layer.quantize("int8", config=config)
        out[name] = (tf.function(lambda v, layer=layer: layer(v)), x)
    limit = float(np.abs(weights).max())
    qint8 = tf.constant(np.rint(weights / limit * 127).astype(np.int8), tf.qint8)
    bias = tf.zeros([units])

    def onednn(v):
        quantized = tf.quantization.quantize(v, -4.0, 4.0, tf.quint8, mode="MIN_FIRST")
        return tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=quantized.output, b=qint8, bias=bias, min_a=quantized.output_min,
            max_a=quantized.output_max, min_b=-limit, max_b=limit, min_freezed_output=-1.0,
            max_freezed_output=1.0, Toutput=tf.float32, input_quant_mode="MIN_FIRST")

    out["onednn_int8"] = (tf.function(onednn), x)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--d_model", type=int, default=256)
    parser.add_argument("--units", default="768,1024,8000")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import tensorflow as tf

    for units in (int(u) for u in args.units.split(",")):
        timings = {name: time_call(function, argument, args.calls, args.repeats)
                   for name, (function, argument) in kernels(args.rows, args.d_model,
                                                             units).items()}
        print(json.dumps({
            "bench": "int8_kernels", "rows": args.rows, "d_model": args.d_model,
            "units": units, "us_cpu_per_call": timings,
            "time_relative_to_bfloat16": {k: round(v / timings["bfloat16"], 2)
                                          for k, v in timings.items()},
            "cpus": len(os.sched_getaffinity(0)), "tensorflow": tf.__version__}), flush=True)


if __name__ == "__main__":
    main()
