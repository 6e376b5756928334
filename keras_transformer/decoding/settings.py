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


def _check(strategy) -> None:
    """ValueError naming every field whose Python value breaks its rule (a tensor is the
    graph's to check)."""
    problems = [f"{f.name} must be {RULES[f.name][1]}, got {value!r}"
                for f in dataclasses.fields(strategy)
                if isinstance(value := getattr(strategy, f.name), (int, float, str))
                and not RULES[f.name][0](value)]
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
        _check(self)


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
        _check(self)
