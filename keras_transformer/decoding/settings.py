"""The two decoding strategies, as values: `BeamSearch` and `Sampling`. `decode` takes
either; plain settings, no TensorFlow, so that the package and the pipeline's options import
on every Keras backend. Their fields may also be scalar tensors (the served functions take
them per request and check them in the graph); only Python values are checked here."""
import dataclasses
import math

STOP_RULES = ("exact", "best_finished")
MAX_BEAM_SIZE = 16
"""The largest beam_size (and n-best, and samples per sentence) the served model's
*_with_options functions accept."""


def _python(value) -> bool:
    """Whether `value` is a Python value this module checks, not a tensor."""
    return isinstance(value, (int, float, str))


def _integer(value, at_least: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= at_least


def _check(problems: list[str]) -> None:
    if problems:
        raise ValueError("; ".join(problems))


@dataclasses.dataclass(frozen=True)
class BeamSearch:
    """Beam search with a length penalty: the paper's defaults (Section 6.1).

    Attributes:
        beam_size: hypotheses kept per sentence (the paper: 4).
        alpha: GNMT length-penalty exponent (the paper: 0.6).
        extra_length: an output has at most source length + this many tokens (50).
        stop_rule: when a sentence stops. "exact": once no live hypothesis can beat its
            finished ones, whatever the next tokens; "best_finished": once its best
            finished hypothesis beats the best live one as it stands (CTranslate2's rule:
            faster, not always the exact result; docs/results.md).
    """

    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    stop_rule: str = "exact"

    def __post_init__(self):
        problems = []
        if _python(self.beam_size) and not _integer(self.beam_size, 1):
            problems.append(f"beam_size must be an integer >= 1, got {self.beam_size!r}")
        problems += _length_problems(self)
        if self.stop_rule not in STOP_RULES:
            problems.append(f"stop_rule must be one of {STOP_RULES}, got {self.stop_rule!r}")
        _check(problems)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Sampling: each token drawn from the model's distribution, cut to the top k or the
    nucleus p and sharpened by a temperature (`keras_transformer.decoding.sampling`);
    outputs are ranked as beam search ranks them (length penalty `alpha`).

    Attributes:
        topk: keep the k most likely tokens; 0: no cut.
        topp: keep the smallest most-likely set reaching this probability, in (0, 1]; 1: no cut.
        temperature: divides the log-probabilities, > 0.
        seed: the integer all randomness derives from: the same seed, the same samples.
        alpha, extra_length: as `BeamSearch`'s.
    """

    topk: int = 0
    topp: float = 1.0
    temperature: float = 1.0
    seed: int = 0
    alpha: float = BeamSearch.alpha
    extra_length: int = BeamSearch.extra_length

    def __post_init__(self):
        problems = _length_problems(self)
        if _python(self.topk) and not _integer(self.topk, 0):
            problems.append(f"topk must be an integer >= 0, got {self.topk!r}")
        if _python(self.topp) and (isinstance(self.topp, str) or not 0 < self.topp <= 1):
            problems.append(f"topp must be in (0, 1], got {self.topp!r}")
        if _python(self.temperature) and (isinstance(self.temperature, str) or not (
                self.temperature > 0 and math.isfinite(self.temperature))):
            problems.append(f"temperature must be a number > 0, got {self.temperature!r}")
        if _python(self.seed) and not (_integer(self.seed, -2 ** 63) and self.seed < 2 ** 63):
            problems.append(f"seed must be a 64-bit integer, got {self.seed!r}")
        _check(problems)


def _length_problems(search) -> list[str]:
    """The checks both strategies share: alpha and extra_length."""
    problems = []
    if _python(search.alpha) and (isinstance(search.alpha, (bool, str))
                                  or not search.alpha >= 0):
        problems.append(f"alpha must be a number >= 0, got {search.alpha!r}")
    if _python(search.extra_length) and not _integer(search.extra_length, 0):
        problems.append(f"extra_length must be an integer >= 0, got {search.extra_length!r}")
    return problems
