"""The paper's learning-rate schedule (Section 5.3, Eq. 3)."""
import keras
from keras import ops


WARMUP_STEPS = 4000
"""Eq. 3's warm-up in the paper (Section 5.3): every default of it reads this one value."""
ADAM_EPSILON = 1e-9
"""Adam's epsilon in the paper (Section 5.3)."""


@keras.saving.register_keras_serializable(package="keras_transformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (Eq. 3).

    Linear warm-up for `warmup_steps`, then decay with the inverse square root of the step.
    Keras counts `optimizer.iterations` from 0, the paper counts steps from 1: the schedule
    is evaluated at iterations + 1, so the first update does not get learning rate 0. Steps
    are optimizer UPDATES (see `accumulation_steps`).

    Example:
        >>> schedule = NoamSchedule(d_model=512, warmup_steps=4000)
        >>> float(schedule(3999))   # step 4000, the peak: 512^-0.5 * 4000^-0.5
        0.000698771...

    Args:
        d_model: model width.
        warmup_steps: 4000 in the paper.
        scale: a constant factor (1 in the paper; tensor2tensor's `learning_rate`).
        accumulation_steps: k for a Keras optimizer with `gradient_accumulation_steps=k`,
            which counts micro-batches (`paper_optimizer`'s counts updates: keep 1).
    """

    def __init__(self, d_model, warmup_steps=WARMUP_STEPS, scale=1.0, accumulation_steps=1):
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)
        self.accumulation_steps = int(accumulation_steps)

    def __call__(self, iteration):
        # In the counter's own integer type: JAX has no int64 unless x64 is enabled.
        updates = ops.floor_divide(iteration, self.accumulation_steps)
        step = ops.cast(updates, "float32") + 1.0
        return (self.scale * self.d_model ** -0.5
                * ops.minimum(ops.rsqrt(step), step * self.warmup_steps ** -1.5))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale,
                "accumulation_steps": self.accumulation_steps}


@keras.saving.register_keras_serializable(package="keras_transformer")
class UpdateCountingAdam(keras.optimizers.Adam):
    """Adam whose learning-rate schedule sees optimizer updates, not micro-batches.

    Keras 3 evaluates a schedule on its micro-batch counter under
    `gradient_accumulation_steps=k`, so Eq. 3 would warm up k times too fast and decay
    sqrt(k) too low; `iterations` (micro-batches // k) is the update count, which Adam's bias
    correction already uses. Without accumulation the two counters are the same.
    """

    def _get_current_learning_rate(self):
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()


def paper_optimizer(d_model, warmup_steps=WARMUP_STEPS, scale=1.0, epsilon=ADAM_EPSILON,
                    **kwargs):
    """Adam with beta1 0.9, beta2 0.98, epsilon 1e-9 and `NoamSchedule` (Section 5.3), its
    schedule counting updates also under `gradient_accumulation_steps` (a keyword here, as
    Keras's `global_clipnorm` is)."""
    return UpdateCountingAdam(NoamSchedule(d_model, warmup_steps, scale),
                              beta_1=0.9, beta_2=0.98, epsilon=epsilon, **kwargs)
