"""The paper's training numbers without Keras: Eq. 3's warm-up and Adam's epsilon (Section
5.3), label smoothing (5.4), the batch's token budget (5.1), and the scale that puts Eq. 3's peak
at a chosen rate. The settings read them before Keras is loaded, as the library's defaults
(`schedules`, `losses`, `data.buckets`) do: one home each."""

WARMUP_STEPS = 4000
"""Eq. 3's warm-up in the paper (Section 5.3): every default of it reads this one value."""
ADAM_EPSILON = 1e-9
"""Adam's epsilon in the paper (Section 5.3)."""
LABEL_SMOOTHING = 0.1
"""eps_ls in the paper (Section 5.4)."""
BATCH_TOKENS = 25_000
"""About the tokens per side of a batch in the paper (Section 5.1)."""


def scale_for_peak(peak_lr: float, d_model: int, warmup_steps: int) -> float:
    """The `NoamSchedule` scale whose peak, at step `warmup_steps`, is `peak_lr`.

    Eq. 3's rising term meets its falling one at step = warmup, where the rate is
    scale * (d_model * warmup)^-0.5; setting that to `peak_lr` gives scale = peak_lr *
    sqrt(d_model * warmup). After the peak the rate is then peak_lr * sqrt(warmup / step),
    fairseq's inverse_sqrt schedule (whose linear rise starts at 1e-7 instead of
    peak_lr / warmup).
    """
    return peak_lr * (d_model * warmup_steps) ** 0.5
