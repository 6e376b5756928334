"""Any parallel text files, given per split by path (`--task text`)."""

import dataclasses
import pathlib

from pipelines.errors import DataError
from pipelines.tasks import corpus_recipe
from pipelines.tasks.base import Task, check_split


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextFilesTask(Task):
    """Any parallel text files, one sentence a line, given per split by path."""

    files: tuple[tuple[str, str | None, str | None], ...] = ()

    def has_split(self, split):
        return any(name == split and src and tgt for name, src, tgt in self.files)

    def score_label(self, split):
        if split == "test" and self.test_files:
            return super().score_label(split)
        return next((tgt for name, src, tgt in self.files if name == split and src and tgt),
                    split)

    def warmup_for(self, train_steps):
        return corpus_recipe.warmup_for(train_steps) if self.recipe else None

    def split_files(self, split, work_dir, *, log=print):
        check_split(split)
        for name, src, tgt in self.files:
            if name == split and src and tgt:
                return pathlib.Path(src), pathlib.Path(tgt)
        raise DataError(
            f"task {self.name}: no files for split {split!r}; pass --{split}_src and "
            f"--{split}_tgt (one sentence a line, UTF-8, same number of lines).")


def text(train_src: str | None = None, train_tgt: str | None = None,
         dev_src: str | None = None, dev_tgt: str | None = None, test_src: str | None = None,
         test_tgt: str | None = None, **options) -> TextFilesTask:
    """Parallel text files by path: the paper's base recipe, or one sized to a small corpus."""
    size = corpus_recipe.measure(train_src, train_tgt) if train_src and train_tgt else None
    recipe = corpus_recipe.sized(size) if size else None
    return TextFilesTask(
        name="text", source_lang="src", target_lang="tgt",
        vocab_size=recipe.vocab_size if recipe else 32_000,
        preset=recipe.preset if recipe else "base", recipe=recipe.recipe if recipe else {},
        recipe_note=recipe.note if recipe else "",
        max_source_length=256, max_target_length=256,
        files=(("train", train_src, train_tgt), ("dev", dev_src, dev_tgt),
               ("test", test_src, test_tgt)),
        **options)
