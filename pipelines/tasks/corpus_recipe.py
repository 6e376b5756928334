"""A from-scratch recipe sized to the user's own corpus (`--task text` without a preset).

The paper's recipe fits WMT's millions of pairs; on a few thousand its vocabulary cannot be filled
and its run ends inside the warm-up. Below `LARGE_CORPUS_PAIRS` pairs the task sizes the run from
the corpus files with the rules below, each measured on Multi30k's validation split (the main
job's recipe, docs/results.md#the-default-job; the table in docs/data.md): dev figures are
cased sacreBLEU on the 1,014 validation sentences, 1,000 steps of 2,048 tokens.

These are the task's layer of the recipe: a preset, the model dir and the flags win over them.
"""

import dataclasses
import itertools

from keras_transformer.learning_rate import WARMUP_STEPS, scale_for_peak
from pipelines.durations import format_duration

LARGE_CORPUS_PAIRS = 1_000_000
SMALL_CORPUS_PAIRS = 1_000  # below: a warning says what to expect
SMALL_CORPUS_NOTE = ("the first 1,000 pairs of Multi30k scored 13.0 BLEU on its test set, all "
                     "29,000 of them 36.0")
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
# The passes over the data a budget may buy: long, the measured 8,000 updates of 8,192 tokens
# on Multi30k (136 passes, the dev loss still falling); quick, three times its 4 passes (runs
# of the small model beyond 4 passes are not measured yet: a provisional bound).
QUICK_MAX_PASSES, LONG_MAX_PASSES, LONG_MEASURED_STEPS = 12, 136, 8000
# From a budget of an hour on, the long recipe of the tiny model (it reached 40.43 in 1 h 52
# min); below, the quick recipe, its steps set by the plan. Provisional: the runs that place
# this line (both recipes at 30 minutes) are not made yet.
LONG_FROM_SECONDS = 3600
LONG_PRESET, LONG_WARMUP_FRACTION = "tiny", 0.25


@dataclasses.dataclass(frozen=True)
class CorpusSize:
    """What sizing reads from the training files."""

    pairs: int
    word_types: int          # distinct whitespace-separated words, both sides' samples
    words_per_line: float    # the longer side's mean, over the sample


@dataclasses.dataclass(frozen=True)
class SizedRecipe:
    """The task layer's values for a corpus: its family (and preset), vocabulary, recipe and
    origin note."""

    family: "Family"
    vocab_size: int
    recipe: dict
    note: str

    @property
    def preset(self) -> str:
        return self.family.preset


def measure(source: str, target: str) -> CorpusSize | None:
    """The corpus's size, read from its files at each call (a sample of lines, and the line
    count); None when a file cannot be read (prepare names it then)."""
    types: set[bytes] = set()
    means = []
    try:
        for path in (source, target):
            with open(path, "rb") as f:
                lines = list(itertools.islice(f, SAMPLE_LINES))
            words = [line.split() for line in lines]
            types.update(itertools.chain.from_iterable(words))
            means.append(sum(map(len, words)) / max(1, len(words)))
        with open(target, "rb") as f:
            pairs = sum(1 for _ in f)
    except OSError:
        return None
    return CorpusSize(pairs, len(types), max(means))


def small_corpus_warning(size: CorpusSize) -> str | None:
    """What to expect from a corpus under `SMALL_CORPUS_PAIRS` pairs; None for a larger one."""
    if size.pairs >= SMALL_CORPUS_PAIRS:
        return None
    return (f"train: warning: {size.pairs:,} pairs is a very small corpus: expect a weak "
            f"model ({SMALL_CORPUS_NOTE}); add parallel text, or fine-tune a trained model on "
            f"it (--init_from DIR)")


def warmup_for(train_steps: int) -> int:
    """The sized warm-up for a run of `train_steps`: `WARMUP_FRACTION` of it, at most 4,000."""
    return max(1, min(WARMUP_STEPS, round(WARMUP_FRACTION * train_steps)))


