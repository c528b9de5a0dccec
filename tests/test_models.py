"""The tabular models (trees, roofline, residual) on simulated kernels: learning beats the roofline, bad targets are one
error, multi-target fits. The contract every CostModel honours is checked on every conf/model entry in
tests/test_conformance.py."""

import numpy as np
import pandas as pd
import pytest

from data.backends.sim_roofline import SimRooflineBackend
from data.collect import collect
from data.sweep import random_sweep
from features.tabular import TabularFeaturizer
from models.base import CostModel, load_model
from models.evaluate import evaluate
from models.residual import ResidualModel
from models.roofline import RooflineModel
from models.splits import held_out_shapes
from models.tree import RandomForestModel, XGBoostModel

MODELS = [
    lambda: RandomForestModel(n_estimators=50),
    lambda: XGBoostModel(n_estimators=100),
    RooflineModel,
    lambda: ResidualModel(base={"kind": "xgb", "n_estimators": 100}),
]


@pytest.fixture(scope="module")
def dataset(registry):
    ops = {
        "matmul": {"n": 60, "params": {"m": [8, 4096], "n": [8, 4096], "k": [8, 4096]}},
        "gelu": {"n": 30, "params": {"m": [1, 8192], "n": [16, 8192]}},
    }
    work = random_sweep(ops, ["float32", "float16"], seed=1)
    rows = pd.concat(
        [
            collect(SimRooflineBackend(registry.get(hw)), work, progress=False)
            for hw in ("T4", "A100-PCIe-40GB", "H100-SXM")
        ],
        ignore_index=True,
    )
    X = TabularFeaturizer(registry).transform(rows)
    return rows, X, rows["runtime_ms"].to_numpy()


@pytest.mark.parametrize("make", MODELS)
def test_interface(make, dataset, tmp_path):
    rows, X, y = dataset
    model = make()
    assert isinstance(model, CostModel)
    assert type(model)(**model.get_params()).get_params() == model.get_params()
    assert model.fit(X, y) is model
    pred = model.predict(X)
    assert pred.shape == y.shape and np.all(pred > 0) and np.all(np.isfinite(pred))
    np.testing.assert_allclose(model.predict(X), pred, rtol=1e-12)  # no side effects (parallel sums may reorder)
    again = load_model(model.save(tmp_path / "m"))
    assert type(again) is type(model)
    np.testing.assert_allclose(again.predict(X), pred, rtol=1e-6)


@pytest.mark.parametrize("make", MODELS)
def test_rejects_bad_targets(make, dataset):
    _, X, y = dataset
    with pytest.raises(ValueError, match="> 0"):
        make().fit(X, np.where(np.arange(len(y)) == 0, -1.0, y))
    with pytest.raises(ValueError, match="shape"):
        make().fit(X, y[:-1])


def test_learned_models_beat_the_roofline_on_held_out_shapes(dataset):
    rows, X, y = dataset
    train, test = held_out_shapes(rows, 0.25, seed=0)
    assert not set(rows.loc[train, "shape_id"]) & set(rows.loc[test, "shape_id"])
    scores = {}
    for make in MODELS:
        model = make().fit(X.iloc[train], y[train])
        scores[type(model).__name__] = evaluate(rows.loc[test, "hardware"], y[test], model.predict(X.iloc[test]))["all"]
    assert scores["XGBoostModel"]["medape"] < 0.5 * scores["RooflineModel"]["medape"]
    assert scores["RandomForestModel"]["medape"] < 0.5 * scores["RooflineModel"]["medape"]
    assert scores["XGBoostModel"]["kendall_tau"] > 0.9


@pytest.mark.parametrize("make", MODELS)
def test_predictions_are_float64(make, dataset):
    _, X, y = dataset
    assert make().fit(X, y).predict(X.iloc[:5]).dtype == np.float64


# --- multi-target rf / xgb (models/tree.py) -----------------------------------------------------------------

MULTI = [
    lambda **kw: RandomForestModel(n_estimators=30, n_jobs=1, **kw),
    lambda **kw: XGBoostModel(n_estimators=60, n_jobs=1, **kw),
]


def _two_targets(rows):
    """runtime (positive, log) and a zero-heavy count (log1p): FLOPs, 0 for the gelu rows."""
    flops = np.where(rows["op"] == "gelu", 0.0, rows["flops"].to_numpy(float))
    return np.column_stack([rows["runtime_ms"].to_numpy(float), flops])


