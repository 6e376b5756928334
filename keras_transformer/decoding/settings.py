"""The strategies `BeamSearch` and `Sampling`: plain values or scalar tensors, no TensorFlow."""
import dataclasses
import math

STOP_RULES = ("exact", "best_finished")
MAX_BEAM_SIZE = 16
"""The largest beam_size, n-best or sample count the served *_with_options functions accept."""


def _integer(at_least: int, below: float = math.inf):
    return lambda v: not isinstance(v, bool) and isinstance(v, int) and at_least <= v < below


def _number(accept):
    return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and accept(v)


RULES = {"beam_size": (_integer(1), "an integer >= 1"),
         "extra_length": (_integer(0), "an integer >= 0"),
         "alpha": (_number(lambda v: v >= 0), "a number >= 0"),
         "stop_rule": (lambda v: v in STOP_RULES, f"one of {STOP_RULES}"),
         "topk": (_integer(0), "an integer >= 0"),
         "topp": (_number(lambda v: 0 < v <= 1), "in (0, 1]"),
         "temperature": (_number(lambda v: 0 < v < math.inf), "a number > 0"),
         "seed": (_integer(-2 ** 63, 2 ** 63), "a 64-bit integer")}
"""Each field's rule and how a refusal says it."""


class _Checked:
    """Base of the strategies: a ValueError naming every field whose Python value breaks its
    rule (tensors: the graph's)."""

    def __post_init__(self) -> None:
        problems = [f"{f.name} must be {RULES[f.name][1]}, got {value!r}"
                    for f in dataclasses.fields(self)
                    if isinstance(value := getattr(self, f.name), (int, float, str))
                    and not RULES[f.name][0](value)]
        if problems:
            raise ValueError("; ".join(problems))


@dataclasses.dataclass(frozen=True)
class BeamSearch(_Checked):
    """Beam search with a length penalty: the paper's defaults (Section 6.1).

    Attributes:
        beam_size: hypotheses kept per sentence (the paper: 4).
        alpha: GNMT length-penalty exponent (the paper: 0.6).
        extra_length: an output has at most source length + this many tokens (50).
        stop_rule: "exact" or "best_finished" (faster, not always exact): `core.can_improve`.
    """

    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    stop_rule: str = "exact"


@dataclasses.dataclass(frozen=True)
class Sampling(_Checked):
    """Sampling from the model's distribution, cut to the top k or nucleus p (`sampling`).

    Attributes:
        topk, topp: keep the k most likely tokens (0: all), then the nucleus p in (0, 1] (1: all).
        temperature: divides the log-probabilities, > 0.
        seed: the integer all randomness derives from: the same seed, the same samples.
        alpha, extra_length: as `BeamSearch`'s (outputs are ranked as beam search ranks them).
    """

    topk: int = 0
    topp: float = 1.0
    temperature: float = 1.0
    seed: int = 0
    alpha: float = BeamSearch.alpha
    extra_length: int = BeamSearch.extra_length
