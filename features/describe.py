"""What ``costmodel featurize FILE.mlir --hardware H100-SXM`` prints: every encoding of one module.

``describe(text, hardware, registry)`` returns a JSON-able dict:

* ``sha256``, ``nodes``, ``edges`` (SSA def-use) of the parsed op graph;
* ``op_histogram``: non-zero counts over the fixed op vocabulary (+ other);
* ``kernels``: the recognised workloads (``features.mlir.workloads_from_mlir``) with their tabular
  features on ``hardware`` (shapes, FLOPs, bytes, roofline, hardware spec);
* ``graph``: shapes of the PyG ``Data`` (x, edge_index, edge_attr, u) and the hardware vector;
* ``tokens``: count and the first ids over the saved vocabulary.

Results are cached in memory (LRU) keyed by the text's sha256 + hardware: the parse itself is cached
by sha256 in ``features.mlir.graph``.
"""

from __future__ import annotations

import functools

from data.hardware import HardwareRegistry
from features.encoders import HW_COLUMNS, GraphEncoder, TokenEncoder, op_histogram
from features.mlir.graph import parse_mlir, text_sha256
from features.mlir.workloads import recognise
from features.tabular import FeatureError, TabularFeaturizer


def describe(text: str, hardware: str, registry: HardwareRegistry, where: str = "mlir") -> dict:
    try:
        hw = registry.resolve(hardware)
    except KeyError as exc:
        raise FeatureError(str(exc)) from None
    return _describe(text_sha256(text), text, hw, registry, where)


@functools.lru_cache(maxsize=256)
def _describe(sha: str, text: str, hardware: str, registry: HardwareRegistry, where: str) -> dict:
    import pandas as pd

    g = parse_mlir(text, where)
    hist = {k: int(v) for k, v in op_histogram(g).items() if v and k.startswith("mlir_op_")}
    kernels = recognise(g)
    if kernels:
        frame = pd.DataFrame(kernels).assign(hardware=hardware)
        X = TabularFeaturizer(registry).transform(frame)
        kernels = [
            {**{k: v for k, v in kern.items() if v == v}, "features": {c: float(x) for c, x in row.items()}}
            for kern, (_, row) in zip(kernels, X.iterrows())
        ]
    data = GraphEncoder(registry).encode(g, hardware, where=where)
    tok = TokenEncoder().encode(g, where)
    return {
        "source": where,
        "sha256": sha,
        "hardware": hardware,
        "nodes": len(g.nodes),
        "edges": len(g.edges),
        "op_histogram": hist,
        "kernels": kernels,
        "graph": {
            "x": list(data.x.shape),
            "edge_index": list(data.edge_index.shape),
            "edge_attr": list(data.edge_attr.shape),
            "u": dict(zip(HW_COLUMNS, map(float, data.u[0]))),
        },
        "tokens": {
            "count": int(tok["ids"].numel()),
            "per_node": list(tok["per_node"].shape),
            "ids_head": tok["ids"][:32].tolist(),
        },
    }
