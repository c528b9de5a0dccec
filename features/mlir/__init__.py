"""MLIR for the feature stage: export (torch-mlir), parse (MLIR Python bindings) and recognise workloads.

    from features.mlir import export_workload, parse_mlir, workloads_from_mlir

``workloads_from_mlir(text, dims=...)`` reads torch-mlir / IREE-style linalg and StableHLO (JAX, pretty or
generic form); ``decode_mlir`` turns file bytes (UTF-8 text or MLIR bytecode) into text. The names load on first
use (PEP 562): reading a graph (``features.mlir.graph``) does not import torch, which the exporter needs.
"""

import importlib

_WHERE = {
    "MlirStore": "export",
    "attach_mlir": "export",
    "export_workload": "export",
    "OpGraph": "graph",
    "OpNode": "graph",
    "TensorType": "graph",
    "decode_mlir": "graph",
    "from_layers": "graph",
    "parse_mlir": "graph",
    "text_sha256": "graph",
    "to_generic": "graph",
    "recognise": "workloads",
    "workloads_from_mlir": "workloads",
}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"features.mlir.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
