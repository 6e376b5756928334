"""Parse trees as symbol sequences and back: parsing as translation (Section 6.3, after
Vinyals & Kaiser et al. 2014, "Grammar as a Foreign Language").

The target is the tree's depth-first sequence of labelled opening and closing brackets and one
word symbol per word, with the root `TOP` implicit. The target forms differ in what stands for a
word and what the decoder reads after it:

    (TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))
    "tags":      (S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S      the paper's code
    "xx":        (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S        Vinyals et al. 2014
    "words":     (S (NP John )NP (VP has (NP a dog )NP )VP . )S      word pieces, copied
    "read_tags": the "tags" target; after each tag the decoder reads the next word
    "read_xx":   the "xx" target; after each XX the decoder reads the next word

In "words" the constrained search copies each word from the source; in the "read" forms the
decoder reads the next word's first source piece at the start and after each word symbol, so it
knows where it is without counting (`constraint.TreeConstraint`, docs/parsing.md).
"""

from typing import Collection, Sequence

import nltk

from pipelines.tasks.parsing.treebank import ROOT_LABEL, is_preterminal

TARGET_FORMS = ("tags", "xx", "words", "read_tags", "read_xx")
"""Every target form, in the order the command line lists them."""

READ_PREFIX = "read_"

PLACEHOLDER = "XX"
"""The "xx" form's word symbol, and `delinearize`'s preterminal for words left without one."""

OPEN = "("
CLOSE = ")"


def reads_words(target_form: str) -> bool:
    """Whether the decoder reads each word after predicting its slot symbol."""
    return target_form.startswith(READ_PREFIX)


def symbol_form(target_form: str) -> str:
    """The form of the target symbols: "tags", "xx" or "words" ("read_xx" writes "xx")."""
    return target_form[len(READ_PREFIX):] if reads_words(target_form) else target_form


def linearize(tree: nltk.Tree, target_form: str = "tags") -> tuple[list[str], list[str]]:
    """`(source_words, target_symbols)` of a preprocessed tree (`treebank.preprocess`); a root
    other than `TOP` is written like every constituent. ValueError if the tree was not
    preprocessed, a label holds spaces or brackets, or `target_form` is unknown."""
    if target_form not in TARGET_FORMS:
        raise ValueError(f"target_form must be one of {TARGET_FORMS}, got {target_form!r}")
    target_form = symbol_form(target_form)
    words, symbols = [], []
    roots = list(tree) if tree.label() == ROOT_LABEL else [tree]
    # Iterative depth-first walk: ("enter", node) expands, ("leave", label) closes.
    stack: list[tuple[str, object]] = [("enter", node) for node in reversed(roots)]
    while stack:
        action, item = stack.pop()
        if action == "leave":
            symbols.append(CLOSE + item)
            continue
        if not isinstance(item, nltk.Tree):
            raise ValueError(
                f"word {item!r} is not under a POS tag; preprocess the tree before linearizing")
        if is_preterminal(item):
            symbol = {"xx": PLACEHOLDER, "words": item[0]}.get(target_form, item.label())
            if not is_word_symbol(symbol):
                raise ValueError(f"{'word' if target_form == 'words' else 'POS tag'} "
                                 f"{symbol!r} cannot be written as a word symbol")
            symbols.append(symbol)
            words.append(item[0])
            continue
        label = item.label()
        if not _valid_label(label):
            raise ValueError(f"label {label!r} cannot be written as a target symbol")
        if len(item) == 0 or any(not isinstance(child, nltk.Tree) for child in item):
            raise ValueError(
                f"({label} ...) has no words or mixes words and constituents; preprocess the tree")
        symbols.append(OPEN + label)
        stack.append(("leave", label))
        stack.extend(("enter", child) for child in reversed(item))
    return words, symbols


def _valid_label(label: object) -> bool:
    """A label usable in `(LABEL`/`)LABEL`: non-empty, no whitespace or parentheses."""
    return (isinstance(label, str) and bool(label)
            and not any(char.isspace() or char in "()" for char in label))


