"""Public-data evaluation: metrics on hand-computed examples, splits that never leak groups (on real rows of the
shared data), bounded FPGA predictions, and the entry point on tiny subsamples against a real sqlite store."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pandas as pd
import pytest

from data.importers.kerneltuner import import_kerneltuner
from data.importers.neusight import import_neusight
from data.importers.wa_hls4ml import import_wa_hls4ml
from features.public_data import fpga_features
from models.evaluate import (
    few_shot_scaled_error,
    oracle_scaled_error,
    ranking_metrics,
    smape,
    topk_slowdown,
    within_group_kendall,
)
from models.public_eval import FPGA_TARGETS, fpga_bounds
from models.splits import (
    few_shot_transfer,
    held_out_layer_shapes,
    held_out_precision,
    held_out_shapes,
    leave_one_group_out,
)
from models.tree import RandomForestModel, XGBoostModel
from tests.conftest import SHARED, run_entry


@pytest.fixture(scope="module")
def wa(registry):
    rows = import_wa_hls4ml(SHARED, registry=registry).reset_index(drop=True)
    return rows.assign(precision_bits=[json.loads(c)["precision_bits"] for c in rows["config"]])


@pytest.fixture(scope="module")
def neusight_small(registry):
    return import_neusight(SHARED, registry=registry, kinds=("bmm", "ln"), max_rows_per_file=60)


# --- metrics, by hand ---------------------------------------------------------------------------------------


def test_smape_by_hand():
    # |110-100|*2/210 = 0.0952381; |0-0| -> 0; |50-100|*2/150 = 0.6666667  -> mean 0.2539683 -> 25.39683 %
    assert smape([100, 0, 100], [110, 0, 50]) == pytest.approx(25.396825, rel=1e-6)
    assert smape([0], [5]) == pytest.approx(200.0)


def test_topk_slowdown_by_hand():
    y_true = [5.0, 1.0, 3.0, 2.0, 4.0]
    y_pred = [1.0, 5.0, 2.0, 4.0, 3.0]  # model ranks rows 0, 2, 4, 3, 1 (fastest first)
    assert topk_slowdown(y_true, y_pred, 1) == pytest.approx(5.0)  # picks row 0 (true 5) / best 1
    assert topk_slowdown(y_true, y_pred, 2) == pytest.approx(3.0)  # rows 0, 2 -> min 3
    assert topk_slowdown(y_true, y_pred, 4) == pytest.approx(2.0)  # rows 0, 2, 4, 3 -> min 2
    assert topk_slowdown(y_true, y_pred, 5) == pytest.approx(1.0)
    assert topk_slowdown(y_true, y_true, 1) == 1.0
    m = ranking_metrics(y_true, y_pred, ks=(1, 5))
    assert m["top1_slowdown"] == pytest.approx(5.0) and m["top5_slowdown"] == 1.0
    with pytest.raises(ValueError):
        topk_slowdown([], [], 1)


def test_within_group_kendall_by_hand():
    # group a: perfectly ranked (tau 1); group b: reversed (tau -1); group c: one row (skipped)
    groups = ["a", "a", "a", "b", "b", "c"]
    y = [1, 2, 3, 1, 2, 7]
    p = [10, 20, 30, 2, 1, 0]
    assert within_group_kendall(groups, y, p) == pytest.approx(0.0)
    assert within_group_kendall(groups[:3], y[:3], p[:3]) == pytest.approx(1.0)
    # across groups the ranking looks fine even though group b is reversed: the within-group score does not
    big = ["s", "s", "L", "L"]
    assert within_group_kendall(big, [1, 2, 100, 200], [2, 1, 200, 100]) == pytest.approx(-1.0)


def test_oracle_scaled_error_by_hand():
    y = np.array([1.0, 2.0, 4.0, 10.0, 10.0, 10.0])
    # group g: one 2x factor on every row -> a per-group scale removes the whole error
    # group h: predictions 10, 12, 8 -> median ratio 1, errors 0, 20, 20 % stay
    p = np.array([2.0, 4.0, 8.0, 10.0, 12.0, 8.0])
    groups = ["g", "g", "g", "h", "h", "h"]
    m = oracle_scaled_error(groups, y, p)
    assert m["medape"] == pytest.approx(0.0) and m["mape"] == pytest.approx(40 / 6)
    # one group for everything: the median ratio is 1.6 (between 1.2 and 2), so no row is exact
    assert oracle_scaled_error(["all"] * 6, y, p)["medape"] > 10


def test_few_shot_scaled_error_by_hand():
    rng = np.random.default_rng(0)
    y = rng.uniform(1, 10, 60)
    groups = np.repeat(["a", "b"], 30)
    p = y * np.where(groups == "a", 2.0, 0.5)  # one exact factor per group: any k rows recover it
    m = few_shot_scaled_error(groups, y, p, k=3)
    assert m["medape"] == pytest.approx(0.0, abs=1e-9) and m["n"] == 54  # the 2 x 3 calibration rows are not scored
    noisy = p * rng.lognormal(0, 0.2, 60)  # per-row noise stays
    assert few_shot_scaled_error(groups, y, noisy, k=10)["medape"] > 5
    assert few_shot_scaled_error(groups, y, noisy, k=30)["n"] == 0  # no group has more than k rows: nothing scored


# --- splits never leak groups (real rows) -------------------------------------------------------------------


@pytest.mark.shared_data
def test_leave_one_gpu_out_and_shapes_never_leak(neusight_small):
    rows = neusight_small.reset_index(drop=True)
    gpus = sorted(rows["hardware"].unique())
    assert len(gpus) == 5
    seen = []
    for gpu, tr, te in leave_one_group_out(rows, "hardware"):
        assert set(rows["hardware"].iloc[te]) == {gpu}
        assert gpu not in set(rows["hardware"].iloc[tr])
        assert len(tr) + len(te) == len(rows)
        seen.append(gpu)
    assert seen == gpus
    tr, te = held_out_shapes(rows, 0.3, seed=1)
    assert not set(rows["shape_id"].iloc[tr]) & set(rows["shape_id"].iloc[te])


@pytest.mark.shared_data
def test_fpga_splits_never_leak(wa):
    tr, te = held_out_layer_shapes(wa, 0.25, seed=0)
    key = list(zip(wa["k"], wa["n"]))
    assert not {key[i] for i in tr} & {key[i] for i in te}
    assert len(tr) + len(te) == len(wa)
    tr, te = held_out_precision(wa, 10, (12, 13, 14))
    assert wa["precision_bits"].iloc[tr].max() <= 10
    assert set(wa["precision_bits"].iloc[te]) <= {12, 13, 14} and len(te) > 0
    with pytest.raises(ValueError, match="held_out_precision"):
        held_out_precision(wa, 10, (99,))


@pytest.mark.shared_data
def test_few_shot_transfer_split(registry):
    rows = import_kerneltuner(SHARED, registry=registry, kernels=("convolution_milo",), max_configs_per_file=50)
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    target = "A100-PCIe-40GB"
    support, other, test = few_shot_transfer(rows, target, 0.1, seed=0, within="op")
    n_target = int((rows["hardware"] == target).sum())
    assert len(support) == round(0.1 * n_target) and len(support) + len(test) == n_target
    assert not set(support) & set(test)
    assert target not in set(rows["hardware"].iloc[other])
    assert set(rows["op"].iloc[other]) == {"conv2d"}  # only GPUs that ran the same kernel


# --- bounded FPGA predictions -------------------------------------------------------------------------------


@pytest.mark.shared_data
@pytest.mark.parametrize("cls", [RandomForestModel, XGBoostModel])
def test_one_multi_target_model_bounded_within_part(wa, registry, cls):
    ok = wa[wa["status"] == "ok"].reset_index(drop=True)
    X, Y = fpga_features(ok), ok[list(FPGA_TARGETS)].to_numpy(float)
    lower, upper = fpga_bounds(registry, "xcvu13p")
    totals = registry.get("xcvu13p").extra["resources"]
    assert upper[:4] == [totals[t] for t in ("lut", "ff", "dsp", "bram_18k")] and upper[4] == float("inf")
    transforms = ["log", "log", "log1p", "log1p", "log1p"]
    model = cls(n_estimators=20, n_jobs=1, targets=list(FPGA_TARGETS), transform=transforms, lower=lower, upper=upper)
    model.fit(X, Y)
    # far outside the data: huge layers, tiny reuse -> the raw model may overshoot; the bounds must hold
    huge = X.assign(
        d_in=X["d_in"] * 1e4,
        d_out=X["d_out"] * 1e4,
        log2_weights=X["log2_weights"] + 30,
        log2_weight_bits=X["log2_weight_bits"] + 30,
        log2_mults_per_cycle=X["log2_mults_per_cycle"] + 30,
    )
    for frame in (X, huge):
        p = model.predict(frame)
        assert p.shape == (len(frame), 5) and np.all(p >= 0) and np.all(p <= np.array(upper))
    dsp, zero = model.predict(X)[:, 2], Y[:, 2] == 0
    assert np.median(dsp[zero]) < 0.1 * np.median(dsp[~zero])  # log1p keeps the DSP = 0 designs near 0
    tiny = cls(n_estimators=10, n_jobs=1, targets=list(FPGA_TARGETS), transform=transforms, lower=0.0, upper=3.0)
    assert tiny.fit(X, Y).predict(X).max() <= 3.0 and (Y > 3).any()  # the clip is active, not vacuous
    with pytest.raises(ValueError, match=">= 0"):
        cls(targets=list(FPGA_TARGETS), transform="log1p").fit(X, -np.ones((len(X), 5)))


# --- the entry point, tiny ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.shared_data
def test_entry_point_tiny_all_datasets(tmp_path):
    """One Hydra multirun over the three datasets (tiny=true), one shared sqlite store."""
    proc = run_entry(
        "pipelines.evaluate",
        "-m",
        "dataset=neusight,kerneltuner,wa_hls4ml",
        "tiny=true",
        "model=[xgb,roofline]",
        f"data_root={SHARED}",
        out=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        runs = mlflow.search_runs(experiment_names=["costmodel-public-eval"])
        assert mlflow.search_registered_models() == []  # evaluation never registers
    finally:
        mlflow.set_tracking_uri(None)
    expected = {
        "neusight": {"leave_one_gpu_out", "held_out_shapes"},
        "kerneltuner": {"per_gpu", "transfer10_with_others", "transfer10_alone"},
        "wa_hls4ml": {"held_out_layer_shapes", "held_out_precision"},
    }
    for dataset, splits in expected.items():
        assert (tmp_path / "public_eval" / f"{dataset}_summary.md").exists()
        assert set(runs.loc[runs["tags.dataset"] == dataset, "tags.split"]) == splits
    assert {"A100-SXM4-40GB", "H100-SXM", "L4", "A100-PCIe-80GB"} <= set(
        pd.read_csv(tmp_path / "public_eval" / "neusight_spec_only_predictions.csv")["hardware"]
    )
    ns = runs[runs["tags.dataset"] == "neusight"]
    assert set(ns["tags.model"]) == {"xgb", "roofline"}

    def metric(row, key):  # <split>/<scope>/<metric>: the run's own split
        return row[f"metrics.{row['tags.split']}/{key}"]

    loo = ns[(ns["tags.split"] == "leave_one_gpu_out") & (ns["tags.model"] == "xgb")].iloc[0]
    assert np.isfinite(metric(loo, "T4/mape")) and np.isfinite(metric(loo, "all/group_kendall_tau"))
    # the error anatomy (values tested by hand above) is logged for all rows and per op family
    for key in [
        "all/oracle_gpu_scale_medape",
        "all/oracle_op_gpu_scale_mape",
        "family:gemm/oracle_gpu_scale_medape",
        "family:elementwise/medape",
        "all/few_shot_10_medape",
        "family:gemm/few_shot_10_mape",
    ]:
        assert metric(loo, key) >= 0, key
    kt = runs[runs["tags.dataset"] == "kerneltuner"]
    assert set(kt["tags.model"]) == {"xgb"}  # roofline cannot rank configs of one kernel: skipped, said so
    for _, row in kt.iterrows():
        assert metric(row, "A100-PCIe-40GB/top1_slowdown") >= 1
        assert np.isfinite(metric(row, "A100-PCIe-40GB/top5_slowdown"))
    wa = runs[runs["tags.dataset"] == "wa_hls4ml"]
    clf = wa[wa["tags.model"] == "feasibility_rf"]
    assert len(clf) == 2 and all(metric(row, "all/balanced_accuracy") > 0.5 for _, row in clf.iterrows())
    for _, row in wa[wa["tags.model"] == "xgb"].iterrows():
        assert np.isfinite(metric(row, "all/dsp.r2"))
        for t in ("lut", "ff", "dsp", "bram_18k", "latency_cycles"):  # one multi-target model, an interval per target
            assert 0 <= metric(row, f"all/{t}.coverage90") <= 1
    assert "roofline: not applicable" in proc.stdout


@pytest.mark.slow
@pytest.mark.shared_data
def test_fpga_entry_point_tiny_hurdle_regime_beside_xgb(tmp_path):
    """``python -m pipelines.evaluate dataset=wa_hls4ml model=[xgb,hurdle_regime]``: the hurdle model on the hls4ml
    features beside the current XGBoost, SMAPE with and without zero-truth rows and DSP / BRAM zero accuracy logged
    under the one metric-key scheme."""
    proc = run_entry(
        "pipelines.evaluate",
        "dataset=wa_hls4ml",
        "tiny=true",
        "model=[xgb,hurdle_regime]",
        f"data_root={SHARED}",
        out=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        runs = mlflow.search_runs(experiment_names=["costmodel-public-eval"])
    finally:
        mlflow.set_tracking_uri(None)
    hurdle = runs[runs["tags.model"] == "hurdle_regime"]
    assert set(hurdle["tags.split"]) == {"held_out_layer_shapes", "held_out_precision"}
    assert set(runs.loc[runs["tags.model"] == "xgb", "tags.split"]) == set(hurdle["tags.split"])
    for _, row in hurdle.iterrows():
        split = row["tags.split"]
        for t in ("lut", "ff", "dsp", "bram_18k", "latency_cycles"):
            assert np.isfinite(row[f"metrics.{split}/all/{t}.r2"]) and row[f"metrics.{split}/all/{t}.smape"] >= 0
        for t in ("dsp", "bram_18k"):
            assert 0 <= row[f"metrics.{split}/all/{t}.zero_accuracy"] <= 1
            assert row[f"metrics.{split}/all/{t}.smape_nonzero"] >= 0
