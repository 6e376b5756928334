"""`Task`: a corpus and direction with its defaults, and every hook a stage may call (stages see
only these), so a new corpus is one subclass and one factory in `registry.TASKS`."""

import abc
import dataclasses
import os
import pathlib
from typing import ClassVar, Sequence

from keras_transformer.decoding import BeamSearch
from pipelines import Log

SPLITS = ("train", "dev", "test")


def check_split(split: str) -> None:
    """Raises ValueError unless `split` is one of `SPLITS` (a programming error)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Task(abc.ABC):
    """A sequence-to-sequence task: language pair, defaults, the text files of each split.
    Lengths count subword tokens with the EOS (source) or BOS (target) the pipeline adds."""

    name: str
    source_lang: str
    target_lang: str
    vocab_size: int
    max_source_length: int
    max_target_length: int
    preset: str
    decoding: BeamSearch = BeamSearch()
    recipe: dict = dataclasses.field(default_factory=dict)
    """Settings the task brings beyond these fields, by flag name (below a preset's)."""
    recipe_note: str = ""
    """How the task chose its preset, vocabulary and recipe, when it measured them."""
    preset_overrides: dict = dataclasses.field(default_factory=dict)
    """Preset name -> the `TransformerConfig` fields this task changes in it."""
    test_files: tuple[str, str] | tuple[()] = ()
    """(source, target) files that stand for the test split: a user's own test set."""

    metric_name: ClassVar[str] = "sacrebleu"
    """The key of `score`'s result that judges a model (dev metric, best checkpoints)."""

    @property
    def origin(self) -> str:
        """Where the task layer's values come from, as the options block names it."""
        return f"task {self.name}" + (f" ({self.recipe_note})" if self.recipe_note else "")

    @property
    def max_length(self) -> int:
        """Longest sequence the model must embed (for the positional encoding size)."""
        return max(self.max_source_length, self.max_target_length)

    def data_files(self, split: str, work_dir: os.PathLike | str, *,
                   log: Log = print) -> tuple[pathlib.Path, pathlib.Path]:
        """``split_files``, or the given ``test_files`` for the test split."""
        if split == "test" and self.test_files:
            return tuple(pathlib.Path(path) for path in self.test_files)
        return self.split_files(split, work_dir, log=log)

    @abc.abstractmethod
    def split_files(self, split: str, work_dir: os.PathLike | str, *,
                    log: Log = print) -> tuple[pathlib.Path, pathlib.Path]:
        """``(source_path, target_path)``: parallel UTF-8 text for ``split``, materialized
        under ``work_dir`` if needed (a second call reuses them)."""

    def content_options(self) -> dict:
        """What the task is, recorded in the model dir so a later run cannot change it."""
        return {}

    def score_label(self, split: str) -> str:
        """What a score of `split` is printed under: the split, or the user's reference file."""
        return self.test_files[1] if split == "test" and self.test_files else split

    def corpus_warning(self) -> str | None:
        """A warning about the training corpus (too small to expect much), or None."""
        return None

    def warmup_for(self, train_steps: int) -> int | None:
        """The warm-up for a run of `train_steps` a flag gives; None: the recipe's stays."""
        return None

    def has_split(self, split: str) -> bool:
        """Whether the task has data for `split`."""
        return True

    def data_dir_for(self, work_dir: os.PathLike | str) -> pathlib.Path:
        """Where this task materializes its text files inside ``work_dir``."""
        return pathlib.Path(work_dir) / "data" / self.name

    def score(self, sources: Sequence[str], hypotheses: Sequence[str],
              references: Sequence[str], *, split: str | None = None,
              work_dir: os.PathLike | str | None = None) -> dict:
        """Scores of `hypotheses` (the first `len(hypotheses)` sentences of `split`), headed by
        `metric_name`; `split` and `work_dir` locate gold data beyond the references."""
        from pipelines.tasks import bleu

        return bleu.score_translations(hypotheses, references, self.target_lang)

    # Hooks for tasks whose output is not plain text (parsing); translation needs none.

    def vocab_symbols(self, train_target: pathlib.Path) -> list[str]:
        """Strings the shared vocabulary must keep as single pieces."""
        return []

    def decoding_constraint(self, spm_proto: bytes):
        """A `keras_transformer.decoding.DecodingConstraint` for beam search, or None."""
        return None

    def teacher_inputs(self, spm_proto: bytes):
        """None, or `f(source_ids, target_in) -> target_in`: the decoder input teacher-forced
        instead of [BOS] + target (a parser reads the words); int32 tensors, one example or a
        batch. Must agree with `decoding_constraint`'s `decoder_inputs`."""
        return None

    def serving_input(self, sentences):
        """In-graph: the input sentences as the model expects them."""
        return sentences

    def serving_output(self, sentences, outputs):
        """In-graph: the answer from the input sentences and the decoded outputs."""
        return outputs
