"""Training: the loop (`train`), `devices`, `callbacks` and `memory_check`."""
