"""GNN and token-transformer cost models (models/gnn.py, models/transformer.py) and pipelines.networks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from features.encoders import NODE_FEATURES, OP_NAME_FEATURES, GraphEncoder, TokenEncoder
from models.base import load_model
from models.gnn import GNNModel, anchor_fit
from models.transformer import TransformerModel

# layer chains (wa-hls4ml style): small graphs without a torch-mlir export, runtime ~ total MACs
CHAINS = [
    [{"op": "dense", "d_in": d, "d_out": d, "precision": 16, "reuse_factor": 1}] * k
    for d in (8, 16, 32, 64)
    for k in (1, 2, 3)
]
Y = np.array([1e-3 * len(c) * c[0]["d_in"] ** 2 for c in CHAINS])


def _graphs():
    return [GraphEncoder().encode(c) for c in CHAINS]


def _two_copies(g):
    """A graph made of two disjoint copies of ``g``."""
    from torch_geometric.data import Data

    n = g.num_nodes
    return Data(
        x=torch.cat([g.x, g.x]),
        edge_index=torch.cat([g.edge_index, g.edge_index + n], dim=1),
        edge_attr=torch.cat([g.edge_attr, g.edge_attr]),
        u=g.u,
        roofline_ms=torch.cat([g.roofline_ms] * 2),
        kernel=torch.cat([g.kernel] * 2),
        num_nodes=2 * n,
    )


@pytest.mark.parametrize("conv,readout", [("sage", "anchored"), ("gatv2", "anchored"), ("sage", "free")])
def test_additive_readout_is_structural_before_and_after_training(conv, readout):
    graphs = _graphs()
    kw = dict(hidden=16, layers=2, conv=conv, readout=readout, heads=2)
    model = GNNModel(**kw, epochs=0)
    model.fit(graphs, Y)  # epochs=0: initialised (normalisation, scale) but untrained
    for m in (model, GNNModel(**kw, epochs=5).fit(graphs, Y)):
        g = graphs[4]
        one, two = m.predict([g, _two_copies(g)])
        assert two == pytest.approx(2 * one, rel=1e-5)
        assert m.node_costs(g).sum() == pytest.approx(one, rel=1e-5)
        assert np.all(m.node_costs(g) > 0)


def test_untrained_anchored_gnn_is_the_calibrated_roofline():
    """epochs=0: the prediction is exactly a * sum(roofline) + b * #kernels of the relative NNLS fit."""
    graphs = _graphs()
    R = np.array([float(g.roofline_ms.sum()) for g in graphs])
    K = np.array([float(g.kernel.sum()) for g in graphs])
    a, b = anchor_fit(R, K, Y)
    assert a > 0 and b > 0
    pred = GNNModel(hidden=16, layers=2, epochs=0).fit(graphs, Y).predict(graphs)
    np.testing.assert_allclose(pred, a * R + b * K, rtol=1e-4)
    # the dense chains cost ~ their MACs, which the roofline sees: the anchor alone already fits them
    assert np.median(np.abs(pred - Y) / Y) < 0.3


def test_anchored_node_costs_are_bounded_around_the_roofline():
    """Whatever the features (here a graph far outside training), e^(a-B) R_v + e^(b-B) K_v <= c_v <= e^(a+B) R_v +
    e^(b+B) K_v."""
    graphs = _graphs()
    model = GNNModel(hidden=16, layers=2, epochs=10, bound=1.5).fit(graphs, Y)
    g = graphs[-1].clone()
    g.x = g.x * 1e3 + 50  # absurd inputs
    a, b = float(model.net.log_scale.detach().exp()), float(model.net.log_overhead.detach().exp())
    c = model.node_costs(g)
    R, K = g.roofline_ms.numpy(), g.kernel.numpy()
    assert np.all(c <= (a * R + b * K) * np.exp(1.5) * (1 + 1e-5))
    assert np.all(c >= (a * R + b * K) * np.exp(-1.5) * (1 - 1e-5))


