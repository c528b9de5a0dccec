"""benchmarks/gpu_holdout.py: the held-out sweep a GPU is judged on (pool here, measure there), on a fake H100."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from tests.conftest import ROOT
from tests.fake_nvml import FakeGpu

sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_holdout  # noqa: E402


def test_the_pool_is_the_calibrate_candidates_in_four_dtypes_shuffled(tmp_path):
    out = tmp_path / "pool.csv"
    assert gpu_holdout.main(["pool", "--out", str(out), "--seed", "3"]) == 0
    pool = pd.read_csv(out)
    assert set(pool["dtype"]) == {"float32", "tf32", "float16", "bfloat16"}
    assert {"matmul", "conv2d", "sdpa", "layernorm"} <= set(pool["op"]) and "hardware" not in pool
    assert pool["op"].head(40).nunique() > 3  # shuffled: the file order is not op by op
    again = tmp_path / "again.csv"
    gpu_holdout.main(["pool", "--out", str(again), "--seed", "3"])
    pd.testing.assert_frame_equal(pool, pd.read_csv(again))  # seeded


def test_measure_appends_rows_as_measured_and_a_rerun_resumes(tmp_path, monkeypatch, registry, capsys):
    from tests import fake_cuda

    pool = pd.DataFrame(
        [
            {"op": "matmul", "dtype": "float16", "m": 256, "n": 256, "k": 256},
            {"op": "add", "dtype": "float32", "m": 64, "n": 1000},
            {"op": "layernorm", "dtype": "bfloat16", "m": 128, "n": 341},
        ]
    )
    pool.to_csv(tmp_path / "pool.csv", index=False)
    out = tmp_path / "rows.jsonl"
    gpu = FakeGpu(busy_power_w=500.0, idle_power_w=70.0, name="NVIDIA H100 80GB HBM3", power_limit_w=700.0)
    with fake_cuda.installed(monkeypatch, fake_cuda.FakeCudaDevice.from_spec(registry.get("H100-SXM"), gpu)):
        pd.DataFrame([pool.iloc[0]]).to_csv(tmp_path / "first.csv", index=False)
        assert gpu_holdout.main(["measure", str(tmp_path / "first.csv"), "--out", str(out)]) == 0
        assert gpu_holdout.main(["measure", str(tmp_path / "pool.csv"), "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["op"] for r in lines] == ["matmul", "add", "layernorm"]  # the first was not measured twice
    assert all(r["status"] == "ok" and r["runtime_ms"] > 0 and r["hardware"] == "H100-SXM" for r in lines)
    assert {r["timing_method"] for r in lines} <= {"cuda_graph", "cuda_events"}
    assert "1 already measured" in capsys.readouterr().out
    from data.nvml import NvmlPower
    from tests.fake_nvml import FakeNvml

    powered = tmp_path / "powered.jsonl"  # --power: each row with its NVML power and SM clock (the fake GPU's NVML)
    monkeypatch.setattr(
        NvmlPower, "open", classmethod(lambda cls, *a, **k: cls(FakeNvml(gpu), ticks=3, settle_ticks=1))
    )
    with fake_cuda.installed(monkeypatch, fake_cuda.FakeCudaDevice.from_spec(registry.get("H100-SXM"), gpu)):
        assert gpu_holdout.main(["measure", str(tmp_path / "first.csv"), "--out", str(powered), "--power"]) == 0
    (row,) = [json.loads(line) for line in powered.read_text().splitlines()]
    assert 70.0 < row["power_w"] < 600.0 and row["sm_clock_mhz"] > 0
    assert all(r["power_w"] is None for r in lines)  # timing only without it


@pytest.mark.shared_data
def test_the_neusight_pool_is_its_distinct_float32_shapes_per_op_seeded(tmp_path, capsys):
    """``pool --from neusight``: NeuSight's own workloads (distinct shapes, float32), at most --per-op of each op and a
    tenth as many of each elementwise one, every one valid for measure (op and shape columns), seeded; a missing data
    folder is one error line."""
    from data.workloads import OPS

    out = tmp_path / "ns.csv"
    assert gpu_holdout.main(["pool", "--from", "neusight", "--per-op", "40", "--out", str(out), "--seed", "1"]) == 0
    pool = pd.read_csv(out)
    counts = pool["op"].value_counts()
    assert {"bmm", "linear", "conv2d", "layernorm", "softmax", "gelu"} <= set(counts.index)
    assert counts[["bmm", "linear", "conv2d", "layernorm", "softmax"]].eq(40).all() and counts["gelu"] == 4
    assert set(pool["dtype"]) == {"float32"} and pool["op"].head(20).nunique() > 2  # shuffled
    for op, group in pool.groupby("op"):
        shapes = group[list(OPS[op].params)]
        assert shapes.notna().all().all() and not shapes.duplicated().any()
    again = tmp_path / "again.csv"
    gpu_holdout.main(["pool", "--from", "neusight", "--per-op", "40", "--out", str(again), "--seed", "1"])
    pd.testing.assert_frame_equal(pool, pd.read_csv(again))
    capsys.readouterr()
    bad = ["pool", "--from", "neusight", "--out", str(tmp_path / "x.csv"), "--data-root", str(tmp_path / "none")]
    assert gpu_holdout.main(bad) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_holdout: error:") and "does not exist" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()


def test_measure_without_a_gpu_is_one_error_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    pd.DataFrame([{"op": "add", "dtype": "float32", "m": 8, "n": 8}]).to_csv(tmp_path / "p.csv", index=False)
    assert gpu_holdout.main(["measure", str(tmp_path / "p.csv"), "--out", str(tmp_path / "r.jsonl")]) == 2
    assert capsys.readouterr().err.strip().startswith("gpu_holdout: error: no CUDA device")
    assert not (tmp_path / "r.jsonl").exists()


def test_fit_scores_measured_rows_with_the_physics_model_fitted_on_the_pack(tmp_path, capsys):
    """``fit``: the physics model fitted here on the pack's GPU rows scores a file of measured rows per family."""
    from data.reference import load_reference

    pack = load_reference()
    rows = pack[
        (pack["hardware"] == "H200-SXM") & (pack["status"] == "ok") & pack["source"].str.startswith("hopper")
    ].head(30)
    path = tmp_path / "rows.jsonl"
    rows.to_json(path, orient="records", lines=True)
    assert gpu_holdout.main(["fit", str(path), "--trees", "10", "--cap", "3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith(str(path)))
    assert "(H200-SXM)" in line and "family:gemm" in line
    fitted = int(out.split("fitted on ")[1].split(" real GPU rows")[0])
    assert 15 * 3 < fitted < 1000  # at most 3 rows per source, GPU, op and dtype: every GPU, a few rows each
    assert 0 < float(line.split(": all ")[1].split(",")[0]) < 100
    # --exclude: the measured GPU left out of training (the model never saw it); a GPU not in the pack is an error
    assert gpu_holdout.main(["fit", str(path), "--trees", "10", "--cap", "3", "--exclude", "H200-SXM"]) == 0
    out = capsys.readouterr().out
    assert "without H200-SXM" in out and int(out.split("fitted on ")[1].split(" real GPU rows")[0]) < fitted
    assert gpu_holdout.main(["fit", str(path), "--trees", "10", "--exclude", "H300"]) == 2
    assert "no such GPU" in capsys.readouterr().err
    # --intervals: the interval folds fitted too, the 90% interval's coverage and width of each file's rows
    args = ["fit", str(path), "--trees", "10", "--cap", "3", "--exclude", "H200-SXM", "--intervals"]
    assert gpu_holdout.main(args) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  interval: covered "))
    covered, half = (float(v.split(",")[0]) for v in (line.split("covered ")[1], line.split("half-width ")[1]))
    assert 0 <= covered <= 1 and half > 0 and line.endswith("in domain 0.00")  # a GPU never seen: outside


def test_probe_pairs_each_question_and_report_prints_what_was_measured(tmp_path, monkeypatch, registry, capsys):
    """``probe``: every open question as pairs of one size with and without the property (a power-of-two row length
    against an odd one; channels a multiple of 8 against an odd count), each workload valid for the physics frame;
    measured (a slice, on the fake H100) and ``report``-ed as achieved rates by row length and by channels."""
    from data.hardware import HardwareRegistry
    from features.physics import PhysicsFeaturizer
    from tests import fake_cuda

    path = tmp_path / "probe.csv"
    assert gpu_holdout.main(["probe", "--out", str(path)]) == 0
    probe = pd.read_csv(path)
    assert set(probe["question"]) == set(gpu_holdout.PROBES)
    assert set(probe["dtype"]) == {"float32", "bfloat16", "tf32", "float16"}
    wise = probe[probe["question"] == "row_alignment"]
    for _, group in wise.groupby(["op", "dtype", "m"]):
        lengths = set(group["n"].astype(int))
        assert {2048, 2047, 4096, 4095} <= lengths  # a power of two and the odd length next to it, same rows
    conv = probe[probe["question"] == "conv_channels"]
    assert {c % 8 for c in conv["c_in"].astype(int)} == {0, 7} and (conv["c_in"] == conv["c_out"]).all()
    overlap = probe[probe["question"] == "overlap"]  # each kernel eager and from a graph
    assert (overlap.groupby(["op", "m"])["timing"].agg(set) == {"eager", "graph"}).all()
    assert probe.loc[~probe["question"].isin(["overlap", "linear_floor"]), "timing"].isna().all()
    lin = probe[probe["question"] == "linear_floor"]  # each size as linear and matmul, eager and from a graph
    assert (lin.groupby(["m", "dtype"])[["op", "timing"]].nunique() == 2).all().all() and (lin["m"] == lin["k"]).all()
    att = probe[probe["question"] == "attention_exp"]  # every head dim at each shape, causal or not
    assert (att.groupby(["dtype", "seq_len", "causal"])["head_dim"].agg(set) == {32, 64, 128, 256}).all()
    long = probe[probe["question"] == "long_gemm"]  # float32 GEMMs up to 16 384 squared, bf16 / tf32 ones, SDPAs
    squares = long[(long["op"] == "matmul") & (long["m"] == long["k"]) & (long["m"] == long["n"])]
    assert {1024, 16384} <= set(squares.loc[squares["dtype"] == "float32", "m"].astype(int))
    assert {"bfloat16", "tf32"} <= set(squares["dtype"]) and set(long.loc[long["op"] == "sdpa", "dtype"]) == {"float32"}
    stem = probe[probe["question"] == "stem_channels"]
    for _, group in stem.groupby("dtype"):  # below, at and above one 16-byte vector of channels, one shape
        assert {1, 3, 4, 8, 16} <= set(group["c_in"].astype(int)) and group["kernel"].nunique() == 1
    PhysicsFeaturizer(HardwareRegistry.from_dir(ROOT / "conf" / "hardware")).transform(
        probe.drop(columns="question").assign(hardware="H100-SXM")
    )  # every workload has a physics frame (raises otherwise)

    part = probe[
        ((probe["m"] == 512) & (probe["n"].isin([2048, 2047])))
        | (probe["batch"] == 8) & (probe["h"] == 28)
        | (probe["question"] == "stem_channels") & probe["c_in"].isin([3, 8])
        | probe["question"].isin(["overlap", "linear_floor"]) & probe["m"].isin([256, 64])
        | (probe["question"] == "long_gemm") & (probe["m"] == 1024) & (probe["k"] == 1024)
        | (probe["question"] == "attention_exp")
        & (probe["seq_len"] == 1024)
        & (probe["causal"] == 0)
        & (probe["dtype"] == "bfloat16")
    ]
    part.to_csv(tmp_path / "part.csv", index=False)
    out = tmp_path / "probe.jsonl"
    gpu = FakeGpu(busy_power_w=500.0, idle_power_w=70.0, name="NVIDIA H100 80GB HBM3", power_limit_w=700.0)
    with fake_cuda.installed(monkeypatch, fake_cuda.FakeCudaDevice.from_spec(registry.get("H100-SXM"), gpu)):
        assert gpu_holdout.main(["measure", str(tmp_path / "part.csv"), "--out", str(out)]) == 0
        part.head(1).assign(timing="fast").to_csv(tmp_path / "bad.csv", index=False)
        capsys.readouterr()
        assert gpu_holdout.main(["measure", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "bad.jsonl")]) == 2
        assert "timing 'fast'" in capsys.readouterr().err and not (tmp_path / "bad.jsonl").exists()
    capsys.readouterr()
    assert gpu_holdout.main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"{len(part)} ok rows on H100-SXM" in text
    assert "GB/s" in text and "2047" in text and "TFLOP/s" in text and "bfloat16" in text and "tf32" in text
    assert "eager - graph" in text and "sdpa, TFLOP/s" in text and "matmul over 1 GFLOP" in text
    measured = pd.read_json(out, lines=True)
    both = measured[measured["probe_timing"].notna()]
    assert set(zip(both["probe_timing"], both["timing_method"])) == {("eager", "cuda_events"), ("graph", "cuda_graph")}
    (tmp_path / "empty.jsonl").write_text("")
    assert gpu_holdout.main(["report", str(tmp_path / "empty.jsonl")]) == 2
    assert gpu_holdout.main(["report", str(tmp_path / "missing.jsonl")]) == 2
