"""The model directory: `layout`, `lock`, `checkpoints`, and file helpers (`files`)."""
