"""Any parallel text files, given per split by path (`--task text`)."""

import dataclasses
import pathlib

from pipelines.durations import parse_duration
from pipelines.errors import ConfigError, DataError
from pipelines.tasks import corpus_recipe
from pipelines.tasks.base import Task, check_split


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextFilesTask(Task):
    """Any parallel text files, one sentence a line, given per split by path."""

    files: tuple[tuple[str, str | None, str | None], ...] = ()
    family: corpus_recipe.Family | None = None
    """The sized recipe's family (None: the paper's recipe, for a large corpus)."""
    budget: float | None = None
    """--time_budget in seconds: the plan sets the family's steps to fit it."""
    max_steps: int = 0
    """The most steps the family may take on this corpus (`corpus_recipe.max_steps`)."""
    size: corpus_recipe.CorpusSize | None = None
    """What sizing read from the training files."""

    def has_split(self, split):
        return any(name == split and src and tgt for name, src, tgt in self.files)

    def score_label(self, split):
        if split == "test" and self.test_files:
            return super().score_label(split)
        return next((tgt for name, src, tgt in self.files if name == split and src and tgt), split)

    def corpus_warning(self):
        return corpus_recipe.small_corpus_warning(self.size) if self.size else None

    def warmup_for(self, train_steps):
        return self.family.warmup(train_steps) if self.family else None

    def split_files(self, split, work_dir, *, log=print):
        check_split(split)
        for name, src, tgt in self.files:
            if name == split and src and tgt:
                return pathlib.Path(src), pathlib.Path(tgt)
        raise DataError(f"task {self.name}: no files for split {split!r}; pass --{split}_src and "
                        f"--{split}_tgt (one sentence a line, UTF-8, same number of lines).")


def text(train_src: str | None = None, train_tgt: str | None = None,
         dev_src: str | None = None, dev_tgt: str | None = None, test_src: str | None = None,
         test_tgt: str | None = None, time_budget: str | None = None,
         **options) -> TextFilesTask:
    """Parallel text files by path: the paper's recipe, or one sized to the corpus and budget."""
    budget = None if time_budget is None else parse_duration(time_budget)
    if time_budget is not None and budget is None:
        raise ConfigError(f"--time_budget {time_budget}: give a duration such as 90s, 30m, 2h "
                          "or 1h30m")
    size = corpus_recipe.measure(train_src, train_tgt) if train_src and train_tgt else None
    recipe = corpus_recipe.sized(size, budget) if size else None
    if budget and recipe is None:
        raise ConfigError(f"--time_budget {time_budget}: only a corpus below "
                          f"{corpus_recipe.LARGE_CORPUS_PAIRS:,} pairs gets a sized recipe to "
                          f"plan; give --train_steps for the paper's recipe")
    layer = ({"family": recipe.family, "max_steps": corpus_recipe.max_steps(recipe.family, size),
              "vocab_size": recipe.vocab_size, "preset": recipe.preset, "recipe": recipe.recipe,
              "recipe_note": recipe.note} if recipe else {"vocab_size": 32_000, "preset": "base"})
    return TextFilesTask(
        name="text", source_lang="src", target_lang="tgt", budget=budget, size=size,
        max_source_length=256, max_target_length=256,
        files=(("train", train_src, train_tgt), ("dev", dev_src, dev_tgt),
               ("test", test_src, test_tgt)), **layer, **options)
