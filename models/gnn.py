"""Additive GNN cost model over the MLIR op graph, anchored on a per-node roofline (PyG + Lightning).

``X`` is a list of ``torch_geometric.data.Data`` from :class:`features.encoders.GraphEncoder` (node
features ``x`` [N, F], ``edge_index``, ``edge_attr``, graph-level hardware vector ``u`` [1, H], per-node
analytic ``roofline_ms`` [N] and ``kernel`` [N]); ``y`` positive runtimes.

Model (per graph):

    h_v^0 = MLP([clip(norm(x_v)), clip(norm(u))])          hardware joins every node's input
    h_v^l = h_v^{l-1} + ReLU(conv(h^{l-1})_v)               conv = SAGEConv (mean) | GATv2Conv; messages
                                                            along def-use and nesting edges AND their reverses
    readout = "anchored" (default):
      g_v   = B tanh(head_g(h_v) / B)                       bounded log-correction, |g_v| < B (``bound``)
      o_v   = B tanh(head_o(h_v) / B)                       bounded log-overhead factor, |o_v| < B
      c_v   = exp(a) R_v exp(g_v)  +  exp(b) K_v exp(o_v)
              R_v = roofline_v = max(FLOPs_v / peak, bytes_v / bandwidth)   (Williams et al. 2009)
              K_v = 1 if node v launches work (not a view / constant / control / scalar body op)
    readout = "free" (the earlier model, kept for comparison):
      c_v   = exp(s) softplus(head(h_v))
    runtime = sum_v c_v                                      additive readout in RUNTIME space

FLOPs_v and bytes_v are read off the MLIR itself (:func:`features.mlir.graph.node_cost`: iteration space
from ``indexing_maps`` + shapes, x arithmetic ops of the body; operand + result bytes). ``a`` and ``b``
are learned global log-scales initialised by a relative non-negative least-squares fit of
y ~ a sum R + b sum K on the training graphs (:func:`anchor_fit`), and the heads start at zero, so the
untrained model IS the calibrated roofline and training only learns a per-node correction within a
factor exp(+-B) and a per-kernel overhead within exp(b +- B); the optional penalty ``shrink`` x
mean(g_v^2 + o_v^2) over kernel nodes pulls both towards the anchor. An op kind never seen in training (a
conv when training saw only matmuls) therefore still costs about its roofline, scaled by what the
network learned for nodes that look like it (same op class, similar intensity), instead of an
unanchored number: this is what lets the model transfer to held-out architectures. Normalised inputs
are clipped to +-6, feature stds floored at 0.1, and columns constant in training (an op class or
element type no training graph has) are ignored, so unseen values cannot blow up h.

The sum readout of per-node costs follows the learned TPU cost model of Kaufman et al. (2021, "A
Learned Performance Model for Tensor Processing Units", MLSys: GNN node embeddings -> per-node
values -> sum), TpuGraphs (Phothilimthana et al. 2023) and TVM's cost model (Chen et al. 2018, per
loop-nest features + sum); the roofline anchor follows Williams, Waterman & Patterson (2009). Two
disjoint copies of a graph predict exactly twice one copy, and deeper networks predict more. The loss
is MSE on ``log(runtime)``, as for the other models.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from models.base import CostModel, check_targets
from models.trainer import trainer

STD_FLOOR = 0.1  # feature std floor: a rare one-hot column does not scale by 1000 at test time
IGNORE = 1e12  # the "std" of a column constant in training: it normalises to 0, whatever it holds later


def _scale(v):
    """Per-column normalisation scale: the std floored at STD_FLOOR, and IGNORE for columns constant in
    training (nothing was learned from them, so an op type or dtype never seen cannot move the model)."""
    std = v.std(0)
    return std.clamp_min(STD_FLOOR).masked_fill(std < 1e-6, IGNORE)


def _check_graphs(X, y=None):
    from torch_geometric.data import Data

    if not isinstance(X, (list, tuple)) or not all(isinstance(g, Data) for g in X):
        raise TypeError("X must be a list of torch_geometric Data graphs (features.encoders.GraphEncoder)")
    if any(g.num_nodes == 0 for g in X):
        raise ValueError("X holds a graph with no nodes")
    missing = [k for k in ("roofline_ms", "kernel", "u", "edge_attr") if any(getattr(g, k, None) is None for g in X)]
    if missing:
        raise ValueError(
            f"X holds graphs without {', '.join(missing)}: encode them with features.encoders.GraphEncoder"
        )
    return X, (None if y is None else check_targets(y, len(X)))


def _net(n_node: int, n_hw: int, hidden: int, layers: int, conv: str, heads: int, readout: str, bound: float):
    import torch
    from torch import nn
    from torch_geometric.nn import GATv2Conv, SAGEConv

    def make_conv():
        if conv == "sage":
            return SAGEConv(hidden, hidden, aggr="mean")
        return GATv2Conv(hidden, hidden // heads, heads=heads, concat=True, edge_dim=3)

    def head(zero: bool):
        h = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        if zero:  # start at the analytic anchor: g = 0, overhead factor exp(o) = 1
            nn.init.zeros_(h[2].weight), nn.init.zeros_(h[2].bias)
        return h

    class AdditiveGNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("x_mean", torch.zeros(n_node))
            self.register_buffer("x_std", torch.ones(n_node))
            self.register_buffer("u_mean", torch.zeros(n_hw))
            self.register_buffer("u_std", torch.ones(n_hw))
            self.embed = nn.Sequential(nn.Linear(n_node + n_hw, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            self.convs = nn.ModuleList(make_conv() for _ in range(layers))
            self.head = head(readout == "anchored")
            self.log_scale = nn.Parameter(torch.zeros(()))
            self.last_g = None
            if readout == "anchored":
                self.overhead_head = head(True)
                self.log_overhead = nn.Parameter(torch.zeros(()))

        def embed_nodes(self, x, edge_index, edge_attr, u, batch):
            xn = ((x - self.x_mean) / self.x_std).clamp(-CLIP, CLIP)
            un = ((u - self.u_mean) / self.u_std).clamp(-CLIP, CLIP)[batch]
            h = self.embed(torch.cat([xn, un], dim=1))
            # messages both ways: def -> use, parent -> body, and their reverses (flag 3)
            ei = torch.cat([edge_index, edge_index.flip(0)], dim=1)
            ea = torch.cat(
                [
                    torch.cat([edge_attr, torch.zeros_like(edge_attr[:, :1])], 1),
                    torch.cat([edge_attr, torch.ones_like(edge_attr[:, :1])], 1),
                ]
            )
            for c in self.convs:
                h = h + torch.relu(c(h, ei) if conv == "sage" else c(h, ei, ea))
            return h

        def node_costs(self, data, batch):
            h = self.embed_nodes(data.x, data.edge_index, data.edge_attr, data.u, batch)
            if readout == "free":
                return torch.nn.functional.softplus(self.head(h).squeeze(-1)) * torch.exp(self.log_scale)
            g = bound * torch.tanh(self.head(h).squeeze(-1) / bound)  # bounded log-correction
            o = bound * torch.tanh(self.overhead_head(h).squeeze(-1) / bound)  # bounded log-overhead factor
            k = data.kernel > 0
            self.last_g = torch.cat([g[k], o[k]])
            gate = torch.exp(o)
            return torch.exp(self.log_scale + g) * data.roofline_ms + torch.exp(self.log_overhead) * gate * data.kernel

        def forward(self, data):
            from torch_geometric.utils import scatter

            c = self.node_costs(data, data.batch)
            return scatter(c, data.batch, dim=0, dim_size=data.num_graphs, reduce="sum")

    return AdditiveGNN()


CLIP = 6.0  # normalised inputs are clipped to +-CLIP: an op value far outside training cannot blow up h


def anchor_fit(roofline_sum: np.ndarray, kernels: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Non-negative (a, b) minimising sum_i ((a R_i + b K_i - y_i) / y_i)^2 (relative least squares,
    ``scipy.optimize.nnls``): R = a graph's summed roofline, K = its kernel count; each floored at 1 %
    of what it would be alone, so both log-scales exist."""
    from scipy.optimize import nnls

    R, K, y = (np.asarray(v, float) for v in (roofline_sum, kernels, y))
    A = np.stack([R / y, K / y], axis=1)
    (a, b), _ = nnls(A, np.ones(len(y)))
    a0 = np.median(y / np.maximum(R, 1e-30))
    b0 = np.median(y / np.maximum(K, 1.0))
    return max(a, 1e-2 * a0), max(b, 1e-2 * b0)


