"""One harness for every layer test, after keras-hub's `TestCase.run_layer_test`.

`run_layer_test` builds a layer from its constructor arguments, calls it on `input_data` and
checks, in order:
  * the output shape (float32 and finite under the default policy);
  * the exact number of trainable (and non-trainable) weights, and optionally of scalars;
    variable paths are unique (checkpoints are keyed by them);
  * that every trainable weight receives a non-zero gradient (no built-but-unused weight);
  * the config round trip: `from_config(get_config())` then `build_from_config` (as a
    `.keras` file is loaded) gives a layer with the same config and the same variable paths
    which, given the same weights, gives the same output (hence also: `training=False` is
    deterministic);
  * registration: the class is registered under "keras_transformer>Name" and survives
    `serialize_keras_object` -> `deserialize_keras_object` with its config intact;
  * an explicit mask (optional): changing inputs where the mask forbids attention does not
    change the outputs that must not see them, while the same change without the mask does
    (so the check can fail);
  * compiled (optional; tracing costs seconds for the stacks, so it is asked for by the
    layers that compute with dynamic shapes): under TensorFlow a `tf.function` with `None`
    batch and length dimensions (what export and `fit` run), under JAX `jax.jit` over
    `stateless_call` (what `fit` runs), gives the eager output;
  * dtype policies: under "mixed_bfloat16" (training) and "bfloat16" (decoding) the output
    has the compute dtype, the variables the variable dtype, every sub-layer carries the
    layer's policy, and given the same weights the output is the float32 one to within
    bfloat16 precision.

Dropout is left in place but every comparison runs with `training=False`. The checks run
on the current Keras backend (TensorFlow, or JAX in `tests/test_backends.py`).
"""
import inspect

import keras
import numpy as np
from keras import ops

from keras_transformer import tf_internals
from tests.helpers import gradients

PACKAGE = "keras_transformer"
PRECISION_POLICIES = ("mixed_bfloat16", "bfloat16")


def to_numpy(x):
    """A tensor (any float dtype, bfloat16 included) as a float64/bool/int numpy array."""
    array = np.asarray(ops.convert_to_numpy(x))
    if array.dtype.kind not in "biu":
        array = array.astype("float64")
    return array


def normal(shape, seed=0, scale=1.0):
    """Reproducible float32 normal values."""
    return (scale * np.random.default_rng(seed).normal(size=shape)).astype("float32")


def call(layer, input_data, **kwargs):
    """`layer(**input_data, **kwargs)` for a dict, else `layer(input_data, **kwargs)`."""
    if isinstance(input_data, dict):
        return layer(**input_data, **kwargs)
    return layer(input_data, **kwargs)


def copy_weights(source, target, relative=False):
    """Assigns `source`'s weights to `target` by variable path (paths must match exactly).

    With `relative`, paths are compared without the layers' own (outermost) names.
    """
    def key(variable):
        return variable.path.split("/", 1)[1] if relative else variable.path

    source_paths = {key(v): v for v in source.weights}
    target_paths = {key(v): v for v in target.weights}
    assert sorted(target_paths) == sorted(source_paths), (
        "variable paths differ:\n"
        f"{sorted(source_paths)}\n{sorted(target_paths)}")
    for path, variable in target_paths.items():
        value = ops.convert_to_numpy(source_paths[path])
        variable.assign(value.astype(ops.convert_to_numpy(variable).dtype))


def dtype(x):
    """A tensor's dtype as Keras names it ("float32", "bfloat16"), on every backend."""
    return keras.backend.standardize_dtype(x.dtype)


def stateless(layer, input_data, call_kwargs):
    """`f(trainable_values, non_trainable_values) -> output`: the layer as `fit` runs it."""
    if "training" not in inspect.signature(layer.call).parameters:
        # `layer(...)` drops an argument its `call` lacks; `stateless_call` passes it on.
        call_kwargs = {k: v for k, v in call_kwargs.items() if k != "training"}

    def run(trainable, non_trainable):
        if isinstance(input_data, dict):
            output, _ = layer.stateless_call(trainable, non_trainable, **input_data, **call_kwargs)
        else:
            output, _ = layer.stateless_call(trainable, non_trainable, input_data, **call_kwargs)
        return output

    return run


