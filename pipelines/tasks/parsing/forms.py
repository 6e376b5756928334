"""The target forms of the parsing task: what stands for a word in the target, and what the
decoder reads after it. Constants only (no nltk), so that the command line can list them.

    source: John has a dog .
    "tags":      (S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S      the paper's code
    "xx":        (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S        Vinyals et al. 2014
    "words":     (S (NP John )NP (VP has (NP a dog )NP )VP . )S      word pieces, copied
    "read_tags": the "tags" target; after each tag the decoder reads the next word
    "read_xx":   the "xx" target; after each XX the decoder reads the next word

In "words" the constrained search copies each word from the source, so the model only chooses
the brackets. In the "read" forms the decoder's input at the start and after each word symbol is
the first source piece of the next word (the end token after the last), in training and search
(`constraint.TreeConstraint`): the decoder knows where it is without counting, and sees the next
word when deciding which brackets open or close before it (docs/parsing.md).
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
