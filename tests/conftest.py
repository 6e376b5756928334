"""Shared test fixtures: real data location, determinism, quiet TensorFlow."""
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def data_dir() -> pathlib.Path:
    """Real data for tests: $KT_DATA_DIR, else ../shared/data beside the project."""
    return pathlib.Path(os.environ.get("KT_DATA_DIR") or ROOT.parent / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    path = data_dir()
    if not (path / "multi30k").is_dir():
        pytest.fail(f"real test data not found at {path}: set $KT_DATA_DIR")
    return path


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(1234)
    yield
