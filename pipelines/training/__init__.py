"""Training: the loop (`train`), `devices`, `callbacks`, `multi_worker` and `memory_check`."""