def _lightning_module(net, lr: float, weight_decay: float, shrink: float = 0.0):
    import lightning as L
    import torch

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net

        def training_step(self, batch, _idx):
            pred = self.net(batch)
            loss = torch.mean((torch.log(pred) - torch.log(batch.y)) ** 2)
            if shrink and self.net.last_g is not None:  # pull the log-corrections towards the anchor (g = 0)
                loss = loss + shrink * torch.mean(self.net.last_g**2)
            self.log("train_loss", loss, batch_size=batch.num_graphs, prog_bar=False)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)

    return Module()


def _check_graph_options(conv: str, hidden: int, heads: int, bound: float) -> None:
    """The message-passing options both GNN models take: a known conv, gatv2 heads dividing hidden, a positive bound."""
    if conv not in ("sage", "gatv2"):
        raise ValueError(f"conv must be 'sage' or 'gatv2', got {conv!r}")
    if conv == "gatv2" and hidden % heads:
        raise ValueError(f"hidden {hidden} must be a multiple of heads {heads} for gatv2")
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound!r}")


class GNNModel(CostModel):
    """Additive GNN cost model; ``X`` = list of PyG graphs (see module docstring).

    ``conv``: ``sage`` (GraphSAGE, mean aggregation) or ``gatv2`` (GATv2, ``heads`` attention heads, edge
    kinds as edge features). ``readout``: ``anchored`` (roofline x bounded learned correction +
    bounded per-kernel overhead) or ``free`` (softplus per-node cost, no physics). ``bound``: the
    largest |log-correction| g of the anchored readout; ``shrink``: weight of the penalty mean(g_v^2)
    over kernel nodes added to the loss (pulls the model towards its roofline anchor)."""

    name = "gnn"

    def __init__(
        self,
        hidden: int = 64,
        layers: int = 3,
        epochs: int = 200,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        batch_size: int = 32,
        seed: int = 0,
        conv: str = "sage",
        heads: int = 4,
        readout: str = "anchored",
        bound: float = 2.0,
        shrink: float = 0.0,
    ):
        self.hidden = hidden
        self.layers = layers
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.seed = seed
        self.conv = conv
        self.heads = heads
        self.readout = readout
        self.bound = bound
        self.shrink = shrink

    def _build(self, n_node: int, n_hw: int):
        import torch

        torch.manual_seed(self.seed)
        self.dims_ = (n_node, n_hw)
        self.net_ = _net(n_node, n_hw, self.hidden, self.layers, self.conv, self.heads, self.readout, self.bound)
        return self.net_

    def fit(self, X, y):
        import torch
        from torch_geometric.loader import DataLoader

        _check_graph_options(self.conv, self.hidden, self.heads, self.bound)
        if self.readout not in ("anchored", "free"):
            raise ValueError(f"readout must be 'anchored' or 'free', got {self.readout!r}")
        X, y = _check_graphs(X, y)
        net = self._build(X[0].x.shape[1], X[0].u.shape[1])
        xs, us = torch.cat([g.x for g in X]), torch.cat([g.u for g in X])
        net.x_mean.copy_(xs.mean(0)), net.x_std.copy_(_scale(xs))
        net.u_mean.copy_(us.mean(0)), net.u_std.copy_(_scale(us) if len(X) > 1 else torch.ones_like(net.u_std))
        with torch.no_grad():
            if self.readout == "anchored":
                # start AT the calibrated roofline: y ~ a * sum roofline + b * kernel count
                a, b = anchor_fit(
                    np.array([float(g.roofline_ms.sum()) for g in X]), np.array([float(g.kernel.sum()) for g in X]), y
                )
                net.log_scale.fill_(math.log(a)), net.log_overhead.fill_(math.log(b))
            else:  # start near the data: median runtime per node / softplus(0)
                per_node = np.median(y / np.array([g.num_nodes for g in X]))
                net.log_scale.fill_(float(math.log(per_node / math.log(2.0))))
        data = []
        for g, t in zip(X, y):
            d = g.clone()
            d.y = torch.tensor([t], dtype=torch.float32)
            data.append(d)
        loader = DataLoader(data, batch_size=self.batch_size, shuffle=True)
        trainer(self.epochs, self.seed).fit(_lightning_module(net, self.lr, self.weight_decay, self.shrink), loader)
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
        widths = {int(g.x.shape[1]) for g in X}
        if widths != {self.dims_[0]}:
            raise ValueError(
                f"graphs have {sorted(widths)} node features, the model was fitted on {self.dims_[0]}: "
                "encode with the GraphEncoder settings used in training (op_names)"
            )
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
            return self.net.node_costs(g, torch.zeros(g.num_nodes, dtype=torch.long)).numpy()

    def _save_payload(self, path: Path) -> None:
        import torch

        torch.save(self.net.state_dict(), path / "gnn.pt")
        (path / "dims.json").write_text(json.dumps(list(self.dims_)))  # hyper-parameters: CostModel.save

    def _load_payload(self, path: Path) -> None:
        import torch

        n_node, n_hw = json.loads((path / "dims.json").read_text())
        self._build(n_node, n_hw).load_state_dict(torch.load(path / "gnn.pt", weights_only=True))
        self.net_.eval()


