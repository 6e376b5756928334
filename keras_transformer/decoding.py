"""How to decode (`DecodingSettings`): plain settings, no TensorFlow, so that the package
imports on every Keras backend; the search itself is `keras_transformer.search`."""
import dataclasses

PRECISIONS = ("float32", "bfloat16")


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
            softmax (about 1.7x faster where the CPU multiplies bfloat16 natively).
    """

    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    max_input_length: int | None = None
    precision: str = "float32"

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
