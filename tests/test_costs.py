"""The registry's closed-form FLOPs and bytes of every op (``data.ops``, evaluated by ``data.costs``) equal
FlopCounterMode's (``count_cost``) on random valid shapes and every dtype the op has a kernel for, vectorised over
rows; the shape check refuses what cannot exist, in one line."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data.costs import INT64_MAX, costs, echo, fmt_dim, op_costs
from data.ops import FP8_ALIGN, KV_DTYPES
from data.workloads import OPS, WorkloadError, count_cost, validate

EXACT = 2.0**53  # float64 holds every integer below this: the closed forms are exact there

# per parameter: the range a random valid shape draws from (networks smaller: count_cost builds them on meta)
RANGES = {
    "batch": (1, 64),
    "m": (1, 4096),
    "n": (1, 4096),
    "k": (1, 4096),
    "c_in": (1, 256),
    "c_out": (1, 256),
    "h": (1, 256),
    "w": (1, 256),
    "kernel": (1, 7),
    "stride": (1, 4),
    "padding": (0, 3),
    "heads": (1, 16),
    "seq_len": (1, 2048),
    "head_dim": (1, 256),
    "causal": (0, 1),
    "width": (1, 512),
    "depth": (1, 4),
    "out_size": (1, 16),
    "inputs": (0, 3),
    "groups": (1, 256),
    "dilation": (1, 4),
    "kv_len": (1, 4096),
    "num_kv_heads": (1, 16),
    "experts": (1, 64),
    "topk": (1, 8),
    "tp": (1, 8),
    "ep": (1, 8),
    "gpus": (2, 8),
}
NETWORK_RANGES = {"batch": (1, 8), "width": (1, 64), "h": (1, 40), "seq_len": (1, 64), "heads": (1, 8), "depth": (1, 4)}
UNSET = (None, float("nan"), 0)  # an optional parameter at its default: missing, NaN or 0


def _valid(op: str, p: dict, integers, choice) -> dict:
    """Make the drawn ``p`` a valid shape of ``op`` and draw its optional parameters: each left unset (missing,
    NaN or 0), set to its default or to another value; conv groups divide both channel counts (depthwise:
    groups = c_in), the dilated kernel and the pooling window fit the padded input."""
    if op == "conv2d":
        mode = choice(["dense", "grouped", "depthwise"])
        if mode != "dense":
            groups = (
                p["c_in"] if mode == "depthwise" else choice([g for g in range(1, p["c_in"] + 1) if p["c_in"] % g == 0])
            )
            p["c_out"] = groups * integers(1, max(1, RANGES["c_out"][1] // groups) if mode == "grouped" else 4)
            p["groups"] = groups
        room = min(p["h"], p["w"]) + 2 * p["padding"]
        p["kernel"] = min(p["kernel"], room)
        p["dilation"] = integers(*RANGES["dilation"])
        if p["kernel"] > 1:  # the dilated span dilation (kernel - 1) + 1 fits the padded input
            p["dilation"] = min(p["dilation"], (room - 1) // (p["kernel"] - 1))
    if op in ("max_pool2d", "avg_pool2d"):
        p["padding"] = min(p["padding"], p["kernel"] // 2)
        p["kernel"] = min(p["kernel"], p["h"] + 2 * p["padding"], p["w"] + 2 * p["padding"])
        p["padding"] = min(p["padding"], p["kernel"] // 2)
    if op == "sdpa":
        p["kv_len"] = choice([p["seq_len"], integers(*RANGES["kv_len"])])
        if p["causal"] and p["kv_len"] < p["seq_len"]:  # causal queries are the last positions of the keys
            p["kv_len"] = p["seq_len"]
        p["num_kv_heads"] = choice([d for d in range(1, p["heads"] + 1) if p["heads"] % d == 0])
    if op == "moe":  # whole experts and expert columns per GPU
        p["ep"], p["tp"] = integers(*RANGES["ep"]), integers(*RANGES["tp"])
        p["experts"], p["n"] = p["ep"] * integers(1, 16), p["tp"] * integers(1, 512)
        p["topk"] = min(p["topk"], p["experts"])
    if op in ("all_gather", "reduce_scatter"):
        p["n"] = p["gpus"] * integers(1, 1024)
    if op == "transformer":  # whole heads
        p["width"] = p["heads"] * integers(1, 16)
    for name, default in OPS[op].optional:  # at the default: unset (missing, NaN, 0) or given explicitly
        base = p[default] if isinstance(default, str) else default
        if p.get(name, base) == base:
            p[name] = choice([*UNSET, base])
            if p[name] is None:
                del p[name]
    return p


@st.composite
def shapes(draw, op: str) -> dict:
    ranges = {**RANGES, **(NETWORK_RANGES if OPS[op].family == "network" else {})}
    p = {name: draw(st.integers(*ranges[name])) for name in OPS[op].params}
    return _valid(op, p, lambda lo, hi: draw(st.integers(lo, hi)), lambda xs: draw(st.sampled_from(xs)))


def test_every_parameter_has_a_test_range():
    """A shape parameter added to the registry needs a range here to draw valid shapes from."""
    unknown = sorted({p for op in OPS for p in OPS[op].names} - set(RANGES))
    assert not unknown, f"shape parameters without a test range in tests/test_costs.py RANGES: {unknown}"


def _dtype_valid(op: str, p: dict, dtype: str) -> dict:
    """An fp8 GEMM's k and n are multiples of 16 (cuBLASLt's rule)."""
    if dtype == "float8_e4m3fn" and op in ("matmul", "linear"):
        p["k"], p["n"] = (FP8_ALIGN * max(1, p[d] // FP8_ALIGN) for d in ("k", "n"))
    return p


@pytest.mark.parametrize("op", list(OPS))
def test_closed_form_equals_flop_counter_mode(op):
    @settings(
        max_examples=12 if OPS[op].family == "network" else 25,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(p=shapes(op), dtype=st.sampled_from(OPS[op].dtypes), kv=st.sampled_from([None, *KV_DTYPES]))
    def check(p, dtype, kv):
        p = _dtype_valid(op, p, dtype)
        kv = kv if OPS[op].kv else None
        want = count_cost(op, p, dtype, kv)
        got = op_costs(op, {k: np.array([float(v)]) for k, v in p.items()}, dtype, kv)
        for name, w, g in (("flops", want[0], got[0][0]), ("bytes", want[1], got[1][0])):
            if w < EXACT:
                assert g == w, f"{op} {p} {dtype}: {name} {g} != FlopCounterMode {w}"
            else:
                assert g == pytest.approx(w, rel=1e-12), f"{op} {p} {dtype}: {name}"

    check()


def test_costs_vectorised_over_mixed_ops_equal_per_row_count_cost():
    rng = np.random.default_rng(0)
    rows = []
    for i in range(400):
        op = list(OPS)[i % len(OPS)]
        dtype = OPS[op].dtypes[rng.integers(len(OPS[op].dtypes))]
        kv = KV_DTYPES[rng.integers(len(KV_DTYPES))] if OPS[op].kv else None
        rows.append((op, _dtype_valid(op, _draw(op, rng), dtype), dtype, kv))
    params = {k: np.array([float(p.get(k, 0)) for _, p, _, _ in rows]) for k in RANGES}
    flops, nbytes = costs([r[0] for r in rows], params, [r[2] for r in rows], kv_dtypes=[r[3] for r in rows])
    want = np.array([count_cost(op, p, dt, kv) for op, p, dt, kv in rows])
    np.testing.assert_array_equal(flops, want[:, 0])
    np.testing.assert_array_equal(nbytes, want[:, 1])


def _draw(op: str, rng) -> dict:
    ranges = {**RANGES, **(NETWORK_RANGES if OPS[op].family == "network" else {})}
    p = {name: int(rng.integers(ranges[name][0], ranges[name][1] + 1)) for name in OPS[op].params}
    return _valid(op, p, lambda lo, hi: int(rng.integers(lo, hi + 1)), lambda xs: xs[rng.integers(len(xs))])


def test_huge_shapes_cost_without_overflow():
    """10^7-wide GEMMs: 2e21 FLOPs (beyond int64) come out as floats, not wrapped integers."""
    p = {k: np.array([1e7]) for k in ("m", "n", "k")}
    flops, nbytes = op_costs("matmul", p, "float16")
    assert flops[0] == 2e21 and nbytes[0] == 3 * 1e14 * 2


@pytest.mark.parametrize(
    "params,msg",
    [
        ({"m": 10**12, "n": 10**12, "k": 1}, r"^matmul output 10\^12x10\^12 = 1\.0e\+24 elements is beyond int64$"),
        (
            {"m": 3 * 10**9, "n": 3 * 10**9, "k": 1},
            r"^matmul output 3000000000x3000000000 float32 = 3\.6e\+19 bytes is "
            r"beyond int64$",
        ),
        ({"m": 10**23, "n": 1, "k": 1}, r"^op 'matmul': shape parameter 'm' = 1e\+23 is beyond int64"),
        ({"m": 2**63, "n": 1, "k": 1}, r"^op 'matmul': shape parameter 'm' = 9\.22e\+18 is beyond int64"),
        ({"m": float("inf"), "n": 1, "k": 1}, r"^op 'matmul': shape parameter 'm' must be a finite integer, got inf$"),
        ({"m": True, "n": 1, "k": 1}, r"^op 'matmul': shape parameter 'm' must be an integer, got True \(a boolean\)$"),
        ({"m": np.bool_(False), "n": 1, "k": 1}, r"must be an integer, got False \(a boolean\)$"),
        ({"m": "true", "n": 1, "k": 1}, r"must be an integer, got 'true'$"),
        ({"m": 2.5, "n": 1, "k": 1}, r"must be an integer, got 2\.5$"),
        ({"m": "x" * 10**6, "n": 1, "k": 1}, r"must be an integer, got 'x{200}'\.\.\. \(1000000 characters\)$"),
        ({"m": [1, 2], "n": 1, "k": 1}, r"must be an integer, got \[1, 2\]$"),
    ],
)
def test_validate_refuses_in_one_line(params, msg):
    with pytest.raises(WorkloadError) as info:
        validate("matmul", params)
    text = str(info.value)
    assert "\n" not in text and len(text) < 300
    assert re.search(msg, text), text


def test_validate_accepts_integer_values_of_any_type_and_keeps_them_exact():
    assert validate("matmul", {"m": np.int64(4), "n": 4.0, "k": "8"}) == {"m": 4, "n": 4, "k": 8}
    assert validate("matmul", {"m": 2**60 + 1, "n": 1, "k": 1})["m"] == 2**60 + 1  # not rounded through float64
    assert validate("sdpa", dict(batch=1, heads=1, seq_len=4, head_dim=4, causal=0))["causal"] == 0


def test_network_depth_beyond_int64_channels_is_refused():
    with pytest.raises(WorkloadError, match=r"op 'cnn': the last block's width x 2\^\(depth-1\) = .* beyond int64"):
        validate("cnn", dict(batch=1, width=8, depth=70, h=32))
    with pytest.raises(WorkloadError, match=r"^mlp weights .* elements is beyond int64$"):
        validate("mlp", dict(batch=1, width=10**6, depth=10**7))


def test_messages_echo_little_and_format_dims():
    assert echo("y" * 1000) == "'" + "y" * 200 + "'... (1000 characters)"
    assert echo("a\nb") == "'a\\nb'" and echo(np.float64(1.5)) == "1.5"
    assert [fmt_dim(x) for x in (1, 4096, 1e9, 12345, 3.1e20)] == ["1", "4096", "10^9", "12345", "3.1e+20"]
    assert INT64_MAX == 2**63 - 1
