"""The paper's learning-rate schedule (Section 5.3, Eq. 3)."""
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (Eq. 3).

    Linear warm-up for `warmup_steps`, then decay with the inverse square root of the step.
    Keras counts `optimizer.iterations` from 0, the paper counts steps from 1: the schedule
    is evaluated at iterations + 1, so the first update does not get learning rate 0.

    Example:
        >>> schedule = NoamSchedule(d_model=512, warmup_steps=4000)
        >>> float(schedule(3999))   # step 4000, the peak: 512^-0.5 * 4000^-0.5
        0.000698771...

    Args:
        d_model: model width.
        warmup_steps: 4000 in the paper.
        scale: a constant factor (1 in the paper; tensor2tensor's `learning_rate`).
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)

    def __call__(self, iteration):
        step = ops.cast(iteration, "float32") + 1.0
        return (self.scale * self.d_model ** -0.5
                * ops.minimum(ops.rsqrt(step), step * self.warmup_steps ** -1.5))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


def paper_optimizer(d_model, warmup_steps=4000, scale=1.0, **kwargs):
    """Adam with beta1 0.9, beta2 0.98, epsilon 1e-9 and `NoamSchedule` (Section 5.3)."""
    return keras.optimizers.Adam(NoamSchedule(d_model, warmup_steps, scale),
                                 beta_1=0.9, beta_2=0.98, epsilon=1e-9, **kwargs)