@dataclasses.dataclass(frozen=True)
class Family:
    """A recipe whose length the corpus or a time budget sets: what stays whatever the steps,
    and how the warm-up, the rate and the checkpoints follow them."""

    name: str
    preset: str
    fixed: dict
    checkpoints: int          # the run is this many checkpoints
    checkpoint_round: int     # checkpoint_every is a multiple of this (where it can be)
    max_passes: float         # passes over the data beyond which no run was measured
    peak_lr: float = 0.0      # the rate's peak (0: the fixed lr_scale times Eq. 3)
    d_model: int = 0          # the preset's, for the peak

    def warmup(self, train_steps: int) -> int:
        if self.peak_lr:
            return max(1, round(LONG_WARMUP_FRACTION * train_steps))
        return warmup_for(train_steps)

    def for_steps(self, train_steps: float) -> dict:
        """The settings that follow the steps, for about `train_steps` of them."""
        every = train_steps / self.checkpoints
        if every >= 5 * self.checkpoint_round:
            every = round(every / self.checkpoint_round) * self.checkpoint_round
        every = max(1, int(round(every)))
        steps = every * self.checkpoints
        out = {"train_steps": steps, "warmup_steps": self.warmup(steps),
               "checkpoint_every": every}
        if self.peak_lr:
            out["lr_scale"] = scale_for_peak(self.peak_lr, self.d_model, out["warmup_steps"])
        return out


QUICK = Family("quick", SMALL_PRESET, {
    "batch_tokens": SMALL_BATCH_TOKENS, "pack": PACK, "lr_scale": LR_SCALE,
    "average_last": AVERAGE_LAST, "choose_on_dev": CHOOSE_ON_DEV},
    checkpoints=CHECKPOINTS, checkpoint_round=10, max_passes=QUICK_MAX_PASSES)
# The long recipe: the `multi30k_quality` preset's (fairseq's transformer_tiny, 40.43 on
# test_2016_flickr in 8,000 updates; docs/results.md#multi30k), its length set by the budget:
# 2 x 4,096-token updates, a quarter of the run warming up to a peak of 0.005, Adam epsilon
# 1e-8, 64 checkpoints of which the last 10 averaged, beam 5, alpha 1.0. Precision and XLA are
# the device's (the preset's float32 with XLA took 1.180 s a step on the AVX512_BF16 CPU,
# bfloat16 without XLA 0.953 s: a budget buys 1.24 times the steps).
LONG = Family("long", LONG_PRESET, {
    "batch_tokens": 8192, "adam_epsilon": 1e-8,
    "average_last": 10, "beam_size": 5, "alpha": 1.0, "choose_on_dev": CHOOSE_ON_DEV},
    checkpoints=64, checkpoint_round=1, max_passes=LONG_MAX_PASSES, peak_lr=0.005, d_model=128)


def tokens_per_pass(size: CorpusSize) -> float:
    """Estimated tokens of one pass over the corpus's longer side (pieces and EOS)."""
    return size.pairs * (PIECES_PER_WORD * size.words_per_line + 1)


def max_steps(family: Family, size: CorpusSize) -> int:
    """The most steps of `family` a budget may buy on this corpus (`Family.max_passes`)."""
    return int(family.max_passes * tokens_per_pass(size) / family.fixed["batch_tokens"])


def sized(size: CorpusSize, budget: float | None = None) -> SizedRecipe | None:
    """The recipe for a corpus of `size` (and a time `budget` in seconds, which picks the
    family; the plan sets its steps); None for a corpus large enough for the paper's."""
    if size.pairs >= LARGE_CORPUS_PAIRS:
        return None
    vocab = min(32_000, max(1000, int(round(size.word_types / WORDS_PER_PIECE_OF_VOCAB, -3))))
    family = LONG if budget and budget >= LONG_FROM_SECONDS else QUICK
    steps = (LONG_MEASURED_STEPS if family is LONG else
             max(MIN_STEPS, PASSES * tokens_per_pass(size) / SMALL_BATCH_TOKENS))
    return SizedRecipe(
        family, vocab, {**family.fixed, **family.for_steps(steps)},
        f"sized to {size.pairs:,} pairs and {size.word_types:,} distinct words"
        + (f", the {family.name} recipe for a budget of {format_duration(budget)}"
           if budget else ""))
