"""Ids with a fixed meaning in every vocabulary the project builds."""

PAD_ID = 0  # padding; masked out of attention and of the loss