@pytest.mark.parametrize("make", MULTI)
def test_multi_target_shapes_roundtrip_and_bounds(make, dataset, tmp_path):
    rows, X, _ = dataset
    Y = _two_targets(rows)
    upper = float(np.quantile(Y[:, 1], 0.5))  # a bound the model must hit: half the rows lie above it
    model = make(targets=["runtime_ms", "flops"], transform=["log", "log1p"], lower=[None, 0.0], upper=[None, upper])
    assert type(model)(**model.get_params()).get_params() == model.get_params()
    pred = model.fit(X, Y).predict(X)
    assert pred.shape == Y.shape and pred.dtype == np.float64 and np.isfinite(pred).all()
    assert pred[:, 0].min() > 0 and pred[:, 1].min() >= 0 and pred[:, 1].max() == pytest.approx(upper)
    assert np.median(np.abs(pred[:, 0] - Y[:, 0]) / Y[:, 0]) < 0.2  # learned, not constant
    gelu = (rows["op"] == "gelu").to_numpy()
    assert np.median(pred[gelu, 1]) < 1.0 < np.median(pred[~gelu, 1])  # the zero-heavy target keeps its zeros
    again = load_model(model.save(tmp_path / "multi"))
    np.testing.assert_allclose(again.predict(X), pred, rtol=1e-6)


@pytest.mark.parametrize("make", MULTI)
def test_multi_target_inverts_each_transform_and_scale(make, dataset):
    rows, X, y = dataset
    # the second target is 2 x the first: after log and standardisation both columns are the same numbers, so the
    # model must return exactly 2 x its first column (any mix-up of per-target transforms or scales breaks this);
    # no row / column subsampling, which XGBoost draws afresh for each target's trees
    params = {"subsample": 1.0, "colsample_bytree": 1.0} if "subsample" in make().get_params() else {}
    pred = make(targets=["a", "b"], **params).fit(X, np.column_stack([y, 2 * y])).predict(X)
    np.testing.assert_allclose(pred[:, 1], 2 * pred[:, 0], rtol=1e-5)


@pytest.mark.parametrize("make", MULTI)
def test_multi_target_errors_are_one_line(make, dataset):
    _, X, y = dataset
    Y = np.column_stack([y, y])
    with pytest.raises(ValueError, match=r"shape \(\d+, 2\), expected \(\d+, 3\)"):
        make(targets=["a", "b", "c"]).fit(X, Y)
    with pytest.raises(ValueError, match=r"expected \(\d+,\)"):
        make().fit(X, Y)  # 2-D y without target names
    with pytest.raises(ValueError, match="> 0"):
        make(targets=["a", "b"]).fit(X, np.column_stack([y, np.zeros(len(y))]))
    with pytest.raises(ValueError, match=">= 0"):
        make(targets=["a", "b"], transform="log1p").fit(X, np.column_stack([y, -np.ones(len(y))]))
    with pytest.raises(ValueError, match="transform has 3 entries for 2 targets"):
        make(targets=["a", "b"], transform=["log"] * 3).fit(X, Y)
    with pytest.raises(ValueError, match="unknown target transform"):
        make(targets=["a", "b"], transform="sqrt").fit(X, Y)


def test_single_target_fit_is_exactly_the_plain_log_fit(dataset, tmp_path):
    """1-D behaviour unchanged: the same forest as scikit-learn on log(y), and a model.json without the
    multi-target parameters (saved before they existed) still loads and predicts the same."""
    import json

    from sklearn.ensemble import RandomForestRegressor

    _, X, y = dataset
    model = RandomForestModel(n_estimators=20, n_jobs=1).fit(X, y)
    plain = RandomForestRegressor(n_estimators=20, max_features=0.5, random_state=0, n_jobs=1)
    plain.fit(X.to_numpy(np.float32), np.log(y))
    np.testing.assert_array_equal(model.predict(X), np.exp(plain.predict(X.to_numpy(np.float32)).astype(np.float64)))
    path = model.save(tmp_path / "old")
    meta = json.loads((path / "model.json").read_text())
    for key in ("targets", "transform", "lower", "upper", "base_columns"):
        del meta["params"][key]
    (path / "model.json").write_text(json.dumps(meta))
    np.testing.assert_array_equal(load_model(path).predict(X), model.predict(X))
