"""The op registry (data/ops.py): every optional shape parameter of every op moves what is costed of it (FLOPs or
bytes, and the physics time), every dtype an op declares builds, and a dtype a GPU has no units for is refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data.costs import costs
from data.hardware import HardwareRegistry, HardwareSpec
from data.ops import DTYPE_INFO, KV_DTYPES, OPS, experts_touched
from features.physics import FAMILIES, PhysicsFeaturizer
from features.tabular import FeatureError, TabularFeaturizer
from tests.test_costs import _draw, _dtype_valid

# a value other than the default an optional parameter can take on the shapes _draw gives: per parameter, from a
# valid drawn shape, the new value (None: none exists for this shape)
OTHER = {
    "groups": lambda p: p["c_in"] if p["c_in"] > 1 and p["c_out"] % p["c_in"] == 0 else None,
    "dilation": lambda p: (
        2 if p["kernel"] > 1 and min(p["h"], p["w"]) + 2 * p["padding"] >= 2 * (p["kernel"] - 1) + 1 else None
    ),
    "kv_len": lambda p: p["seq_len"] + 64,
    "num_kv_heads": lambda p: 1 if p["heads"] > 1 else None,
    "tp": lambda p: 2 if p["n"] % 2 == 0 else None,
    "ep": lambda p: 2 if p["experts"] % 2 == 0 else None,
}


def _registry() -> HardwareRegistry:
    """The spec registry with the H200's NVLink at round numbers (the tests' arithmetic)."""
    registry = HardwareRegistry.from_dir()
    h200 = registry.get("H200-SXM").to_dict()
    h200["interconnect"] = {"kind": "nvlink4", "bandwidth_gbs": 450, "latency_us": 1.0, "gpus_per_node": 8}
    registry.add(HardwareSpec.from_dict(h200))
    return registry


def test_every_optional_parameter_has_a_value_that_moves_it():
    missing = sorted({name for op in OPS.values() for name, _ in op.optional} - set(OTHER))
    assert not missing, f"optional parameters without a moving value in tests/test_ops.py OTHER: {missing}"


@pytest.mark.parametrize("op", [op for op, spec in OPS.items() if spec.optional])
def test_every_optional_parameter_moves_the_cost_and_the_physics_time(op):
    """Set to another value, each optional parameter changes the FLOPs or bytes (the registry's closed forms) on some
    shapes, and wherever it does the physics featurizer's compute or memory time moves too: a parameter a featurizer
    drops fails here."""
    rng = np.random.default_rng(0)
    featurizer = PhysicsFeaturizer(_registry()) if OPS[op].family in FAMILIES else None
    moved = {name: 0 for name, _ in OPS[op].optional}
    for _ in range(40):
        drawn = _draw(op, rng)
        for name, default in OPS[op].optional:
            base = {**drawn, name: drawn[default] if isinstance(default, str) else default}
            value = OTHER[name](base)
            if value is None:
                continue
            changed = {**base, name: value}
            if op == "conv2d" and name == "groups":
                changed["c_out"] = base["c_out"]
            rows = pd.DataFrame([base, changed]).assign(op=op, dtype="float16", hardware="H200-SXM")
            params = {k: rows[k].to_numpy(float) for k in OPS[op].names if k in rows}
            flops, nbytes = costs([op, op], params, ["float16", "float16"])
            if (flops[0], nbytes[0]) == (flops[1], nbytes[1]):  # e.g. a dilation a stride rounds away
                continue
            if featurizer is not None:
                times = featurizer.transform(rows)[["compute_ms", "memory_ms", "comm_ms"]].to_numpy()
                assert (times[0] != times[1]).any(), f"{op}: {name} {base} -> {value} moved no physics time"
            moved[name] += 1
    assert all(moved.values()), f"{op}: parameters never exercised: {[k for k, v in moved.items() if not v]}"


@pytest.mark.parametrize("op", list(OPS))
def test_every_dtype_an_op_declares_builds_and_counts(op):
    from data.workloads import count_cost

    rng = np.random.default_rng(1)
    for dtype in OPS[op].dtypes:
        p = _dtype_valid(op, _draw(op, rng), dtype)
        flops, nbytes = count_cost(op, p, dtype)
        assert flops >= 0 and nbytes > 0


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(kv=st.sampled_from(KV_DTYPES), batch=st.integers(1, 64), kv_len=st.integers(1, 1 << 17))
def test_a_decode_reads_its_cache_in_its_kv_dtype(kv, batch, kv_len):
    p = dict(batch=batch, heads=32, num_kv_heads=8, seq_len=1, kv_len=kv_len, head_dim=128, causal=0)
    params = {k: np.array([float(v)]) for k, v in p.items()}
    _, nbytes = costs(["sdpa"], params, ["bfloat16"], kv_dtypes=[kv])
    cache = 2 * batch * 8 * kv_len * 128 * DTYPE_INFO[kv].act
    assert nbytes[0] == cache + 2 * batch * 32 * 128 * 2


def test_a_decode_costs_its_cache_and_a_depthwise_conv_its_groups():
    f = PhysicsFeaturizer(_registry())
    decode = [
        dict(op="sdpa", batch=32, heads=64, num_kv_heads=8, seq_len=1, kv_len=kv, head_dim=128, causal=0)
        for kv in (1024, 8192, 65536)
    ]
    t = f.transform(pd.DataFrame(decode).assign(hardware="H200-SXM", dtype="bfloat16"))["physics_ms"].to_numpy()
    assert t[0] < t[1] < t[2] and t[2] / t[1] == pytest.approx(8, rel=0.05)  # the cache over the bandwidth
    kv_bytes = 2 * 32 * 8 * 65536 * 128 * 2
    assert t[2] == pytest.approx(kv_bytes / 4.8e12 * 1e3, rel=0.01)
    fp8 = f.transform(
        pd.DataFrame([{**decode[2], "kv_dtype": "float8_e4m3fn", "dtype": "bfloat16"}]).assign(hardware="H200-SXM")
    )
    assert fp8["physics_ms"].iloc[0] == pytest.approx(t[2] / 2, rel=0.01)
    conv = dict(op="conv2d", batch=8, c_in=256, c_out=256, h=56, w=56, kernel=3, stride=1, padding=1)
    X = f.transform(pd.DataFrame([conv, {**conv, "groups": 256}]).assign(hardware="H200-SXM"))
    assert X["flops"].iloc[1] == X["flops"].iloc[0] / 256 and X["physics_ms"].iloc[1] < X["physics_ms"].iloc[0] / 4


def test_gqa_groups_query_heads_over_a_shared_cache():
    f = PhysicsFeaturizer(_registry())
    row = dict(op="sdpa", batch=8, heads=32, seq_len=1, kv_len=4096, head_dim=128, causal=0)
    X = f.transform(pd.DataFrame([row, {**row, "num_kv_heads": 8}]).assign(hardware="H200-SXM", dtype="bfloat16"))
    assert X["bytes"].iloc[1] < X["bytes"].iloc[0] / 3.9 and X["flops"].iloc[1] == X["flops"].iloc[0]
    assert X["log2_kv_group"].tolist() == [0.0, 2.0]


def test_fp8_gemms_run_at_the_fp8_rate_where_a_gpu_has_one():
    registry = _registry()
    h200 = registry.get("H200-SXM").to_dict()
    h200["peak_tflops"] = {**h200["peak_tflops"], "fp8": 1978.9}
    registry.add(HardwareSpec.from_dict(h200))
    big = dict(op="linear", m=8192, n=8192, k=8192, hardware="H200-SXM")
    X = PhysicsFeaturizer(registry).transform(
        pd.DataFrame([big | {"dtype": "bfloat16"}, big | {"dtype": "float8_e4m3fn"}])
    )
    assert X["compute_ms"].iloc[1] == pytest.approx(X["compute_ms"].iloc[0] / 2, rel=0.01)
    assert X["mode_tensor8"].tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    "hardware,dtype,msg",
    [
        ("T4", "bfloat16", "hardware 'T4' has no bfloat16 units"),
        ("A100-PCIe-40GB", "float8_e4m3fn", "hardware 'A100-PCIe-40GB' has no fp8 units"),
        ("V100-SXM2-16GB", "int4_wo", "hardware 'V100-SXM2-16GB' has no bfloat16 units"),
    ],
)
def test_a_dtype_a_gpu_has_no_units_for_is_one_clear_error(hardware, dtype, msg):
    rows = pd.DataFrame([dict(op="linear", m=64, n=4096, k=4096, hardware=hardware, dtype=dtype)])
    for featurizer in (TabularFeaturizer(HardwareRegistry.from_dir()), PhysicsFeaturizer(HardwareRegistry.from_dir())):
        with pytest.raises(FeatureError, match=f"^row 0: {msg}"):
            featurizer.transform(rows)


def test_an_op_refuses_a_dtype_it_has_no_kernel_for():
    rows = pd.DataFrame([dict(op="layernorm", m=64, n=4096, hardware="H200-SXM", dtype="float8_e4m3fn")])
    with pytest.raises(FeatureError, match="op 'layernorm' has no float8_e4m3fn kernel"):
        TabularFeaturizer(HardwareRegistry.from_dir()).transform(rows)


def test_collectives_move_with_message_gpus_and_link_and_need_an_interconnect():
    f = PhysicsFeaturizer(_registry())
    rows = pd.DataFrame(
        [dict(op="all_reduce", n=n, gpus=g) for n, g in ((1 << 20, 2), (1 << 24, 2), (1 << 24, 8))]
        + [dict(op="all_gather", n=1 << 24, gpus=8)]
    ).assign(hardware="H200-SXM", dtype="bfloat16")
    X = f.transform(rows)
    t = X["comm_ms"].to_numpy()
    assert t[0] < t[1] < t[2] and t[3] < t[2]  # bytes, ring steps; an all-gather sends half an all-reduce's
    wire = 2 * 7 / 8 * (1 << 24) * 2  # an 8-GPU ring all-reduce of 16 Mi bf16 elements
    assert t[2] == pytest.approx((wire / 450e9 + 14 * 1e-6) * 1e3, rel=1e-6)
    assert (X["physics_ms"] >= X["comm_ms"]).all() and X["log2_gpus"].tolist() == [1, 1, 3, 3]
    with pytest.raises(FeatureError, match="hardware 'T4' has no interconnect in its spec"):
        f.transform(rows.assign(hardware="T4", dtype="float16"))


def test_a_pcie_node_shares_its_fabric_beyond_two_gpus():
    registry = _registry()
    l4 = registry.get("L4").to_dict()
    l4["interconnect"] = {"kind": "pcie4", "bandwidth_gbs": 32, "latency_us": 0, "gpus_per_node": 8}
    registry.add(HardwareSpec.from_dict(l4))
    rows = pd.DataFrame([dict(op="all_to_all", n=1 << 26, gpus=g) for g in (2, 4)]).assign(
        hardware="L4", dtype="bfloat16"
    )
    t = PhysicsFeaturizer(registry).transform(rows)["comm_ms"].to_numpy()
    from features.physics import laws

    # (g - 1) / g of the message per GPU: 1/2 at 2 GPUs, 3/4 at 4, over (2 / g)^exponent of the link at 4
    assert t[1] / t[0] == pytest.approx(1.5 / 0.5 ** laws()["collective"]["pcie_fabric_exponent"], rel=1e-9)


def test_moe_costs_the_experts_its_tokens_touch():
    f = PhysicsFeaturizer(_registry())
    moe = dict(op="moe", k=4096, n=14336, experts=8, topk=2, hardware="H200-SXM", dtype="bfloat16")
    X = f.transform(pd.DataFrame([moe | {"m": 1}, moe | {"m": 2}, moe | {"m": 4096}, moe | {"m": 4096, "ep": 2}]))
    nbytes, flops = X["bytes"].to_numpy(), X["flops"].to_numpy()
    expert = 3 * 4096 * 14336 * 2
    # 2 and 4 token-expert pairs routed at random over 8 experts reach 8 (1 - (7/8)^A) of them: 2 and 3
    assert [experts_touched(8, a) for a in (2, 4, 64)] == [2, 3, 8]
    assert nbytes[0] == pytest.approx(2 * expert, rel=0.01) and nbytes[1] == pytest.approx(3 * expert, rel=0.01)
    assert flops[2] == 6 * 4096 * 2 * 4096 * 14336 and flops[3] == flops[2] / 2
    assert X["physics_ms"].iloc[0] < X["physics_ms"].iloc[1] < X["physics_ms"].iloc[2]
