"""How to decode (`DecodingSettings`) and sample (`SamplingSettings`): plain settings, no
TensorFlow, so that the package and the pipeline's options import on every Keras backend."""
import dataclasses
import math

PRECISIONS = ("float32", "bfloat16")
STOP_RULES = ("exact", "best_finished")
MAX_BEAM_SIZE = 16
"""The largest beam_size (and n-best, and samples per sentence) the served model's
*_with_options functions accept."""


@dataclasses.dataclass(frozen=True)
class DecodingSettings:
    """How to decode: the paper's defaults (Section 6.1) unless a task or user says otherwise.

    Attributes:
        beam_size: hypotheses kept per sentence (the paper: 4).
        alpha: GNMT length-penalty exponent (the paper: 0.6).
        extra_length: a translation has at most source length + this many tokens (50).
        max_input_length: longest source in tokens, EOS included; longer sources keep their
            first pieces (`export.text.sentences_to_ids`). None: the model's `max_length`.
        precision: "float32", or "bfloat16" weights and compute with float32 logits and
            softmax (faster where the CPU multiplies bfloat16 natively; docs/library.md).
        stop_rule: when beam search stops a sentence. "exact": once no live hypothesis can
            beat its finished ones, whatever the next tokens; "best_finished": once its best
            finished hypothesis beats the best live one as it stands (CTranslate2's rule:
            faster, not always the exact result; docs/results.md).
    """

    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    max_input_length: int | None = None
    precision: str = "float32"
    stop_rule: str = "exact"

    def __post_init__(self):
        problems = []
        if isinstance(self.beam_size, bool) or not isinstance(self.beam_size, int) \
                or self.beam_size < 1:
            problems.append(f"beam_size must be an integer >= 1, got {self.beam_size!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) \
                or not self.alpha >= 0:
            problems.append(f"alpha must be a number >= 0, got {self.alpha!r}")
        if isinstance(self.extra_length, bool) or not isinstance(self.extra_length, int) \
                or self.extra_length < 0:
            problems.append(f"extra_length must be an integer >= 0, got {self.extra_length!r}")
        if self.max_input_length is not None and (
                not isinstance(self.max_input_length, int) or self.max_input_length < 1):
            problems.append(f"max_input_length must be an integer >= 1, got "
                            f"{self.max_input_length!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.stop_rule not in STOP_RULES:
            problems.append(f"stop_rule must be one of {STOP_RULES}, got {self.stop_rule!r}")
        if problems:
            raise ValueError("; ".join(problems))

    def replace(self, **changes):
        """A copy with `changes` (None values are ignored)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def input_length(self, model_max_length):
        """The source truncation length for a model of `model_max_length` positions."""
        if self.max_input_length is None:
            return model_max_length
        return min(self.max_input_length, model_max_length)


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """How to sample (see the module docstring).

    Attributes:
        topk: keep the k most likely tokens; 0: no cut.
        topp: keep the smallest most-likely set reaching this probability, in (0, 1]; 1: no cut.
        temperature: divides the log-probabilities, > 0.
        seed: the integer all randomness derives from.
    """

    topk: int = 0
    topp: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self):
        problems = []
        if isinstance(self.topk, bool) or not isinstance(self.topk, int) or self.topk < 0:
            problems.append(f"topk must be an integer >= 0, got {self.topk!r}")
        if not isinstance(self.topp, (int, float)) or not 0 < self.topp <= 1:
            problems.append(f"topp must be in (0, 1], got {self.topp!r}")
        if not isinstance(self.temperature, (int, float)) or not (
                self.temperature > 0 and math.isfinite(self.temperature)):
            problems.append(f"temperature must be a number > 0, got {self.temperature!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) \
                or not -2 ** 63 <= self.seed < 2 ** 63:
            problems.append(f"seed must be a 64-bit integer, got {self.seed!r}")
        if problems:
            raise ValueError("; ".join(problems))
