"""The private TensorFlow and Keras APIs the project needs, each without a public equivalent;
`check_versions` warns once when TensorFlow or Keras is not a release they were checked against.
(`schedules.UpdateCountingAdam` also overrides a private Keras hook.)"""
import functools
import warnings

CHECKED = {"tensorflow": ("2.21.",), "keras": ("3.",)}
"""Version prefixes these private APIs were checked against."""


@functools.cache
def check_versions() -> None:
    """Warns once if TensorFlow or Keras is not a version in `CHECKED`."""
    import keras
    import tensorflow as tf

    warn_unless_checked("tensorflow", tf.__version__)
    warn_unless_checked("keras", keras.__version__)


def warn_unless_checked(name: str, version: str) -> None:
    """Warns if `version` of `name` is not one in `CHECKED`."""
    if not version.startswith(CHECKED[name]):
        warnings.warn(f"keras_transformer.tf_internals was checked against {name} "
                      f"{', '.join(CHECKED[name])}x, not {version}: XLA detection, the int8 "
                      f"export's layer walk and the op check's probe may need updating",
                      stacklevel=3)


OP_REGISTRY_PROBE = r"""
import glob, json, os, sys
names = json.load(sys.stdin)
import tensorflow as tf
from tensorflow.python.framework import op_def_registry
core = sorted(n for n in names if op_def_registry.get(n) is not None)
import tensorflow_text
after_text = sorted(n for n in names if n not in core and op_def_registry.get(n) is not None)
root = os.path.dirname(tensorflow_text.__file__)
libraries = {}
for path in sorted(glob.glob(os.path.join(root, "**", "*.so"), recursive=True)):
    try:
        library = tf.load_op_library(path)
    except Exception:
        continue
    for name in after_text:
        if hasattr(library, name):
            libraries.setdefault(name, os.path.relpath(path, os.path.dirname(root)))
json.dump({"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__,
           "core": core, "after_text": after_text,
           "text_library": {n: libraries.get(n) for n in after_text}}, sys.stdout)
"""
"""The op check's probe (export/op_check.py): which op names from stdin a fresh interpreter
registers after `import tensorflow`, which only after `import tensorflow_text`, and where."""


def in_xla_context() -> bool:
    """Whether the graph being traced is XLA-compiled at any depth (no public query exists)."""
    check_versions()
    import tensorflow as tf

    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # gone: assume XLA (its fixed decoder cache slots are always correct)
        return True
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def sublayers(layer) -> list:
    """`layer` and every layer inside it, depth first: Keras 3 has no public walk."""
    check_versions()
    return list(layer._flatten_layers(include_self=True, recursive=True))


def fit_under_multi_worker(model):
    """Patches this model instance so that Keras 3 `fit` runs under MultiWorkerMirroredStrategy
    (keras-team/keras#20585): `_maybe_symbolic_build` builds from one replica's first batch, and
    the steps' scalar logs (already synchronised) get shape [1] for Keras' reduction on axis 0."""
    check_versions()
    import types

    import keras
    import tensorflow as tf

    def first_replica(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return model.distribute_strategy.experimental_local_results(value)[0]
        return value

    def maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = keras.tree.map_structure(first_replica, next(it))
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def with_axis(step):
        return lambda data: keras.tree.map_structure(lambda v: tf.reshape(v, [-1]), step(data))

    model._maybe_symbolic_build = types.MethodType(maybe_symbolic_build, model)
    model.train_step = with_axis(model.train_step)
    model.test_step = with_axis(model.test_step)
    return model
