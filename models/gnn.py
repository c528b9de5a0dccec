"""GraphSAGE cost model over the MLIR op graph with an additive per-node readout (PyG + Lightning).

``X`` is a list of ``torch_geometric.data.Data`` from :class:`features.encoders.GraphEncoder` (node
features ``x`` [N, F], ``edge_index``, graph-level hardware vector ``u`` [1, H]); ``y`` positive runtimes.

Model (per graph):

    h_v^0 = MLP([norm(x_v), norm(u)])                      hardware joins every node's input
    h_v^l = h_v^{l-1} + ReLU(SAGEConv(h^{l-1})_v)          mean-aggregating GraphSAGE, residual
    c_v   = softplus(w . h_v^L + b)                         per-node cost, > 0
    runtime = exp(s) * sum_v c_v                            additive readout in RUNTIME space

The readout is a sum of positive per-node costs (not a mean, and not in log space), so a graph made of
two disjoint copies of a subgraph predicts exactly twice one copy, and a deeper network predicts more
than a shallower one: the structural prior that lets it extrapolate in depth (cf. the per-op additive
cost in TVM's / TpuGraphs' learned cost models). ``s`` is a learned log-scale initialised from the training
data (median runtime per node). The loss is MSE on ``log(runtime)``, as for the other models.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from models.base import CostModel, check_targets


def _check_graphs(X, y=None):
    from torch_geometric.data import Data

    if not isinstance(X, (list, tuple)) or not all(isinstance(g, Data) for g in X):
        raise TypeError("X must be a list of torch_geometric Data graphs (features.encoders.GraphEncoder)")
    if any(g.num_nodes == 0 for g in X):
        raise ValueError("X holds a graph with no nodes")
    return X, (None if y is None else check_targets(y, len(X)))


def _net(n_node: int, n_hw: int, hidden: int, layers: int):
    import torch
    from torch import nn
    from torch_geometric.nn import SAGEConv

    class AdditiveSAGE(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("x_mean", torch.zeros(n_node))
            self.register_buffer("x_std", torch.ones(n_node))
            self.register_buffer("u_mean", torch.zeros(n_hw))
            self.register_buffer("u_std", torch.ones(n_hw))
            self.embed = nn.Sequential(nn.Linear(n_node + n_hw, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            self.convs = nn.ModuleList(SAGEConv(hidden, hidden, aggr="mean") for _ in range(layers))
            self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
            self.log_scale = nn.Parameter(torch.zeros(()))

        def node_costs(self, x, edge_index, u, batch):
            xn = (x - self.x_mean) / self.x_std
            un = ((u - self.u_mean) / self.u_std)[batch]
            h = self.embed(torch.cat([xn, un], dim=1))
            for conv in self.convs:
                h = h + torch.relu(conv(h, edge_index))
            return torch.nn.functional.softplus(self.head(h).squeeze(-1)) * torch.exp(self.log_scale)

        def forward(self, data):
            from torch_geometric.utils import scatter

            c = self.node_costs(data.x, data.edge_index, data.u, data.batch)
            return scatter(c, data.batch, dim=0, dim_size=data.num_graphs, reduce="sum")

    return AdditiveSAGE()


def _lightning_module(net, lr: float, weight_decay: float):
    import lightning as L
    import torch

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net

        def training_step(self, batch, _idx):
            pred = self.net(batch)
            loss = torch.mean((torch.log(pred) - torch.log(batch.y)) ** 2)
            self.log("train_loss", loss, batch_size=batch.num_graphs, prog_bar=False)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)

    return Module()


def trainer(max_epochs: int, seed: int):
    """A quiet CPU Lightning trainer (no logger, checkpoints or progress bar)."""
    import logging
    import warnings

    import lightning as L

    for name in ("lightning", "lightning.pytorch", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"lightning\.")
    warnings.filterwarnings("ignore", ".*(does not have many workers|LeafSpec|number of training batches).*")
    L.seed_everything(seed, workers=True, verbose=False)
    return L.Trainer(max_epochs=max_epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, deterministic=True)


class GNNModel(CostModel):
    """GraphSAGE + additive readout; ``X`` = list of PyG graphs (see module docstring)."""

    name = "gnn"

    def __init__(self, hidden: int = 64, layers: int = 3, epochs: int = 200, lr: float = 3e-3,
                 weight_decay: float = 1e-4, batch_size: int = 32, seed: int = 0):
        self.hidden = hidden
        self.layers = layers
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.seed = seed

    def _build(self, n_node: int, n_hw: int):
        import torch

        torch.manual_seed(self.seed)
        self.dims_ = (n_node, n_hw)
        self.net_ = _net(n_node, n_hw, self.hidden, self.layers)
        return self.net_

    def fit(self, X, y):
        import torch
        from torch_geometric.loader import DataLoader

        X, y = _check_graphs(X, y)
        net = self._build(X[0].x.shape[1], X[0].u.shape[1])
        xs, us = torch.cat([g.x for g in X]), torch.cat([g.u for g in X])
        net.x_mean.copy_(xs.mean(0)), net.x_std.copy_(xs.std(0).clamp_min(1e-3))
        net.u_mean.copy_(us.mean(0)), net.u_std.copy_(us.std(0).clamp_min(1e-3) if len(X) > 1 else torch.ones_like(net.u_std))
        # start near the data: median runtime per node / softplus(0)
        per_node = np.median(y / np.array([g.num_nodes for g in X]))
        with torch.no_grad():
            net.log_scale.fill_(float(math.log(per_node / math.log(2.0))))
        data = []
        for g, t in zip(X, y):
            d = g.clone()
            d.y = torch.tensor([t], dtype=torch.float32)
            data.append(d)
        loader = DataLoader(data, batch_size=self.batch_size, shuffle=True)
        trainer(self.epochs, self.seed).fit(_lightning_module(net, self.lr, self.weight_decay), loader)
        net.eval()
        return self

    @property
    def net(self):
        if not hasattr(self, "net_"):
            raise RuntimeError("GNNModel is not fitted")
        return self.net_

    def predict(self, X) -> np.ndarray:
        import torch
        from torch_geometric.loader import DataLoader

        X, _ = _check_graphs(X)
        net = self.net
        net.eval()
        out = []
        with torch.no_grad():
            for batch in DataLoader(list(X), batch_size=max(self.batch_size, 64), shuffle=False):
                out.append(net(batch).double().numpy())
        return np.concatenate(out)

    def node_costs(self, g) -> np.ndarray:
        """Per-node predicted runtime contributions of one graph (they sum to its prediction)."""
        import torch

        with torch.no_grad():
            return self.net.node_costs(g.x, g.edge_index, g.u, torch.zeros(g.num_nodes, dtype=torch.long)).numpy()

    def _save_payload(self, path: Path) -> None:
        import torch

        torch.save(self.net.state_dict(), path / "gnn.pt")
        (path / "dims.json").write_text(json.dumps(list(self.dims_)))

    def _load_payload(self, path: Path) -> None:
        import torch

        n_node, n_hw = json.loads((path / "dims.json").read_text())
        self._build(n_node, n_hw).load_state_dict(torch.load(path / "gnn.pt", weights_only=True))
        self.net_.eval()
