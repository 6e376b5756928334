"""What both command lines do before TensorFlow is imported: answer `--help` at once, choose
the Keras backend (and say how to install it when it is missing), and keep TensorFlow's C++
log lines out of the output unless asked for (`--verbose`).

Imports only the standard library and absl: everything here runs before the seconds that
importing TensorFlow takes. `USAGE_EXIT` is the exit status of every user error, here and
in `cli.main`.
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
    """The value of `--name` in `argv`, read before absl parses it: Keras fixes its backend,
    and XLA the number of its CPU devices, when first imported. absl parses and checks the
    same flags again afterwards."""
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
    says) and, under JAX, `--num_cpu_devices N` as XLA's CPU device count; returns it. A
    backend that is not installed is a user error naming the command that installs it."""
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
    """absl's flag parsing for `app.run(main, flags_parser=parse_flags)`. `--help`,
    `--helpshort` and `--helpfull` print to stdout and exit 0 (absl exits 1); a malformed
    flag is a user error like any other, one line on stderr and exit status 2 (absl: 1)."""
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
"""TensorFlow's environment switch for its pooling (BFC) allocator on the CPU. Without it
every tensor over glibc's 32 MB mmap threshold (a small model's [tokens, vocabulary] logits
and their gradient) is mapped and unmapped at every step, and the kernel zeroes its pages
anew: a third of a small model's training time went to page faults (docs/training.md)."""


def use_pooled_cpu_allocator() -> None:
    """Turns TensorFlow's pooling CPU allocator on unless the environment already chose;
    must run before TensorFlow is imported (it reads the switch once)."""
    os.environ.setdefault(*POOLED_CPU_ALLOCATOR)


def import_tensorflow(verbose: bool) -> None:
    """Imports TensorFlow, with its pooling CPU allocator (`use_pooled_cpu_allocator`).

    Unless `verbose`, absl's and TensorFlow's Python logging show errors only and, unless
    the user set TF_CPP_MIN_LOG_LEVEL too, TensorFlow's C++ log level becomes 3 (its errors
    still reach the user as Python exceptions), what it writes to stderr while loading is
    dropped, and the libraries' informational and warning lines are filtered out of stderr
    from then on, child processes included (`cli.quiet`; their error and fatal lines pass)."""
    if not verbose:  # absl's and TensorFlow's Python loggers (retracing warnings, TFDS)
        import logging as python_logging

        from absl import logging

        logging.set_verbosity(logging.ERROR)
        python_logging.getLogger("tensorflow").setLevel(python_logging.ERROR)
    use_pooled_cpu_allocator()
    if verbose or "TF_CPP_MIN_LOG_LEVEL" in os.environ:  # the user's level
        import tensorflow  # noqa: F401
        return
    from cli import quiet
    from export.op_check import import_tensorflow_quietly

    quiet.filter_stderr()
    import_tensorflow_quietly()  # sets TF_CPP_MIN_LOG_LEVEL=3 (the user set none)
