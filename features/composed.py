"""Network encodings that carry their kernels, for the residual network models (``models.gnn`` readout
``residual``, ``models.transformer`` ``residual=True``): the graph or tokens of a network's MLIR (as
``features.encoders``) plus the kernels recognised in it (``features.mlir.workloads_from_mlir``) with their tabular
features (``features.tabular.TabularFeaturizer``), so the model can predict each kernel with its kernel model of
record and compose them (``models.compose``) before it learns a bounded correction. One row = one network
(``mlir`` + ``hardware`` + optional ``dtype``), the same input the served network models take.

Attached per network (python attributes, stripped before batching):

* ``kernels``: the recognised kernels (op, dtype, shape columns, ``node`` = the op's index in the graph) on the row's
  hardware; ``kernel_features``: their tabular features (the kernel model's ``X``);
* ``hw_kind``: ``gpu`` | ``cpu`` (which execution constants apply);
* graphs also get ``kind`` [N]: each node's op class index (``features.mlir.graph.OP_CLASSES``), the unit of the
  residual GNN's per-op-kind normalisation.
"""

from __future__ import annotations

import warnings

import pandas as pd

from data.workloads import SHAPE_PARAMS
from features.encoders import GraphEncoder, TokenEncoder, network_rows
from features.mlir.graph import OP_CLASSES, node_costs, parse_mlir
from features.tabular import FeatureError, TabularFeaturizer


def network_kernels(text: str, hardware: str, dtype: str, registry, where: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The kernels recognised in one network's MLIR on ``hardware`` and their tabular features."""
    from features.mlir import workloads_from_mlir

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = workloads_from_mlir(text, where=where)
    k = k.drop(columns=["mlir_op"]).assign(hardware=hardware)
    k = k.astype({c: float for c in SHAPE_PARAMS}).astype({"node": int})
    if k.empty:
        return k, pd.DataFrame()
    return k, TabularFeaturizer(registry).transform(k.drop(columns=["node"]))


class _Kernels:
    def __init__(self, registry=None):
        if registry is None:
            raise FeatureError("a composed network encoding needs the hardware registry")
        self.registry = registry

    def attach(self, obj, record: dict, where: str):
        spec = self.registry.get(record["hardware"])
        kernels, features = network_kernels(record["mlir"], spec.id, record["dtype"], self.registry, where)
        return kernels, features, spec.kind


class ComposedGraphEncoder(GraphEncoder):
    """:class:`features.encoders.GraphEncoder` + the network's kernels and its nodes' op kinds."""

    name = "composed_graph"

    def __init__(self, registry=None, op_names: bool = True, fusion: bool = False):
        super().__init__(registry, op_names, fusion)
        self._kernels = _Kernels(registry)

    def transform(self, rows) -> list:
        import torch

        records, _ = network_rows(rows, self.registry)
        out = []
        for i, r in enumerate(records):
            where = f"row {i}"
            g = self.encode(r["mlir"], hardware=r["hardware"], dtype=r["dtype"], where=where)
            graph = parse_mlir(r["mlir"], where)
            g.kind = torch.tensor([OP_CLASSES.index(c.op_class) for c in node_costs(graph)], dtype=torch.long)
            g.kernels, g.kernel_features, g.hw_kind = self._kernels.attach(g, r, where)
            out.append(g)
        return out


class ComposedTokenEncoder(TokenEncoder):
    """:class:`features.encoders.TokenEncoder` + the network's kernels (dict keys ``kernels``,
    ``kernel_features``, ``hw_kind``)."""

    name = "composed_tokens"

    def __init__(self, registry=None, **kwargs):
        super().__init__(**kwargs)
        self._kernels = _Kernels(registry)
        self.registry = registry

    def transform(self, rows) -> list:
        records, _ = network_rows(rows, self.registry)
        out = []
        for i, r in enumerate(records):
            enc = self.encode(r["mlir"], where=f"row {i}")
            enc["kernels"], enc["kernel_features"], enc["hw_kind"] = self._kernels.attach(enc, r, f"row {i}")
            out.append(enc)
        return out
