"""A from-scratch recipe sized to the user's own corpus (`--task text` without a preset): the
paper's, for WMT's millions of pairs, cannot fill its vocabulary or end its warm-up on a few
thousand. The rules below were measured on Multi30k's validation split (docs/data.md); a preset,
the model dir and the flags win over them."""

import dataclasses
import itertools

from keras_transformer.learning_rate import WARMUP_STEPS, scale_for_peak
from pipelines.durations import format_duration

LARGE_CORPUS_PAIRS = 1_000_000
SMALL_CORPUS_PAIRS = 1_000  # below: a warning says what to expect
SMALL_CORPUS_NOTE = ("the first 1,000 pairs of Multi30k scored 13.0 BLEU on its test set, all "
                     "29,000 of them 36.0")
SAMPLE_LINES = 100_000  # of each side, for the words; the pairs are counted to the end

WORDS_PER_PIECE_OF_VOCAB = 5  # the vocabulary: one piece per five distinct words
SMALL_PRESET, SMALL_BATCH_TOKENS = "small", 2048
# Four passes over the data and at least 1,000 steps, in `CHECKPOINTS` checkpoints; 1.3 pieces
# per word plus EOS estimate the tokenized lengths.
PASSES, MIN_STEPS, CHECKPOINTS = 4, 1000, 10
PIECES_PER_WORD = 1.3
PACK = True
# The warm-up: 40% of the run, the paper's 4,000 steps at most, at 0.7 times Eq. 3's rate.
WARMUP_FRACTION, LR_SCALE = 0.4, 0.7
AVERAGE_LAST = 3
CHOOSE_ON_DEV = True  # then the average and alpha are chosen on dev (pipelines/stages/choose.py)
# The most passes a budget may buy: quick (provisional), long (its measured run of 8,000 steps).
QUICK_MAX_PASSES, LONG_MAX_PASSES, LONG_MEASURED_STEPS = 12, 136, 8000
LONG_FROM_SECONDS = 3600  # from this budget on, the long recipe of the tiny model (provisional)
LONG_PRESET, LONG_WARMUP_FRACTION = "tiny", 0.25


@dataclasses.dataclass(frozen=True)
class CorpusSize:
    """What sizing reads from the training files."""

    pairs: int
    word_types: int          # distinct whitespace-separated words, both sides' samples
    words_per_line: float    # the longer side's mean, over the sample


@dataclasses.dataclass(frozen=True)
class SizedRecipe:
    """The task layer's values for a corpus: family (and preset), vocabulary, recipe, note."""

    family: "Family"
    vocab_size: int
    recipe: dict
    note: str

    @property
    def preset(self) -> str:
        return self.family.preset


def measure(source: str, target: str) -> CorpusSize | None:
    """The corpus's size (a sample of lines, and the line count); None for an unreadable file."""
    types: set[bytes] = set()
    means = []
    try:
        for path in (source, target):
            with open(path, "rb") as f:
                words = [line.split() for line in itertools.islice(f, SAMPLE_LINES)]
            types.update(itertools.chain.from_iterable(words))
            means.append(sum(map(len, words)) / max(1, len(words)))
        with open(target, "rb") as f:
            pairs = sum(1 for _ in f)
    except OSError:
        return None
    return CorpusSize(pairs, len(types), max(means))


def small_corpus_warning(size: CorpusSize) -> str | None:
    """What to expect from a corpus under `SMALL_CORPUS_PAIRS` pairs; None for a larger one."""
    return None if size.pairs >= SMALL_CORPUS_PAIRS else (
        f"train: warning: {size.pairs:,} pairs is a very small corpus: expect a weak model "
        f"({SMALL_CORPUS_NOTE}); add parallel text, or fine-tune a trained model on it "
        f"(--init_from DIR)")


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
        """`LONG_WARMUP_FRACTION` of `train_steps` (peak rate), else `WARMUP_FRACTION`, <= 4,000."""
        if self.peak_lr:
            return max(1, round(LONG_WARMUP_FRACTION * train_steps))
        return max(1, min(WARMUP_STEPS, round(WARMUP_FRACTION * train_steps)))

    def for_steps(self, train_steps: float) -> dict:
        """The settings that follow the steps, for about `train_steps` of them."""
        every = train_steps / self.checkpoints
        if every >= 5 * self.checkpoint_round:
            every = round(every / self.checkpoint_round) * self.checkpoint_round
        every = max(1, int(round(every)))
        steps = every * self.checkpoints
        out = {"train_steps": steps, "warmup_steps": self.warmup(steps), "checkpoint_every": every}
        if self.peak_lr:
            out["lr_scale"] = scale_for_peak(self.peak_lr, self.d_model, out["warmup_steps"])
        return out


QUICK = Family("quick", SMALL_PRESET, {
    "batch_tokens": SMALL_BATCH_TOKENS, "pack": PACK, "lr_scale": LR_SCALE,
    "average_last": AVERAGE_LAST, "choose_on_dev": CHOOSE_ON_DEV},
    checkpoints=CHECKPOINTS, checkpoint_round=10, max_passes=QUICK_MAX_PASSES)
# The long recipe: the `multi30k_quality` preset's (docs/data.md), its length set by the budget.
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
