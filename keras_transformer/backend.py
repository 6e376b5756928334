"""The import check of the TensorFlow-only decoding modules (`sampling`, `terms`)."""
import keras


def require_tensorflow(module: str) -> None:
    """Raises ImportError unless TensorFlow is the Keras backend (`module`: the importer's name)."""
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise ImportError(
            f"{module} needs the TensorFlow Keras backend (KERAS_BACKEND={backend}); beam "
            "search on every backend: keras_transformer.decoding.decode")
