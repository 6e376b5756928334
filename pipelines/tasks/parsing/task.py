"""The `ptb_parsing` task: English constituency parsing on the WSJ Penn Treebank (Section 6.3).

"Attention Is All You Need", Section 6.3: a 4-layer Transformer with d_model = 1024 trained on
the WSJ part of the Penn Treebank (about 40K sentences, sections 02-21; dev 22, test 23) with a
16K-token vocabulary, decoding with beam size 21, alpha = 0.3 and a maximum output length of
input length + 300, scored with EVALB F1.

The task plugs parsing into the translation pipeline like any corpus: `split_files` turns the
bracketed `.mrg` trees of a split into two parallel text files,

    <work_dir>/data/ptb_parsing/<split>.src     the words, separated by single spaces
    <work_dir>/data/ptb_parsing/<split>.tgt     the linearized tree, `(S (NP NNP )NP ... )S`
                                                (`target_form` "tags"; "xx": `(NP XX )NP`;
                                                "words": `(NP John )NP`)

after the standard preprocessing (`treebank.preprocess`), plus `<split>.trees` with the
preprocessed gold tree of every line (one bracketed tree a line, POS tags included) and
`<split>.manifest.json`, which records the input files (path, size, mtime) and the target
form, and marks the split complete. Files are written under temporary names and renamed; they are reused while the
manifest matches the inputs and the target form, i.e. no input file was added, removed,
replaced or modified since (a stricter test than "newer than the inputs", which misses a swap to an older file).

`score` replaces BLEU for this task: hypotheses are de-linearized over the source words
(`linearize.delinearize`, which repairs ill-formed output) and compared with the gold trees by
`evalb.score_corpus`. The gold trees come from `<split>.trees`, not from the references: the
references may have no POS tags ("xx"), and EVALB (COLLINS.prm) needs the gold tags to delete
punctuation before it computes spans; predicted tags are not scored.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
from typing import ClassVar, Sequence

import nltk

from keras_transformer.decoding import DecodingSettings
from pipelines import Log
from pipelines.errors import DataError
from pipelines.model_dir.files import atomic_files, input_identity, read_manifest
from pipelines.tasks.base import Task, check_split
from pipelines.tasks.parsing import constraint, evalb, forms, linearize, serving, treebank

MANIFEST_VERSION = 2

WSJ_LAYOUTS = ("", "wsj", "parsed/mrg/wsj", "treebank_3/parsed/mrg/wsj")
"""Where the WSJ section folders 00-24 are looked for below `data_dir`, in order: the folder
itself, `wsj/`, and the LDC99T42 (Treebank-3) layouts `parsed/mrg/wsj/`."""

SCORE_SPLITS = ("test", "dev")
"""Splits searched for matching gold trees when `score` is not told the split."""

PROGRESS_EVERY = 10_000
"""Trees between progress lines while a split is read."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PtbParsingTask(Task):
    """Penn Treebank constituency parsing as translation: words -> linearized tree.

    Trees of a split come from its explicit file or directory in `tree_files` (any `.mrg`
    bracketed file, or a directory searched recursively for `*.mrg`), else from the standard
    WSJ sections below `data_dir` (train 02-21, dev 22, test 23; `treebank.wsj_split_files`).
    `target_form` is how words appear in the target (`linearize.TARGET_FORMS`): "tags", each
    word's POS tag (the paper's code), "xx", one placeholder for every word (Vinyals et al.),
    or "words", the word itself, which the constrained search copies from the source;
    "read_tags" and "read_xx" predict tags or `XX` and read each word after its symbol
    (`forms`).
    """

    data_dir: str | None = None
    tree_files: tuple[tuple[str, str | None], ...] = ()
    target_form: str = "read_tags"

    def __post_init__(self):
        if self.target_form not in linearize.TARGET_FORMS:
            raise DataError(f"--target_form must be one of {linearize.TARGET_FORMS}, got "
                            f"{self.target_form!r}")

    metric_name: ClassVar[str] = "f1"

    # ------------------------------------------------------------------ inputs

    def input_files(self, split: str) -> list[pathlib.Path]:
        """The `.mrg` files holding the trees of `split`, in reading order.

        Raises:
            DataError: no input configured for the split, or the file, directory or WSJ
                sections are missing; the message says which flag or folder to fix.
        """
        check_split(split)
        explicit = dict(self.tree_files).get(split)
        if explicit:
            return _explicit_files(pathlib.Path(explicit).expanduser(), split)
        if self.data_dir:
            root = self.wsj_root()
            try:
                return treebank.wsj_split_files(root, split)
            except FileNotFoundError as error:
                raise DataError(
                    f"task {self.name}: {error}. Or give the {split} trees with "
                    f"--{split}_trees FILE."
                ) from None
        raise DataError(
            f"task {self.name}: no trees for the {split} split. Pass --data_dir WSJ_DIR (the "
            f"folder holding the WSJ sections 00-24, e.g. treebank_3/parsed/mrg/wsj of "
            f"LDC99T42) or --{split}_trees FILE (a bracketed .mrg file or a directory of them)."
        )

    def content_options(self) -> dict:
        return {"target_form": self.target_form}

    def has_split(self, split: str) -> bool:
        return bool(dict(self.tree_files).get(split) or self.data_dir)

    def wsj_root(self) -> pathlib.Path:
        """The folder holding the WSJ section folders, searched below `data_dir`.

        Raises:
            DataError: `data_dir` is unset or none of the `WSJ_LAYOUTS` has section 02.
        """
        if not self.data_dir:
            raise DataError(f"task {self.name}: no data_dir; pass --data_dir WSJ_DIR")
        base = pathlib.Path(self.data_dir).expanduser()
        candidates = [base / layout if layout else base for layout in WSJ_LAYOUTS]
        for candidate in candidates:
            if (candidate / "02").is_dir():
                return candidate
        raise DataError(
            f"task {self.name}: no WSJ section folders (02, ..., 23 holding wsj_*.mrg) in any "
            f"of {', '.join(str(c) for c in candidates)}. Point --data_dir at the WSJ folder "
            f"of the Penn Treebank, or give the trees with --train_trees, --dev_trees and "
            f"--test_trees."
        )

    def read_split(self, split: str, *, log: Log | None = None) -> list[nltk.Tree]:
        """The preprocessed trees of `split`, read from its input files.

        Raises:
            DataError: missing inputs, or a malformed tree (the message names file and line).
        """
        return [tree for _, _, tree in self._read(split, self.input_files(split), log)]

    def _read(
        self, split: str, files: Sequence[pathlib.Path], log: Log | None
    ) -> list[tuple[pathlib.Path, int, nltk.Tree]]:
        """`(file, 1-based tree number in the file, preprocessed tree)` of every tree."""
        rows: list[tuple[pathlib.Path, int, nltk.Tree]] = []
        next_report = PROGRESS_EVERY
        for count, path in enumerate(files, start=1):
            try:
                trees = treebank.read_trees(path, preprocessed=True)
            except (treebank.TreebankFormatError, FileNotFoundError) as error:
                raise DataError(f"task {self.name}: {error}") from None
            except ValueError as error:  # preprocess: a word outside a POS tag
                raise DataError(f"task {self.name}: {path}: {error}; fix that tree") from None
            rows.extend((path, number, tree) for number, tree in enumerate(trees, start=1))
            if log is not None and len(rows) >= next_report:
                log(f"{self.name}: {split}: read {len(rows):,} trees "
                    f"({count:,} of {len(files):,} files)")
                next_report = (len(rows) // PROGRESS_EVERY + 1) * PROGRESS_EVERY
        return rows

    # ------------------------------------------------------------------ files

    def split_paths(self, split: str, work_dir: os.PathLike | str) -> dict[str, pathlib.Path]:
        """`{"src", "tgt", "trees", "manifest"}` paths of `split` inside `work_dir`."""
        check_split(split)
        out = self.data_dir_for(work_dir)
        return {kind: out / f"{split}.{kind}" for kind in ("src", "tgt", "trees")} | {
            "manifest": out / f"{split}.manifest.json"
        }

    def split_files(self, split, work_dir, *, log=print):
        """Write (or reuse) `<split>.src`, `.tgt` and `.trees`; return the first two.

        See the module docstring for the format and the reuse rule.
        """
        paths = self.split_paths(split, work_dir)
        files = self.input_files(split)
        identity = {"files": input_identity(files), "target_form": self.target_form}
        reusable = read_manifest(paths["manifest"], MANIFEST_VERSION, identity)
        if reusable is None or not all(paths[k].is_file() for k in ("src", "tgt", "trees")):
            self._write_split(split, files, identity, paths, log)
        return paths["src"], paths["tgt"]

    def _write_split(self, split, files, identity, paths, log: Log) -> None:
        rows = self._read(split, files, log)
        paths["manifest"].unlink(missing_ok=True)  # incomplete until the new one is renamed in
        empty = 0
        kinds = ("src", "tgt", "trees", "manifest")  # the manifest last: complete
        with atomic_files(*(paths[kind] for kind in kinds)) as temps:
            temp = dict(zip(kinds, temps))
            with open(temp["src"], "w", encoding="utf-8", newline="\n") as src, \
                    open(temp["tgt"], "w", encoding="utf-8", newline="\n") as tgt, \
                    open(temp["trees"], "w", encoding="utf-8", newline="\n") as gold:
                for path, number, tree in rows:
                    try:
                        words, symbols = linearize.linearize(tree, self.target_form)
                    except ValueError as error:
                        raise DataError(
                            f"task {self.name}: {path}: tree {number}: {error}; fix that tree"
                        ) from None
                    empty += not words
                    src.write(" ".join(words) + "\n")
                    tgt.write(linearize.to_target_string(symbols) + "\n")
                    gold.write(tree_to_line(tree) + "\n")
            manifest = {"version": MANIFEST_VERSION, "inputs": identity, "trees": len(rows)}
            temp["manifest"].write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        note = f", {empty:,} without words (kept as empty lines)" if empty else ""
        log(f"{self.name}: {split}: {len(rows):,} trees from {len(files):,} file(s){note} -> "
            f"{paths['src']}, {paths['tgt']}, {paths['trees']}")

    def gold_trees(
        self, split: str, work_dir: os.PathLike | str, *, log: Log = print
    ) -> list[nltk.Tree]:
        """The preprocessed gold trees of `split`, line by line with `split_files`' text.

        Writes the split's files first if they are missing or stale.
        """
        self.split_files(split, work_dir, log=log)
        path = self.split_paths(split, work_dir)["trees"]
        trees = []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    trees.append(nltk.Tree.fromstring(line))
                except ValueError as error:
                    raise DataError(
                        f"{path}: line {number}: not a bracketed tree ({error}); delete "
                        f"{path.parent} so the split is written again"
                    ) from None
        return trees

    # ------------------------------------------------------------------ decoding

    def vocab_symbols(self, train_target: pathlib.Path) -> list[str]:
        """Every tree symbol as one piece, `▁` included: the training targets' symbols and
        those of the whole standard label inventory.

        A target line `(S (NP NNP )NP )S` is then exactly one piece per symbol, about a third
        of the pieces BPE would split it into, and the constrained search can tell brackets
        and word symbols apart by id. Labels are an open class for a small training set (the
        WSJ sample has no `WHADJP`, its dev split has one): a bracket pair for every standard
        phrase label (`treebank.PHRASE_LABELS`) and, in the "tags" form, every standard POS tag
        (`treebank.POS_TAGS`) are pieces too, so that the constraint can produce any standard
        tree. A label outside the inventory and the training targets has no piece and stays
        unreachable (the PTB has none after `treebank.preprocess`).
        """
        words = {"tags": treebank.POS_TAGS, "xx": (linearize.PLACEHOLDER,), "words": ()}
        symbols = set(words[forms.symbol_form(self.target_form)])
        symbols.update(bracket + label for label in treebank.PHRASE_LABELS
                       for bracket in (linearize.OPEN, linearize.CLOSE))
        with open(train_target, encoding="utf-8") as handle:
            for line in handle:  # the "words" form's words stay ordinary text
                symbols.update(symbol for symbol in line.split() if self.target_form != "words"
                               or not linearize.is_word_symbol(symbol))
        return [constraint.WORD_START + symbol for symbol in sorted(symbols)]

    def word_symbols(self) -> frozenset[str] | None:
        """The word symbols `score` accepts: `{XX}` for "xx", any non-bracket for "tags"."""
        xx = forms.symbol_form(self.target_form) == "xx"
        return frozenset([linearize.PLACEHOLDER]) if xx else None

    def word_label(self) -> str | None:
        """The preterminal of a predicted word: `XX` for "words", else its word symbol."""
        return linearize.PLACEHOLDER if self.target_form == "words" else None

    def decoding_constraint(self, spm_proto: bytes) -> constraint.TreeConstraint:
        """Beam search that only builds well-formed trees over the sentence's words."""
        return constraint.TreeConstraint.from_proto(
            spm_proto, copy_words=self.target_form == "words",
            read_words=forms.reads_words(self.target_form))

    def teacher_inputs(self, spm_proto: bytes):
        """In the "read" forms, each word symbol of the decoder input becomes its word's
        first source piece (`constraint.TreeConstraint.teacher_inputs`)."""
        if not forms.reads_words(self.target_form):
            return None
        return self.decoding_constraint(spm_proto).teacher_inputs

    def serving_input(self, sentences):
        return serving.normalize_sentences(sentences)

    def serving_output(self, sentences, outputs):
        """The exported parser answers with bracketed trees over the words."""
        return serving.trees_from_linearized(sentences, outputs, word_label=self.word_label())

    # ------------------------------------------------------------------ scoring

    def find_gold_trees(
        self,
        sources: Sequence[str],
        references: Sequence[str],
        *,
        split: str | None = None,
        work_dir: os.PathLike | str | None = None,
    ) -> list[nltk.Tree]:
        """The gold trees of `sources`/`references`: the first `len(sources)` of a split.

        With `split`, that split is used (read from `work_dir`'s `.trees` when given, else from
        the input files); without, the `SCORE_SPLITS` are tried in order and the first whose
        trees linearize to exactly `sources` and `references` is taken (the evaluate stage
        scores a split, or its first N sentences, in corpus order).

        Raises:
            DataError: no split matches, or `split`'s trees differ from the sentences; the
                message gives the first sentence that differs.
        """
        candidates = (split,) if split else SCORE_SPLITS
        reasons = []
        for candidate in candidates:
            try:
                trees = (self.gold_trees(candidate, work_dir, log=lambda _: None)
                         if work_dir is not None else self.read_split(candidate))
            except DataError as error:
                if split:
                    raise
                reasons.append(f"{candidate}: {error}")
                continue
            mismatch = _first_mismatch(trees, sources, references, self.target_form)
            if mismatch is None:
                return trees[: len(sources)]
            reasons.append(f"{candidate}: {mismatch}")
        raise DataError(
            f"task {self.name}: cannot find the gold trees of the {len(sources):,} sentences "
            f"being scored ({'; '.join(reasons)}). Score a split of this task in corpus order, "
            f"or pass gold_trees."
        )

    def score(
        self,
        sources: Sequence[str],
        hypotheses: Sequence[str],
        references: Sequence[str],
        *,
        split: str | None = None,
        work_dir: os.PathLike | str | None = None,
        gold_trees: Sequence[nltk.Tree] | None = None,
    ) -> dict:
        """EVALB (COLLINS.prm) scores of decoded target strings against the gold trees.

        Args:
            sources: the sentences, words separated by spaces (the `.src` lines).
            hypotheses: decoded target strings, one per sentence; any string is scored, after
                `delinearize` repairs it over that sentence's words.
            references: the gold target strings (the `.tgt` lines); used to find and check the
                gold trees, whose POS tags decide the punctuation EVALB deletes.
            split, work_dir: where the gold trees are (see `find_gold_trees`).
            gold_trees: the gold trees themselves, which skips the search.

        Returns:
            `{"f1", "precision", "recall"}` in percent, `"exact"` (sentences with every bracket
            right), `"sentences"` (scored, i.e. with words) and `"repaired"` (hypotheses that
            were not a well-formed linearization over their sentence).

        Raises:
            ValueError: the three lists differ in length.
            DataError: gold trees not found or not matching the sentences.
        """
        if not len(sources) == len(hypotheses) == len(references):
            raise ValueError(
                f"{len(sources)} sources, {len(hypotheses)} hypotheses and {len(references)} "
                f"references; score one hypothesis per sentence"
            )
        if gold_trees is None:
            gold_trees = self.find_gold_trees(sources, references, split=split,
                                              work_dir=work_dir)
        else:
            mismatch = _first_mismatch(gold_trees, sources, references, self.target_form)
            if mismatch is not None or len(gold_trees) != len(sources):
                raise DataError(
                    f"task {self.name}: the gold trees do not match the sentences scored: "
                    f"{mismatch or f'{len(gold_trees)} trees for {len(sources)} sentences'}"
                )
        test_trees = []
        repaired = 0
        for source, hypothesis in zip(sources, hypotheses):
            tree, repairs = linearize.delinearize(
                linearize.from_target_string(hypothesis), source.split(),
                word_symbols=self.word_symbols(), word_label=self.word_label())
            test_trees.append(tree)
            repaired += repairs > 0
        scores = evalb.score_corpus(gold_trees, test_trees)
        return {
            "f1": scores["f1"],
            "precision": scores["precision"],
            "recall": scores["recall"],
            "exact": scores["exact"],
            "sentences": scores["sentences"],
            "repaired": repaired,
        }


def ptb_parsing(
    data_dir: str | None = None,
    train_trees: str | None = None,
    dev_trees: str | None = None,
    test_trees: str | None = None,
    **options,
) -> PtbParsingTask:
    """WSJ constituency parsing with the paper's settings (Section 6.3).

    Defaults: 16,000 shared BPE pieces (the paper's WSJ-only vocabulary; SentencePiece reaches
    that size on the 10% nltk sample too), preset `parsing_wsj` (4 layers, d_model 1024), beam
    21, alpha 0.3, output up to input length + 300. Length limits in tokens: 128 source
    pieces, 512 target symbols (every tree symbol is one piece, `vocab_symbols`: on the WSJ
    sample a tree averages 62 symbols for 34 source pieces); on the sample they drop 6 of
    3,396 training pairs. `options` may set `target_form` (`forms.TARGET_FORMS`; the default,
    "read_tags", predicts POS tags and reads each word; README.md has each form's dev F1).
    """
    return PtbParsingTask(
        name="ptb_parsing",
        source_lang="en",
        target_lang="tree",
        vocab_size=16_000,
        max_source_length=128,
        max_target_length=512,
        preset="parsing_wsj",
        decoding=DecodingSettings(beam_size=21, alpha=0.3, extra_length=300),
        data_dir=data_dir,
        tree_files=(("train", train_trees), ("dev", dev_trees), ("test", test_trees)),
        **options,
    )


def tree_to_line(tree: nltk.Tree) -> str:
    """A tree as one bracketed line, `(TOP (S (NP (NNP John)) ...))`."""
    return tree.pformat(margin=sys.maxsize)


def _explicit_files(path: pathlib.Path, split: str) -> list[pathlib.Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(path.rglob("*.mrg"))
        if files:
            return files
        raise DataError(f"{path}: no .mrg files below this directory (--{split}_trees)")
    raise DataError(
        f"{path}: no such treebank file or directory (--{split}_trees); give a bracketed "
        f".mrg file or a directory of them"
    )


def _first_mismatch(
    trees: Sequence[nltk.Tree], sources: Sequence[str], references: Sequence[str],
    target_form: str,
) -> str | None:
    """None if `trees` start with the trees of `sources`/`references`, else what differs."""
    if len(trees) < len(sources):
        return f"{len(trees):,} gold trees for {len(sources):,} sentences"
    for index, (tree, source, reference) in enumerate(zip(trees, sources, references)):
        words, symbols = linearize.linearize(tree, target_form)
        if words != source.split():
            return f"sentence {index}: the words differ from the gold tree's"
        if symbols != linearize.from_target_string(reference):
            return f"sentence {index}: the reference differs from the gold tree's linearization"
    return None
