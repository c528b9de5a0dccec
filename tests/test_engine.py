"""Engines: failures become error rows, resume skips committed workloads, Ray gives the local engine's rows."""

import subprocess
import sys

import pandas as pd
import pytest

from data.backends.cpu import CpuBackend
from data.backends.sim_roofline import SimRooflineBackend
from data.engine import LocalEngine, RayEngine, run_sweep, safe_measure
from data.hardware import detect_cpu
from data.schema import row_key, validate
from data.store import ShardedDataset
from data.sweep import make_sweep
from tests.conftest import ROOT

OPS = {
    "matmul": {"params": {"m": [8, 4096], "n": [8, 4096], "k": [8, 4096]}},
    "conv2d": {
        "params": {
            "batch": [1, 16],
            "c_in": [3, 256],
            "c_out": [8, 256],
            "h": [7, 64],
            "w": [7, 64],
            "kernel": {"choice": [1, 3, 5]},
            "stride": {"choice": [1, 2]},
            "padding": 1,
        }
    },
    "softmax": {"params": {"m": [1, 8192], "n": [16, 8192]}},
}


class Exploding(SimRooflineBackend):
    """A backend with a bug on one op: it raises instead of returning an error row."""

    def measure(self, workload):
        if workload["op"] == "softmax":
            raise MemoryError("simulated allocator failure")
        return super().measure(workload)


def test_anything_a_backend_raises_becomes_an_error_row(registry, tmp_path):
    work = make_sweep(OPS, ["float16"], n=4, kind="lhs", seed=1)
    stats = run_sweep(Exploding(registry.get("T4")), work, tmp_path / "d", shard_rows=5, progress=False)
    assert stats == {**stats, "total": 12, "measured": 12, "committed": 12, "errors": 4}
    df = ShardedDataset(tmp_path / "d").read()
    bad = df[df["op"] == "softmax"]
    assert (bad["status"] == "error").all() and bad["error"].str.contains("MemoryError: simulated").all()
    assert (df.loc[df["op"] != "softmax", "status"] == "ok").all() and bad["bytes"].gt(0).all()


def test_invalid_shape_is_an_error_row_and_resume_skips_what_is_done(tmp_path):
    cpu = CpuBackend(num_threads=1, min_run_time=0.002, warmup=1, hardware=detect_cpu(1), energy=False)
    bad = {
        "op": "conv2d",
        "params": {"batch": 1, "c_in": 3, "c_out": 4, "h": 2, "w": 2, "kernel": 7, "stride": 1, "padding": 0},
        "dtype": "float32",
    }
    good = [{"op": "add", "params": {"m": m, "n": 8}, "dtype": "float32"} for m in (1, 2, 3, 4)]
    first = run_sweep(cpu, [bad, *good[:2]], tmp_path / "d", shard_rows=2, progress=False)
    assert first["errors"] == 1 and first["committed"] == 3
    row = ShardedDataset(tmp_path / "d").read().set_index("op").loc["conv2d"]
    assert row["status"] == "error" and "kernel 7 larger than padded input" in row["error"]
    second = run_sweep(cpu, [bad, *good, good[0]], tmp_path / "d", shard_rows=2, progress=False)
    assert (second["total"], second["skipped"], second["measured"]) == (6, 4, 2)
    assert len(ShardedDataset(tmp_path / "d")) == 5


def test_safe_measure_keeps_the_workload_config(registry):
    row = safe_measure(
        Exploding(registry.get("L4")),
        {"op": "softmax", "params": {"m": 2, "n": 2}, "dtype": "float32", "config": {"tile": 64}},
    )
    validate(pd.DataFrame([row]))
    assert row["config"] == '{"tile": 64}' and row["status"] == "error"


def _comparable(df: pd.DataFrame) -> pd.DataFrame:
    keys = [row_key(r) for r in df.to_dict("records")]
    return df.drop(columns="timestamp").assign(_key=keys).sort_values("_key").reset_index(drop=True)


@pytest.mark.slow
def test_ray_engine_writes_the_local_engines_rows(registry, tmp_path):
    ray = pytest.importorskip("ray")
    sim = SimRooflineBackend(registry.get("H100-SXM"))
    work = make_sweep(OPS, ["float32", "bfloat16"], n=15, kind="sobol", seed=7)
    local = run_sweep(sim, work, tmp_path / "local", LocalEngine(), shard_rows=16, progress=False)
    try:
        remote = run_sweep(
            sim,
            work,
            tmp_path / "ray",
            RayEngine(num_cpus=2, chunk_size=4, max_in_flight=4),
            shard_rows=16,
            progress=False,
        )
        # a backend bug inside a Ray task is caught there too
        boom = run_sweep(
            Exploding(registry.get("T4")), work[::6], tmp_path / "boom", RayEngine(chunk_size=5), progress=False
        )
    finally:
        ray.shutdown()
    assert local["committed"] == remote["committed"] == len(work) == 90
    a, b = ShardedDataset(tmp_path / "local").read(), ShardedDataset(tmp_path / "ray").read()
    pd.testing.assert_frame_equal(_comparable(a), _comparable(b))
    assert boom["errors"] == sum(w["op"] == "softmax" for w in work[::6]) > 0


@pytest.mark.slow
def test_collect_entry_point_composes_and_resumes(tmp_path):
    args = [
        sys.executable,
        "-m",
        "pipelines.collect",
        "backend=sim-roofline",
        "backend.hardware.name=T4",
        "workload=norm",
        "sweep=grid",
        "sweep.points=3",
        "progress=false",
        f"paths.output_dir={tmp_path}",
    ]
    first = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    # 3 x 3 grid per op, 2 ops, minus the 8192 x 8192 corner (over the workload's max_bytes)
    assert "16 workloads, 0 already present, 16 measured (0 errors)" in first.stdout
    df = ShardedDataset(tmp_path / "datasets" / "sim-roofline-norm-grid-n50-s0").read()
    assert len(df) == 16 and set(df["hardware"]) == {"T4"} and set(df["op"]) == {"layernorm", "softmax"}
    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "16 workloads, 16 already present, 0 measured" in again.stdout
    bad = subprocess.run(args[:3] + ["backend=tpu"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "tpu" in bad.stderr
