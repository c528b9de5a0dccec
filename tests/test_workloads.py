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
    params = (
        {p: 3 for p in OPS[op].params}
        | ({"padding": 1, "stride": 1} if "padding" in OPS[op].params else {})
        | ({"causal": 1} if op == "sdpa" else {})
    )
    fn, inputs, _ = build(op, params, "float32", device="cpu")
    with torch.no_grad():
        out = fn(*inputs)
    assert torch.isfinite(out).all()
    assert family(op) == OPS[op].family
    assert count_cost(op, params, "float32")[1] > 0


@pytest.mark.parametrize(
    "op,params,msg",
    [
        ("matmulx", {"m": 1}, "unknown op"),
        ("matmul", {"m": 4, "n": 4}, "needs shape parameter 'k'"),
        ("matmul", {"m": 4, "n": 0, "k": 4}, "must be >= 1"),
        ("matmul", {"m": 4, "n": 2.5, "k": 4}, "must be an integer"),
        ("conv2d", dict(batch=1, c_in=1, c_out=1, h=2, w=8, kernel=5, stride=1, padding=0), "larger than padded input"),
        ("sdpa", dict(batch=1, heads=2, seq_len=8, head_dim=4, causal=2), "'causal' must be 0 or 1"),
        ("transformer", dict(batch=1, seq_len=8, width=10, heads=4, depth=1), "multiple of heads"),
        (
            "conv2d",
            dict(batch=1, c_in=6, c_out=8, h=8, w=8, kernel=3, stride=1, padding=1, groups=4),
            "multiples of groups",
        ),
        (
            "conv2d",
            dict(batch=1, c_in=4, c_out=4, h=8, w=8, kernel=3, stride=1, padding=0, dilation=4),
            "dilated kernel",
        ),
        ("conv2d", dict(batch=1, c_in=4, c_out=4, h=8, w=8, kernel=3, stride=1, padding=0, groups=-2), "must be >= 1"),
        ("max_pool2d", dict(batch=1, c_in=4, h=8, w=8, kernel=3, stride=2, padding=2), "at most half the kernel"),
        ("ewise", dict(m=4, n=4, inputs=4), "inputs must be 0..3"),
        ("sdpa", dict(batch=1, heads=2, seq_len=8, head_dim=4, causal=0, kv_len=2.5), "must be an integer"),
    ],
)
def test_validate_names_the_problem(op, params, msg):
    with pytest.raises(WorkloadError, match=msg):
        validate(op, params)


def test_shape_id_ignores_unused_params_and_dtype():
    assert shape_id("matmul", {"m": 1, "n": 2, "k": 3}) == shape_id("matmul", {"k": 3, "n": 2, "m": 1, "batch": 9})
    assert shape_id("matmul", {"m": 1, "n": 2, "k": 3}) != shape_id("linear", {"m": 1, "n": 2, "k": 3})


def test_sweep_is_seeded_bounded_and_distinct():
    ops = {
        "matmul": {"n": 20, "params": {"m": [8, 4096], "n": [8, 4096], "k": [8, 4096]}},
        "conv2d": {
            "n": 5,
            "params": {
                "batch": 2,
                "c_in": [3, 64],
                "c_out": {"choice": [16, 32]},
                "h": [8, 32],
                "w": [8, 32],
                "kernel": {"choice": [1, 3]},
                "stride": 1,
                "padding": 1,
            },
        },
    }
    a = random_sweep(ops, ["float32", "float16"], seed=3, max_flops=1e8)
    assert a == random_sweep(ops, ["float32", "float16"], seed=3, max_flops=1e8)
    assert a != random_sweep(ops, ["float32", "float16"], seed=4, max_flops=1e8)
    assert len(a) == 2 * 25
    assert all(count_cost(w["op"], w["params"], "float32")[0] <= 1e8 for w in a)
    assert len({(w["op"], tuple(sorted(w["params"].items())), w["dtype"]) for w in a}) == len(a)
    assert {w["params"]["c_out"] for w in a if w["op"] == "conv2d"} <= {16, 32}


CONV = dict(batch=2, c_in=8, c_out=16, h=16, w=16, kernel=3, stride=1, padding=1)


def test_optional_params_at_their_default_change_nothing():
    # groups = 1 / dilation = 1 / kv_len = seq_len (given, missing, NaN or 0) is the row that never had them
    base = (validate("conv2d", CONV), shape_id("conv2d", CONV), count_cost("conv2d", CONV, "float32"))
    for extra in (
        {"groups": 1},
        {"groups": 1.0, "dilation": 1},
        {"groups": float("nan")},
        {"groups": 0, "dilation": 0},
    ):
        p = CONV | extra
        assert (validate("conv2d", p), shape_id("conv2d", p), count_cost("conv2d", p, "float32")) == base
    sd = dict(batch=2, heads=4, seq_len=16, head_dim=8, causal=1)
    assert validate("sdpa", sd | {"kv_len": 16}) == validate("sdpa", sd)
    assert shape_id("sdpa", sd | {"kv_len": 16}) == shape_id("sdpa", sd) != shape_id("sdpa", sd | {"kv_len": 64})
    assert shape_id("conv2d", CONV | {"groups": 8}) != base[1]


