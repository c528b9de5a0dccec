"""Extrapolation checks (models/extrapolation.py) and their runner (benchmarks/extrapolation.py) on small real
slices."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import models.extrapolation as ex
from models.physics import PhysicsModel
from models.public_eval import spec_features
from models.roofline import RooflineModel
from tests.conftest import ROOT
from tests.test_physics import small_frame, small_rows


def test_folds_hold_out_what_they_say(registry):
    rows = small_rows()
    hw, dtype = rows["hardware"].to_numpy(), rows["dtype"].to_numpy()
    (a,) = ex.faster_gpu_folds(rows)
    assert set(hw[a.test]) == {"H200-SXM"} and set(dtype[a.test]) == {"float32"} and "H200-SXM" not in set(hw[a.train])
    (every,) = ex.faster_gpu_folds(rows, test_dtype=("float32", "tf32", "float16", "bfloat16"))
    assert set(dtype[every.test]) == {"float32", "tf32", "float16", "bfloat16"} and set(hw[every.test]) == {"H200-SXM"}
    b = ex.leave_one_gpu_out_folds(rows)
    assert [f.label for f in b] == sorted(set(hw[rows["source"].str.startswith("neusight")]))
    for f in b:
        assert set(hw[f.test]) == {f.label} and f.label not in set(hw[f.train])
    (c,) = ex.leave_fastest_out_folds(rows, registry)
    assert c.label == "A100-PCIe-40GB" and set(hw[c.test]) == {"A100-PCIe-40GB"}
    (d,) = ex.large_shapes_folds(rows)
    flops = rows["flops"].to_numpy()
    assert flops[d.train].max() < 1e9 and flops[d.test].min() > 1e10
    (e,) = ex.dtype_folds(rows)
    assert set(dtype[e.test]) == {"bfloat16", "float16", "tf32"} and set(hw[e.test]) == {"H200-SXM"}
    assert set(dtype[e.train][hw[e.train] == "H200-SXM"]) == {"float32"}
    with pytest.raises(ValueError, match="no"):
        ex.faster_gpu_folds(rows, test_hardware="L4")


def test_run_check_scores_every_candidate_on_the_same_rows(registry):
    rows = small_rows()
    frames = {"physics": small_frame(), "tabular": spec_features(rows, registry)}
    cands = [
        ex.Candidate("physics", lambda: PhysicsModel(n_estimators=40, interval_folds=False), "physics"),
        ex.Candidate("roofline", RooflineModel, "tabular"),
    ]
    (phys, roof) = ex.run_check("c", rows, frames, cands, registry)
    assert phys["metrics"]["all"]["n"] == roof["metrics"]["all"]["n"] > 0
    assert {"in_domain", "covered"} <= set(phys["metrics"]["all"]) and "covered" not in roof["metrics"]["all"]
    assert phys["metrics"]["all"]["mape"] < roof["metrics"]["all"]["mape"]  # the learned efficiency beats none
    assert ex.worst(phys)[0] == "A100-PCIe-40GB"


@pytest.mark.slow
def test_few_shot_check_calibrates_with_k_rows(registry):
    rows = small_rows()
    rows = rows[rows["hardware"].isin(["H200-SXM", "V100-PCIe-32GB", "T4"])].reset_index(drop=True)
    from features.physics import PhysicsFeaturizer

    frames = {"physics": PhysicsFeaturizer(registry).transform(rows), "tabular": spec_features(rows, registry)}
    cands = [
        ex.Candidate("physics", lambda: PhysicsModel(n_estimators=40, interval_folds=False), "physics"),
        ex.Candidate("roofline", RooflineModel, "tabular"),
    ]
    results = ex.run_check("f", rows, frames, cands, registry, ks=(10, 30), draws=1)
    assert {(r["model"], r["k"]) for r in results} == {
        ("physics", 10),
        ("physics", 30),
        ("roofline", 10),
        ("roofline", 30),
    }
    for r in results:
        assert np.isfinite(r["metrics"]["all"]["mape"])


def test_runner_rejects_an_unknown_check():
    proc = subprocess.run(
        [sys.executable, "benchmarks/extrapolation.py", "--check", "z"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: unknown check(s) z (a, b, c, d, e, f, all)"


def test_achieved_rate_table_is_flops_over_time_over_the_dtype_peak(registry):
    """``benchmarks/achieved_rate.py`` (the growth of convolutions' rate with size that check d asks a model to
    extrapolate, docs/extrapolation.md): FLOPs / runtime / the spec peak of the row's dtype, binned by FLOPs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from achieved_rate import rates

    rows = pd.DataFrame(
        {"hardware": ["T4", "T4", "H200-SXM"], "dtype": ["float32", "float16", "float32"], "flops": [1e9, 2e10, 3e11]}
    )
    rows["runtime_ms"] = [1.0, 2.0, 4.0]
    out = rates(rows, registry)
    peaks = [registry.get(h).peak_flops(d) for h, d in zip(rows["hardware"], rows["dtype"])]
    assert peaks[0] != peaks[1]  # a dtype's own peak (the T4's tensor cores for float16)
    assert out["rate"].tolist() == pytest.approx(
        [1e9 / 1e-3 / peaks[0], 2e10 / 2e-3 / peaks[1], 3e11 / 4e-3 / peaks[2]]
    )
    assert [str(b) for b in out["log10_flops"]] == ["(8.5, 9.0]", "(10.0, 10.5]", "(11.0, 13.0]"]


def test_repeat_errors_pair_only_the_same_kernel_measured_again():
    """``benchmarks/in_sample.py`` (the noise under check (f)'s goal, docs/extrapolation.md): the H200 set's two
    measurements of one kernel predict each other; DeepBench's two layouts of one shape (the same ``shape_id``, another
    ``config``) and one shape in two dtypes are other kernels, not repeats."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from in_sample import repeat_errors

    from data.reference import load_reference

    rows = load_reference()
    h200 = rows[(rows["hardware"] == "H200-SXM") & (rows["status"] == "ok") & rows["source"].str.startswith("hopper")]
    twin = h200[h200.duplicated("shape_id", keep=False)].groupby("shape_id").head(2).head(2)
    assert len(twin) == 2 and twin["shape_id"].nunique() == 1
    bench = rows[(rows["hardware"] == "T4") & rows["source"].str.startswith("deepbench")]
    layouts = bench[bench.duplicated("shape_id", keep=False) & bench["config"].notna()]
    layouts = layouts[layouts["shape_id"] == layouts["shape_id"].iloc[0]]
    assert len(layouts.groupby(["dtype", "config"])) == len(layouts) > 2  # two layouts, two dtypes
    out = repeat_errors(pd.concat([twin, layouts]).reset_index(drop=True))
    a, b = twin["runtime_ms"].to_numpy(float)
    assert out[:2].tolist() == pytest.approx([abs(b / a - 1) * 100, abs(a / b - 1) * 100])
    assert out[2:].isna().all()
