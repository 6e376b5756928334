"""cli/startup.py: what both command lines set before TensorFlow is imported."""
import os
import subprocess
import sys

import pytest

from tests.pipelines.run_helpers import ROOT

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)

CHILD = r"""
from cli import startup
startup.import_tensorflow(verbose=False)
import tensorflow as tf
tf.ones((256, 256)).numpy()
try:
    print(tf.config.experimental.get_memory_info("CPU:0")["peak"] > 0)
except ValueError:  # only TensorFlow's pooling (BFC) allocator keeps statistics
    print("default allocator")
"""


@pytest.mark.parametrize("user_choice, expected", [(None, "True"),
                                                   ("false", "default allocator")])
def test_training_allocates_from_tensorflows_pool_unless_the_user_chose(user_choice, expected):
    """A fresh process through `import_tensorflow` allocates from TensorFlow's pool (glibc
    otherwise maps and zeroes a small model's logits afresh every step); a user's
    TF_CPU_ALLOCATOR_USE_BFC is kept.

    oneDNN's own CPU allocator, TensorFlow's default on CPUs with AVX512_VNNI or newer, keeps
    statistics too, so the child turns oneDNN off: only the pool then answers the probe."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPU_ALLOCATOR_USE_BFC", "TF_CPP_MIN_LOG_LEVEL")}
    env["TF_ENABLE_ONEDNN_OPTS"] = "0"
    if user_choice is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = user_choice
    result = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == expected
