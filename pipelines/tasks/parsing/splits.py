"""The trees of a `ptb_parsing` split, and the parallel text files written from them.

`TreebankSplits.split_files` writes, below `<work_dir>/data/ptb_parsing/`:

    <split>.src            the words, separated by single spaces
    <split>.tgt            the linearized tree (`linearize`), `(S (NP NNP )NP ... )S`
    <split>.trees          the preprocessed gold tree of every line, POS tags included
    <split>.manifest.json  the input files (path, size, mtime) and the target form; complete

and reuses them while the manifest matches: same target form, no input file changed since.
"""

import json
import os
import pathlib
import sys
from typing import Sequence

import nltk

from keras_transformer.atomic_files import atomic_files
from pipelines import Log
from pipelines.errors import DataError
from pipelines.model_dir.files import input_identity, read_manifest
from pipelines.tasks.base import check_split
from pipelines.tasks.parsing import linearize, treebank

MANIFEST_VERSION = 2

WSJ_LAYOUTS = ("", "wsj", "parsed/mrg/wsj", "treebank_3/parsed/mrg/wsj")
"""Where the WSJ section folders 00-24 are looked for below `data_dir`, in order."""

PROGRESS_EVERY = 10_000
"""Trees between progress lines while a split is read."""


class TreebankSplits:
    """A split's trees and the files `split_files` writes from them; part of `PtbParsingTask`."""

    def input_files(self, split: str) -> list[pathlib.Path]:
        """The `.mrg` files of `split` in reading order; DataError when none are given or found."""
        check_split(split)
        explicit = dict(self.tree_files).get(split)
        if explicit:
            return _explicit_files(pathlib.Path(explicit).expanduser(), split)
        if self.data_dir:
            root = self.wsj_root()
            try:
                return treebank.wsj_split_files(root, split)
            except FileNotFoundError as error:
                raise DataError(f"task {self.name}: {error}. Or give the {split} trees with "
                                f"--{split}_trees FILE.") from None
        raise DataError(
            f"task {self.name}: no trees for the {split} split. Pass --data_dir WSJ_DIR (the "
            f"folder holding the WSJ sections 00-24, e.g. treebank_3/parsed/mrg/wsj of "
            f"LDC99T42) or --{split}_trees FILE (a bracketed .mrg file or a directory of them).")

    def has_split(self, split: str) -> bool:
        return bool(dict(self.tree_files).get(split) or self.data_dir)

    def wsj_root(self) -> pathlib.Path:
        """The first of the `WSJ_LAYOUTS` below `data_dir` with section 02, else DataError."""
        if not self.data_dir:
            raise DataError(f"task {self.name}: no data_dir; pass --data_dir WSJ_DIR")
        base = pathlib.Path(self.data_dir).expanduser()
        candidates = [base / layout for layout in WSJ_LAYOUTS]
        for candidate in candidates:
            if (candidate / "02").is_dir():
                return candidate
        raise DataError(
            f"task {self.name}: no WSJ section folders (02, ..., 23 holding wsj_*.mrg) in any of "
            f"{', '.join(str(c) for c in candidates)}. Point --data_dir at the WSJ folder of the "
            "Penn Treebank, or give the trees with --train_trees, --dev_trees and --test_trees.")

    def read_split(self, split: str, *, log: Log | None = None) -> list[nltk.Tree]:
        """The preprocessed trees of `split`; DataError for missing inputs or a malformed tree."""
        return [tree for _, _, tree in self._read(split, self.input_files(split), log)]

    def _read(self, split: str, files: Sequence[pathlib.Path],
              log: Log | None) -> list[tuple[pathlib.Path, int, nltk.Tree]]:
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

    def split_paths(self, split: str, work_dir: os.PathLike | str) -> dict[str, pathlib.Path]:
        """`{"src", "tgt", "trees", "manifest"}` paths of `split` inside `work_dir`."""
        check_split(split)
        out = self.data_dir_for(work_dir)
        return ({kind: out / f"{split}.{kind}" for kind in ("src", "tgt", "trees")}
                | {"manifest": out / f"{split}.manifest.json"})

    def split_files(self, split, work_dir, *, log=print):
        """Write or reuse (module docstring) `<split>.src`, `.tgt`, `.trees`; return src, tgt."""
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
                        raise DataError(f"task {self.name}: {path}: tree {number}: {error}; "
                                        "fix that tree") from None
                    empty += not words
                    src.write(" ".join(words) + "\n")
                    tgt.write(linearize.to_target_string(symbols) + "\n")
                    gold.write(tree_to_line(tree) + "\n")
            manifest = {"version": MANIFEST_VERSION, "inputs": identity, "trees": len(rows)}
            temp["manifest"].write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        note = f", {empty:,} without words (kept as empty lines)" if empty else ""
        log(f"{self.name}: {split}: {len(rows):,} trees from {len(files):,} file(s){note} -> "
            f"{paths['src']}, {paths['tgt']}, {paths['trees']}")

    def gold_trees(self, split: str, work_dir: os.PathLike | str, *,
                   log: Log = print) -> list[nltk.Tree]:
        """The preprocessed gold trees of `split`, line by line with `split_files`' text."""
        self.split_files(split, work_dir, log=log)
        path = self.split_paths(split, work_dir)["trees"]
        trees = []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    trees.append(nltk.Tree.fromstring(line))
                except ValueError as error:
                    raise DataError(f"{path}: line {number}: not a bracketed tree ({error}); "
                                    f"delete {path.parent} so the split is written again") from None
        return trees


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
    raise DataError(f"{path}: no such treebank file or directory (--{split}_trees); give a "
                    "bracketed .mrg file or a directory of them")
