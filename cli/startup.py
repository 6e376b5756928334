"""What both command lines do before TensorFlow is imported: answer `--help` at once, choose
the Keras backend, and keep TensorFlow's C++ log lines out of the output unless `--verbose`.
Imports only the standard library and absl, so that it runs before TensorFlow's slow import.
"""
import importlib
import os
import sys

from absl import flags

from pipelines.settings.table import TABLE

USAGE_EXIT = 2
"""Exit status of a user error (a flag, a file, a model dir): one line on stderr."""
BACKENDS = TABLE["backend"].choices
INSTALL = {"jax": 'pip install -e ".[jax]"'}
"""How to install a backend that setup.py offers as an extra."""
HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull")


def fail(message: str) -> None:
    """A user error before absl runs: one line on stderr, exit status 2."""
    sys.stderr.write(f"{sys.argv[0] if sys.argv else 'run.py'}: error: {message}\n")
    sys.exit(USAGE_EXIT)


def early_flag(argv: list[str], name: str, default: str) -> str:
    """The value of `--name` in `argv`, read before absl: Keras fixes its backend, and XLA its
    CPU device count, when first imported."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "--":
            break
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    return default


def select_backend(argv: list[str]) -> str:
    """Sets KERAS_BACKEND to --backend's value (default tensorflow, whatever the environment
    says) and, under JAX, XLA's CPU device count; returns it. Fails if it is not installed."""
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
    """absl's flag parsing, except that help prints to stdout and exits 0, and a malformed flag
    is a user error (exit status 2)."""
    from absl import app

    asked = [arg for arg in argv[1:] if arg.split("=")[0] in HELP_FLAGS]
    if asked:
        app.usage(shorthelp=asked[0] != "--helpfull", writeto_stdout=True)
        sys.exit(0)
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        fail(f"{' '.join(str(error).split())} (--help lists every flag)")


POOLED_CPU_ALLOCATOR = ("TF_CPU_ALLOCATOR_USE_BFC", "true")
"""TensorFlow's environment switch for its pooling (BFC) allocator on the CPU. Without it every
tensor over glibc's mmap threshold is mapped and zeroed anew each step (docs/training.md)."""


def use_pooled_cpu_allocator() -> None:
    """Turns TensorFlow's pooling CPU allocator on unless the environment already chose; must
    run before TensorFlow is imported."""
    os.environ.setdefault(*POOLED_CPU_ALLOCATOR)


def import_tensorflow(verbose: bool) -> None:
    """Imports TensorFlow, with its pooling CPU allocator (`use_pooled_cpu_allocator`).

    Unless `verbose`, Python logging shows errors only and, unless the user set
    TF_CPP_MIN_LOG_LEVEL, the libraries' informational and warning lines are filtered out of
    stderr (`cli.quiet`); TensorFlow's C++ log level is left as the user has it, so that its
    error lines reach them."""
    if not verbose:  # absl's and TensorFlow's Python loggers (retracing warnings, TFDS)
        import logging as python_logging

        from absl import logging

        logging.set_verbosity(logging.ERROR)
        python_logging.getLogger("tensorflow").setLevel(python_logging.ERROR)
    use_pooled_cpu_allocator()
    if not verbose and "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
        from cli import quiet

        quiet.filter_stderr()
    import tensorflow  # noqa: F401
