"""Evaluation: the decode loop (`evaluate`), BLEU (`bleu`) and attention plots."""