@pytest.mark.parametrize("conv", ["sage", "gatv2"])
def test_gnn_fit_predict_save_load(tmp_path, conv):
    """Targets with a size effect the roofline does not have (layers of width <= 16 run 4x slower than
    their bytes say, then flat): the anchor alone cannot fit them, the learned correction must."""
    graphs = _graphs()
    widths = np.array([c[0]["d_in"] for c in CHAINS])
    y = Y * np.where(widths <= 16, 4.0, 1.0)
    anchor = GNNModel(hidden=32, layers=2, epochs=0, conv=conv).fit(graphs, y).predict(graphs)
    model = GNNModel(hidden=32, layers=2, epochs=60, lr=1e-2, batch_size=12, conv=conv).fit(graphs, y)
    pred = model.predict(graphs)
    assert pred.shape == (len(graphs),) and np.all(pred > 0)
    log_mse = lambda p: float(np.mean(np.log(p / y) ** 2))  # noqa: E731
    assert log_mse(pred) < 0.5 * log_mse(anchor), (log_mse(pred), log_mse(anchor))
    assert np.median(np.abs(pred - y) / y) < 0.25
    # deeper chain of the same width predicts more (additive in nodes)
    assert pred[2] > pred[0] and pred[11] > pred[9]
    loaded = load_model(model.save(tmp_path / "gnn"))
    np.testing.assert_allclose(loaded.predict(graphs), pred, rtol=1e-6)
    with pytest.raises(ValueError, match="node features"):
        loaded.predict([GraphEncoder(op_names=False).encode(CHAINS[0])])


def test_gnn_bad_input():
    with pytest.raises(TypeError, match="torch_geometric"):
        GNNModel().fit([[1, 2]], [1.0])
    with pytest.raises(ValueError, match="> 0"):
        GNNModel().fit(_graphs()[:2], [1.0, -1.0])
    with pytest.raises(RuntimeError, match="not fitted"):
        GNNModel().predict(_graphs()[:1])
    with pytest.raises(ValueError, match="conv must be"):  # parameters are checked at fit (__init__ only stores)
        GNNModel(conv="gcn").fit(_graphs()[:2], [1.0, 2.0])
    with pytest.raises(ValueError, match="readout must be"):
        GNNModel(readout="mean").fit(_graphs()[:2], [1.0, 2.0])
    g = _graphs()[0]
    del g.roofline_ms
    with pytest.raises(ValueError, match="without roofline_ms"):
        GNNModel().fit([g], [1.0])


NET_SHAPES = [
    ("mlp", dict(batch=8, width=64, depth=2)),
    ("cnn", dict(batch=2, width=8, depth=2, h=16)),
    ("resnet", dict(batch=2, width=8, depth=1, h=16)),
    ("gated_mlp", dict(batch=4, width=32, depth=2)),
    ("transformer", dict(batch=2, seq_len=16, width=32, heads=2, depth=1)),
]


@pytest.mark.parametrize("op,params", NET_SHAPES)
def test_mlir_contraction_flops_equal_torch_flop_counter(op, params):
    """Iteration space x body arithmetic, read off the exported MLIR alone, gives the FLOPs that torch's
    FlopCounterMode counts for the network (it counts matmuls, convs and attention: the contractions)."""
    from data.workloads import count_cost
    from features.mlir.export import export_workload
    from features.mlir.graph import node_costs, parse_mlir

    costs = node_costs(parse_mlir(export_workload(op, params, "float32")))
    flops = sum(c.flops for c in costs if c.op_class == "contraction")
    assert flops == count_cost(op, params, "float32")[0]
    assert all(c.bytes == 0 for c in costs if c.op_class in ("view_constant", "scalar_body", "control"))
    assert sum(c.op_class == "contraction" for c in costs) > 0


