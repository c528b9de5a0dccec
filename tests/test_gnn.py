"""GNN and token-transformer cost models (models/gnn.py, models/transformer.py) and pipelines.networks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from features.encoders import GraphEncoder, TokenEncoder
from models.base import load_model
from models.gnn import GNNModel
from models.transformer import TransformerModel

# layer chains (wa-hls4ml style): small graphs without a torch-mlir export, runtime ~ total MACs
CHAINS = [[{"op": "dense", "d_in": d, "d_out": d, "precision": 16, "reuse_factor": 1}] * k
          for d in (8, 16, 32, 64) for k in (1, 2, 3)]
Y = np.array([1e-3 * len(c) * c[0]["d_in"] ** 2 for c in CHAINS])


def _graphs():
    return [GraphEncoder().encode(c) for c in CHAINS]


def _two_copies(g):
    """A graph made of two disjoint copies of ``g``."""
    from torch_geometric.data import Data

    n = g.num_nodes
    return Data(x=torch.cat([g.x, g.x]), edge_index=torch.cat([g.edge_index, g.edge_index + n], dim=1),
                edge_attr=torch.cat([g.edge_attr, g.edge_attr]), u=g.u, num_nodes=2 * n)


def test_additive_readout_is_structural_before_and_after_training(tmp_path):
    graphs = _graphs()
    model = GNNModel(hidden=16, layers=2, epochs=0)
    model.fit(graphs, Y)  # epochs=0: initialised (normalisation, scale) but untrained
    for m in (model, GNNModel(hidden=16, layers=2, epochs=5).fit(graphs, Y)):
        g = graphs[4]
        one, two = m.predict([g, _two_copies(g)])
        assert two == pytest.approx(2 * one, rel=1e-5)
        assert m.node_costs(g).sum() == pytest.approx(one, rel=1e-5)
        assert np.all(m.node_costs(g) > 0)


def test_gnn_fit_predict_save_load(tmp_path):
    graphs = _graphs()
    model = GNNModel(hidden=32, layers=2, epochs=200, lr=1e-2, batch_size=12).fit(graphs, Y)
    pred = model.predict(graphs)
    assert pred.shape == (len(graphs),) and np.all(pred > 0)
    ape = np.abs(pred - Y) / Y
    assert np.median(ape) < 0.5, ape  # learns a 64x runtime range on its training set
    # deeper chain of the same width predicts more (additive in nodes)
    assert pred[2] > pred[0] and pred[11] > pred[9]
    loaded = load_model(model.save(tmp_path / "gnn"))
    np.testing.assert_allclose(loaded.predict(graphs), pred, rtol=1e-6)


def test_gnn_bad_input():
    with pytest.raises(TypeError, match="torch_geometric"):
        GNNModel().fit([[1, 2]], [1.0])
    with pytest.raises(ValueError, match="> 0"):
        GNNModel().fit(_graphs()[:2], [1.0, -1.0])
    with pytest.raises(RuntimeError, match="not fitted"):
        GNNModel().predict(_graphs()[:1])


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
    import subprocess
    import sys

    import mlflow

    out = subprocess.run([sys.executable, "-m", "pipelines.networks", "tiny=true", f"paths.output_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for name in ("held_out_mlp", "held_out_cnn", "held_out_transformer", "deeper", "gnn", "xgb_layer_sum"):
        assert name in out.stdout
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["costmodel-networks"])
    assert len(runs) == 1
    assert np.isfinite(runs["metrics.deeper/gnn/mape"].iloc[0])
