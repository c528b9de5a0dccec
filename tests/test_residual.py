"""ResidualModel: a tree model on log(runtime / roofline). The common interface tests are in test_models.py."""

import json

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from models.base import load_model
from models.evaluate import regression_metrics
from models.residual import ResidualModel
from models.roofline import RooflineModel
from tests.conftest import ROOT


def _synthetic(n: int, seed: int):
    """Roofline spans 6 decades; the truth is roofline x a smooth factor in [1.2, 4.8] of two other features."""
    rng = np.random.default_rng(seed)
    u, v = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    roof = np.exp(rng.uniform(np.log(1e-3), np.log(1e3), n))
    factor = 1.2 + 3.0 * (np.sin(3 * u) ** 2) * (0.5 + v)
    X = pd.DataFrame({"u": u, "v": v, "log2_roofline_ms": np.log2(roof), "roofline_ms": roof})
    return X, roof * factor


@pytest.mark.parametrize("kind", ["xgb", "rf"])
def test_residual_beats_the_roofline_when_it_is_off_by_a_smooth_factor(kind, tmp_path):
    X, y = _synthetic(1500, seed=0)
    Xt, yt = _synthetic(500, seed=1)  # fresh points: generalisation, not memorisation
    base = {"kind": kind, "n_estimators": 100, "n_jobs": 1, "random_state": 0}
    model = ResidualModel(base=base).fit(X, y)
    pred = model.predict(Xt)
    res, roof = regression_metrics(yt, pred), regression_metrics(yt, RooflineModel().predict(Xt))
    assert roof["mape"] > 50  # the baseline is badly off ...
    assert res["mape"] < 0.1 * roof["mape"]  # ... the learned factor removes most of it
    assert res["mape"] < 10
    again = load_model(model.save(tmp_path / "m"))
    assert isinstance(again, ResidualModel) and again.get_params() == model.get_params()
    np.testing.assert_allclose(again.predict(Xt), pred, rtol=1e-6)


def test_residual_is_exactly_the_reference_times_the_learned_ratio():
    X, y = _synthetic(300, seed=2)
    model = ResidualModel(base={"kind": "xgb", "n_estimators": 20, "n_jobs": 1}).fit(X, y)
    np.testing.assert_allclose(model.predict(X), X["roofline_ms"] * model.base_.predict(X), rtol=1e-12)


def test_bad_inputs_are_one_clear_error():
    X, y = _synthetic(50, seed=3)
    with pytest.raises(ValueError, match="unknown base kind 'svm'"):
        ResidualModel(base={"kind": "svm"}).fit(X, y)
    with pytest.raises(ValueError, match="'roofline_ms' missing"):
        ResidualModel(base={"kind": "xgb", "n_estimators": 5}).fit(X.drop(columns=["roofline_ms"]), y)
    with pytest.raises(ValueError, match="finite and > 0"):
        ResidualModel(base={"kind": "xgb", "n_estimators": 5}).fit(X.assign(roofline_ms=0.0), y)


def test_transfer_features_hide_absolute_spec_columns(registry):
    from features.tabular import TabularFeaturizer

    rows = pd.DataFrame(
        [
            {"op": "matmul", "m": 64 * i, "n": 128, "k": 256 + i, "hardware": hw}
            for i in range(1, 30)
            for hw in ("T4", "A100-PCIe-40GB")
        ]
    )
    X = TabularFeaturizer(registry).transform(rows)
    y = X["roofline_ms"].to_numpy() * (2.0 + np.arange(len(X)) % 3)
    model = ResidualModel(base={"kind": "xgb", "n_estimators": 10, "n_jobs": 1}, features="transfer").fit(X, y)
    seen = set(model.base_.feature_names_)
    assert {"wave_eff_128", "log2_waves_128", "log2_intensity_over_ridge", "m", "hw_ridge_intensity"} <= seen
    assert not seen & {"hw_sm_count", "hw_l2_mb", "hw_clock_mhz", "roofline_ms", "log2_roofline_ms", "log2_wave_ms_128"}
    assert np.all(model.predict(X) > 0)
    with pytest.raises(ValueError, match="unknown features 'some'"):
        ResidualModel(base={"kind": "xgb", "n_estimators": 5}, features="some").fit(X, y)


@pytest.mark.parametrize(
    "name,kind", [("xgb_residual", "xgb"), ("rf_residual", "rf"), ("xgb_residual_transfer", "xgb")]
)
def test_hydra_configs_instantiate_a_saveable_model(name, kind, tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("run", overrides=[f"model=[{name}]"])
    model = instantiate(cfg.model[name])
    assert isinstance(model, ResidualModel) and model.base["kind"] == kind and model.column == "roofline_ms"
    json.dumps(model.get_params())  # plain JSON: model.json round-trips
    X, y = _synthetic(100, seed=4)
    model.base.update(n_estimators=5, n_jobs=1)
    again = load_model(model.fit(X, y).save(tmp_path / "m"))
    np.testing.assert_allclose(again.predict(X), model.predict(X), rtol=1e-6)
