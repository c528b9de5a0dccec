"""The analytical power model of the sim-roofline backend and the idle power in the hardware registry."""

import dataclasses

import pandas as pd
import pytest

from data.backends.sim_roofline import SimRooflineBackend
from data.schema import validate

BIG_GEMM = {"op": "matmul", "params": {"m": 8192, "n": 8192, "k": 8192}, "dtype": "float16"}
BIG_ADD = {"op": "add", "params": {"m": 8192, "n": 8192}, "dtype": "float32"}
TINY = {"op": "matmul", "params": {"m": 8, "n": 8, "k": 8}, "dtype": "float32"}


def test_every_gpu_has_an_idle_power_below_its_tdp_with_a_source(registry):
    gpus = [spec for spec in registry if spec.kind == "gpu"]
    assert len(gpus) >= 20
    for spec in gpus:
        assert spec.tdp_w and 0 < spec.idle_power_w < spec.tdp_w, spec.id
        assert spec.idle_power_source and len(spec.idle_power_source) > 20, spec.id


def test_memory_bound_power_follows_the_formula(registry):
    spec = registry.get("H200-SXM")
    sim = SimRooflineBackend(spec)
    row = sim.measure(BIG_ADD)
    runtime_s = row["runtime_ms"] * 1e-3
    u_memory = row["bytes"] / (runtime_s * spec.bandwidth_bytes_s)  # < 0.85: launch overhead dilutes it
    assert 0.8 < u_memory < 0.85 and row["flops"] == 0
    assert row["power_w"] == pytest.approx(spec.idle_power_w + (spec.tdp_w - spec.idle_power_w) * u_memory, rel=1e-9)
    assert row["energy_j"] == pytest.approx(row["power_w"] * runtime_s, rel=1e-12)
    assert row["power_method"] == "simulated"


def test_power_stays_between_idle_and_tdp_and_is_capped(registry):
    spec = registry.get("A100-SXM4-80GB")
    big, tiny = SimRooflineBackend(spec).measure(BIG_GEMM), SimRooflineBackend(spec).measure(TINY)
    assert spec.idle_power_w <= tiny["power_w"] < spec.idle_power_w * 1.05  # launch-bound: near idle
    assert tiny["power_w"] < big["power_w"] <= spec.tdp_w
    hot = SimRooflineBackend(spec, compute_power_weight=3.0).measure(BIG_GEMM)
    assert hot["power_w"] == spec.tdp_w  # capped at the board limit


def test_idle_defaults_to_a_fraction_of_tdp_and_no_tdp_means_no_power(registry):
    spec = dataclasses.replace(registry.get("T4"), idle_power_w=None)
    assert SimRooflineBackend(spec, idle_fraction=0.2).idle_power_w() == pytest.approx(0.2 * spec.tdp_w)
    row = SimRooflineBackend(dataclasses.replace(spec, tdp_w=None)).measure(TINY)
    assert row["power_w"] is None and row["energy_j"] is None and row["power_method"] is None


def test_simulated_power_rows_fit_the_schema(registry):
    rows = [
        SimRooflineBackend(registry.get(h)).measure(w) for h in ("T4", "H100-SXM") for w in (BIG_GEMM, BIG_ADD, TINY)
    ]
    df = validate(pd.DataFrame(rows))
    assert (df["power_w"] > 0).all() and (df["power_method"] == "simulated").all()
