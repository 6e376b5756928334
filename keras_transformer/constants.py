"""Ids with a fixed meaning in every vocabulary the project builds: the one copy."""

PAD_ID = 0  # padding; masked out of attention and of the loss
UNK_ID = 1  # unknown piece (byte fallback makes it practically unused)
BOS_ID = 2  # start of a target sequence: the decoder's first input
EOS_ID = 3  # end of a source and of a target sequence
