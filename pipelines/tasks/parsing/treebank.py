"""Read Penn Treebank bracketed files (`.mrg`, split into top-level trees before nltk parses
them, so errors name file, tree and line) and apply the standard parsing preprocessing.
`preprocess` (Collins 1997): empty elements (`-NONE-`) and the constituents they leave empty are
removed; function tags and co-indices are stripped (`strip_label`); the unlabelled outer wrapper
`( (S ...) )` becomes a root `TOP`; unary chains and POS tags stay.
"""

import os
import pathlib
import re
from typing import Iterator

import nltk

ROOT_LABEL = "TOP"
"""Label of the root of every preprocessed tree; EVALB's COLLINS.prm ignores it."""

EMPTY_ELEMENT_TAG = "-NONE-"
"""POS tag of the Penn Treebank's empty elements (traces, null complementizers, ...)."""

WSJ_SPLITS = {"train": tuple(range(2, 22)), "dev": (22,), "test": (23,)}
"""WSJ sections of the standard parsing split (Collins 1997; Vinyals et al. 2014)."""

_ROOT_ALIASES = ("", "TOP", "ROOT")

PHRASE_LABELS = (
    "ADJP", "ADVP", "CONJP", "FRAG", "INTJ", "LST", "NAC", "NP", "NX", "PP", "PRN", "PRT", "QP",
    "RRC", "S", "SBAR", "SBARQ", "SINV", "SQ", "UCP", "VP", "WHADJP", "WHADVP", "WHNP", "WHPP", "X")
"""The Penn Treebank's clause and phrase labels (Bies et al. 1995, after `strip_label`)."""

POS_TAGS = (
    "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS", "NNP",
    "NNPS", "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB",
    "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB",
    "#", "$", ".", ",", ":", "-LRB-", "-RRB-", "``", "''")
"""The 45 Penn Treebank POS tags (Santorini 1990). With `PHRASE_LABELS`, kept as vocabulary pieces
so a label the training trees lack can still be predicted."""

PathLike = str | os.PathLike


class TreebankFormatError(ValueError):
    """A treebank file that is not well-formed bracketed text; the message names file and line."""


def _top_level_spans(text: str, source: str) -> Iterator[tuple[int, int, int]]:
    """`(start, end, line)` of each top-level tree in `text`; `TreebankFormatError` if malformed."""
    depth = count = start = start_line = 0
    line = 1
    for index, char in enumerate(text):
        if char == "\n":
            line += 1
        elif char == "(":
            if depth == 0:
                start, start_line = index, line
            depth += 1
        elif char == ")":
            if depth == 0:
                raise TreebankFormatError(f"{source}: line {line}: ')' without a matching '(' "
                                          f"after tree {count}; remove it or add the missing '('")
            depth -= 1
            if depth == 0:
                count += 1
                yield start, index + 1, start_line
        elif depth == 0 and not char.isspace():
            raise TreebankFormatError(
                f"{source}: line {line}: text {char!r} outside any bracketed tree, after tree "
                f"{count}; a treebank file holds only bracketed trees")
    if depth:
        raise TreebankFormatError(f"{source}: tree {count + 1} (line {start_line}): not closed, "
                                  f"{depth} ')' missing at the end of the file")


def _check_structure(tree: nltk.Tree) -> None:
    """Raise `ValueError` unless every word sits alone under a POS tag and labels are set."""
    stack = [(tree, True)]
    while stack:
        node, is_root = stack.pop()
        children = list(node)
        if not children:
            raise ValueError(f"constituent ({node.label()} ) has no children")
        if not is_root and not node.label():
            raise ValueError(f"a constituent without a label: {_short(node)}")
        words = [child for child in children if not isinstance(child, nltk.Tree)]
        if words and len(children) != 1:
            raise ValueError(f"({node.label()} ...) mixes words and constituents or holds several "
                             f"words: {_short(node)}")
        if words and is_root:
            raise ValueError(f"the tree is a bare word, not a constituent: {_short(node)}")
        stack.extend((child, False) for child in children if isinstance(child, nltk.Tree))


