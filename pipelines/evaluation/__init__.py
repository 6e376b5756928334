"""Evaluation: the decode loop for evaluate, the dev metric and translate (`evaluate`), BLEU
variants (`bleu`) and attention heat maps (`attention_plot`)."""
