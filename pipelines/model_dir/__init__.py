"""The model directory: its layout (`layout`), its lock (`lock`), atomic writes and input
manifests (`files`), checkpoints (`checkpoints`), starting from another model (`init_from`)
and the records of what each stage made from what (`made_from`)."""
