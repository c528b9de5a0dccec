"""Split-conformal intervals in log space (models/conformal.py)."""
import math

import numpy as np
import pytest

from models.conformal import calibrate, coverage, coverage_by_hardware, interval


def test_quantile_rank_is_the_finite_sample_one():
    y = np.ones(9)
    pred = np.exp(np.arange(1, 10))  # |log y - log pred| = 1..9
    assert calibrate(y, pred, 0.9) == pytest.approx(9.0)  # ceil(10 * 0.9) / 9 -> the largest score
    assert calibrate(np.ones(19), np.exp(np.arange(1, 20)), 0.9) == pytest.approx(18.0)  # ceil(20 * .9) = 18th


def test_interval_covers_fresh_exchangeable_rows_at_the_nominal_level():
    rng = np.random.default_rng(0)
    pred_cal, pred_new = rng.lognormal(0, 2, 2000), rng.lognormal(0, 2, 20000)
    y_cal = pred_cal * np.exp(rng.normal(0, 0.3, 2000))  # multiplicative noise
    y_new = pred_new * np.exp(rng.normal(0, 0.3, 20000))
    q = calibrate(y_cal, pred_cal, 0.9)
    assert q == pytest.approx(0.3 * 1.645, rel=0.08)
    lo, hi = interval(pred_new, q)
    np.testing.assert_allclose(hi / pred_new, math.exp(q))
    assert 0.88 < coverage(y_new, lo, hi) < 0.92
    by_hw = coverage_by_hardware(np.where(np.arange(20000) % 2, "a", "b"), y_new, lo, hi)
    assert set(by_hw) == {"all", "a", "b"} and by_hw["all"] == coverage(y_new, lo, hi)


@pytest.mark.parametrize("level", [0, 1, 1.5])
def test_bad_level(level):
    with pytest.raises(ValueError, match="level"):
        calibrate([1.0], [1.0], level)
