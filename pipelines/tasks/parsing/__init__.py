"""English constituency parsing as sequence-to-sequence translation (paper Section 6.3): the
`ptb_parsing` task (`task`). Nothing is re-exported, so nltk and TensorFlow load only on use."""
