"""The paper's training numbers without Keras, for the settings and the library's defaults:
Eq. 3's warm-up and Adam's epsilon (5.3), label smoothing (5.4), a batch's tokens (5.1)."""

WARMUP_STEPS = 4000
"""Eq. 3's warm-up in the paper (Section 5.3): every default of it reads this one value."""
ADAM_EPSILON = 1e-9
"""Adam's epsilon in the paper (Section 5.3)."""
LABEL_SMOOTHING = 0.1
"""eps_ls in the paper (Section 5.4)."""
BATCH_TOKENS = 25_000
"""About the tokens per side of a batch in the paper (Section 5.1)."""


def scale_for_peak(peak_lr: float, d_model: int, warmup_steps: int) -> float:
    """The `NoamSchedule` scale whose peak, at step `warmup_steps`, is `peak_lr` (the peak is
    scale * (d_model * warmup)^-0.5); after it the rate is peak_lr * sqrt(warmup / step), as
    fairseq's inverse_sqrt schedule."""
    return peak_lr * (d_model * warmup_steps) ** 0.5
