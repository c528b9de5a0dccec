"""Split-conformal intervals in log space (models/conformal.py)."""

import math

import numpy as np
import pytest

from models.conformal import (
    calibrate,
    calibrate_by_group,
    coverage,
    coverage_by_hardware,
    halfwidths,
    interval,
    min_rows,
)


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


# --- several targets, log1p, bounds (models/conformal.py + models/tree.py) ----------------------------------


def test_log1p_scores_and_bounded_interval_by_hand():
    from models.conformal import bounded_interval, scores_of

    # |log1p(0) - log1p(e - 1)| = 1, |log1p(3) - log1p(3)| = 0: defined at y = 0, where log is not
    np.testing.assert_allclose(scores_of([0.0, 3.0], [math.e - 1, 3.0], "log1p"), [1.0, 0.0])
    lo, hi = bounded_interval([math.e - 1, 0.0], 1.0, "log1p", lower=0.0, upper=5.0)
    np.testing.assert_allclose(lo, [0.0, 0.0])  # expm1(1 - 1) = 0; expm1(-1) < 0 clipped to 0
    np.testing.assert_allclose(hi, [5.0, math.e - 1])  # expm1(2) = 6.39 clipped to the upper bound 5
    lo, hi = bounded_interval([2.0], 0.5, "log")
    np.testing.assert_allclose([lo[0], hi[0]], [2 * math.exp(-0.5), 2 * math.exp(0.5)])
    with pytest.raises(ValueError, match="transform"):
        scores_of([1.0], [1.0], "sqrt")


def test_fit_calibrated_covers_each_target_on_unseen_groups():
    """Two targets with different noise (multiplicative; zero-heavy counts): each gets its own half-width, and
    coverage on fresh groups is near the nominal 90% for both."""
    import pandas as pd

    from models.conformal import fit_calibrated
    from models.tree import RandomForestModel

    rng = np.random.default_rng(0)
    n_groups, per = 400, 5
    x = np.repeat(rng.uniform(0, 4, n_groups), per)
    groups = np.repeat(np.arange(n_groups), per)
    X = pd.DataFrame({"x": x, "u": rng.uniform(size=len(x))})
    runtime = np.exp(x) * np.exp(rng.normal(0, 0.1, len(x)))
    count = np.where(x < 1.5, 0.0, np.round(np.exp(x) * np.exp(rng.normal(0, 0.4, len(x)))))
    Y = np.column_stack([runtime, count])
    train = groups < 300
    cal = fit_calibrated(
        RandomForestModel(
            n_estimators=50,
            min_samples_leaf=5,
            n_jobs=1,
            targets=["t", "c"],
            transform=["log", "log1p"],
            lower=[None, 0.0],
        ),
        X[train],
        Y[train],
        groups[train],
        0.3,
        0.9,
        seed=0,
    )
    assert cal.q[0] < cal.q[1] and cal.transforms == ["log", "log1p"] and cal.n_calibration == 450
    pred, lo, hi = cal.predict_interval(X[~train])
    assert pred.shape == lo.shape == hi.shape == (500, 2) and (lo <= pred).all() and (pred <= hi).all()
    assert lo[:, 1].min() >= 0
    cover = cal.coverage(X[~train], Y[~train])
    assert 0.84 < cover[0] < 0.97 and 0.84 < cover[1] < 0.97, cover
    # a one-target model gives 1-D arrays
    one = fit_calibrated(RandomForestModel(n_estimators=20, n_jobs=1), X[train], runtime[train], groups[train])
    p1, l1, h1 = one.predict_interval(X[~train])
    assert p1.shape == l1.shape == h1.shape == (500,) and one.coverage(X[~train], runtime[~train]).shape == (1,)
