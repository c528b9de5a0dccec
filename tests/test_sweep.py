import math

import numpy as np
import pytest

from data.sweep import KINDS, make_sweep, op_shapes
from data.workloads import WorkloadError, count_cost

GEMM = {"m": [8, 2048], "n": [8, 2048], "k": {"choice": [16, 64, 256]}}


@pytest.mark.parametrize("kind", KINDS)
def test_sweeps_are_seeded_and_reproducible(kind):
    a = op_shapes("matmul", GEMM, 24, kind, seed=3, points=3)
    b = op_shapes("matmul", GEMM, 24, kind, seed=3, points=3)
    assert a == b and len(a) == (24 if kind != "grid" else 3 * 3 * 3)
    assert len({tuple(sorted(p.items())) for p in a}) == len(a)  # distinct shapes
    for p in a:
        assert 8 <= p["m"] <= 2048 and 8 <= p["n"] <= 2048 and p["k"] in (16, 64, 256)
    if kind != "grid":
        assert a != op_shapes("matmul", GEMM, 24, kind, seed=4)


@pytest.mark.parametrize("kind", ["random", "sobol", "lhs"])
def test_ranges_are_sampled_on_a_log_scale(kind):
    """On [1, 10^6] log-uniform puts half the mass below 1000 (a linear scale would put 0.1%)."""
    shapes = op_shapes("add", {"m": [1, 10**6], "n": 1}, 128, kind, seed=0)
    below = np.mean([p["m"] < 1000 for p in shapes])
    assert 0.35 < below < 0.65


def test_lhs_hits_every_log_stratum_once():
    n = 16
    shapes = op_shapes("add", {"m": [1, 2**20], "n": [1, 2**20]}, n, "lhs", seed=1)
    for name in ("m", "n"):
        strata = sorted(min(int(math.log2(p[name]) / 20 * n), n - 1) for p in shapes)
        assert len(set(strata)) >= n - 2  # rounding to integers can move a point across a stratum edge


def test_sobol_covers_the_space_better_than_random():
    """Discrepancy of the unit points behind the shapes: Sobol' is lower than independent draws."""
    from scipy.stats import qmc

    def unit(kind):
        ps = op_shapes("matmul", {"m": [1, 2**16], "n": [1, 2**16], "k": [1, 2**16]}, 128, kind, seed=0)
        return np.array([[math.log2(p[d]) / 16 for d in "mnk"] for p in ps]).clip(0, 1)

    assert qmc.discrepancy(unit("sobol")) < qmc.discrepancy(unit("random"))


def test_limits_skip_big_shapes_and_grid_ignores_n():
    shapes = op_shapes("matmul", {"m": [8, 4096], "n": [8, 4096], "k": [8, 4096]}, 40, "sobol", 0, max_flops=1e8)
    assert len(shapes) == 40 and all(count_cost("matmul", p, "float32")[0] <= 1e8 for p in shapes)
    grid = op_shapes(
        "conv2d",
        {
            "batch": 1,
            "c_in": [4, 64],
            "c_out": 8,
            "h": [2, 32],
            "w": 8,
            "kernel": {"choice": [1, 5]},
            "stride": 1,
            "padding": 0,
        },
        1,
        "grid",
        points=3,
    )
    # h=2 with kernel 5 is not a valid convolution: skipped, not an error
    assert len(grid) == 3 * 3 * 2 - 3 and all(p["h"] + 2 * p["padding"] >= p["kernel"] for p in grid)


def test_make_sweep_crosses_dtypes_and_op_streams_are_independent():
    ops = {"matmul": {"params": GEMM}, "add": {"params": {"m": [1, 64], "n": [1, 64]}}}
    work = make_sweep(ops, ["float32", "bfloat16"], n=5, kind="sobol", seed=0)
    assert len(work) == 2 * 5 * 2 and {w["dtype"] for w in work} == {"float32", "bfloat16"}
    only_add = make_sweep({"add": ops["add"]}, ["float32", "bfloat16"], n=5, kind="sobol", seed=0)
    assert [w for w in work if w["op"] == "add"] == only_add


@pytest.mark.parametrize(
    "ops,msg",
    [
        ({"convolution": {"params": {}}}, "unknown op 'convolution'"),
        ({"matmul": {"params": {"m": [8, 16], "n": 8}}}, "lacks a spec for k"),
        ({"matmul": {"params": {"m": [16, 8], "n": 8, "k": 8}}}, "0 < lo <= hi"),
    ],
)
def test_bad_sweep_specs_name_the_problem(ops, msg):
    with pytest.raises(WorkloadError, match=msg):
        make_sweep(ops, ["float32"], n=4, kind="lhs")