def compiled_output(layer, input_data, call_kwargs):
    """The layer's output compiled as the backend's `fit` (and, on TensorFlow, export) runs
    it: a `tf.function` with every dimension unknown but the width of float tensors; a
    `jax.jit` of `stateless_call`."""
    if keras.backend.backend() == "jax":
        import jax

        run = jax.jit(stateless(layer, input_data, call_kwargs))
        return run([v.value for v in layer.trainable_variables],
                   [v.value for v in layer.non_trainable_variables])
    import tensorflow as tf

    tensors = input_data if isinstance(input_data, dict) else {"__first__": input_data}
    names = list(tensors)
    specs = []
    for name in names:
        x = tf.convert_to_tensor(tensors[name])
        shape = [None] * len(x.shape)
        if x.dtype.is_floating and shape:
            shape[-1] = x.shape[-1]
        specs.append(tf.TensorSpec(shape, x.dtype))

    @tf.function(input_signature=specs)
    def traced(*args):
        named = dict(zip(names, args))
        if "__first__" in named:
            return layer(named.pop("__first__"), **named, **call_kwargs)
        return layer(**named, **call_kwargs)

    return traced(*[tf.convert_to_tensor(tensors[n]) for n in names])


def run_layer_test(layer_cls, init_kwargs, input_data, expected_output_shape,
                   expected_num_trainable_weights, expected_num_non_trainable_weights=0,
                   expected_num_trainable_params=None, call_kwargs=None,
                   expected_supports_masking=False, run_gradient_check=True,
                   mask_kwarg=None, masked_input_data=None, unaffected_output=np.s_[...],
                   run_graph_check=False, precision_policies=PRECISION_POLICIES,
                   precision_rtol=0.05, atol=1e-5):
    """Runs the shared checks on `layer_cls(**init_kwargs)`; returns (layer, output numpy).

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        input_data: a tensor (first call argument) or a dict of call arguments.
        expected_output_shape: tuple.
        expected_num_trainable_weights: exact number of trainable variables.
        expected_num_non_trainable_weights: exact number of non-trainable variables.
        expected_num_trainable_params: exact number of trainable scalars, if given.
        call_kwargs: extra call arguments (masks, `start`, ...) used in every call.
        expected_supports_masking: the Keras implicit-mask flag. The layers here take masks
            explicitly, so an implicit `_keras_mask` must not be claimed as handled.
        run_gradient_check: every trainable weight gets a non-zero gradient.
        mask_kwarg: name of the mask argument in `call_kwargs` for the mask check.
        masked_input_data: `input_data` changed only where `call_kwargs[mask_kwarg]` forbids
            attention.
        unaffected_output: index of the output that must not see those changes.
        run_graph_check: compare the compiled layer (`compiled_output`) to eager.
        precision_policies: dtype policies to check.
        precision_rtol: largest error allowed under them (given the same weights), relative
            to the largest float32 output.
        atol: tolerance of every float32 comparison.
    """
    call_kwargs = dict(call_kwargs or {})
    call_kwargs.setdefault("training", False)

    # ---------------------------------------------------------------- build, call, gradient
    layer = layer_cls(**init_kwargs)
    output = call(layer, input_data, **call_kwargs)
    assert tuple(output.shape) == tuple(expected_output_shape), (
        f"{layer_cls.__name__}: output shape {tuple(output.shape)}, "
        f"expected {tuple(expected_output_shape)}")
    assert dtype(output) == layer.compute_dtype == "float32"
    expected = to_numpy(output)
    assert np.all(np.isfinite(expected)), f"{layer_cls.__name__}: non-finite output"

    # ---------------------------------------------------------------- weights
    assert len(layer.trainable_weights) == expected_num_trainable_weights, (
        f"{layer_cls.__name__}: {len(layer.trainable_weights)} trainable weights "
        f"({[v.path for v in layer.trainable_weights]}), "
        f"expected {expected_num_trainable_weights}")
    assert len(layer.non_trainable_weights) == expected_num_non_trainable_weights, (
        [v.path for v in layer.non_trainable_weights])
    paths = [v.path for v in layer.weights]
    assert len(set(paths)) == len(paths), f"duplicate variable paths (checkpoints): {paths}"
    if expected_num_trainable_params is not None:
        count = sum(int(np.prod(v.shape)) for v in layer.trainable_weights)
        assert count == expected_num_trainable_params, (
            f"{layer_cls.__name__}: {count} trainable scalars, "
            f"expected {expected_num_trainable_params}")
    assert layer.supports_masking == expected_supports_masking

    if run_gradient_check and layer.trainable_weights:
        probe = np.random.default_rng(0).normal(size=tuple(output.shape)).astype("float32")
        run = stateless(layer, input_data, call_kwargs)
        non_trainable = [v.value for v in layer.non_trainable_variables]
        grads = gradients(
            lambda *trainable: ops.sum(ops.cast(run(list(trainable), non_trainable),
                                                "float32") * probe),
            *[v.value for v in layer.trainable_variables])
        for variable, gradient in zip(layer.trainable_variables, grads):
            assert np.any(gradient != 0), f"no gradient reaches {variable.path}"

    # ---------------------------------------------------------------- config round trip
    # Rebuilt as `.keras` loading does (from_config, then build_from_config), given the
    # weights by path, the clone must reproduce the output. This also proves that
    # `training=False` is deterministic (an active dropout would differ between the two).
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert type(clone) is layer_cls
    assert clone.get_config() == config
    clone.build_from_config(layer.get_build_config())
    copy_weights(layer, clone)
    np.testing.assert_allclose(to_numpy(call(clone, input_data, **call_kwargs)), expected,
                               atol=atol, err_msg="from_config(get_config()) differs")

    # ---------------------------------------------------------------- registration
    name = f"{PACKAGE}>{layer_cls.__name__}"
    assert keras.saving.get_registered_name(layer_cls) == name, (
        f"{layer_cls.__name__} is not registered as {name!r}: a saved model cannot load it")
    assert keras.saving.get_registered_object(name) is layer_cls
    serialized = keras.saving.serialize_keras_object(layer)
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is layer_cls
    assert restored.get_config() == config

    # ---------------------------------------------------------------- explicit mask
    if mask_kwarg is not None:
        assert mask_kwarg in call_kwargs and masked_input_data is not None
        changed = to_numpy(call(layer, masked_input_data, **call_kwargs))
        np.testing.assert_allclose(
            changed[unaffected_output], expected[unaffected_output], atol=atol,
            err_msg=f"{mask_kwarg}: outputs see inputs the mask forbids")
        unmasked_kwargs = {k: v for k, v in call_kwargs.items() if k != mask_kwarg}
        before = to_numpy(call(layer, input_data, **unmasked_kwargs))
        after = to_numpy(call(layer, masked_input_data, **unmasked_kwargs))
        assert not np.allclose(before[unaffected_output], after[unaffected_output],
                               atol=1e-3), "vacuous mask check: the change is invisible anyway"

    # ---------------------------------------------------------------- compiled
    if run_graph_check:
        np.testing.assert_allclose(
            to_numpy(compiled_output(layer, input_data, call_kwargs)), expected, atol=atol,
            err_msg=f"compiled under {keras.backend.backend()}, the output differs")

    # ---------------------------------------------------------------- dtype policies
    for policy_name in precision_policies:
        policy = keras.DTypePolicy(policy_name)
        low = layer_cls(**init_kwargs, dtype=policy_name)
        if layer.weights:
            low.build_from_config(layer.get_build_config())
            copy_weights(layer, low, relative=True)
        low_output = call(low, input_data, **call_kwargs)
        assert tuple(low_output.shape) == tuple(expected_output_shape)
        assert dtype(low_output) == policy.compute_dtype, (
            f"{layer_cls.__name__} under {policy_name}: output {low_output.dtype}")
        assert all(v.dtype == policy.variable_dtype for v in low.weights), (
            [(v.path, v.dtype) for v in low.weights])
        for sublayer in tf_internals.sublayers(low)[1:]:
            assert sublayer.dtype_policy.name == policy_name, (
                f"{sublayer.path} runs under {sublayer.dtype_policy.name}, not {policy_name}")
        # The same function at bfloat16 precision (8-bit mantissa): within a few percent.
        error = np.max(np.abs(to_numpy(low_output) - expected)) / np.max(np.abs(expected))
        assert error < precision_rtol, (
            f"{layer_cls.__name__} under {policy_name}: off by {error:.3f} of the output scale")
        round_trip = layer_cls.from_config(low.get_config())
        assert round_trip.dtype_policy.name == policy_name

    return layer, expected
