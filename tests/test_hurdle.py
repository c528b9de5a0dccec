"""models.hurdle.HurdleModel: exact zeros where the classifier says zero, amounts from the non-zero rows, bounds,
intervals through models.conformal, round trip, and on real wa-hls4ml designs against the plain log1p model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from data.importers.wa_hls4ml import import_wa_hls4ml
from features.fpga import hls4ml_features
from models.base import load_model
from models.conformal import fit_calibrated
from models.evaluate import smape
from models.hurdle import HurdleModel
from models.public_eval import FPGA_TARGETS, fpga_bounds, layer_shape_groups
from models.splits import held_out_layer_shapes
from models.tree import XGBoostModel
from tests.conftest import SHARED

TRANSFORMS = ["log", "log", "log1p", "log1p", "log1p"]


def zero_heavy(n: int = 600, seed: int = 0):
    """count = 0 when bits < 6 (mapped to LUTs), else about 3 x mults; size always positive."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"bits": rng.integers(2, 15, n).astype(float), "mults": rng.integers(1, 200, n).astype(float)})
    count = np.where(X["bits"] >= 6, np.round(3 * X["mults"] * np.exp(rng.normal(0, 0.02, n))), 0.0)
    size = 50 * X["mults"] * X["bits"]
    return X.assign(mults_base=X["mults"]), np.column_stack([size, count])


def test_exact_zeros_and_amounts():
    X, Y = zero_heavy()
    tr, te = np.arange(400), np.arange(400, 600)
    model = HurdleModel(
        ["size", "count"],
        hurdle_targets=("count",),
        transform=["log", "log1p"],
        base_columns=[None, "mults_base"],
        n_estimators=200,
        classifier_estimators=50,
    )
    P = model.fit(X.iloc[tr], Y[tr]).predict(X.iloc[te])
    zero = Y[te, 1] == 0
    assert P.shape == (200, 2) and zero.any() and (~zero).any()
    assert np.all(P[zero, 1] == 0)  # exactly zero, not 0.3
    assert smape(Y[te][~zero, 1], P[~zero, 1]) < 5
    prob = model.nonzero_probability(X.iloc[te])["count"].to_numpy()
    assert np.all((prob >= 0.5) == (P[:, 1] > 0))
    # the plain log1p regressor leaves small non-zero values on the zero designs
    plain = XGBoostModel(n_estimators=200, n_jobs=1, transform="log1p").fit(X.iloc[tr], Y[tr, 1]).predict(X.iloc[te])
    assert np.mean(P[zero, 1] == 0) > np.mean(plain[zero] == 0)


def test_one_class_bounds_and_errors(tmp_path):
    X, Y = zero_heavy(200)
    Y = np.column_stack([Y, np.zeros(len(Y))])  # a target that is always 0: no classifier to fit
    model = HurdleModel(
        ["size", "count", "never"],
        hurdle_targets=("count", "never"),
        transform=["log", "log1p", "log1p"],
        upper=[1e4, None, None],
        n_estimators=30,
    )
    P = model.fit(X, Y).predict(X)
    assert np.all(P[:, 2] == 0) and P[:, 0].max() <= 1e4 and (Y[:, 0] > 1e4).any()
    loaded = load_model(model.save(tmp_path / "hurdle"))
    assert np.allclose(loaded.predict(X), P)
    with pytest.raises(ValueError, match="log1p"):
        HurdleModel(["size", "count"], hurdle_targets=("count",), transform="log").fit(X, Y[:, :2])
    with pytest.raises(ValueError, match="not among the targets"):
        HurdleModel(["size", "count"], hurdle_targets=("dsp",), transform=["log", "log1p"]).fit(X, Y[:, :2])
    with pytest.raises(ValueError, match="features missing"):
        model.predict(X.drop(columns="bits"))


@pytest.fixture(scope="module")
def wa(registry):
    return import_wa_hls4ml(SHARED, registry=registry)