def is_word_symbol(symbol: object) -> bool:
    """True for a symbol that stands for one word: a valid label not starting with a bracket."""
    return _valid_label(symbol) and symbol[0] not in (OPEN, CLOSE)


def to_target_string(symbols: Sequence[str]) -> str:
    """The target sequence as one line of text, symbols separated by single spaces."""
    return " ".join(symbols)


def from_target_string(text: str) -> list[str]:
    """Split a target line (for example a decoded model output) back into symbols."""
    return text.split()


def delinearize(target_symbols: Sequence[str], source_words: Sequence[str], *,
                labels: Collection[str] | None = None,
                word_symbols: Collection[str] | None = None,
                word_label: str | None = None) -> tuple[nltk.Tree, int]:
    """`(tree, repairs)`: a `TOP` root over exactly `source_words` in order, each under its word
    symbol, rebuilt from `target_symbols`; repairs is 0 exactly for a well-formed linearization.
    Repairs, left to right:

    - an unknown symbol (or one outside `word_symbols`/`labels` when given) is dropped;
    - a closing bracket with no open constituent is dropped;
    - a mislabelled closing bracket closes the innermost constituent, which keeps its label;
    - a word symbol beyond the number of words is dropped;
    - leftover words go, each under `XX`, to the innermost open constituent (or the root);
    - constituents still open at the end are closed; those without any word are dropped.

    `labels`, `word_symbols`: if given, the constituent labels and word symbols allowed (by
    default any valid label, every `is_word_symbol`); `word_label`: if given, every word's
    preterminal (by default its word symbol).
    """
    allowed = None if labels is None else frozenset(labels)
    allowed_words = None if word_symbols is None else frozenset(word_symbols)
    root = nltk.Tree(ROOT_LABEL, [])
    open_nodes = [root]  # the root never closes; open_nodes[-1] receives new children
    position = repairs = 0

    def close_innermost() -> int:
        node = open_nodes.pop()
        if len(node) == 0:
            return 1  # a constituent over no words: drop it
        open_nodes[-1].append(node)
        return 0

    for symbol in target_symbols:
        if is_word_symbol(symbol) and (allowed_words is None or symbol in allowed_words):
            if position < len(source_words):
                open_nodes[-1].append(nltk.Tree(word_label or symbol, [source_words[position]]))
                position += 1
            else:
                repairs += 1
            continue
        bracket, label = symbol[:1], symbol[1:]
        if (bracket not in (OPEN, CLOSE) or not _valid_label(label)
                or (allowed is not None and label not in allowed)):
            repairs += 1
        elif bracket == OPEN:
            open_nodes.append(nltk.Tree(label, []))
        elif len(open_nodes) == 1:
            repairs += 1
        else:  # a mislabelled closing bracket is a repair too
            repairs += (open_nodes[-1].label() != label) + close_innermost()
    for word in source_words[position:]:
        open_nodes[-1].append(nltk.Tree(PLACEHOLDER, [word]))
        repairs += 1
    while len(open_nodes) > 1:
        repairs += 1 + close_innermost()
    return root, repairs


def is_well_formed(tree: nltk.Tree, source_words: Sequence[str], *,
                   word_symbols: Collection[str] | None = None) -> bool:
    """True if `tree` is what `delinearize` promises: a `TOP` root, labelled constituents over
    words, each word alone under a word symbol (of `word_symbols` if given), words in order."""
    if not isinstance(tree, nltk.Tree) or tree.label() != ROOT_LABEL:
        return False
    words = []
    stack = list(reversed(tree))
    while stack:
        node = stack.pop()
        if not isinstance(node, nltk.Tree) or not _valid_label(node.label()) or len(node) == 0:
            return False
        if is_preterminal(node):
            if not is_word_symbol(node.label()) or (
                    word_symbols is not None and node.label() not in word_symbols):
                return False
            words.append(node[0])
        elif any(not isinstance(child, nltk.Tree) for child in node):
            return False
        else:
            stack.extend(reversed(node))
    return words == list(source_words)
