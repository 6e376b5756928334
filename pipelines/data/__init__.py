"""Training and decoding data: preparation, vocabulary, text, tf.data input, token caches."""
