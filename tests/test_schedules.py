"""NoamSchedule equals Eq. 3 of the paper; the first update has a non-zero rate."""
import pytest

from keras_transformer import NoamSchedule, paper_optimizer

pytestmark = pytest.mark.quick  # the quick tier (tests/conftest.py)


@pytest.mark.parametrize("step", [1, 100, 4000, 4001, 100000])
def test_noam_equals_formula(step):
    schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    expected = 512 ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
    # Keras iterations count from 0: iteration step - 1 is the paper's step `step`.
    assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-6)


def test_first_update_is_not_zero_and_peak_is_at_warmup():
    schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    assert float(schedule(0)) > 0
    rates = [float(schedule(i)) for i in (3998, 3999, 4000)]
    assert rates[1] > rates[0] and rates[1] > rates[2]


def test_paper_optimizer_hyperparameters_and_config_round_trip():
    optimizer = paper_optimizer(512)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    schedule = NoamSchedule.from_config(NoamSchedule(256, 100, 2.0).get_config())
    assert (schedule.d_model, schedule.warmup_steps, schedule.scale) == (256, 100, 2.0)


def _eq3(step, d_model=512, warmup=4000):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("k", [1, 4])
def test_under_accumulation_the_schedule_counts_updates(k):
    """Keras 3 would evaluate the schedule on micro-batches: 8.73e-07 after 1 update with k=4
    instead of Eq. 3's 3.49e-07 for update 2. (Eager updates: about 0.25 s each under JAX,
    so few of them; `fit` is checked below.)"""
    import keras
    import numpy as np

    variable = keras.Variable(np.ones(3, "float32"))
    optimizer = paper_optimizer(512, gradient_accumulation_steps=k if k > 1 else None)
    optimizer.build([variable])
    for updates in range(1, 4):
        for _ in range(k):
            optimizer.apply_gradients([(keras.ops.ones(3), variable)])
        # Adam's bias correction and the schedule both count updates.
        assert int(optimizer.iterations) == updates
        assert float(optimizer.learning_rate) == pytest.approx(_eq3(updates + 1), rel=1e-6)
    # A plain Keras optimizer counts micro-batches: the schedule divides them itself.
    plain = NoamSchedule(512, accumulation_steps=k)
    assert float(plain(3 * k)) == pytest.approx(_eq3(4), rel=1e-6)


def test_accumulating_4_batches_equals_one_batch_4_times_larger():
    """Through `fit` with the label-smoothed loss, compiled as training runs it
    (`tf.function`, or `jax.jit` of the stateless step). The property is the optimizer's
    and the loss's, so two dense layers over one-hot tokens stand in for the Transformer
    (dense gradients, as the Transformer's tied embedding gets)."""
    import keras
    import numpy as np

    from keras_transformer import LabelSmoothedCrossEntropy
    from tests.helpers import random_ids

    from keras_transformer.schedules import UpdateCountingAdam

    # Equal lengths, no padding: every micro-batch has as many tokens, so the mean of the
    # micro-batch losses is the loss of the whole batch.
    inputs = np.eye(50, dtype="float32")[random_ids(32, 6, seed=1)]
    labels = random_ids(32, 6, seed=2)

    def train(k, batch, adam=UpdateCountingAdam):
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.Input((None, 50)), keras.layers.Dense(16),
                                  keras.layers.Dense(50)])
        # paper_optimizer's machinery with a larger epsilon: Adam's first steps are about
        # lr * sign(gradient), so with 1e-9 float noise in a near-zero gradient flips them.
        optimizer = adam(NoamSchedule(32, warmup_steps=2), beta_1=0.9, beta_2=0.98,
                         epsilon=1e-3, gradient_accumulation_steps=k if k > 1 else None)
        model.compile(optimizer=optimizer, loss=LabelSmoothedCrossEntropy(0.1))
        model.fit(inputs, labels, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        return model.get_weights(), int(model.optimizer.iterations)

    one, one_updates = train(1, 16)
    accumulated, accumulated_updates = train(4, 4)
    assert one_updates == accumulated_updates == 2
    for a, b in zip(one, accumulated):
        np.testing.assert_allclose(a, b, atol=2e-5)
    # Keras' own Adam runs the schedule on micro-batches: the same run ends elsewhere.
    keras_adam, _ = train(4, 4, adam=keras.optimizers.Adam)
    assert max(float(np.abs(a - b).max()) for a, b in zip(one, keras_adam)) > 1e-3
