"""Data pipelines and the command line: tasks, vocabulary, tf.data input, training stages."""
