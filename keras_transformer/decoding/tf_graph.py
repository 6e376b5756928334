"""TensorFlow-only search helpers: a faster top-k over vocabulary-wide rows, XLA detection, and
while loops whose shapes change (a growing decoder cache, sentences leaving the batch)."""
import tensorflow as tf

TOP_K_BLOCK = 128
"""About how many values `top_k` takes the maximum of at a time (see there)."""


def _block_size(n):
    """`top_k`'s block: the divisor of `n` nearest TOP_K_BLOCK (within 2x), else TOP_K_BLOCK."""
    if n is None:
        return TOP_K_BLOCK
    divisors = [d for d in range(TOP_K_BLOCK // 2, 2 * TOP_K_BLOCK + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - TOP_K_BLOCK)) if divisors else TOP_K_BLOCK


def top_k(values, k):
    """`tf.math.top_k(values, k)` (int32 indices) over float [rows, n] (n may be dynamic; 1 <= k
    <= n), faster for large n: the k largest lie in the k blocks of about `TOP_K_BLOCK` with the
    largest maxima (CPU TopKV2 keeps a heap per row: docs/library.md); ties go to the lower
    index, as in `tf.math.top_k`."""
    block = _block_size(values.shape[-1])
    rows, n = tf.shape(values)[0], tf.shape(values)[1]
    blocks = (n + block - 1) // block
    if values.shape[-1] is None or values.shape[-1] % block:
        lowest = tf.fill([rows, blocks * block - n], tf.constant(-float("inf"), values.dtype))
        values = tf.concat([values, lowest], axis=1)
    blocked = tf.reshape(values, [rows, blocks, block])
    _, chosen = tf.math.top_k(tf.reduce_max(blocked, axis=2), k=tf.minimum(k, blocks))
    chosen = tf.sort(chosen, axis=1)
    candidates = tf.reshape(tf.gather(blocked, chosen, batch_dims=1), [rows, -1])
    top_values, positions = tf.math.top_k(candidates, k=k)
    indices = tf.gather(chosen, positions // block, batch_dims=1) * block + positions % block
    return top_values, indices


def compiling_with_xla():
    """Whether the graph being traced is XLA-compiled (`tf.function(jit_compile=True)`, at any
    depth), which needs fixed decoder cache slots (loop-invariant shapes)."""
    if tf.executing_eagerly():
        return False
    from keras_transformer import tf_internals

    return tf_internals.in_xla_context()


def cache_length(max_steps):
    """The decoder cache length for `max_steps` steps: `max_steps` under XLA, else None (grows)."""
    return max_steps if compiling_with_xla() else None


def while_loop(cond, body, loop_vars, maximum_iterations, shrinking=()):
    """`tf.while_loop` keeping static shapes but for dimensions of size 0 at the start (may grow),
    axis 0 of the loop variables at positions `shrinking` (may shrink) and TensorArrays; static
    shapes lost by reshapes with a dynamic batch are set back after each step."""
    def invariant(value):
        if isinstance(value, tf.TensorArray):
            return tf.TensorShape(None)
        return tf.TensorShape([None if size == 0 else size for size in value.shape.as_list()])

    def free_axis_0(shape):
        return tf.TensorShape([None] + shape.as_list()[1:]) if shape.rank else shape

    invariants = [tf.nest.map_structure(free_axis_0 if i in shrinking else lambda s: s,
                                        tf.nest.map_structure(invariant, value))
                  for i, value in enumerate(loop_vars)]

    def shaped_body(*values):
        new = body(*values)
        tf.nest.map_structure(lambda value, shape: isinstance(value, tf.TensorArray)
                              or value.set_shape(shape), tuple(new), tuple(invariants))
        return tuple(new)

    return tf.while_loop(cond, shaped_body, tuple(loop_vars),
                         maximum_iterations=maximum_iterations,
                         shape_invariants=tuple(invariants))
