"""English constituency parsing as sequence-to-sequence translation (paper Section 6.3).

Following Vinyals & Kaiser et al. (2014), "Grammar as a Foreign Language": Penn Treebank trees
are read and preprocessed (`treebank`), turned into source words and a bracketed target
sequence and back (`linearize`), and predictions are scored like EVALB with COLLINS.prm
(`evalb`). Pure Python on nltk trees; the translation model and tf.data pipeline are separate.

The names live in their modules (`from pipelines.tasks.parsing.linearize import linearize`);
they are not re-exported here, so that `pipelines.tasks.parsing.linearize` stays the module
rather than being shadowed by the function of the same name. Nor are they imported here: the
command line reads `forms` without paying for nltk.
"""