# --------------------------------------------------------------------------- analytic baselines over the same graphs
def _graph_totals(X) -> tuple[np.ndarray, np.ndarray]:
    """Per graph: the summed per-node roofline (ms) and the number of kernel nodes."""
    X, _ = _check_graphs(X)
    return (np.array([float(g.roofline_ms.sum()) for g in X]), np.array([float(g.kernel.sum()) for g in X]))


class RooflineSumModel(CostModel):
    """The analytic floor of a network: the sum over its graph's nodes of max(FLOPs / peak, bytes / bandwidth) on
    the graph's hardware (``GraphEncoder``'s ``roofline_ms``). No learning: ``fit`` only checks its input."""

    name = "roofline_sum"

    def fit(self, X, y) -> RooflineSumModel:
        _check_graphs(X, y)
        return self

    def predict(self, X) -> np.ndarray:
        return _graph_totals(X)[0]


class RooflineFitModel(CostModel):
    """``a * roofline_sum + b * kernel_count`` with (a, b) >= 0 fitted on the training networks (:func:`anchor_fit`):
    the GNN's starting point, so the GNN's learned part is judged against it."""

    name = "roofline_fit"

    def fit(self, X, y) -> RooflineFitModel:
        X, y = _check_graphs(X, y)
        self.coef_ = anchor_fit(*_graph_totals(X), y)
        return self

    def predict(self, X) -> np.ndarray:
        roof, kernels = _graph_totals(X)
        a, b = self.coef_
        return a * roof + b * kernels

    def _save_payload(self, path: Path) -> None:
        (path / "coef.json").write_text(json.dumps(list(self.coef_)))

    def _load_payload(self, path: Path) -> None:
        self.coef_ = tuple(json.loads((path / "coef.json").read_text()))


