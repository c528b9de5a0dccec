"""conf/physics.yaml: every fitted or assumed number of the physics laws and the physics model carries its provenance,
a number fitted on one GPU names that GPU and how others get it, and the code reads the numbers from there."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import features.physics as fp
import models.physics.corrections as corrections
import models.physics.floors as floors
from data.hardware import HardwareRegistry
from features.physics import PhysicsFeaturizer, laws

PROVENANCE = ("fitted", "assumption")


def _sources(section: dict) -> dict[str, str]:
    return {k: str(v) for k, v in section.items() if k == "source" or k.endswith("_source")}


@pytest.mark.parametrize("name", sorted(laws()))
def test_every_law_says_where_its_numbers_come_from(name):
    section = laws()[name]
    sources = _sources(section)
    assert sources, f"conf/physics.yaml {name}: no source"
    for key, text in sources.items():
        assert text.strip().lower().startswith(PROVENANCE), f"{name}.{key} must start with fitted or assumption"
        assert "stop " not in text and "->" not in text, f"{name}.{key} tells history"
    for prefix in ("", "graph_"):  # a number fitted on one GPU names it and says how other GPUs get it
        if f"{prefix}fitted_on" in section:
            other = str(section.get(f"{prefix}other_gpus", ""))
            assert other.lower().startswith("assumption"), f"{name}: {prefix}other_gpus must say the assumption"
            ids = section[f"{prefix}fitted_on"]
            for hw in [ids] if isinstance(ids, str) else ids:
                assert hw in HardwareRegistry.from_dir(), f"{name}: fitted_on {hw!r} is not a registry id"


def test_the_code_reads_its_fitted_numbers_from_the_config():
    law = laws()
    assert fp.ROW_LATENCY == {op: tuple(ab) for op, ab in law["row_latency"]["cycles_per_row"].items()}
    assert fp.ROWS_PER_SM == law["row_latency"]["rows_per_sm"]
    assert fp.ELEMENT_CYCLES["softmax"] == tuple(tuple(p) for p in law["element_cycles"]["by_op"]["softmax"])
    assert fp.ELEMENT_FLOPS == law["element_flops"]["by_op"]
    assert fp.MIN_TF32_CONV_K == law["conv"]["min_tf32_k"]
    assert fp.LAYERNORM_TWO_PASS == law["layernorm"]["two_pass_reads"]
    assert fp.NARROW_LOAD_BYTES == law["tensor_core_feed"]["narrow_load_bytes"]
    assert {f: floors.GRAPH_FLOORS_MS[f] for f in law["floors"]["graph_ms"]} == law["floors"]["graph_ms"]
    assert floors.OVER_PER_CALL == law["floors"]["over_per_call"]
    assert floors.FLOOR_OP_PRIOR == law["floors"]["linear_over_gemm"]
    assert floors.GRAPH_PRIOR_ROWS == law["floors"]["graph_prior_rows"]
    assert corrections.BORROW_MAX_DISTANCE == law["corrections"]["borrow_max_distance"]
    assert corrections.NEW_ROW_REPEATS == law["corrections"]["new_row_repeats"]
    # every family and floor op has a graph floor; every harness a ratio and a linear prior
    assert set(floors.GRAPH_FLOORS_MS) == set(floors.FLOOR_GROUPS)
    assert set(floors.OVER_PER_CALL) == set(fp.HARNESSES) == set(floors.FLOOR_OP_PRIOR)


def test_a_fitted_number_moves_the_physics(monkeypatch):
    """The layernorm's second read and the row walk are what the config says: twice the number, twice the time."""
    registry = HardwareRegistry.from_dir()
    rows = pd.DataFrame(
        [
            dict(op="layernorm", m=4096, n=4095, hardware="H200-SXM", dtype="bfloat16"),
            dict(op="softmax", m=8, n=512, hardware="H200-SXM", dtype="float16"),
        ]
    )
    base = PhysicsFeaturizer(registry).transform(rows)
    monkeypatch.setattr(fp, "LAYERNORM_TWO_PASS", 2 * fp.LAYERNORM_TWO_PASS)
    monkeypatch.setattr(fp, "ROW_LATENCY", {op: (2 * a, 2 * b) for op, (a, b) in fp.ROW_LATENCY.items()})
    moved = PhysicsFeaturizer(registry).transform(rows)
    assert moved["memory_ms"].iloc[0] == pytest.approx(2 * base["memory_ms"].iloc[0])
    assert base["latency_ms"].iloc[1] > 0
    assert moved["latency_ms"].iloc[1] == pytest.approx(2 * base["latency_ms"].iloc[1])
    assert np.isfinite(moved["physics_ms"]).all()
