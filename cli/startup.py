"""What both command lines do before TensorFlow's slow import (so: only the standard library and
absl): answer `--help`, choose the Keras backend, keep C++ log lines out unless `--verbose`."""
import importlib
import logging
import os
import sys

from absl import app, flags, logging as absl_logging

from pipelines.settings.table import TABLE

USAGE_EXIT = 2  # exit status of a user error (a flag, a file, a model dir): one line
BACKENDS = TABLE["backend"].choices
INSTALL = {"jax": 'pip install -e ".[jax]"'}  # the backends setup.py offers as extras
HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull")


def fail(message: str) -> None:
    """A user error before absl runs: one line on stderr, exit status 2."""
    sys.stderr.write(f"{sys.argv[0] if sys.argv else 'run.py'}: error: {message}\n")
    sys.exit(USAGE_EXIT)


def early_flag(argv: list[str], name: str, default: str) -> str:
    """`--name`'s value in `argv`, before absl: Keras and XLA read theirs when first imported."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "--":
            break
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    return default


def select_backend(argv: list[str]) -> str:
    """Sets and returns KERAS_BACKEND from --backend (not the environment), and under JAX XLA's
    CPU device count; fails if the backend is not installed."""
    backend = early_flag(argv, "backend", "tensorflow")
    backend = backend if backend in BACKENDS else "tensorflow"  # absl refuses it later
    if backend in INSTALL and not any(arg.split("=")[0] in HELP_FLAGS for arg in argv[1:]):
        try:
            importlib.import_module(backend)
        except ImportError:
            fail(f"--backend {backend} needs {backend}, which is not installed: "
                 f"{INSTALL[backend]}")
    os.environ["KERAS_BACKEND"] = backend
    cpu_devices = early_flag(argv, "num_cpu_devices", "1")
    if backend == "jax" and cpu_devices.isdigit() and int(cpu_devices) > 1:
        os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                                   f"--xla_force_host_platform_device_count={cpu_devices}").strip()
    return backend


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, but help goes to stdout (exit 0) and a bad flag is a user error."""
    asked = [arg for arg in argv[1:] if arg.split("=")[0] in HELP_FLAGS]
    if asked:
        app.usage(shorthelp=asked[0] != "--helpfull", writeto_stdout=True)
        sys.exit(0)
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        fail(f"{' '.join(str(error).split())} (--help lists every flag)")


POOLED_CPU_ALLOCATOR = ("TF_CPU_ALLOCATOR_USE_BFC", "true")
"""TensorFlow's switch for its pooling CPU allocator; without it every tensor over glibc's mmap
threshold is mapped and zeroed anew each step (docs/training.md)."""


def use_pooled_cpu_allocator() -> None:
    """Turns the pooling CPU allocator on unless the environment chose; before TensorFlow loads."""
    os.environ.setdefault(*POOLED_CPU_ALLOCATOR)


def import_tensorflow(verbose: bool) -> None:
    """Imports TensorFlow with its pooling CPU allocator; unless `verbose`, Python logging shows
    errors only, and unless TF_CPP_MIN_LOG_LEVEL is set, `cli.quiet` filters the C++ lines."""
    if not verbose:  # absl's and TensorFlow's Python loggers (retracing warnings, TFDS)
        absl_logging.set_verbosity(absl_logging.ERROR)
        logging.getLogger("tensorflow").setLevel(logging.ERROR)
    use_pooled_cpu_allocator()
    if not verbose and "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
        from cli import quiet

        quiet.filter_stderr()
    import tensorflow  # noqa: F401