def test_launch_kernels_fusion_on_real_mlir():
    """fusion=True counts what a fusing runtime launches: per MLP layer one GEMM and one fused bias + ReLU (the
    weight transpose and the accumulator fill fold away); a LayerNorm's ~18 linalg ops become a few kernels."""
    from data.hardware import HardwareRegistry
    from features.encoders import GraphEncoder
    from features.mlir.export import export_workload
    from features.mlir.graph import launch_kernels, node_costs, parse_mlir

    for depth in (1, 3):
        g = parse_mlir(export_workload("mlp", dict(batch=8, width=64, depth=depth), "float32"))
        fused = launch_kernels(g, fusion=True)
        names = [g.nodes[i].name for i, k in enumerate(fused) if k]
        assert names == ["linalg.matmul", "linalg.generic"] * depth
        unfused = launch_kernels(g)  # every working node: also the transposes and fills
        assert unfused == [float(c.op_class not in ("view_constant", "control", "scalar_body")) for c in node_costs(g)]
        assert sum(unfused) > sum(fused)
    ln = parse_mlir(export_workload("layernorm", dict(m=64, n=128), "float32"))
    reductions = sum(c.op_class == "reduction" for c in node_costs(ln))
    assert reductions <= sum(launch_kernels(ln, fusion=True)) < sum(launch_kernels(ln)) / 2
    reg = HardwareRegistry.from_dir()
    data = GraphEncoder(reg, fusion=True).encode(ln, hardware="T4")
    assert data.kernel.tolist() == launch_kernels(ln, fusion=True)


GENERIC = """
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#map2 = affine_map<(d0, d1, d2) -> (d2)>
module {
  func.func @main(%arg0: tensor<3x5x7xf32>, %arg1: tensor<7xf32>, %init: tensor<3x5x1xf32>) -> tensor<3x5x1xf32> {
    %0 = linalg.generic {indexing_maps = [#map, #map2, #map1], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%arg0, %arg1 : tensor<3x5x7xf32>, tensor<7xf32>) outs(%init : tensor<3x5x1xf32>) {
    ^bb0(%in: f32, %w: f32, %out: f32):
      %1 = arith.mulf %in, %w : f32
      %2 = math.exp %1 : f32
      %3 = arith.addf %2, %out : f32
      linalg.yield %3 : f32
    } -> tensor<3x5x1xf32>
    return %0 : tensor<3x5x1xf32>
  }
}
"""


@pytest.mark.parametrize(
    "name,cls",
    [
        ("linalg.conv_2d_nhwc_hwcf", "contraction"),
        ("linalg.matmul", "contraction"),
        ("linalg.depthwise_conv_2d_nchw_chw", "contraction"),
        ("linalg.pooling_nchw_max", "reduction"),
        ("stablehlo.convert", "elementwise"),
        ("linalg.transpose", "data_movement"),
        ("tensor.collapse_shape", "view_constant"),
        ("func.return", "control"),
    ],
)
def test_op_classes_of_names(name, cls):
    from features.mlir.graph import OpNode, op_class

    assert op_class(OpNode(0, name, name.split(".")[0], [], [], [])) == cls


def test_generic_iteration_space_flops_bytes_and_roofline():
    from data.hardware import HardwareRegistry
    from features.encoders import GraphEncoder, roofline_ms
    from features.mlir.graph import iteration_extents, node_cost, op_class, parse_mlir

    g = parse_mlir(GENERIC)
    gen = next(n for n in g.nodes if n.name == "linalg.generic")
    assert iteration_extents(gen) == [3, 5, 7]  # d2 from arg0's last dim; the broadcast "0" result is no dim
    c = node_cost(gen, g)
    assert (c.op_class, c.iterations, c.flops) == ("contraction", 105, 3 * 105)  # mulf + exp + addf per point
    assert c.bytes == 4 * (105 + 7 + 15 + 15)  # ins + init + result
    assert op_class(next(n for n in g.nodes if n.name == "math.exp"), g) == "scalar_body"
    reg = HardwareRegistry.from_dir()
    spec = reg.get("H100-SXM")
    data = GraphEncoder(reg).encode(g, hardware="H100-SXM")
    i = gen.index
    assert float(data.roofline_ms[i]) == pytest.approx(
        roofline_ms(c.flops, c.bytes, spec.peak_flops("float32"), spec.bandwidth_bytes_s), rel=1e-6
    )
    assert data.kernel.tolist() == [float(n.name == "linalg.generic") for n in g.nodes]
    assert GraphEncoder(op_names=False).encode(g).x.shape[1] == NODE_FEATURES - OP_NAME_FEATURES


