"""Domain of validity (models/domain.py) and the physics model's intervals: flags, distances, honest widening."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from models.domain import Domain, calibrate_widening, conformal, widen
from tests.test_physics import fitted, neusight_mask, small_frame, small_rows

FEATS = ["log2_k", "tail_occupancy", "op_matmul", "op_bmm"]
HW = ["hw_log2_peak_flops", "hw_log2_bandwidth"]


def frame(**cols) -> pd.DataFrame:
    return pd.DataFrame({k: np.asarray(v, float) for k, v in cols.items()})


def toy_domain() -> Domain:
    train = frame(
        log2_k=[4, 6, 8, 10],
        tail_occupancy=[0.2, 0.5, 0.9, 1.0],
        op_matmul=[1, 1, 0, 0],
        op_bmm=[0, 0, 0, 0],
        hw_log2_peak_flops=[44, 44, 45, 45],
        hw_log2_bandwidth=[30, 30, 31, 31],
    )
    return Domain(FEATS, HW, HW[1:]).fit(train)


def test_inside_is_zero_and_outside_names_the_reason():
    dom = toy_domain()
    X = frame(
        log2_k=[5, 12, 5, 5],
        tail_occupancy=[0.5, 0.5, 0.5, 0.5],
        op_matmul=[1, 1, 0, 1],
        op_bmm=[0, 0, 1, 0],
        hw_log2_peak_flops=[44.5, 44.5, 44.5, 44.5],
        hw_log2_bandwidth=[30.5, 30.5, 30.5, 32],
    )
    out = dom.frame(X)
    assert out["in_domain"].tolist() == [True, False, False, False]
    assert out["domain_distance"][0] == 0 and out["domain_reason"][0] == ""
    assert out["domain_reason"][1].startswith("log2_k +")  # K deeper than any training row
    assert out["domain_distance"][2] == pytest.approx(1.0)  # an op never seen: 1 per unseen category
    assert out["domain_reason"][2] == "op_bmm +1.00"
    assert out["domain_distance"][3] == pytest.approx(1.0)  # twice the largest bandwidth: one octave
    assert out["domain_reason"][3] == "hw_log2_bandwidth +1.00"
    assert not out["hardware_seen"][3] and not out["hardware_seen"][0]  # 30.5 lies between, but is not a GPU seen


def test_seen_hardware_and_add_hardware():
    dom = toy_domain()
    X = frame(
        log2_k=[5], tail_occupancy=[0.5], op_matmul=[1], op_bmm=[0], hw_log2_peak_flops=[47], hw_log2_bandwidth=[31]
    )
    out = dom.frame(X)
    assert out["hardware_seen"][0]  # its bandwidth (the identity column here) is a training GPU's
    assert out["domain_distance"][0] == pytest.approx(2.0)  # a math-mode peak 4x the largest seen: 2 octaves
    new = frame(
        log2_k=[5], tail_occupancy=[0.5], op_matmul=[1], op_bmm=[0], hw_log2_peak_flops=[47], hw_log2_bandwidth=[33]
    )
    dom.add_hardware(new)
    out = dom.frame(new)
    assert out["hardware_seen"][0] and out["in_domain"][0]


def test_round_trip_through_json():
    dom = toy_domain()
    again = Domain.from_dict(json.loads(json.dumps(dom.to_dict())))
    X = frame(
        log2_k=[3, 20],
        tail_occupancy=[0.1, 1],
        op_matmul=[0, 1],
        op_bmm=[1, 0],
        hw_log2_peak_flops=[43, 46],
        hw_log2_bandwidth=[29, 30],
    )
    pd.testing.assert_frame_equal(dom.frame(X), again.frame(X))


def test_widening_covers_the_calibration_rows():
    rng = np.random.default_rng(0)
    n = 600
    d = np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0.2, 3.0, n))
    seen = rng.random(n) < 0.5
    s = np.abs(rng.normal(0, 0.1, n)) + 0.2 * d + np.where(seen, 0.0, 0.1)  # errors grow with distance
    w = calibrate_widening(s, d, seen, level=0.9)
    assert 0 < w["q_seen"] <= w["q_unseen"] and w["slope"] > 0
    q = widen(w, d, seen)
    inside = d == 0
    assert np.mean(s[inside & seen] <= q[inside & seen]) >= 0.9
    assert np.mean(s[~inside] <= q[~inside]) >= 0.9
    assert np.all(np.diff(widen(w, np.linspace(0, 5, 20), np.zeros(20, bool))) > 0)  # wider the farther out


def test_conformal_quantile_rule():
    assert conformal(np.arange(1, 11), 0.9) == 10  # ceil(11 * 0.9) = 10th smallest
    assert conformal(np.arange(1, 101), 0.9) == 91


def test_physics_model_flags_unseen_hardware_and_dtypes():
    """Fitted on NeuSight + the H200's fp32 rows: the H200's tensor-core dtypes are outside (their math-mode peak
    and mode were never seen); NeuSight rows of the training GPUs are inside and their hardware is seen."""
    model = fitted()
    rows, X = small_rows(), small_frame()
    dom = model.predict_domain(X)
    tensor = (rows["hardware"] == "H200-SXM").to_numpy() & rows["dtype"].isin(["float16", "bfloat16"]).to_numpy()
    assert not dom.loc[tensor, "in_domain"].any()
    assert dom.loc[tensor, "domain_reason"].str.contains("dtype_bytes|mode_tensor16|hw_log2_peak_flops").mean() > 0.9
    assert dom.loc[neusight_mask(), "hardware_seen"].all()
    assert dom.loc[neusight_mask(), "in_domain"].mean() > 0.95


@pytest.mark.slow
def test_intervals_widen_outside_and_cover_held_out_rows():
    """With interval folds: the half-width grows with the distance (within a family: each has its own q), and on a
    GPU held out of training the interval covers most of its rows (the folds calibrate exactly that situation)."""
    rows, X = small_rows(), small_frame()
    y = rows["runtime_ms"].to_numpy()
    nm = neusight_mask()
    held = nm & (rows["hardware"] == "V100-PCIe-32GB").to_numpy()
    from models.physics import PhysicsModel

    model = PhysicsModel(n_estimators=60).fit(X[nm & ~held].reset_index(drop=True), y[nm & ~held])
    w = model.widening_
    assert w is not None and w["n_unseen"] > 0 and w["slope"] >= 0
    dom = model.predict_domain(X[held].reset_index(drop=True))
    covered = np.mean((y[held] >= dom["lo_ms"]) & (y[held] <= dom["hi_ms"]))
    assert covered >= 0.75, covered
    h200 = model.predict_domain(X[~nm].reset_index(drop=True))
    half = np.log(h200["hi_ms"] / h200["runtime_ms"]).to_numpy()
    family = rows.loc[~nm, "family"].to_numpy()
    for f in np.unique(family):  # each family's own q inside; outside, the same rise with the distance for all
        m = family == f
        assert np.all(np.diff(half[m][np.argsort(h200["domain_distance"].to_numpy()[m])]) >= -1e-9), f


def test_categories_seen_only_apart_are_outside():
    """TF32 seen only in bmm rows: a TF32 matmul is outside although each category was seen."""
    train = frame(
        log2_k=[4, 6],
        tail_occupancy=[0.5, 0.5],
        op_matmul=[1, 0],
        op_bmm=[0, 1],
        hw_log2_peak_flops=[44, 44],
        hw_log2_bandwidth=[30, 30],
    )
    dom = Domain(FEATS + ["mode_tf32"], HW, HW[1:]).fit(train.assign(mode_tf32=[0.0, 1.0]))
    X = frame(
        log2_k=[5, 5],
        tail_occupancy=[0.5, 0.5],
        op_matmul=[1, 0],
        op_bmm=[0, 1],
        hw_log2_peak_flops=[44, 44],
        hw_log2_bandwidth=[30, 30],
    ).assign(mode_tf32=[1.0, 1.0])
    out = dom.frame(X)
    assert out["domain_reason"].tolist() == ["unseen combination +1.00", ""]
    again = Domain.from_dict(json.loads(json.dumps(dom.to_dict())))
    pd.testing.assert_frame_equal(again.frame(X), out)


def test_widening_covers_the_farthest_rows_not_only_the_many_just_outside():
    """Fold rows outside the domain are mostly just outside, with errors q already covers; a few are far out with
    errors that grow with the distance. The slope covers the level in every quarter of the distance, so the far rows
    are covered as well (a slope from all outside rows pooled covered 70% of them) and the near ones still are."""
    rng = np.random.default_rng(0)
    near_d, far_d = rng.uniform(0.01, 0.5, 850), rng.uniform(3, 8, 150)
    near_s, far_s = np.abs(rng.normal(0, 0.1, 850)), 0.15 * far_d * rng.uniform(0.5, 1.0, 150)
    s = np.concatenate([np.abs(rng.normal(0, 0.1, 500)), near_s, far_s])
    d = np.concatenate([np.zeros(500), near_d, far_d])
    seen = np.ones(len(s), bool)
    w = calibrate_widening(s, d, seen, level=0.9)
    covered = s <= widen(w, d, seen)
    assert covered[d >= 3].mean() >= 0.85 and covered[(d > 0) & (d < 3)].mean() >= 0.9


def test_each_family_gets_its_own_q_inside_the_domain():
    """Fold rows of two families, one fitted to 5%, one to 40%: a pooled quantile covers the noisy family's rows well
    under the level and the quiet one's at nearly all; per family each is covered at the level, and a GPU never
    measured is never given less than the pooled q (its own level error is in every family)."""
    rng = np.random.default_rng(1)
    n = 2000
    family = np.where(rng.random(n) < 0.7, "elementwise", "gemm")
    seen = rng.random(n) < 0.5
    s = np.abs(rng.normal(0, np.where(family == "gemm", 0.4, 0.05)))
    d = np.zeros(n)
    pooled = calibrate_widening(s, d, seen, level=0.9)
    by = calibrate_widening(s, d, seen, level=0.9, groups=family)
    for name in ("gemm", "elementwise"):
        m = family == name
        covered = s[m] <= widen(by, d[m], seen[m], family[m])
        assert covered.mean() >= 0.89, name
    gemm = family == "gemm"
    assert np.mean(s[gemm] <= widen(pooled, d[gemm], seen[gemm])) < 0.8  # pooled: the noisy family under the level
    assert np.mean(s[~gemm] <= widen(pooled, d[~gemm], seen[~gemm])) > 0.99
    assert by["by_group"]["elementwise"]["q_seen"] < 0.5 * pooled["q_seen"]
    assert min(q["q_unseen"] for q in by["by_group"].values()) >= by["q_unseen"]
    # a widening without groups, or rows of a family it has no q of, take the pooled ones
    assert widen(by, [0.0], [True], ["softmax"])[0] == pytest.approx(by["q_seen"])


def test_distance_curve_is_as_wide_as_the_fold_rows_need_far_out():
    """Outside rows: the many just outside have errors a little over q, the far ones (distance 4-6) errors that grow
    slowly. One slope that covers the near quarter (a small excess over a tiny distance) is steep and gives the far
    rows intervals several times wider than their errors; the curve of binned quantiles covers each bin at the level
    and stays near what the far rows need. A widening saved before the curve (no ``knots``) keeps the line."""
    rng = np.random.default_rng(2)
    near_d, far_d = rng.uniform(0.01, 0.3, 800), rng.uniform(4, 6, 400)
    near_s, far_s = 0.15 + np.abs(rng.normal(0, 0.1, 800)), 0.3 + np.abs(rng.normal(0, 0.1, 400))
    s = np.concatenate([np.abs(rng.normal(0, 0.1, 500)), near_s, far_s])
    d = np.concatenate([np.zeros(500), near_d, far_d])
    seen = np.ones(len(s), bool)
    w = calibrate_widening(s, d, seen, level=0.9)
    q = widen(w, d, seen)
    for m in (d == 0, (d > 0) & (d < 1), d >= 4):
        assert np.mean(s[m] <= q[m]) >= 0.89
    line = w["q_seen"] + w["slope"] * d
    assert np.median(q[d >= 4]) < 0.25 * np.median(line[d >= 4])  # the line: several times wider far out
    assert np.median(q[d >= 4]) < 2 * np.quantile(far_s, 0.9)
    old = {k: v for k, v in w.items() if k not in ("knots", "beyond")}
    np.testing.assert_allclose(widen(old, d, seen), line)
    grid = widen(w, np.linspace(0, 8, 40), np.ones(40, bool))
    assert np.all(np.diff(grid) >= 0) and grid[-1] > grid[0]  # never narrower farther out


@pytest.mark.parametrize("seed", range(4))
def test_distinct_rows_are_numpys_unique_rows(seed):
    from models.domain import distinct_rows

    rng = np.random.default_rng(seed)
    floats = np.round(rng.normal(size=(7, 5)), 6)[rng.integers(0, 7, 300)]
    floats[::5, 2], floats[1::5, 2] = -0.0, 0.0  # signed zeros (np.round of a tiny negative) are one value
    flags = rng.random((9, 30)) < 0.2
    for M in (floats, flags[rng.integers(0, 9, 200)], floats[:1], floats[:0]):
        want, want_inverse = np.unique(M, axis=0, return_inverse=True)
        got, inverse = distinct_rows(M)
        assert got.dtype == M.dtype and np.array_equal(got, want)
        assert np.array_equal(inverse, want_inverse.reshape(-1))
