"""MLIR for the feature stage: export (torch-mlir), parse (MLIR Python bindings) and recognise workloads.

    from features.mlir import export_workload, parse_mlir, workloads_from_mlir

``workloads_from_mlir(text, dims=...)`` reads torch-mlir / IREE-style linalg and StableHLO (JAX, pretty or
generic form); ``decode_mlir`` turns file bytes (UTF-8 text or MLIR bytecode) into text.
"""

from features.mlir.export import MlirStore, attach_mlir, export_workload
from features.mlir.graph import (
    OpGraph,
    OpNode,
    TensorType,
    decode_mlir,
    from_layers,
    parse_mlir,
    text_sha256,
    to_generic,
)
from features.mlir.workloads import recognise, workloads_from_mlir

__all__ = [
    "MlirStore",
    "attach_mlir",
    "export_workload",
    "OpGraph",
    "OpNode",
    "TensorType",
    "decode_mlir",
    "from_layers",
    "parse_mlir",
    "text_sha256",
    "to_generic",
    "recognise",
    "workloads_from_mlir",
]
