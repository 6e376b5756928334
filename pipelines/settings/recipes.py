"""Recipes: the settings a task or a preset brings (training, decoding, the task's form,
the split evaluated), below the flags and settings.json in precedence, a preset's above its
task's. OpenNMT-tf's `auto_config()` does the same for its models."""
from typing import Any

# Multi30k departs from the paper so that a CPU run finishes in minutes (the default job,
# `python pipelines/run.py`).
TASK_RECIPES: dict[str, dict[str, Any]] = {
    "multi30k_ende": {"train_steps": 1000, "batch_tokens": 2048, "warmup_steps": 1000,
                      "checkpoint_every": 100},
}

# multi30k_quality: the CPU run of docs/results.md; parsing_wsj_sample: the parser of
# docs/parsing.md on the 10% WSJ sample, whose dev split stands in for the test split it
# lacks.
PRESET_RECIPES: dict[str, dict[str, Any]] = {
    "multi30k_quality": {"train_steps": 4000, "checkpoint_every": 250},
    "parsing_wsj_sample": {"target_form": "read_xx", "batch_tokens": 2048, "warmup_steps": 800,
                           "train_steps": 6400, "checkpoint_every": 400,
                           "dev_metric_every": 800, "dev_metric_sentences": 0,
                           "keep_best_by": "dev_metric", "beam_size": 4, "eval_split": "dev"},
}

# The paper's per-task departures from a preset's model (Section 6.1: "The Transformer (big)
# model trained for English-to-French used dropout rate P_drop = 0.1, instead of 0.3").
TASK_PRESET_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    ("wmt14_enfr", "big"): {"dropout": 0.1},
}
