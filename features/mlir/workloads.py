"""MLIR in -> workload descriptions the tabular cost model understands (op + shape columns).

Each linalg op of the parsed module is matched against the conventions of ``data.workloads``:

* ``linalg.matmul``        A[m,k] @ B[k,n]                 -> ``matmul`` (m, n, k)
* ``linalg.batch_matmul``  A[b,m,k] @ B[b,k,n]             -> ``bmm`` (batch, m, n, k)
* ``linalg.conv_2d_nchw_fchw`` input [N,C,H,W], filter [F,C,K,K], equal strides, dilation 1
  -> ``conv2d``; when the input comes from a ``tensor.pad`` with equal static low/high pads on H and
  W (how torch-mlir exports ``padding=p``), ``h, w`` are the unpadded sizes and ``padding = p``
* ``linalg.generic`` with only ``parallel`` iterators (elementwise) whose body computes something
  (not just a dtype cast): 2+ tensor inputs -> ``add``, 1 -> ``gelu`` (both memory-bound; the proxy
  is named in the ``op`` column, the MLIR op in ``mlir_op``), shape collapsed to [m = prod(leading
  dims), n = last dim].

dtype is the element type of the op's first input, looked through a cast-only ``linalg.generic``
(torch-mlir computes float16 matmuls as f32 after ``arith.extf``; the workload is still float16).
Anything else (fills, transposes, broadcasts, pads, reductions) is not a kernel of its own here and
is skipped; the ``mlir_op`` column names what was recognised.
"""
from __future__ import annotations

import math

import pandas as pd

from data.workloads import SHAPE_PARAMS
from features.mlir.graph import OpGraph, OpNode, parse_mlir

ELEM_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
CAST_OPS = {"arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui",
            "arith.extsi", "arith.extui", "arith.trunci", "arith.bitcast", "linalg.yield"}


def _body(g: OpGraph, node: OpNode) -> list[str]:
    return [c.name for c in g.children(node.index)]


def _is_cast(g: OpGraph, node: OpNode) -> bool:
    return node.name == "linalg.generic" and set(_body(g, node)) <= CAST_OPS


def _dtype(g: OpGraph, node: OpNode, operand: int = 0) -> str | None:
    src = node.operand_defs[operand] if operand < len(node.operand_defs) else -1
    elem = node.operands[operand].elem if operand < len(node.operands) else ""
    if src >= 0 and _is_cast(g, g.nodes[src]) and g.nodes[src].operands:
        elem = g.nodes[src].operands[0].elem
    return ELEM_DTYPES.get(elem)


def _conv(g: OpGraph, n: OpNode) -> dict | None:
    x, f = n.operands[0].shape, n.operands[1].shape
    strides = n.attrs.get("strides", [1, 1])
    dil = n.attrs.get("dilations", [1, 1])
    if len(x) != 4 or len(f) != 4 or f[2] != f[3] or not isinstance(strides, list) or len(set(strides)) != 1 \
            or (isinstance(dil, list) and set(dil) != {1}):
        return None
    batch, c_in, h, w = x
    pad, src = 0, n.operand_defs[0]
    if src >= 0 and g.nodes[src].name == "tensor.pad":
        p = g.nodes[src]
        lo, hi = p.attrs.get("static_low"), p.attrs.get("static_high")
        if isinstance(lo, list) and lo == hi and len(lo) == 4 and lo[:2] == [0, 0] and lo[2] == lo[3] >= 0:
            pad, (batch, c_in, h, w) = lo[2], p.operands[0].shape
    return {"op": "conv2d", "batch": batch, "c_in": c_in, "c_out": f[0], "h": h, "w": w,
            "kernel": f[2], "stride": strides[0], "padding": pad}


def recognise(g: OpGraph) -> list[dict]:
    """One workload dict per recognised kernel (keys: mlir_op, node, op, dtype and the op's shape params)."""
    out = []
    for n in g.nodes:
        row = None
        shapes = [t.shape for t in n.operands]
        if any(d < 0 for s in shapes for d in s):
            continue  # dynamic shapes: no static workload
        if n.name == "linalg.matmul" and len(shapes) >= 2 and len(shapes[0]) == 2 and len(shapes[1]) == 2:
            (m, k), (_, nn) = shapes[0], shapes[1]
            row = {"op": "matmul", "m": m, "n": nn, "k": k}
        elif n.name == "linalg.batch_matmul" and len(shapes) >= 2 and len(shapes[0]) == 3 and len(shapes[1]) == 3:
            (b, m, k), (_, _, nn) = shapes[0], shapes[1]
            row = {"op": "bmm", "batch": b, "m": m, "n": nn, "k": k}
        elif n.name == "linalg.conv_2d_nchw_fchw" and len(shapes) >= 2:
            row = _conv(g, n)
        elif (n.name == "linalg.generic" and n.iterator_types and set(n.iterator_types) == {"parallel"}
              and not _is_cast(g, n) and n.results and n.results[0].shape):
            n_in = sum(1 for t in n.operands[:len(n.operands) - len(n.results)] if t.shape)
            shape = n.results[0].shape
            row = {"op": "add" if n_in >= 2 else "gelu", "m": math.prod(shape[:-1]), "n": shape[-1]}
        if row is None:
            continue
        dtype = _dtype(g, n)
        if dtype is None:
            continue
        out.append({"mlir_op": n.name, "node": n.index, "dtype": dtype, **row})
    return out


def workloads_from_mlir(text: str, where: str = "mlir") -> pd.DataFrame:
    """Workload descriptions (mlir_op, node, op, dtype + shape columns) recognised in an MLIR module.

    Shape columns are nullable integers (a column an op does not use is <NA>); an empty frame (with
    those columns) when nothing is recognised."""
    rows = recognise(parse_mlir(text, where))
    df = pd.DataFrame(rows, columns=["mlir_op", "node", "op", "dtype", *SHAPE_PARAMS])
    return df.astype({c: "Int64" for c in ("node", *SHAPE_PARAMS)})
