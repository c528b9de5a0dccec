"""Power surrogate (models/power.py, pipelines/power.py) on the real H200 file in shared/data/hopper."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from data.importers.hopper import import_hopper
from data.workloads import SHAPE_PARAMS
from features.tabular import PowerFeaturizer, TabularFeaturizer
from models.conformal import calibrate
from models.evaluate import POWER_COLUMNS as TARGETS
from models.evaluate import noise_floor, regression_metrics
from models.power import PowerSurrogate, network_totals
from models.pyfunc import CostModelPyfunc, make_meta, write_artifacts
from models.splits import grouped_kfold, held_out_shapes, leave_one_family_out
from pipelines.experiment import Target, pooled
from pipelines.report import in_row_order
from tests.conftest import ROOT, SHARED, run_cli, run_entry

pytestmark = pytest.mark.shared_data
CFG = OmegaConf.create(
    {
        "seed": 0,
        "power_cap": 1.12,
        "xgb": {"n_estimators": 200, "learning_rate": 0.08, "max_depth": 4, "min_child_weight": 3.0, "n_jobs": 1},
    }
)
POWER = Target.from_config(OmegaConf.load(ROOT / "conf" / "target" / "power.yaml"))


def make_surrogate(kind: str, cfg) -> PowerSurrogate:
    """A fresh surrogate of ``kind`` (conf/model/power_<kind>.yaml with these hyper-parameters)."""
    return PowerSurrogate(
        kind,
        xgb=dict(cfg.xgb, random_state=int(cfg.seed)),
        power_cap=float(cfg.power_cap),
        multi_target=bool(cfg.get("multi_target", False)),
    )


def out_of_fold(kind: str, cfg, X, rows, folds) -> pd.DataFrame:
    """Out-of-fold predictions of every row (the library's pooled refits), in row order."""
    fit = pooled(
        lambda: make_surrogate(kind, cfg),
        X,
        rows[list(TARGETS)].to_numpy(float),
        rows,
        [(str(i), tr, te) for i, (tr, te) in enumerate(folds)],
    )
    return in_row_order(fit, rows)


@pytest.fixture(scope="module")
def data(registry):
    rows = import_hopper(SHARED, registry)
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    return rows, PowerFeaturizer(registry).transform(rows)


@pytest.fixture(scope="module")
def fitted(data):
    rows, X = data
    Y = rows[list(TARGETS)]
    out = {k: make_surrogate(k, CFG).fit(X, Y) for k in ("xgb", "residual")}
    out["xgb_joint"] = make_surrogate("xgb", OmegaConf.merge(CFG, {"multi_target": True})).fit(X, Y)
    return out


def test_power_features_keep_the_tabular_columns(data, registry):
    rows, X = data
    base = TabularFeaturizer(registry).transform(rows.head(20))
    pd.testing.assert_frame_equal(X.head(20)[list(base.columns)], base)
    idle, tdp = X["hw_idle_power_w"], X["hw_tdp_w"]
    assert ((X["analytical_power_w"] >= idle) & (X["analytical_power_w"] <= tdp)).all()


def test_splits_never_share_shape_id(data):
    rows, _ = data
    seen_test = []
    for train, test in grouped_kfold(rows, 5, 0):
        assert not set(rows["shape_id"].iloc[train]) & set(rows["shape_id"].iloc[test])
        seen_test.extend(test)
    assert sorted(seen_test) == list(range(len(rows)))  # every row predicted once, out of fold
    train, test = held_out_shapes(rows, 0.2, 0)
    assert not set(rows["shape_id"].iloc[train]) & set(rows["shape_id"].iloc[test])
    # the two passes of one configuration land on the same side
    config = rows["op"] + rows["shape_id"] + rows["dtype"]
    assert not set(config.iloc[train]) & set(config.iloc[test])
    for fam, train, test in leave_one_family_out(rows):
        assert set(rows["family"].iloc[test]) == {fam} and fam not in set(rows["family"].iloc[train])


def test_residual_beats_analytical_power_on_unseen_shapes(data):
    rows, X = data
    medape = {
        k: regression_metrics(rows["power_w"], out_of_fold(k, CFG, X, rows, grouped_kfold(rows, 3, 0))["power_w"])[
            "medape"
        ]
        for k in ("analytical", "residual")
    }
    assert medape["residual"] < medape["analytical"], medape


def test_energy_is_power_times_runtime_exactly(data, fitted):
    rows, X = data
    for model in fitted.values():
        pred = model.predict(X)
        assert np.array_equal(
            pred["energy_j"].to_numpy(), pred["power_w"].to_numpy() * pred["runtime_ms"].to_numpy() / 1e3
        )
        assert np.isfinite(pred.to_numpy()).all()


def _spec_only_frame(rows: pd.DataFrame, hardware: str) -> pd.DataFrame:
    """The measured kernels on another GPU, in the dtypes it has units for (a T4 runs no bfloat16 matrix math)."""
    from data.hardware import HardwareRegistry
    from features.tabular import unit_problem

    spec = HardwareRegistry.from_dir().get(hardware)
    runs = [unit_problem(spec, dt) is None for dt in rows["dtype"]]
    frame = rows[runs].drop_duplicates(["op", "shape_id", "dtype"])
    return frame[["op", "dtype", *SHAPE_PARAMS]].assign(hardware=hardware)


@pytest.mark.parametrize("gpu", ["L4", "T4"])
def test_spec_only_gpu_predictions_are_finite_and_within_its_power_range(data, fitted, registry, gpu):
    rows, _ = data
    spec = registry.get(gpu)
    X = PowerFeaturizer(registry).transform(_spec_only_frame(rows, gpu))
    for name, model in fitted.items():
        pred = model.predict(X)
        assert np.isfinite(pred.to_numpy()).all()
        assert (pred["power_w"] >= spec.idle_power_w).all() and (pred["power_w"] <= 1.2 * spec.tdp_w).all(), name
    # the xgb power model learned a fraction of the board limit: its raw output stays in range without the bound
    for raw in (fitted["xgb"].models["power_w"].predict(X), fitted["xgb_joint"].models["joint"].predict(X)[:, 1]):
        assert (raw >= spec.idle_power_w).all() and (raw <= 1.2 * spec.tdp_w).all()
    # specs move the predictions: the same kernels on a 72 W card draw far less than on the 700 W H200
    h200 = fitted["residual"].predict(PowerFeaturizer(registry).transform(_spec_only_frame(rows, "H200-SXM")))
    assert pred["power_w"].median() < 0.3 * h200["power_w"].median()


def test_noise_floor_from_the_two_passes(data):
    rows, _ = data
    floor = noise_floor(rows, by=None).iloc[0]
    assert 0 < floor["noise_power_w"] < 10 and 0 < floor["noise_runtime_ms"] < 10
    assert set(noise_floor(rows).index.get_level_values("op")) == set(rows["op"])


def _pyfunc(model, registry, tmp_path, rows, X):
    pred = model.predict(X)
    intervals = {t: {"log_halfwidth": calibrate(rows[t], pred[t]), "by_hardware": {}} for t in TARGETS}
    meta = make_meta(
        model=model.kind,
        target=POWER.facts(),
        encoder={"_target_": "features.tabular.PowerFeaturizer"},
        unit="kernel",
        intervals=intervals,
        level=0.9,
    )
    arts = write_artifacts(tmp_path / "pyfunc", model, registry, meta)
    py = CostModelPyfunc()
    py.load_context(SimpleNamespace(artifacts=arts))
    return py


def test_joint_model_is_one_model_and_serves_through_the_pyfunc(data, fitted, registry, tmp_path):
    rows, X = data
    joint = fitted["xgb_joint"]
    assert list(joint.models) == ["joint"] and joint.models["joint"].targets == ["runtime_ms", "power_w"]
    assert joint.models["joint"].base_columns == [None, "hw_tdp_w"]  # runtime in log, power as a fraction of TDP
    pred = joint.predict(X)
    assert np.median(np.abs(pred["power_w"] - rows["power_w"]) / rows["power_w"]) < 0.1  # in-sample: it learned
    layers = pd.DataFrame(
        [
            {"op": "matmul", "m": 2048, "n": 2048, "k": 2048, "dtype": "float16", "hardware": h}
            for h in ("H200-SXM", "L4")
        ]
    )
    out = _pyfunc(joint, registry, tmp_path, rows, X).predict(None, layers)  # saved, reloaded, served
    want = joint.predict(PowerFeaturizer(registry).transform(layers))
    np.testing.assert_allclose(out[["runtime_ms", "power_w", "energy_j"]].to_numpy(), want.to_numpy(), rtol=1e-6)


def test_network_power_is_energy_over_runtime(data, fitted, registry, tmp_path):
    rows, X = data
    py = _pyfunc(fitted["residual"], registry, tmp_path, rows, X)
    layers = pd.DataFrame(
        [
            {"network": "mlp", "op": "linear", "m": 512, "n": 4096, "k": 1024, "dtype": "bfloat16", "hardware": "L4"},
            {"network": "mlp", "op": "gelu", "m": 512, "n": 4096, "dtype": "bfloat16", "hardware": "L4"},
            {"network": "mlp", "op": "linear", "m": 512, "n": 1024, "k": 4096, "dtype": "bfloat16", "hardware": "L4"},
            {"network": None, "op": "add", "m": 512, "n": 1024, "dtype": "bfloat16", "hardware": "L4"},
        ]
    )
    out = py.predict(None, layers)
    assert len(out) == 4 and np.isnan(out["network_power_w"].iloc[3])
    net = out.iloc[:3]
    want = network_totals(net["runtime_ms"], net["energy_j"])
    assert net["network_runtime_ms"].iloc[0] == pytest.approx(want["runtime_ms"])
    assert net["network_energy_j"].iloc[0] == pytest.approx(net["energy_j"].sum())
    assert net["network_power_w"].iloc[0] == pytest.approx(want["energy_j"] / want["runtime_ms"] * 1e3)
    assert net["network_power_w"].iloc[0] < net["power_w"].sum()  # not a sum of powers
    assert net["power_w"].min() <= net["network_power_w"].iloc[0] <= net["power_w"].max()
    for t in TARGETS:
        assert (out[f"{t}_lo"] < out[t]).all() and (out[t] < out[f"{t}_hi"]).all()
    assert np.array_equal(out["energy_j"], out["power_w"] * out["runtime_ms"] / 1e3)


def test_mlir_row_costs_the_sum_of_its_kernels(data, fitted, registry, tmp_path):
    from features.mlir import workloads_from_mlir
    from features.mlir.export import export_workload

    rows, X = data
    py = _pyfunc(fitted["xgb"], registry, tmp_path, rows, X)
    text = export_workload("linear", {"m": 256, "n": 512, "k": 128}, "float32")  # matmul + bias add
    out = py.predict(None, pd.DataFrame([{"mlir": text, "hardware": "L4"}]))
    kernels = py.predict(None, workloads_from_mlir(text).drop(columns=["mlir_op", "node"]).assign(hardware="L4"))
    assert len(kernels) >= 2 and len(out) == 1
    assert out["runtime_ms"].iloc[0] == pytest.approx(kernels["runtime_ms"].sum())
    assert out["energy_j"].iloc[0] == pytest.approx(kernels["energy_j"].sum())
    assert out["power_w"].iloc[0] == pytest.approx(out["energy_j"].iloc[0] / out["runtime_ms"].iloc[0] * 1e3)


@pytest.mark.slow
def test_entry_point_registers_and_cli_predicts_power(tmp_path):
    proc = run_entry(
        "pipelines.power",
        "model=[power_analytical,power_residual]",
        "split.folds=2",
        "xgb.n_estimators=100",
        f"data_root={SHARED}",
        out=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "noise floor" in proc.stdout and "registered 'power_residual' as costmodel-power" in proc.stdout
    workloads = tmp_path / "net.csv"
    pd.DataFrame(
        [
            {"network": "n1", "op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "T4"},
            {"network": "n1", "op": "softmax", "m": 1024, "n": 1024, "dtype": "float16", "hardware": "T4"},
        ]
    ).to_csv(workloads, index=False)
    res = run_cli(
        "predict",
        "--model",
        "models:/costmodel-power@champion",
        "--input",
        str(workloads),
        "--format",
        "json",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
    )
    assert res.returncode == 0, res.stderr
    out = pd.DataFrame(json.loads(res.stdout))
    assert {"runtime_ms_lo", "power_w_hi", "energy_j", "network_power_w"} <= set(out.columns)
    assert out["network_power_w"].iloc[0] == pytest.approx(out["energy_j"].sum() / out["runtime_ms"].sum() * 1e3)


def test_a_model_logged_in_the_earlier_layout_still_serves(data, fitted, registry, tmp_path):
    """Meta and surrogate folder as the earlier PowerPyfunc wrote them: this code serves them with the same numbers
    (a process that imported this code, e.g. the CLI, uses it for every model it loads)."""
    import json as _json

    rows, X = data
    model = fitted["residual"]
    new = _pyfunc(model, registry, tmp_path / "new", rows, X)
    old = tmp_path / "old"
    for key, member in model.models.items():
        member.save(old / "model" / key)
    (old / "model" / "surrogate.json").write_text(
        _json.dumps({"name": "residual", "power_cap": 1.12, "joint": False, "targets": ["runtime_ms", "power_w"]})
    )
    (old / "hardware.json").write_text(registry.to_json())
    (old / "meta.json").write_text(
        _json.dumps(
            {
                "targets": ["runtime_ms", "power_w"],
                "model": "residual",
                "level": 0.9,
                "intervals": new.meta["intervals"],
            }
        )
    )
    py = CostModelPyfunc()
    py.load_context(
        SimpleNamespace(
            artifacts={
                k: str(old / f) for k, f in (("model", "model"), ("meta", "meta.json"), ("hardware", "hardware.json"))
            }
        )
    )
    layers = pd.DataFrame(
        [
            {"network": "n", "op": "matmul", "m": 512, "n": 512, "k": 512, "dtype": "float16", "hardware": "L4"},
            {"network": "n", "op": "gelu", "m": 512, "n": 512, "hardware": "L4"},
        ]
    )
    pd.testing.assert_frame_equal(py.predict(None, layers), new.predict(None, layers))
