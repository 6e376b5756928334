"""What only TensorFlow's graph gives the search: a faster top-k kernel over vocabulary-wide
rows, XLA detection, and while loops whose shapes change (a decoder cache that grows a
position a step, sentences that leave the batch). Imported only under TensorFlow."""
import tensorflow as tf

TOP_K_BLOCK = 128
"""About how many values `top_k` takes the maximum of at a time (see there)."""


def _block_size(n):
    """A block size for `top_k` over rows of static length `n`: the divisor of n nearest
    TOP_K_BLOCK within a factor of 2 (no padding copy), else TOP_K_BLOCK."""
    if n is None:
        return TOP_K_BLOCK
    divisors = [d for d in range(TOP_K_BLOCK // 2, 2 * TOP_K_BLOCK + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - TOP_K_BLOCK)) if divisors else TOP_K_BLOCK


def top_k(values, k):
    """`tf.math.top_k(values, k)` over the last axis of a [rows, n] tensor, faster for large n.

    TensorFlow's CPU TopKV2 kernel keeps a heap per row, slow over vocabulary-wide rows
    (docs/library.md). Here each row is cut into blocks of about `TOP_K_BLOCK`;
    the k largest values lie in the k blocks with the largest maxima (a value outside them
    is beaten by the maximum of each of those k blocks), so one vectorised maximum per
    block, a top-k over the block maxima and one over the chosen blocks give the same
    values and indices. The chosen blocks are taken in index order, so ties go to the lower
    index, as in `tf.math.top_k`.

    Args:
        values: float [rows, n]; n may be dynamic.
        k: int or int32 scalar tensor, 1 <= k <= n.
    Returns:
        (values [rows, k], int32 indices [rows, k]), largest first.
    """
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
    """Whether the graph being traced is XLA-compiled (inside `tf.function(jit_compile=True)`,
    at any depth). XLA needs loop-invariant shapes, so decoding then keeps the decoder cache
    in fixed slots; elsewhere the cache grows a position a step."""
    if tf.executing_eagerly():
        return False
    try:  # not public API: where it is gone, assume XLA (fixed slots are always correct)
        from tensorflow.python.ops import control_flow_util
    except ImportError:
        return True
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def cache_length(max_steps):
    """The `max_length` to give `Transformer.initial_decode_state` for a search of at most
    `max_steps` steps: fixed slots under XLA, else None (a cache that grows)."""
    return max_steps if compiling_with_xla() else None


def while_loop(cond, body, loop_vars, maximum_iterations, shrinking=()):
    """`tf.while_loop` whose loop variables keep their static shapes except dimensions of
    size 0 at the start, which may grow (a growing decoder cache's length axis), and axis 0
    of the loop variables at positions `shrinking` (sentences leaving the batch);
    TensorArrays are left free. Static shapes that reshapes with a dynamic batch lose are
    set back after each step."""
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
