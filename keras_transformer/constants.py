"""Ids with a fixed meaning in every vocabulary the project builds: the one copy."""

PAD_ID = 0
"""Padding: masked out of attention and of the loss."""
UNK_ID = 1
"""The unknown piece (byte fallback makes it practically unused)."""
BOS_ID = 2
"""The start of a target sequence: the decoder's first input."""
EOS_ID = 3
"""The end of a source and of a target sequence."""

QUANTIZE_MODES = ("int8",)
"""What a served model's weights may be stored as besides their own dtype (`serving.quantize`)."""
