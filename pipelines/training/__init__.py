"""Training: the train loop and its strategy (`train`), callbacks (`callbacks`), multi-worker
set-up (`multi_worker`) and the memory check before a run (`memory_check`)."""
