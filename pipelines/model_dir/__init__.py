"""The model directory: `layout`, `lock`, `checkpoints`; atomic writes, input manifests and
line counts (`files`)."""