def test_transformer_fit_predict_save_load(tmp_path):
    enc = TokenEncoder()
    X = [enc.encode(c) for c in CHAINS]
    model = TransformerModel(d_model=32, heads=2, layers=1, epochs=60, lr=3e-3, batch_size=4).fit(X, Y)
    pred = model.predict(X)
    assert pred.shape == (len(X),) and np.all(pred > 0)
    # better than predicting the geometric mean for all (the bias it starts from)
    base = np.exp(np.mean(np.log(Y)))
    assert np.mean(np.abs(np.log(pred / Y))) < 0.5 * np.mean(np.abs(np.log(base / Y)))
    loaded = load_model(model.save(tmp_path / "tf"))
    np.testing.assert_allclose(loaded.predict(X), pred, rtol=1e-6)
    with pytest.raises(ValueError, match="empty"):
        model.predict([torch.zeros(0, dtype=torch.long)])


@pytest.mark.slow
def test_networks_entry_point_tiny(tmp_path):
    """The real entry point: measure tiny networks on this CPU, export MLIR, fit, score, log to MLflow."""
    import mlflow

    from tests.conftest import run_entry

    out = run_entry("pipelines.networks", "debug=tiny_networks", out=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    for name in (
        "held_out_mlp",
        "held_out_cnn",
        "held_out_transformer",
        "deeper",
        "gnn",
        "xgb_layer_sum",
        "roofline_sum",
        "roofline_fit",
    ):
        assert name in out.stdout
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["costmodel-networks"])
    assert sorted(runs["tags.model"]) == sorted(
        [
            "gnn_residual",
            "token_transformer_residual",
            "composed",
            "gnn",
            "token_transformer",
            "xgb_layer_sum",
            "roofline_sum",
            "roofline_fit",
            "measured_layer_sum",
        ]
    )  # one run per model
    for model in ("gnn", "gnn_residual", "composed"):
        assert np.isfinite(runs.loc[runs["tags.model"] == model, "metrics.deeper/all/mape"].iloc[0])
    assert "kernel model of record" in out.stdout


# --------------------------------------------------------------------------- residual models over the composition
@pytest.fixture(scope="module")
def composed_nets(tmp_path_factory, registry):
    """Four small networks of data/networks.py exported to MLIR, on T4, their kernels and a kernel model (XGBoost,
    real) fitted on a kernel table whose runtimes are a floor + roofline (no measurement needed to test algebra)."""
    import pandas as pd

    from data.workloads import count_cost
    from features.composed import ComposedGraphEncoder, ComposedTokenEncoder
    from features.mlir.export import export_workload
    from features.tabular import TabularFeaturizer
    from models.tree import XGBoostModel

    rng = np.random.default_rng(0)
    rows = []
    for op in ("matmul", "add", "gelu", "sum", "max", "copy", "conv2d", "bmm", "softmax"):
        for _ in range(12):
            if op == "matmul":
                p = {k: int(rng.integers(1, 512)) for k in ("m", "n", "k")}
            elif op == "bmm":
                p = {"batch": int(rng.integers(1, 8)), **{k: int(rng.integers(1, 64)) for k in ("m", "n", "k")}}
            elif op == "conv2d":
                p = dict(batch=2, c_in=int(rng.integers(1, 16)), c_out=8, h=16, w=16, kernel=3, stride=1, padding=1)
            else:
                p = {"m": int(rng.integers(1, 512)), "n": int(rng.integers(1, 512))}
            f, b = count_cost(op, p, "float32")
            rows.append({"op": op, "dtype": "float32", "hardware": "T4", **p, "runtime_ms": 0.005 + f / 8e9 + b / 3e8})
    rows = pd.DataFrame(rows)
    path = tmp_path_factory.mktemp("kernel") / "km"
    XGBoostModel(n_estimators=30, n_jobs=1).fit(
        TabularFeaturizer(registry).transform(rows), rows["runtime_ms"].to_numpy()
    ).save(path)
    nets = [
        ("mlp", dict(batch=4, width=16, depth=1)),
        ("mlp", dict(batch=4, width=32, depth=2)),
        ("cnn", dict(batch=2, width=8, depth=1, h=16)),
        ("transformer", dict(batch=1, seq_len=8, width=32, heads=2, depth=1)),
    ]
    df = pd.DataFrame({"mlir": [export_workload(o, p) for o, p in nets], "hardware": "T4"})
    return {
        "km": str(path),
        "graphs": ComposedGraphEncoder(registry, op_names=False).transform(df),
        "tokens": ComposedTokenEncoder(registry).transform(df),
        "y": np.array([0.05, 0.1, 0.08, 0.3]),
    }


