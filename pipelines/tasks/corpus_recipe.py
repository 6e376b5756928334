"""A from-scratch recipe sized to the user's own corpus (`--task text` without a preset).

The paper's recipe fits WMT's millions of pairs; on a few thousand its vocabulary cannot be filled
and its run ends inside the warm-up. Below `LARGE_CORPUS_PAIRS` pairs the task sizes the run from
the corpus files: one vocabulary piece per five distinct words (1,000 to 32,000); `SMALL_PRESET`
with 2,048-token batches; `PASSES` passes over the data, at least `MIN_STEPS` (1.3 pieces per word
plus EOS estimate the tokenized lengths); the paper's 4,000 warm-up steps, or the whole run when
shorter, so the learning rate (Eq. 3) peaks by the last step (docs/data.md); ten checkpoints.

These are the task's layer of the recipe: a preset, the model dir and the flags win over them.
"""

import dataclasses
import functools
import itertools
import os

from keras_transformer.schedules import WARMUP_STEPS

LARGE_CORPUS_PAIRS = 1_000_000
SAMPLE_LINES = 100_000  # of each side, for the words; the pairs are counted to the end
WORDS_PER_PIECE_OF_VOCAB = 5
SMALL_PRESET, SMALL_BATCH_TOKENS = "small", 2048
PASSES, MIN_STEPS = 4, 1000
PIECES_PER_WORD = 1.3


@dataclasses.dataclass(frozen=True)
class CorpusSize:
    """What sizing reads from the training files."""

    pairs: int
    word_types: int          # distinct whitespace-separated words, both sides' samples
    words_per_line: float    # the longer side's mean, over the sample


@dataclasses.dataclass(frozen=True)
class SizedRecipe:
    """The task layer's values for a corpus: preset, vocabulary, recipe and origin note."""

    preset: str
    vocab_size: int
    recipe: dict
    note: str


def measure(source: str, target: str) -> CorpusSize | None:
    """The corpus's size, or None when a file cannot be read (prepare names it then)."""
    try:
        return _measure(*(os.path.abspath(p) for p in (source, target)),
                        *(os.stat(p).st_mtime_ns for p in (source, target)))
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def _measure(source: str, target: str, *_mtimes: int) -> CorpusSize:
    types: set[bytes] = set()
    means = []
    for path in (source, target):
        with open(path, "rb") as f:
            lines = list(itertools.islice(f, SAMPLE_LINES))
        words = [line.split() for line in lines]
        types.update(itertools.chain.from_iterable(words))
        means.append(sum(map(len, words)) / max(1, len(words)))
    with open(target, "rb") as f:
        pairs = sum(1 for _ in f)
    return CorpusSize(pairs, len(types), max(means))


def sized(size: CorpusSize) -> SizedRecipe | None:
    """The recipe for a corpus of `size`; None for a corpus large enough for the paper's."""
    if size.pairs >= LARGE_CORPUS_PAIRS:
        return None
    vocab = min(32_000, max(1000, int(round(size.word_types / WORDS_PER_PIECE_OF_VOCAB, -3))))
    tokens_per_pass = size.pairs * (PIECES_PER_WORD * size.words_per_line + 1)
    steps = max(MIN_STEPS, PASSES * tokens_per_pass / SMALL_BATCH_TOKENS)
    checkpoint_every = max(10, int(round(steps / 10, -1)))
    steps = checkpoint_every * 10
    return SizedRecipe(
        SMALL_PRESET, vocab,
        {"batch_tokens": SMALL_BATCH_TOKENS, "train_steps": steps,
         "warmup_steps": min(WARMUP_STEPS, steps), "checkpoint_every": checkpoint_every},
        f"sized to {size.pairs:,} pairs and {size.word_types:,} distinct words")