def test_new_ops_flops_and_bytes_closed_forms():
    e = 4  # float32 bytes
    b, ci, co, h, w, k = 2, 8, 16, 16, 16, 3
    # grouped conv: each output sees c_in / groups input channels; weights c_out x c_in/groups x k x k
    flops, nbytes = count_cost("conv2d", CONV | {"groups": 4}, "float32")
    assert flops == 2 * b * co * h * w * (ci // 4) * k * k
    assert nbytes == e * (b * ci * h * w + co * (ci // 4) * k * k + co + b * co * h * w)
    dw = dict(CONV, c_out=8, groups=8)  # depthwise
    assert count_cost("conv2d", dw, "float32")[0] == 2 * b * 8 * h * w * k * k
    # dilation 2, padding 1: span 5, output 14 x 14
    assert count_cost("conv2d", CONV | {"dilation": 2}, "float32")[0] == 2 * b * co * 14 * 14 * ci * k * k
    pool = dict(batch=b, c_in=ci, h=h, w=w, kernel=3, stride=2, padding=1)  # output 8 x 8
    for op in ("max_pool2d", "avg_pool2d"):
        assert count_cost(op, pool, "float32") == (0.0, e * (b * ci * h * w + b * ci * 8 * 8))
    assert count_cost("adaptive_avg_pool2d", dict(batch=b, c_in=ci, h=h, w=w, out_size=4), "float16") == (
        0.0,
        2 * (b * ci * h * w + b * ci * 16),
    )
    assert count_cost("batchnorm", dict(batch=b, c_in=ci, h=h, w=w), "float32") == (
        0.0,
        e * (2 * b * ci * h * w + 4 * ci),
    )  # x, y, weight, bias, running mean and variance
    assert count_cost("rmsnorm", {"m": 6, "n": 32}, "float32") == (0.0, e * (2 * 6 * 32 + 32))
    # embedding: int64 ids, the rows a lookup can touch (min(m, k)), the output
    assert count_cost("embedding", {"m": 10, "n": 32, "k": 1000}, "float32") == (0.0, 8 * 10 + e * (10 * 32 + 10 * 32))
    assert count_cost("embedding", {"m": 100, "n": 32, "k": 20}, "float32") == (0.0, 8 * 100 + e * (20 * 32 + 100 * 32))
    for n_in in range(4):
        assert count_cost("ewise", {"m": 6, "n": 32, "inputs": n_in}, "float32") == (0.0, e * 6 * 32 * (n_in + 1))
    for op in ("copy", "silu", "sigmoid", "hardtanh"):
        assert count_cost(op, {"m": 6, "n": 32}, "bfloat16") == (0.0, 2 * 2 * 6 * 32)
    sd = dict(batch=2, heads=4, seq_len=1, head_dim=8, causal=0, kv_len=64)  # one query against a 64-token cache
    assert count_cost("sdpa", sd, "float32") == (4 * 2 * 4 * 1 * 64 * 8, e * 2 * 4 * 8 * (1 + 64 + 64 + 1))


def test_grouped_conv_is_one_gemm_per_group():
    from data.backends.sim_roofline import gemm_dims

    assert gemm_dims("conv2d", validate("conv2d", CONV)) == (1, 2 * 16 * 16, 16, 8 * 9)
    assert gemm_dims("conv2d", validate("conv2d", CONV | {"groups": 4})) == (4, 2 * 16 * 16, 4, 2 * 9)
    # a feature frame holds 0 for an unused column: still one group
    assert gemm_dims("conv2d", {**validate("conv2d", CONV), "groups": 0.0, "dilation": 0.0}) == (1, 512, 16, 72)


def test_optional_params_accept_pandas_missing_values():
    import pandas as pd

    row = pd.DataFrame([CONV]).astype("Int64").assign(groups=pd.NA, dilation=pd.NA).astype("Int64").iloc[0]
    assert validate("conv2d", row.to_dict()) == CONV and shape_id("conv2d", row.to_dict()) == shape_id("conv2d", CONV)


def test_importers_finish_costs_optional_params():
    """Imported rows are costed and grouped by every parameter the op reads: a grouped conv is not a dense one, an
    optional parameter at its default (1, NaN) is the row without it."""
    import pandas as pd

    from data.importers import finish

    rows = [
        CONV | {"groups": 4},
        CONV | {"groups": 1},
        CONV | {"groups": float("nan")},
        CONV,
        {"batch": 2, "heads": 4, "seq_len": 1, "head_dim": 8, "causal": 0, "kv_len": 64},
    ]
    ops = ["conv2d"] * 4 + ["sdpa"]
    out = finish(
        pd.DataFrame(rows).assign(op=ops, dtype="float32", hardware="H100-SXM", runtime_ms=1.0), source="test", env={}
    )
    assert out["flops"].tolist() == [count_cost(op, r, "float32")[0] for op, r in zip(ops, rows)]
    assert out["bytes"].tolist() == [count_cost(op, r, "float32")[1] for op, r in zip(ops, rows)]
    assert out.loc[0, "flops"] == count_cost("conv2d", CONV, "float32")[0] / 4
    assert out.loc[4, "flops"] == 4 * 2 * 4 * 1 * 64 * 8
    assert out.loc[0, "shape_id"] != out.loc[1, "shape_id"] == out.loc[2, "shape_id"] == out.loc[3, "shape_id"]
