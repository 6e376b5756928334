"""The precision and XLA setting each device trains with, and how the resolver takes them."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig
from pipelines.settings import describe, device_policy, resolver
from pipelines.settings.device_policy import Device
from pipelines.model_dir import checkpoints
from pipelines.training import train as train_lib
from tests.helpers import random_ids, tiny_config, training_options

CPU = Device()
AVX512_BF16 = Device("cpu", cpu_flags=frozenset({"avx512_bf16"}))
AMX_BF16 = Device("cpu", cpu_flags=frozenset({"amx_bf16"}))
PASCAL, TURING, AMPERE, HOPPER = (Device("gpu", cc) for cc in ((6, 1), (7, 5), (8, 0), (9, 0)))
JAX_CPU = Device("cpu", cpu_flags=frozenset({"avx512_bf16"}), cpu_devices=2, backend="jax")
JAX_AMPERE = Device("gpu", (8, 0), backend="jax")
SMALL = TransformerConfig.preset("multi30k_small").d_model  # 256
BASE = TransformerConfig.preset("base").d_model  # 512


@pytest.mark.parametrize("device, policy, mixed, why", [
    (CPU, "float32", "mixed_bfloat16", "the CPU has no bfloat16 instructions"),
    (AVX512_BF16, "mixed_bfloat16", "mixed_bfloat16", "natively (avx512_bf16)"),
    (AMX_BF16, "mixed_bfloat16", "mixed_bfloat16", "natively (amx_bf16)"),
    (PASCAL, "float32", "mixed_float16", "6.1 has no float16 tensor cores"),
    (TURING, "mixed_float16", "mixed_float16", "7.5 has float16 tensor cores"),
    (AMPERE, "mixed_bfloat16", "mixed_bfloat16", "8.0 has bfloat16 tensor cores"),
    (HOPPER, "mixed_bfloat16", "mixed_bfloat16", "9.0 has bfloat16 tensor cores"),
    (Device("gpu"), "float32", "mixed_float16", "compute capability unknown"),
    (JAX_CPU, "float32", "mixed_bfloat16", "jax compiles every step with XLA"),
    (JAX_AMPERE, "mixed_bfloat16", "mixed_bfloat16", "8.0 has bfloat16 tensor cores"),
])
@pytest.mark.quick
def test_each_device_s_precision(device, policy, mixed, why):
    """The default policy and its reason; `mixed` is what --mixed_precision means there."""
    name, reason = device_policy.precision(device)
    assert name == policy and why in reason
    assert device_policy.mixed_policy(device) == mixed


@pytest.mark.parametrize("device, d_model, policy, on, why", [
    (CPU, SMALL, "float32", False, "d_model 256 < 512"),
    (CPU, BASE, "float32", True, "d_model 512 >= 512"),
    (AVX512_BF16, SMALL, "mixed_bfloat16", False, "bfloat16 hardware"),
    (AVX512_BF16, BASE, "mixed_bfloat16", False, "bfloat16 hardware"),
    (AVX512_BF16, BASE, "float32", True, "d_model 512 >= 512"),
    (Device("cpu", cpu_devices=2), BASE, "float32", False, "another logical CPU"),
    (PASCAL, SMALL, "float32", True, "GPUs"),
    (AMPERE, BASE, "mixed_bfloat16", True, "GPUs"),
    (JAX_CPU, SMALL, "float32", True, "every jax step"),
    (JAX_AMPERE, BASE, "mixed_bfloat16", True, "every jax step"),
])
def test_each_device_s_xla_setting(device, d_model, policy, on, why):
    compiled, reason = device_policy.jit_compile(device, d_model, policy)
    assert compiled is on and why in reason


@pytest.mark.quick
def test_cpu_flags_are_read_as_whole_words():
    cpuinfo = "flags\t\t: fpu avx512f avx512_bf16 amx_tile\nflags\t\t: fpu avx512_bf16x\n"
    assert device_policy.cpu_flags(cpuinfo) == {"avx512_bf16"}
    assert device_policy.cpu_flags("flags : amx_bf16 amx_int8") == {"amx_bf16"}
    assert device_policy.cpu_flags("flags : avx2") == frozenset()


def test_detect_takes_the_lowest_gpu_compute_capability(monkeypatch):
    gpus = ["GPU:0", "GPU:1"]
    details = {"GPU:0": {"compute_capability": (8, 0)}, "GPU:1": {"compute_capability": (7, 5)}}
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: gpus)
    monkeypatch.setattr(tf.config.experimental, "get_device_details", details.__getitem__)
    device = device_policy.detect()
    assert (device.kind, device.compute_capability) == ("gpu", (7, 5))
    assert device.describe() == "gpu (compute capability 7.5)"
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    assert device_policy.detect(cpu_devices=2).kind == "cpu"
    assert device_policy.detect(backend="jax").describe().endswith(", jax")


@pytest.mark.parametrize("device, config, policy, jit", [
    (CPU, "multi30k_small", "float32", False),
    (AVX512_BF16, "multi30k_small", "mixed_bfloat16", False),
    (AMX_BF16, "base", "mixed_bfloat16", False),
    (CPU, "base", "float32", True),
    (PASCAL, "multi30k_small", "float32", True),
    (TURING, "multi30k_small", "mixed_float16", True),
    (AMPERE, "base", "mixed_bfloat16", True),
    (HOPPER, "base", "mixed_bfloat16", True),
])
def test_the_resolver_takes_the_device_s_defaults(tmp_path, device, config, policy, jit):
    run = resolver.resolve({"model_dir": str(tmp_path), "config": config}, device=device)
    t = run.training
    assert (t.precision_policy, t.mixed_precision, t.jit_compile) == (
        policy, policy != "float32", jit)
    assert run.origins["mixed_precision"] == run.origins["precision_policy"] == (
        f"device: {device_policy.precision(device)[1]}")
    d_model = TransformerConfig.preset(config).d_model
    assert run.origins["jit_compile"] == (
        f"device: {device_policy.jit_compile(device, d_model, policy)[1]}")
    assert run.decoding.precision == ("bfloat16" if policy == "mixed_bfloat16" else "float32")
    assert run.settings(trained=True)["training"]["precision_policy"] == policy
    assert f"precision_policy {policy!r} (device: " in describe.describe_origins(run)


def test_the_log_line_says_what_and_why(tmp_path):
    run = resolver.resolve({"model_dir": str(tmp_path)}, device=AVX512_BF16)
    assert describe.describe_device(run, AVX512_BF16) == (
        "device: cpu (avx512_bf16): mixed_bfloat16 (device: the CPU multiplies bfloat16 "
        "natively (avx512_bf16)); XLA off (device: XLA's CPU kernels do not use the bfloat16 hardware that "
        "TensorFlow's do)")
    forced = resolver.resolve({"model_dir": str(tmp_path), "jit_compile": True}, device=AMPERE)
    assert describe.describe_device(forced, AMPERE).endswith("XLA on (flag)")


@pytest.mark.parametrize("device, given, policy, jit", [
    (AMPERE, {"mixed_precision": False, "jit_compile": False}, "float32", False),
    (CPU, {"mixed_precision": True, "jit_compile": True}, "mixed_bfloat16", True),
    (PASCAL, {"mixed_precision": True}, "mixed_float16", True),
    (AVX512_BF16, {"config_override": {"d_model": 512}}, "mixed_bfloat16", False),
    (AVX512_BF16, {"config": "base", "mixed_precision": False}, "float32", True),
])
def test_flags_force_the_choice(tmp_path, device, given, policy, jit):
    run = resolver.resolve({"model_dir": str(tmp_path), **given}, device=device)
    assert (run.training.precision_policy, run.training.jit_compile) == (policy, jit)
    for name in ("mixed_precision", "jit_compile"):
        assert (run.origins[name] == "flag") == (name in given)
    assert run.origins["precision_policy"] == run.origins["mixed_precision"]


def test_settings_json_wins_over_the_device(tmp_path):
    """A model trained on a CPU keeps its XLA setting and mixed_precision when resumed on a
    GPU; the mixed policy is the GPU's (checkpoints hold the same variables under each)."""
    from pipelines.model_dir import layout as md

    trained = resolver.resolve({"model_dir": str(tmp_path)}, device=AVX512_BF16)
    md.save_settings(tmp_path, trained.settings(trained=True))
    md.final_weights(tmp_path).write_bytes(b"weights")
    run = resolver.resolve({"model_dir": str(tmp_path)}, device=TURING)
    assert (run.training.mixed_precision, run.training.jit_compile) == (True, False)
    assert run.origins["jit_compile"] == run.origins["mixed_precision"] == "settings.json"
    assert run.training.precision_policy == "mixed_float16"
    assert run.decoding.precision == "bfloat16"  # decoding is the model dir's too


