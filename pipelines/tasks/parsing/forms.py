"""The target forms of the parsing task: what stands for a word in the target, and what the
decoder reads after it. Constants only (no nltk), so that the command line can list them.

    source: John has a dog .
    "tags":      (S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S      the paper's code
    "xx":        (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S        Vinyals et al. 2014
    "words":     (S (NP John )NP (VP has (NP a dog )NP )VP . )S      word pieces, copied
    "read_tags": the "tags" target; after each tag the decoder reads the next word
    "read_xx":   the "xx" target; after each XX the decoder reads the next word

"tags" (tensor2tensor's wsj_parsing) gives attention a word-dependent symbol to align on at
every word slot. In "words" the decoder reads which word it has reached instead of counting its
word symbols, and the constrained search copies each word from the source
(`constraint.TreeConstraint`), so the model only chooses the brackets.

In the "read" forms a word slot is ONE predicted symbol (its POS tag, or `XX`), and the
decoder's *input* is the sentence itself: at the start and after each slot symbol it reads the
first source piece of the word that comes next (the end token after the last word) instead of
the symbol. In training the teacher-forced input is rewritten so, and beam search feeds the
same whenever a slot symbol is chosen (`constraint.TreeConstraint.decoder_inputs`). The
decoder then knows where it is without counting its slot symbols, it sees the next word when it
decides which brackets to open or close before it, and it predicts a few hundred tree symbols,
never the 4,000-way word pieces the "words" form makes it predict and the search overrides.
The next word, not the one just predicted: deciding what opens or closes before a word needs
that word (docs/parsing.md has the dev F1 of reading the word just predicted).
"""
TARGET_FORMS = ("tags", "xx", "words", "read_tags", "read_xx")
"""Every target form, in the order the command line lists them."""

READ_PREFIX = "read_"


def reads_words(target_form: str) -> bool:
    """Whether the decoder reads each word after predicting its slot symbol."""
    return target_form.startswith(READ_PREFIX)


def symbol_form(target_form: str) -> str:
    """The form of the target symbols: "tags", "xx" or "words" ("read_xx" writes "xx")."""
    return target_form[len(READ_PREFIX):] if reads_words(target_form) else target_form
