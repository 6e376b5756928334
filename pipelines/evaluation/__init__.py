"""Evaluation: the decode loop (`evaluate`), results and attention plots."""
