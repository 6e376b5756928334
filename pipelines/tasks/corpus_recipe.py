"""A from-scratch recipe sized to the user's own corpus (`--task text` without a preset).

The paper's recipe fits WMT's millions of pairs; on a few thousand its vocabulary cannot be filled
and its run ends inside the warm-up. Below `LARGE_CORPUS_PAIRS` pairs the task sizes the run from
the corpus files with the rules below, each measured on Multi30k's validation split (the main
job's recipe, docs/results.md#the-default-job; the table in docs/data.md): dev figures are
cased sacreBLEU on the 1,014 validation sentences, 1,000 steps of 2,048 tokens.

These are the task's layer of the recipe: a preset, the model dir and the flags win over them.
"""

import dataclasses
import functools
import itertools
import os

from keras_transformer.schedules import WARMUP_STEPS

LARGE_CORPUS_PAIRS = 1_000_000
SAMPLE_LINES = 100_000  # of each side, for the words; the pairs are counted to the end

# The vocabulary: one piece per five distinct words, 1,000 to 32,000 (Multi30k: 8,000 for its
# 39,522 words, the main job's own vocabulary).
WORDS_PER_PIECE_OF_VOCAB = 5
# The model and batch: the `small` preset (3 layers, d_model 256, dropout 0.1) with 2,048-token
# batches, the main job's: trains in minutes on a 2-core CPU.
SMALL_PRESET, SMALL_BATCH_TOKENS = "small", 2048
# The steps: four passes over the data and at least 1,000, in `CHECKPOINTS` checkpoints (1.3
# pieces per word plus EOS estimate the tokenized lengths); Multi30k: 1,000, the main job's.
PASSES, MIN_STEPS, CHECKPOINTS = 4, 1000, 10
PIECES_PER_WORD = 1.3
# Packed rows: dev loss 2.925 against 3.032 with length buckets, dev BLEU 35.08 against 33.52
# (last 3 averaged): 12% more sentences a step at the same step time.
PACK = True
# The warm-up: 40% of the run, the paper's 4,000 steps at most, at 0.7 times Eq. 3's rate
# (peak 0.0022 for d_model 256): dev loss 3.032 against 3.256 for a warm-up over the whole run;
# at 1.5 times the rate the loss stalled at 4.33, at 0.85 times 3.083. A run given fewer
# --train_steps keeps the fraction (`WARMUP_FRACTION`, applied by the resolver).
WARMUP_FRACTION, LR_SCALE = 0.4, 0.7
# Averaging: the last 3 of the 10 checkpoints: dev BLEU 35.08 against 34.93 (last 2) and 34.27
# (last 5); the dev choice after training may pick another count (pipelines/stages/choose.py).
AVERAGE_LAST = 3
# Then choose the average and alpha on the user's dev split (`--choose_on_dev`,
# pipelines/stages/choose.py): the recipe's values stay unless another scores higher there.
CHOOSE_ON_DEV = True


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


def warmup_for(train_steps: int) -> int:
    """The sized warm-up for a run of `train_steps`: `WARMUP_FRACTION` of it, at most 4,000."""
    return max(1, min(WARMUP_STEPS, round(WARMUP_FRACTION * train_steps)))


def sized(size: CorpusSize) -> SizedRecipe | None:
    """The recipe for a corpus of `size`; None for a corpus large enough for the paper's."""
    if size.pairs >= LARGE_CORPUS_PAIRS:
        return None
    vocab = min(32_000, max(1000, int(round(size.word_types / WORDS_PER_PIECE_OF_VOCAB, -3))))
    tokens_per_pass = size.pairs * (PIECES_PER_WORD * size.words_per_line + 1)
    steps = max(MIN_STEPS, PASSES * tokens_per_pass / SMALL_BATCH_TOKENS)
    checkpoint_every = max(10, int(round(steps / CHECKPOINTS, -1)))
    steps = checkpoint_every * CHECKPOINTS
    return SizedRecipe(
        SMALL_PRESET, vocab,
        {"batch_tokens": SMALL_BATCH_TOKENS, "train_steps": steps, "pack": PACK,
         "warmup_steps": warmup_for(steps), "lr_scale": LR_SCALE,
         "checkpoint_every": checkpoint_every, "average_last": AVERAGE_LAST,
         "choose_on_dev": CHOOSE_ON_DEV},
        f"sized to {size.pairs:,} pairs and {size.word_types:,} distinct words")
