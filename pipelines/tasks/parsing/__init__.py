"""English constituency parsing as sequence-to-sequence translation (paper Section 6.3).

Following Vinyals & Kaiser et al. (2014), "Grammar as a Foreign Language": `treebank` reads
trees, `linearize` turns them into sequences and back, `evalb` scores like EVALB (COLLINS.prm).
Nothing is re-exported here, so `linearize` stays the module and `forms` loads without nltk.
"""