def _short(node: nltk.Tree, limit: int = 80) -> str:
    text = " ".join(str(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_trees(text: str, source: str = "<string>") -> list[nltk.Tree]:
    """The trees of bracketed `text` (an `.mrg` file's content) in order, as written (WSJ's outer
    wrapper kept); `TreebankFormatError`, naming `source`, tree and line, for a malformed one."""
    trees = []
    for number, (start, end, line) in enumerate(_top_level_spans(text, source), start=1):
        try:
            tree = nltk.Tree.fromstring(text[start:end])
            _check_structure(tree)
        except ValueError as error:
            detail = " ".join(str(error).split())
            raise TreebankFormatError(
                f"{source}: tree {number} (line {line}): {detail}; fix that tree") from None
        trees.append(tree)
    return trees


def read_trees(path: PathLike, *, preprocessed: bool = False) -> list[nltk.Tree]:
    """The trees of one `.mrg` file or every `*.mrg` below a directory (path order), `preprocess`ed
    if asked; FileNotFoundError for no such file, `TreebankFormatError` for a malformed one."""
    path = pathlib.Path(path)
    if path.is_dir():
        files = sorted(path.rglob("*.mrg"))
        if not files:
            raise FileNotFoundError(f"{path}: no .mrg files below this directory")
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"{path}: no such treebank file or directory")
    trees = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise TreebankFormatError(
                f"{file}: not UTF-8 text (byte {error.start}); convert the file to UTF-8") from None
        trees.extend(parse_trees(text, source=str(file)))
    return [preprocess(tree) for tree in trees] if preprocessed else trees


def wsj_split_files(data_dir: PathLike, split: str) -> list[pathlib.Path]:
    """The `.mrg` files of a WSJ split in order, below `data_dir` (section folders `00` ... `24`);
    ValueError for an unknown split, FileNotFoundError for a missing or empty section."""
    if split not in WSJ_SPLITS:
        raise ValueError(f"unknown WSJ split {split!r}; use one of {sorted(WSJ_SPLITS)}")
    data_dir = pathlib.Path(data_dir)
    files = []
    for section in WSJ_SPLITS[split]:
        folder = data_dir / f"{section:02d}"
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: WSJ section {section:02d} of the {split} split is "
                                    "missing; point data_dir at the folder holding sections 00-24")
        section_files = sorted(folder.glob("wsj_*.mrg"))
        if not section_files:
            raise FileNotFoundError(f"{folder}: no wsj_*.mrg files in this section")
        files.extend(section_files)
    return files


def read_wsj_split(data_dir: PathLike, split: str, *, preprocessed: bool = True) -> list[nltk.Tree]:
    """Read (and by default preprocess) the trees of a standard WSJ split."""
    return [tree for file in wsj_split_files(data_dir, split)
            for tree in read_trees(file, preprocessed=preprocessed)]


def strip_label(label: str) -> str:
    """The bare category of a Penn Treebank label, cut at the first `-` or `=` as EVALB cuts:
    `NP-SBJ-1` -> `NP`, `ADVP|PRT` -> `ADVP`; labels starting with `-` (`-LRB-`) stay whole."""
    return (label if label.startswith("-")
            else re.split("[-=]", label.split("|", 1)[0], maxsplit=1)[0])


def is_preterminal(node: object) -> bool:
    """True for a POS-tag node: an `nltk.Tree` whose only child is a word."""
    return isinstance(node, nltk.Tree) and len(node) == 1 and not isinstance(node[0], nltk.Tree)


def preprocess(tree: nltk.Tree) -> nltk.Tree:
    """A preprocessed copy of a tree (module docstring), rooted in `TOP` (perhaps childless)."""
    wrapped = isinstance(tree, nltk.Tree) and tree.label() in _ROOT_ALIASES
    children = [_clean(child) for child in (tree if wrapped else [tree])]
    return nltk.Tree(ROOT_LABEL, [child for child in children if child is not None])


def _clean(node: nltk.Tree) -> nltk.Tree | None:
    """Copy of `node` without empty elements and function tags; None if nothing is left."""
    if not isinstance(node, nltk.Tree):
        raise ValueError(f"word {node!r} is not the only child of a POS tag; not a treebank tree")
    if is_preterminal(node):
        return None if node.label() == EMPTY_ELEMENT_TAG else nltk.Tree(node.label(), [node[0]])
    children = [child for child in map(_clean, node) if child is not None]
    return nltk.Tree(strip_label(node.label()), children) if children else None


def sentence(tree: nltk.Tree) -> list[str]:
    """The words of a tree in order, leaving out empty elements."""
    return [word for word, tag in tree.pos() if tag != EMPTY_ELEMENT_TAG]


def pos_tags(tree: nltk.Tree) -> list[str]:
    """The POS tags of a tree's words in order, leaving out empty elements."""
    return [tag for _, tag in tree.pos() if tag != EMPTY_ELEMENT_TAG]