@pytest.mark.slow
def test_hurdle_on_withheld_layer_shapes(wa, registry):
    """Real designs, 13 layer shapes withheld: the hurdle model gets the DSP = 0 designs right and beats the plain
    multi-target log1p model on DSP SMAPE; its conformal intervals are built per target and contain the point."""
    ok = wa[wa["status"] == "ok"].reset_index(drop=True)
    X, Y = hls4ml_features(ok), ok[list(FPGA_TARGETS)].to_numpy(float)
    lower, upper = fpga_bounds(registry, "xcvu13p")
    tr, te = held_out_layer_shapes(ok, 0.25, 0)
    hurdle = HurdleModel(
        list(FPGA_TARGETS),
        transform=TRANSFORMS,
        lower=lower,
        upper=upper,
        base_columns=[None, None, "dsps_base", "bram18_base", "latency_base"],
        max_depth=3,
        n_estimators=300,
    )
    P = hurdle.fit(X.iloc[tr], Y[tr]).predict(X.iloc[te])
    plain = (
        XGBoostModel(
            n_estimators=300, n_jobs=1, targets=list(FPGA_TARGETS), transform=TRANSFORMS, lower=lower, upper=upper
        )
        .fit(X.iloc[tr], Y[tr])
        .predict(X.iloc[te])
    )
    dsp = list(FPGA_TARGETS).index("dsp")
    zero_acc = np.mean((Y[te, dsp] > 0) == (P[:, dsp] > 0))
    assert zero_acc >= 0.98 and smape(Y[te, dsp], P[:, dsp]) < smape(Y[te, dsp], plain[:, dsp])
    assert np.all(P >= 0) and np.all(P <= np.array(upper))
    cal = fit_calibrated(hurdle, X.iloc[tr], Y[tr], layer_shape_groups(ok.iloc[tr]), 0.2, 0.9, 0)
    pred, lo, hi = cal.predict_interval(X.iloc[te])
    assert np.all(lo <= pred + 1e-9) and np.all(pred <= hi + 1e-9) and cal.coverage(X.iloc[te], Y[te]).min() > 0.5


def two_regimes(n: int = 600, seed: int = 0):
    """regime 0: y = 30 x d_in + d_out x g(lanes); regime 1: y = weights x h(bits): a different law per regime."""
    rng = np.random.default_rng(seed)
    d_in, d_out = rng.choice([32, 64, 128, 256], n).astype(float), rng.choice([16, 32, 64, 128], n).astype(float)
    lanes, bits = rng.choice([1, 2, 4, 8], n).astype(float), rng.integers(2, 15, n).astype(float)
    regime = rng.integers(0, 2, n).astype(float)
    y = np.where(regime == 0, 30 * d_in + d_out * (40 + 25 * np.log2(lanes)), d_in * d_out * (1 + 0.4 * bits))
    X = pd.DataFrame(
        {
            "parallel": regime,
            "d_in": d_in,
            "d_out": d_out,
            "weights": d_in * d_out,
            "log2_d_out": np.log2(d_out),
            "lanes": lanes,
            "bits": bits,
        }
    )
    return X, np.column_stack([y * np.exp(rng.normal(0, 0.01, n)), np.where(bits > 6, d_out, 0.0)])


def test_regime_models_per_law_and_offset(tmp_path):
    X, Y = two_regimes()
    # withhold the largest layers: only the per-output / per-weight factor and the offset carry the size; rows
    # of equal lanes and d_out differ only in d_in, which identifies the slope of the offset
    big = ((X["d_in"] == 256) & (X["d_out"] == 128)).to_numpy()
    regimes = {
        "size": {
            "features": {"0": ["lanes", "log2_d_out"], "1": ["bits"]},
            "base_columns": {"0": "d_out", "1": "weights"},
            "offset_columns": {"0": "d_in"},
        }
    }
    kw = {"transform": ["log", "log1p"], "hurdle_targets": ("count",), "n_estimators": 200, "classifier_estimators": 30}
    model = HurdleModel(["size", "count"], regime_column="parallel", regime_models=regimes, **kw)
    P = model.fit(X[~big], Y[~big]).predict(X[big])
    assert model.parts_["size"]["amount"].parts_["0"]["alpha"] == pytest.approx(30, rel=0.05)
    plain = HurdleModel(["size", "count"], **kw).fit(X[~big], Y[~big]).predict(X[big])
    assert smape(Y[big, 0], P[:, 0]) < 3 < smape(Y[big, 0], plain[:, 0])
    loaded = load_model(model.save(tmp_path / "regime"))
    assert np.allclose(loaded.predict(X[big]), P)
    with pytest.raises(ValueError, match="never seen in training"):
        model.predict(X.assign(parallel=2.0))
    with pytest.raises(ValueError, match="regime target"):
        HurdleModel(
            ["size", "count"],
            regime_column="parallel",
            regime_models=regimes,
            **{**kw, "transform": ["log1p", "log1p"]},
        ).fit(X, Y)
    with pytest.raises(ValueError, match="need regime_column"):
        HurdleModel(["size", "count"], regime_models=regimes, **kw).fit(X, Y)
