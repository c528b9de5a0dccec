import pytest
import torch

from data.sweep import random_sweep
from data.workloads import OPS, WorkloadError, build, count_cost, family, shape_id, validate


def test_flops_match_closed_forms():
    assert count_cost("matmul", {"m": 64, "n": 32, "k": 16}, "float32")[0] == 2 * 64 * 32 * 16
    assert count_cost("bmm", {"batch": 3, "m": 8, "n": 4, "k": 5}, "float32")[0] == 2 * 3 * 8 * 4 * 5
    assert count_cost("linear", {"m": 10, "n": 20, "k": 30}, "float32")[0] == 2 * 10 * 20 * 30
    p = dict(batch=2, c_in=3, c_out=8, h=16, w=16, kernel=3, stride=1, padding=1)
    assert count_cost("conv2d", p, "float32")[0] == 2 * 2 * 8 * 16 * 16 * 3 * 3 * 3


def test_bytes_are_inputs_weights_outputs_and_follow_dtype():
    flops, nbytes = count_cost("matmul", {"m": 64, "n": 32, "k": 16}, "float32")
    assert nbytes == 4 * (64 * 16 + 16 * 32 + 64 * 32)
    assert count_cost("matmul", {"m": 64, "n": 32, "k": 16}, "float16")[1] == nbytes / 2
    # linear: input + weight + bias + output
    assert count_cost("linear", {"m": 10, "n": 20, "k": 30}, "float32")[1] == 4 * (10 * 30 + 30 * 20 + 20 + 10 * 20)


@pytest.mark.parametrize("op", list(OPS))
def test_every_op_builds_and_runs_on_cpu(op):
    params = {p: 3 for p in OPS[op].params} | ({"padding": 1, "stride": 1} if op == "conv2d" else {}) \
        | ({"causal": 1} if op == "sdpa" else {})
    fn, inputs, _ = build(op, params, "float32", device="cpu")
    with torch.no_grad():
        out = fn(*inputs)
    assert torch.isfinite(out).all()
    assert family(op) == OPS[op].family
    assert count_cost(op, params, "float32")[1] > 0


@pytest.mark.parametrize("op,params,msg", [
    ("matmulx", {"m": 1}, "unknown op"),
    ("matmul", {"m": 4, "n": 4}, "needs shape parameter 'k'"),
    ("matmul", {"m": 4, "n": 0, "k": 4}, "must be >= 1"),
    ("matmul", {"m": 4, "n": 2.5, "k": 4}, "must be an integer"),
    ("conv2d", dict(batch=1, c_in=1, c_out=1, h=2, w=8, kernel=5, stride=1, padding=0), "larger than padded input"),
    ("sdpa", dict(batch=1, heads=2, seq_len=8, head_dim=4, causal=2), "'causal' must be 0 or 1"),
    ("transformer", dict(batch=1, seq_len=8, width=10, heads=4, depth=1), "multiple of heads"),
])
def test_validate_names_the_problem(op, params, msg):
    with pytest.raises(WorkloadError, match=msg):
        validate(op, params)


def test_shape_id_ignores_unused_params_and_dtype():
    assert shape_id("matmul", {"m": 1, "n": 2, "k": 3}) == shape_id("matmul", {"k": 3, "n": 2, "m": 1, "batch": 9})
    assert shape_id("matmul", {"m": 1, "n": 2, "k": 3}) != shape_id("linear", {"m": 1, "n": 2, "k": 3})


def test_sweep_is_seeded_bounded_and_distinct():
    ops = {"matmul": {"n": 20, "params": {"m": [8, 4096], "n": [8, 4096], "k": [8, 4096]}},
           "conv2d": {"n": 5, "params": {"batch": 2, "c_in": [3, 64], "c_out": {"choice": [16, 32]}, "h": [8, 32],
                                         "w": [8, 32], "kernel": {"choice": [1, 3]}, "stride": 1, "padding": 1}}}
    a = random_sweep(ops, ["float32", "float16"], seed=3, max_flops=1e8)
    assert a == random_sweep(ops, ["float32", "float16"], seed=3, max_flops=1e8)
    assert a != random_sweep(ops, ["float32", "float16"], seed=4, max_flops=1e8)
    assert len(a) == 2 * 25
    assert all(count_cost(w["op"], w["params"], "float32")[0] <= 1e8 for w in a)
    assert len({(w["op"], tuple(sorted(w["params"].items())), w["dtype"]) for w in a}) == len(a)
    assert {w["params"]["c_out"] for w in a if w["op"] == "conv2d"} <= {16, 32}
