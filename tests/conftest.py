"""Shared test fixtures: real data location, determinism, quiet TensorFlow, and for the whole
test run one JAX and one TensorFlow XLA compilation cache and XLA's quick compiles; the order
in which pytest-xdist hands the tests out.

`pytest -m quick` runs the quick tier: the tests marked `quick` on the test itself, at least
one of every test module (tests/test_tiers.py), about two minutes."""
import atexit
import os
import pathlib
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
if "PYTEST_XDIST_WORKER" not in os.environ:
    # Set once, in the process that starts the run: the xdist workers and the runs they start
    # inherit it. The tiny models' programs cost more to compile than to run, so
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        # every JAX process reuses what an earlier one compiled for the same shapes (a new
        # cache for each run, so nothing carries over), and
        _jax_cache = tempfile.mkdtemp(prefix="kt-jax-cache-")
        atexit.register(shutil.rmtree, _jax_cache, True)
        os.environ.update(JAX_COMPILATION_CACHE_DIR=_jax_cache,
                          JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                          JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    if "tf_xla_persistent_cache_directory" not in os.environ.get("TF_XLA_FLAGS", ""):
        # every TensorFlow process reuses the XLA programs an earlier one compiled (the tiny
        # models' beam searches and training steps recur from test to test), and
        _tf_xla_cache = tempfile.mkdtemp(prefix="kt-tf-xla-cache-")
        atexit.register(shutil.rmtree, _tf_xla_cache, True)
        os.environ["TF_XLA_FLAGS"] = " ".join([
            *os.environ.get("TF_XLA_FLAGS", "").split(),
            f"--tf_xla_persistent_cache_directory={_tf_xla_cache}"])
    if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
        # XLA's CPU code is not optimised by LLVM (values differ only by float rounding).
        os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} "
                                   "--xla_backend_optimization_level=0").strip()

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """Real data for tests: $KT_DATA_DIR, else ../shared/data beside the project, else
    Multi30k downloaded (checked) into a cache dir (`tests.helpers.find_test_data`)."""
    from tests.helpers import find_test_data

    path, failure = find_test_data()
    if failure:
        pytest.fail(failure)
    return path


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, shared_data):
    """A model dir after `--mode prepare` with the tiny test settings (copy it to use it).

    Prepared with the README's form, `--data_dir` naming the folder that holds multi30k/, in
    this process through the Stage interface; once per xdist worker.
    """
    from tests.pipelines.run_helpers import TINY, run_stages

    model_dir = tmp_path_factory.mktemp("prepared") / "model"
    ran = run_stages("prepare", model_dir=str(model_dir), data_dir=str(shared_data), **TINY)
    assert "padding" in ran.log  # the bucket table, a log
    assert ran.out == ""  # prepare has no results
    return model_dir


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(1234)
    yield


SLOW_FIRST = [
    "tests/test_doc_commands.py",
    "tests/pipelines/test_user_paths.py",
    "tests/pipelines/test_kill_consistency.py",
    "tests/test_backends.py",
    "tests/test_first_hour.py",
    "tests/pipelines/test_backend_training.py",
    "tests/export/",
    "tests/pipelines/test_multi_worker.py",
    "tests/pipelines/parsing/test_run_parsing.py",
    "tests/pipelines/test_cli_errors.py",
    "tests/pipelines/test_run.py",
    "tests/pipelines/test_init_from.py",
    "tests/test_readme.py",
    "tests/pipelines/test_packing.py",
    "tests/pipelines/test_lock.py",
    "tests/test_model.py",
    "tests/test_distribute.py",
]
"""Modules (or folders) whose tests take longest, slowest first (`--durations` on the 2-core
machine). A module whose tests share a module fixture marks itself
`pytest.mark.xdist_group`, so that one xdist worker builds it (`--dist loadgroup`)."""


def pytest_collection_modifyitems(items):
    """The slow modules first (`SLOW_FIRST`), so that no xdist worker starts one at the end."""
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(SLOW_FIRST) if item.nodeid.startswith(prefix)),
                    len(SLOW_FIRST))

    items.sort(key=rank)