@pytest.fixture
def float16_policy():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def _train_steps(model, steps):
    source, target = random_ids(4, 7), random_ids(4, 6)
    for _ in range(steps):
        model.train_on_batch((source, target[:, :-1]), target[:, 1:])


def test_float16_training_scales_the_loss_also_when_accumulating(tmp_path, float16_policy):
    """mixed_float16 wraps the paper's optimizer (gradient accumulation included) in a built
    LossScaleOptimizer; its checkpoints restore into a float32 model, and back."""
    strategy = tf.distribute.get_strategy()
    model = train_lib.compile_model(tiny_config(), strategy,
                                    training_options(warmup_steps=10, accumulate_steps=2))
    optimizer = model.optimizer
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer) and optimizer.built
    assert optimizer.inner_optimizer.gradient_accumulation_steps == 2
    inner = train_lib.checkpoint_optimizer(optimizer)
    manager = checkpoints.checkpoint_manager(model, inner, tmp_path)
    _train_steps(model, 4)
    assert int(optimizer.iterations.numpy()) == 2  # updates, not micro-batches
    assert int(optimizer.step_counter.numpy()) == 4  # every scaled gradient was finite
    assert float(optimizer.dynamic_scale.numpy()) == 2.0 ** 15
    manager.save(checkpoint_number=2)

    keras.mixed_precision.set_global_policy("float32")
    plain = train_lib.compile_model(tiny_config(), strategy,
                                    training_options(warmup_steps=10, accumulate_steps=2))
    assert not isinstance(plain.optimizer, keras.optimizers.LossScaleOptimizer)
    assert train_lib.checkpoint_optimizer(plain.optimizer) is plain.optimizer
    restored = checkpoints.checkpoint_manager(plain, plain.optimizer, tmp_path)
    assert checkpoints.restore_latest(restored, plain.optimizer) == 2
    for a, b in zip(model.weights, plain.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_adam_epsilon_and_gradient_clipping_reach_the_optimizer(tmp_path):
    """--adam_epsilon and --clip_norm (fairseq's 1e-8 and 25, the published protocol's
    departures) are the optimizer's; the defaults are the paper's: 1e-9, no clipping."""
    from pipelines.settings import resolver

    run = resolver.resolve({"model_dir": str(tmp_path), "adam_epsilon": 1e-8,
                            "clip_norm": 25.0})
    assert (run.training.adam_epsilon, run.training.clip_norm) == (1e-8, 25.0)
    strategy = tf.distribute.get_strategy()
    clipped = train_lib.compile_model(tiny_config(), strategy, run.training).optimizer
    assert (clipped.epsilon, clipped.global_clipnorm) == (1e-8, 25.0)
    paper = resolver.resolve({"model_dir": str(tmp_path)}).training
    plain = train_lib.compile_model(tiny_config(), strategy, paper).optimizer
    assert (plain.epsilon, plain.global_clipnorm) == (1e-9, None)
    # Clipping acts before Adam's moments: a gradient of global norm 1,000 enters them at 25.
    from keras_transformer import paper_optimizer

    variable = keras.Variable(np.zeros([10, 10], "float32"))
    optimizer = paper_optimizer(16, 10, global_clipnorm=25.0)
    optimizer.apply_gradients([(tf.fill([10, 10], 100.0), variable)])
    momentum = [v for v in optimizer.variables if tuple(v.shape) == (10, 10)][0]
    np.testing.assert_allclose(np.asarray(momentum), 0.1 * 2.5, rtol=1e-5)  # (1 - beta1) g