def test_residual_gnn_falls_back_to_the_composition(composed_nets, tmp_path):
    from models.gnn import ComposedNetworkModel, ResidualGNNModel

    X, y, km = composed_nets["graphs"], composed_nets["y"], composed_nets["km"]
    assert [len(g.kernels) for g in X] == [3, 6, 6, 53] and all(g.hw_kind == "gpu" for g in X)
    base = ComposedNetworkModel(km).fit(X[:3], y[:3])
    untrained = ResidualGNNModel(km, epochs=0).fit(X[:3], y[:3])  # an untrained model IS the composition
    np.testing.assert_allclose(untrained.predict(X), base.predict(X), rtol=1e-5)
    model = ResidualGNNModel(km, epochs=8, hidden=16, heads=2, bound=0.5).fit(X[:3], y[:3])
    composed = model.composed(X)
    np.testing.assert_allclose(composed, base.predict(X), rtol=1e-9)
    ratio = model.predict(X) / composed
    assert np.all(np.abs(np.log(ratio)) < 0.5) and not np.allclose(ratio, 1.0)  # learned, and bounded
    loaded = load_model(model.save(tmp_path / "res"))
    np.testing.assert_allclose(loaded.predict(X), model.predict(X), rtol=1e-6)
    model.net.zero()  # the learned part at zero: exactly the composition
    np.testing.assert_allclose(model.predict(X), composed, rtol=1e-5)
    # op kinds no training graph had get no correction of their own (the transformer's reductions here)
    seen = {int(k) for g in X[:3] for k in g.kind}
    assert set(np.flatnonzero(model.net.seen.numpy())) == seen
    with pytest.raises(ValueError, match="needs kernel_model"):
        ResidualGNNModel(None, epochs=0).fit(X[:3], y[:3])
    with pytest.raises(ValueError, match="carries no kernels"):
        ComposedNetworkModel(km).fit([GraphEncoder().encode(c) for c in CHAINS[:2]], Y[:2])


def test_residual_token_transformer_falls_back_to_the_composition(composed_nets, tmp_path):
    from models.gnn import ComposedNetworkModel

    X, y, km = composed_nets["tokens"], composed_nets["y"], composed_nets["km"]
    base = ComposedNetworkModel(km).fit(X[:3], y[:3]).predict(X)
    model = TransformerModel(residual=True, kernel_model=km, d_model=16, heads=2, layers=1, epochs=0).fit(X[:3], y[:3])
    np.testing.assert_allclose(model.predict(X), base, rtol=1e-6)  # its output layer starts at zero
    model = TransformerModel(residual=True, kernel_model=km, d_model=16, heads=2, layers=1, epochs=10, bound=0.3).fit(
        X[:3], y[:3]
    )
    assert np.all(np.abs(np.log(model.predict(X) / base)) < 0.3)
    loaded = load_model(model.save(tmp_path / "tf"))
    np.testing.assert_allclose(loaded.predict(X), model.predict(X), rtol=1e-6)
