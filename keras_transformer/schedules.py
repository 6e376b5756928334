"""The paper's learning-rate schedule (Section 5.3, Eq. 3) and optimizer, in Keras."""
import keras
from keras import ops

from keras_transformer.learning_rate import ADAM_EPSILON, WARMUP_STEPS


@keras.saving.register_keras_serializable(package="keras_transformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (Eq. 3; scale 1),
    steps being optimizer UPDATES counted from 1: `accumulation_steps` is the k of
    `gradient_accumulation_steps=k` (1 with `paper_optimizer`, which counts updates itself).

    Example:
        >>> schedule = NoamSchedule(d_model=512, warmup_steps=4000)
        >>> float(schedule(3999))   # step 4000, the peak: 512^-0.5 * 4000^-0.5
        0.000698771...
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
    """Adam whose schedule sees updates (`iterations`), not the micro-batches Keras 3 gives it
    under `gradient_accumulation_steps=k` (Eq. 3 would warm up k times too fast)."""

    def _get_current_learning_rate(self):
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()


def paper_optimizer(d_model, warmup_steps=WARMUP_STEPS, scale=1.0, epsilon=ADAM_EPSILON,
                    **kwargs):
    """The paper's Adam (betas 0.9, 0.98; epsilon 1e-9) on a `NoamSchedule` that counts updates."""
    return UpdateCountingAdam(NoamSchedule(d_model, warmup_steps, scale),
                              beta_1=0.9, beta_2=0.98, epsilon=epsilon, **kwargs)
