"""NoamSchedule equals Eq. 3 of the paper; the first update has a non-zero rate."""
import pytest

from keras_transformer import NoamSchedule, paper_optimizer


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
