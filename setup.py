"""keras-transformer-nmt: the Transformer of "Attention Is All You Need" in Keras 3.

The import name is `keras_transformer`; the distribution has a name of its own because
"keras-transformer" on the package index is an unrelated project."""
from setuptools import find_packages, setup

setup(
    name="keras-transformer-nmt",
    version="0.1.0",
    description=(
        "The paper's Transformer in Keras 3: training under tf.distribute, beam search, "
        "and SavedModels that stock TensorFlow Serving loads."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # Only the library is installed: `pipelines/` and `export/` are the application, run from
    # the checkout (their scripts put it on sys.path), so the distribution never claims the
    # generic top-level names "pipelines" and "export" in site-packages.
    packages=find_packages(include=["keras_transformer", "keras_transformer.*"]),
    install_requires=[
        # tensorflow-text ships compiled ops built against one TensorFlow release: the two
        # (and TensorFlow Serving) must be the same minor version.
        "tensorflow==2.21.*",
        "tensorflow-text==2.21.*",
        "keras>=3.15",
        "tensorflow-datasets",
        "sacrebleu>=2.3",
        "absl-py",
        "importlib_resources",  # tensorflow-datasets imports it but declares it only for Python < 3.9
        "tensorboard",
        "sentencepiece",
        "nltk",
        "matplotlib",
    ],
    extras_require={
        # sacremoses: Moses tokenization for benchmarks/multi30k_published_protocol.py (and
        # its test); not needed to train, evaluate or serve. jax[cpu]: the tests run the
        # library under KERAS_BACKEND=jax too (tests/test_backends.py).
        # ctranslate2: `--mode export --format ctranslate2` (export/ctranslate2.py), a model
        # for the CTranslate2 engine; its wheel installs beside tensorflow (numpy, pyyaml), so
        # the tests install it and its tests run (they skip where it is missing).
        # pytest-xdist: a plain `pytest` runs on every core (pytest.ini's addopts). pdoc: the
        # API reference, whose build is tested.
        "bench": ["sacremoses"],
        "jax": ["jax[cpu]"],  # pipelines/run.py --backend jax
        "ctranslate2": ["ctranslate2>=4.5,<5"],
        "docs": ["pdoc>=14"],  # the API reference (docs/library.md)
        "test": ["pytest", "pytest-xdist>=3.5", "sacremoses", "jax[cpu]", "ctranslate2>=4.5,<5",
                 "pdoc>=14"],
    },
)
