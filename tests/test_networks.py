import pytest
import torch

from data.workloads import build, count_cost, family
from data.workloads import network_layers as layers

NETS = [
    ("mlp", dict(batch=8, width=64, depth=3)),
    ("cnn", dict(batch=2, width=8, depth=3, h=32)),
    ("transformer", dict(batch=2, seq_len=16, width=64, heads=4, depth=2)),
    ("resnet", dict(batch=2, width=8, depth=2, h=16)),
    ("gated_mlp", dict(batch=4, width=32, depth=2)),
]


@pytest.mark.parametrize("op,params", NETS)
def test_network_flops_equal_the_sum_of_its_layers(op, params):
    """One code path: the layers come from hooking the same module the network row runs."""
    parts = layers(op, params)
    assert family(op) == "network" and all(family(p["op"]) != "network" for p in parts)
    total = sum(count_cost(p["op"], p["params"], "float32")[0] for p in parts)
    assert total == count_cost(op, params, "float32")[0] > 0


def test_layer_shapes_follow_our_conventions():
    mlp = layers("mlp", dict(batch=8, width=64, depth=2))
    assert [l["op"] for l in mlp] == ["linear", "relu", "linear", "relu"]
    assert mlp[0]["params"] == {"m": 8, "k": 64, "n": 64}
    cnn = layers("cnn", dict(batch=2, width=8, depth=2, h=32))
    assert cnn[0] == {
        "op": "conv2d",
        "dtype": "float32",
        "params": dict(batch=2, c_in=3, c_out=8, h=32, w=32, kernel=3, stride=1, padding=1),
    }
    assert cnn[2]["params"] == dict(batch=2, c_in=8, c_out=16, h=32, w=32, kernel=3, stride=2, padding=1)
    assert cnn[-2] == {"op": "mean", "dtype": "float32", "params": {"m": 2 * 16, "n": 16 * 16}}
    assert cnn[-1]["params"] == {"m": 2, "k": 16, "n": 10}
    block = layers("transformer", dict(batch=2, seq_len=16, width=64, heads=4, depth=1), "bfloat16")
    assert [l["op"] for l in block] == [
        "layernorm",
        "linear",
        "sdpa",
        "linear",
        "add",
        "layernorm",
        "linear",
        "gelu",
        "linear",
        "add",
    ]
    assert block[1]["params"] == {"m": 32, "k": 64, "n": 192}  # qkv on batch*seq tokens
    assert block[2]["params"] == dict(batch=2, heads=4, seq_len=16, head_dim=16, causal=0)
    assert block[7]["params"] == {"m": 32, "n": 256} and all(l["dtype"] == "bfloat16" for l in block)
    res = layers("resnet", dict(batch=2, width=8, depth=1, h=16))
    assert [l["op"] for l in res] == ["conv2d", "relu", "conv2d", "relu", "conv2d", "add", "relu", "mean", "linear"]
    assert res[2]["params"] == dict(batch=2, c_in=8, c_out=8, h=16, w=16, kernel=3, stride=1, padding=1)
    assert res[5]["params"] == {"m": 2 * 8 * 16, "n": 16}  # the residual add on [2, 8, 16, 16]
    glu = layers("gated_mlp", dict(batch=4, width=32, depth=1))
    assert [l["op"] for l in glu] == ["linear", "gelu", "linear", "mul", "linear", "add"]
    assert glu[0]["params"] == {"m": 4, "k": 32, "n": 64} and glu[3]["params"] == {"m": 4, "n": 64}
    assert glu[4]["params"] == {"m": 4, "k": 64, "n": 32}


def test_network_runs_for_real_and_sdpa_matches_reference():
    fn, inputs, weights = build("transformer", dict(batch=2, seq_len=8, width=32, heads=4, depth=2), "float32")
    with torch.no_grad():
        out = fn(*inputs)
    assert out.shape == (2, 8, 32) and torch.isfinite(out).all() and len(weights) > 0
    fn, (q, k, v), _ = build("sdpa", dict(batch=1, heads=2, seq_len=5, head_dim=4, causal=1), "float32")
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    ref = torch.softmax((q @ k.transpose(-1, -2) / 2.0).masked_fill(~mask, float("-inf")), -1) @ v
    torch.testing.assert_close(fn(q, k, v), ref)
    fn, (x,), _ = build("max", {"m": 3, "n": 7}, "float32")
    torch.testing.assert_close(fn(x), x.max(dim=-1).values)


def test_non_network_cannot_be_split():
    with pytest.raises(ValueError, match="not a network"):
        layers("matmul", {"m": 2, "n": 2, "k": 2})


@pytest.mark.parametrize("name", ["elementwise", "reduction", "attention", "network"])
def test_workload_configs_draw_valid_workloads(name):
    """Every op and parameter spec in conf/collect/workload/<family>.yaml draws shapes our ops accept."""
    import numpy as np
    import yaml

    from data.sweep import _draw
    from data.workloads import OPS, validate
    from tests.conftest import ROOT

    cfg = yaml.safe_load((ROOT / "conf" / "collect" / "workload" / f"{name}.yaml").read_text())
    rng = np.random.default_rng(0)
    for op, spec in cfg["ops"].items():
        assert set(spec["params"]) == set(OPS[op].params), op
        for _ in range(5):
            validate(op, {p: _draw(s, rng) for p, s in spec["params"].items()})
