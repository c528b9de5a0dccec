"""Split-conformal intervals in log space (models/conformal.py)."""
import math

import numpy as np
import pytest

from models.conformal import calibrate, calibrate_by_group, coverage, coverage_by_hardware, halfwidths, interval, min_rows


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


def test_per_hardware_halfwidths_fix_under_coverage_of_the_noisy_group():
    rng = np.random.default_rng(1)
    hw = np.repeat(["gpu-sim", "cpu"], [4000, 400])
    sigma = np.where(hw == "cpu", 0.5, 0.05)  # real CPU timings are noisier than simulated GPUs
    pred = rng.lognormal(0, 1, len(hw))
    y = pred * np.exp(rng.normal(0, sigma))
    y_new, cal = pred * np.exp(rng.normal(0, sigma)), np.arange(len(hw)) % 2 == 0
    q = calibrate(y[cal], pred[cal])
    lo, hi = interval(pred, q)
    assert coverage_by_hardware(hw, y_new, lo, hi)["cpu"] < 0.6  # one global q under-covers the noisy group
    by = calibrate_by_group(hw[cal], y[cal], pred[cal])
    lo, hi = interval(pred, halfwidths(hw, q, by))
    cov = coverage_by_hardware(hw, y_new, lo, hi)
    assert 0.85 < cov["cpu"] < 0.95 and 0.85 < cov["gpu-sim"] < 0.95
    assert min_rows(0.9) == 9 and calibrate_by_group(["a"] * 8 + ["b"] * 9, np.ones(17), np.ones(17)) == {"b": 0.0}
    assert halfwidths(["a", "b", "new"], 0.7, {"b": 0.1}).tolist() == [0.7, 0.1, 0.7]