# --------------------------------------------------------------------------- residual over the composition
def kernel_items(X) -> list[dict]:
    """Per network: its kernels, their features and its hardware kind (``features.composed`` encodings)."""
    out = []
    for i, x in enumerate(X):
        get = x.get if isinstance(x, dict) else (lambda k, x=x: getattr(x, k, None))
        item = {k: get(k) for k in ("kernels", "kernel_features", "hw_kind")}
        if any(v is None for v in item.values()):
            raise ValueError(
                f"X[{i}] carries no kernels: encode the networks with features.composed "
                "(ComposedGraphEncoder / ComposedTokenEncoder)"
            )
        out.append(item)
    return out


def load_kernel_model(path):
    """The kernel model of record a residual network model composes (a saved :class:`CostModel` directory)."""
    from models.base import load_model

    if not path:
        raise ValueError(
            "a residual network model needs kernel_model: the directory of a saved kernel CostModel "
            "(pipelines.networks fits one on a kernel sweep)"
        )
    if not (Path(path) / "model.json").exists():
        raise ValueError(f"kernel_model {path!r} is not a saved CostModel directory (no model.json)")
    return load_model(path)


def _residual_net(n_node: int, n_hw: int, n_kinds: int, hidden: int, layers: int, conv: str, heads: int, bound: float):
    import torch
    from torch import nn
    from torch_geometric.nn import GATv2Conv, SAGEConv
    from torch_geometric.utils import scatter

    class ResidualGNN(nn.Module):
        """log runtime = log composed + B tanh((bias + sum_v w_v s_v) / B); s_v = 0 on op kinds unseen in fit."""

        def __init__(self):
            super().__init__()
            self.register_buffer("x_mean", torch.zeros(n_kinds, n_node))
            self.register_buffer("x_std", torch.ones(n_kinds, n_node))
            self.register_buffer("seen", torch.zeros(n_kinds))
            self.register_buffer("u_mean", torch.zeros(n_hw))
            self.register_buffer("u_std", torch.ones(n_hw))
            self.embed = nn.Sequential(nn.Linear(n_node + n_hw, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            self.convs = nn.ModuleList(
                SAGEConv(hidden, hidden, aggr="mean")
                if conv == "sage"
                else GATv2Conv(hidden, hidden // heads, heads=heads, concat=True, edge_dim=3)
                for _ in range(layers)
            )
            self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
            self.bias = nn.Parameter(torch.zeros(()))
            self.zero()
            self.last_s = None

        def zero(self):
            """The learned part at zero: the model is the composition."""
            with torch.no_grad():
                self.head[2].weight.zero_(), self.head[2].bias.zero_(), self.bias.zero_()

        def forward(self, data):
            seen = self.seen[data.kind] > 0
            xn = ((data.x - self.x_mean[data.kind]) / self.x_std[data.kind]).clamp(-CLIP, CLIP) * seen[:, None]
            un = ((data.u - self.u_mean) / self.u_std).clamp(-CLIP, CLIP)[data.batch]
            h = self.embed(torch.cat([xn, un], dim=1))
            ei = torch.cat([data.edge_index, data.edge_index.flip(0)], dim=1)
            ea = torch.cat(
                [
                    torch.cat([data.edge_attr, torch.zeros_like(data.edge_attr[:, :1])], 1),
                    torch.cat([data.edge_attr, torch.ones_like(data.edge_attr[:, :1])], 1),
                ]
            )
            for c in self.convs:
                h = h + torch.relu(c(h, ei) if conv == "sage" else c(h, ei, ea))
            s = self.head(h).squeeze(-1) * seen
            self.last_s = s[data.w > 0]
            r = self.bias + scatter(data.w * s, data.batch, dim=0, dim_size=data.num_graphs, reduce="sum")
            return data.log_composed + bound * torch.tanh(r / bound)

    return ResidualGNN()


class ResidualGNNModel(CostModel):
    """A whole network = the composition of its kernels' predictions (``models.compose.NetworkComposer``: the
    kernel model of record ``kernel_model`` + the ``execution`` mode, launch and per-kernel gap fitted on the
    training networks) x a bounded learned correction from a GNN over its MLIR graph:

        log runtime = log composed + B tanh((b + sum_v w_v s_v) / B)

    ``w_v`` = node v's share of the composed runtime (its kernels' steps / the total; 0 for nodes that launch
    nothing), ``s_v`` = a head over the GNN embedding of v. Node features are normalised PER OP KIND (op class:
    contraction, elementwise, reduction, ...) with that kind's training statistics, and nodes of a kind never seen
    in training get ``s_v = 0``: a held-out architecture's unseen ops fall back to the composition, and any
    correction is within exp(+-B). The head and ``b`` start at zero (an untrained model IS the composition); the
    loss is MSE on log runtime + ``shrink`` x mean(s_v^2) over kernel nodes. ``X``: graphs from
    ``features.composed.ComposedGraphEncoder``."""

    name = "gnn_residual"

    def __init__(
        self,
        kernel_model: str | None = None,
        execution: str = "eager",
        hidden: int = 64,
        layers: int = 3,
        epochs: int = 150,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        batch_size: int = 16,
        seed: int = 0,
        conv: str = "gatv2",
        heads: int = 4,
        bound: float = 0.5,
        shrink: float = 1.0,
    ):
        self.kernel_model = kernel_model
        self.execution = execution
        self.hidden = hidden
        self.layers = layers
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.seed = seed
        self.conv = conv
        self.heads = heads
        self.bound = bound
        self.shrink = shrink

    def _data(self, X, composed) -> list:
        """Plain tensor graphs (the kernels stripped) with each node's share ``w`` and ``log_composed``."""
        import torch
        from torch_geometric.data import Data

        out = []
        for g, (total, k) in zip(X, composed):
            w = np.zeros(g.num_nodes)
            if len(k):
                np.add.at(w, k["node"].to_numpy(int), k["step_ms"].to_numpy(float))
            out.append(
                Data(
                    x=g.x,
                    edge_index=g.edge_index,
                    edge_attr=g.edge_attr,
                    u=g.u,
                    kind=g.kind,
                    w=torch.tensor(w / total, dtype=torch.float32),
                    log_composed=torch.tensor([math.log(total)], dtype=torch.float32),
                    num_nodes=g.num_nodes,
                )
            )
        return out

    def _build(self, n_node: int, n_hw: int):
        import torch

        from features.mlir.graph import OP_CLASSES

        torch.manual_seed(self.seed)
        self.dims_ = (n_node, n_hw)
        self.net_ = _residual_net(
            n_node, n_hw, len(OP_CLASSES), self.hidden, self.layers, self.conv, self.heads, self.bound
        )
        return self.net_

    def fit(self, X, y):
        import torch
        from torch_geometric.loader import DataLoader

        from models.compose import NetworkComposer

        _check_graph_options(self.conv, self.hidden, self.heads, self.bound)
        X, y = _check_graphs(X, y)
        if any(getattr(g, "kind", None) is None for g in X):
            raise ValueError("X holds graphs without kind: encode them with features.composed.ComposedGraphEncoder")
        self.composer_ = NetworkComposer(load_kernel_model(self.kernel_model), self.execution).fit(kernel_items(X), y)
        data = self._data(X, self.composer_.compose(kernel_items(X)))
        net = self._build(X[0].x.shape[1], X[0].u.shape[1])
        xs, kinds, us = (
            torch.cat([d.x for d in data]),
            torch.cat([d.kind for d in data]),
            torch.cat([d.u for d in data]),
        )
        for k in torch.unique(kinds):
            m = kinds == k
            std = xs[m].std(0, unbiased=False)  # one node of a kind: std 0, every column ignored
            net.x_mean[k], net.seen[k] = xs[m].mean(0), 1.0
            net.x_std[k] = std.clamp_min(STD_FLOOR).masked_fill(std < 1e-6, IGNORE)
        net.u_mean.copy_(us.mean(0)), net.u_std.copy_(_scale(us) if len(X) > 1 else torch.ones_like(net.u_std))
        for d, t in zip(data, y):
            d.y = torch.tensor([t], dtype=torch.float32)
        if self.epochs > 0:
            loader = DataLoader(data, batch_size=self.batch_size, shuffle=True)
            trainer(self.epochs, self.seed).fit(_residual_module(net, self.lr, self.weight_decay, self.shrink), loader)
        net.eval()
        return self

    @property
    def net(self):
        if not hasattr(self, "net_"):
            raise RuntimeError("ResidualGNNModel is not fitted")
        return self.net_

    def composed(self, X) -> np.ndarray:
        """The composition alone (the model with its learned part at zero)."""
        _ = self.net  # raises when not fitted
        return np.array([t for t, _ in self.composer_.compose(kernel_items(X))])

    def predict(self, X) -> np.ndarray:
        import torch
        from torch_geometric.loader import DataLoader

        X, _ = _check_graphs(X)
        net = self.net
        widths = {int(g.x.shape[1]) for g in X}
        if widths != {self.dims_[0]}:
            raise ValueError(
                f"graphs have {sorted(widths)} node features, the model was fitted on {self.dims_[0]}: "
                "encode with the settings used in training (op_names)"
            )
        data = self._data(X, self.composer_.compose(kernel_items(X)))
        net.eval()
        out = []
        with torch.no_grad():
            for batch in DataLoader(data, batch_size=max(self.batch_size, 64), shuffle=False):
                out.append(torch.exp(net(batch)).double().numpy())
        return np.concatenate(out)

    def _save_payload(self, path: Path) -> None:
        import torch

        torch.save(self.net.state_dict(), path / "gnn.pt")
        (path / "dims.json").write_text(json.dumps(list(self.dims_)))
        (path / "composer.json").write_text(json.dumps(self.composer_.state()))
        self.composer_.kernel_model.save(path / "kernel_model")

    def _load_payload(self, path: Path) -> None:
        import torch

        from models.base import load_model
        from models.compose import NetworkComposer

        n_node, n_hw = json.loads((path / "dims.json").read_text())
        self._build(n_node, n_hw).load_state_dict(torch.load(path / "gnn.pt", weights_only=True))
        self.net_.eval()
        self.composer_ = NetworkComposer.from_state(
            json.loads((path / "composer.json").read_text()), load_model(path / "kernel_model")
        )


def _residual_module(net, lr: float, weight_decay: float, shrink: float):
    import lightning as L
    import torch

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net

        def training_step(self, batch, _idx):
            loss = torch.mean((self.net(batch) - torch.log(batch.y)) ** 2)
            if shrink and self.net.last_s is not None and self.net.last_s.numel():
                loss = loss + shrink * torch.mean(self.net.last_s**2)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)

    return Module()


class ComposedNetworkModel(CostModel):
    """The composition alone (``models.compose.NetworkComposer``: the kernel model of record + ``execution``, launch
    and per-kernel gap fitted on the training networks): the residual models' anchor, scored on its own. ``X``:
    ``features.composed`` encodings (graphs or token dicts)."""

    name = "composed"

    def __init__(self, kernel_model: str | None = None, execution: str = "eager"):
        self.kernel_model = kernel_model
        self.execution = execution

    def fit(self, X, y) -> ComposedNetworkModel:
        from models.compose import NetworkComposer

        y = check_targets(y, len(X))
        self.composer_ = NetworkComposer(load_kernel_model(self.kernel_model), self.execution).fit(kernel_items(X), y)
        return self

    def predict(self, X) -> np.ndarray:
        if not hasattr(self, "composer_"):
            raise RuntimeError("ComposedNetworkModel is not fitted")
        return np.array([t for t, _ in self.composer_.compose(kernel_items(X))])

    def _save_payload(self, path: Path) -> None:
        (path / "composer.json").write_text(json.dumps(self.composer_.state()))
        self.composer_.kernel_model.save(path / "kernel_model")

    def _load_payload(self, path: Path) -> None:
        from models.base import load_model
        from models.compose import NetworkComposer

        self.composer_ = NetworkComposer.from_state(
            json.loads((path / "composer.json").read_text()), load_model(path / "kernel_model")
        )
