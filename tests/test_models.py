"""The common suite every CostModel passes, plus a check that learning beats the roofline baseline."""
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

MODELS = [lambda: RandomForestModel(n_estimators=50), lambda: XGBoostModel(n_estimators=100), RooflineModel,
          lambda: ResidualModel(base={"kind": "xgb", "n_estimators": 100})]


@pytest.fixture(scope="module")
def dataset(registry):
    ops = {"matmul": {"n": 60, "params": {"m": [8, 4096], "n": [8, 4096], "k": [8, 4096]}},
           "gelu": {"n": 30, "params": {"m": [1, 8192], "n": [16, 8192]}}}
    work = random_sweep(ops, ["float32", "float16"], seed=1)
    rows = pd.concat([collect(SimRooflineBackend(registry.get(hw)), work, progress=False)
                      for hw in ("T4", "A100-PCIe-40GB", "H100-SXM")], ignore_index=True)
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
