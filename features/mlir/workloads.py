"""MLIR in -> workload descriptions the tabular cost model understands (op + shape columns).

The ops of the entry function (``@main``, else the only public function, else the first; of each module when a
text holds several; a ``func.call`` is expanded into its callee's ops, once per call) are matched against the
conventions of ``data.workloads``.

linalg (torch-mlir's linalg-on-tensors, IREE-style files):

* ``linalg.matmul`` (and ``matmul_transpose_b``) A[m,k] @ B[k,n] -> ``matmul`` (m, n, k); ``linalg.matvec`` ->
  ``matmul`` with n = 1; ``linalg.batch_matmul`` (and ``_transpose_b``) -> ``bmm`` (batch, m, n, k)
* ``linalg.conv_2d_nchw_fchw`` / ``conv_2d_nhwc_hwcf`` / ``conv_2d_nhwc_fhwc`` / ``conv_2d_ngchw_gfchw``
  (grouped) / ``depthwise_conv_2d_nchw_chw`` / ``depthwise_conv_2d_nhwc_hwc``: square kernel, equal strides and
  dilations -> ``conv2d`` (with ``groups``, ``dilation``); when the input comes from a ``tensor.pad`` (looked
  through a ``tensor.expand_shape``) with equal static low/high pads on H and W (how torch-mlir exports
  ``padding=p``), ``h, w`` are the unpadded sizes and ``padding = p``
* ``linalg.pooling_{nchw,nhwc}_{max,sum}`` -> ``max_pool2d`` / ``avg_pool2d`` (the sum pool of an average; its
  division is the elementwise op after it), padding read from a ``tensor.pad`` as for convolutions
* ``linalg.generic`` with only ``parallel`` iterators (elementwise) whose body computes something (not just a
  dtype cast): 2+ tensor inputs -> ``add``, 1 -> ``gelu`` (both memory-bound; the proxy is named in the ``op``
  column, the MLIR op in ``mlir_op``), shape collapsed to [m = prod(leading dims), n = last dim]
* ``linalg.generic`` with ``reduction`` iterators that does not multiply-accumulate, ``linalg.reduce``:
  ``sum`` (an add body) or ``max`` (max/compare bodies) over [m = result elements, n = input / result elements];
  ``linalg.softmax`` -> ``softmax``
* ``linalg.transpose`` / ``linalg.copy`` / ``tensor.concat`` / ``tensor.insert_slice`` -> ``copy``, except a
  transpose that only feeds contractions (through casts and views: a GEMM reads a transposed operand through its
  layout flag)

StableHLO (JAX, TensorFlow, torch-xla exports; pretty or generic form):

* ``stablehlo.dot_general``: batch = product of the batching dims, k = product of the contracting dims, m / n =
  products of the other lhs / rhs dims -> ``bmm`` (batch > 1 or batching dims) or ``matmul``; ``stablehlo.dot``
  -> ``matmul``
* ``stablehlo.convolution`` with two spatial dims (any layout, read from ``dimension_numbers``), square kernel,
  equal strides and dilations, no lhs dilation (a transposed conv is not mapped) -> ``conv2d`` with ``groups =
  feature_group_count``; asymmetric padding (``SAME`` with an even kernel) keeps the smaller pad and adds the
  difference to ``h`` / ``w`` so the output size, and the FLOPs, stay exact
* ``stablehlo.reduce`` -> ``sum`` / ``max`` by its body; ``stablehlo.reduce_window`` over two square spatial
  dims -> ``max_pool2d`` / ``avg_pool2d``
* elementwise ops -> the named op when one exists and all operands are full-size (``add``, ``subtract`` ->
  ``add``, ``multiply`` -> ``mul``, ``divide`` -> ``div``, ``power`` -> ``pow``, ``tanh``, ``logistic`` ->
  ``sigmoid``), its ``*_scalar`` form when one operand is a broadcast or constant, else ``ewise`` with the count
  of full-size operands; ``convert`` -> ``copy``. An operand produced by ``broadcast_in_dim``, ``constant`` or
  ``iota`` is not full-size: XLA fuses those into their consumer
* ``transpose`` (unless it only feeds dots / convolutions), ``concatenate``, ``pad``, ``gather``, ``scatter``,
  ``dynamic_update_slice``, ``reverse`` -> ``copy``; ``reshape``, ``broadcast_in_dim``, ``slice``,
  ``dynamic_slice``, ``iota``, ``constant``, tuples cost nothing

dtype is the element type of the op's first floating input, looked through a cast-only ``linalg.generic``
(torch-mlir computes float16 matmuls as f32 after ``arith.extf``; the workload is still float16); integer
elementwise ops (index arithmetic) are costed in float32. Fills, views, constants, broadcasts and pads feeding a
convolution are no kernels of their own. Every other op of the function is *unmapped*: named with its count in
``frame.attrs["unmapped"]`` and one warning line, never dropped silently. Dynamic dimensions are bound with
``dims`` (:mod:`features.mlir.dynamic`).
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Mapping

import pandas as pd

from data.workloads import SHAPE_PARAMS, WorkloadError, validate
from features.mlir.graph import OpGraph, OpNode, parse_mlir
from features.tabular import FeatureError

ELEM_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
CAST_OPS = {
    "arith.extf",
    "arith.truncf",
    "arith.sitofp",
    "arith.uitofp",
    "arith.fptosi",
    "arith.fptoui",
    "arith.extsi",
    "arith.extui",
    "arith.trunci",
    "arith.bitcast",
    "linalg.yield",
}
# ops that launch nothing of their own: constants, shape bookkeeping, views, fused producers
FREE = {
    "arith.constant",
    "tensor.empty",
    "tensor.dim",
    "tensor.cast",
    "tensor.expand_shape",
    "tensor.collapse_shape",
    "tensor.reshape",
    "tensor.extract",
    "tensor.extract_slice",
    "tensor.from_elements",
    "tensor.bitcast",
    "linalg.fill",
    "linalg.broadcast",
    "linalg.index",
    "affine.apply",
    "func.return",
    "ml_program.global_load",
    "ml_program.global",
    "stablehlo.constant",
    "stablehlo.reshape",
    "stablehlo.broadcast_in_dim",
    "stablehlo.iota",
    "stablehlo.slice",
    "stablehlo.dynamic_slice",
    "stablehlo.get_tuple_element",
    "stablehlo.tuple",
    "stablehlo.optimization_barrier",
    "stablehlo.bitcast_convert",
    "stablehlo.return",
    "stablehlo.dynamic_broadcast_in_dim",
    "stablehlo.dynamic_reshape",
    "stablehlo.get_dimension_size",
    "stablehlo.broadcast",
    "chlo.constant",
    "chlo.constant_like",
    "shape.shape_of",
    "tosa.const",
    "tosa.reshape",
}
CONV_LAYOUTS = {  # linalg conv name -> (input layout, filter layout); g = groups
    "linalg.conv_2d_nchw_fchw": ("nchw", "fchw"),
    "linalg.conv_2d_nhwc_hwcf": ("nhwc", "hwcf"),
    "linalg.conv_2d_nhwc_fhwc": ("nhwc", "fhwc"),
    "linalg.conv_2d_ngchw_gfchw": ("ngchw", "gfchw"),
    "linalg.conv_2d_ngchw_fgchw": ("ngchw", "fgchw"),
    "linalg.depthwise_conv_2d_nchw_chw": ("nchw", "chw"),
    "linalg.depthwise_conv_2d_nhwc_hwc": ("nhwc", "hwc"),
}
POOLS = {
    "linalg.pooling_nchw_max": ("nchw", "max_pool2d"),
    "linalg.pooling_nhwc_max": ("nhwc", "max_pool2d"),
    "linalg.pooling_nchw_sum": ("nchw", "avg_pool2d"),
    "linalg.pooling_nhwc_sum": ("nhwc", "avg_pool2d"),
}
HLO_BINARY = {"add": "add", "subtract": "add", "multiply": "mul", "divide": "div", "power": "pow"}
HLO_UNARY = {"tanh": "tanh", "logistic": "sigmoid"}
HLO_ELEMENTWISE = {  # stablehlo / chlo ops computed element by element
    "abs",
    "add",
    "and",
    "atan2",
    "cbrt",
    "ceil",
    "clamp",
    "compare",
    "complex",
    "cosine",
    "divide",
    "exponential",
    "exponential_minus_one",
    "floor",
    "imag",
    "is_finite",
    "log",
    "log_plus_one",
    "logistic",
    "maximum",
    "minimum",
    "multiply",
    "negate",
    "not",
    "or",
    "popcnt",
    "power",
    "real",
    "remainder",
    "round_nearest_afz",
    "round_nearest_even",
    "rsqrt",
    "select",
    "shift_left",
    "shift_right_arithmetic",
    "shift_right_logical",
    "sign",
    "sine",
    "sqrt",
    "subtract",
    "tan",
    "tanh",
    "xor",
    "erf",
    "erf_inv",
    "erfc",
    "lgamma",
    "digamma",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cosh",
    "sinh",
    "is_inf",
    "is_neg_inf",
    "is_pos_inf",
    "next_after",
    "polygamma",
    "zeta",
    "square",
}
HLO_COPIES = {"concatenate", "pad", "gather", "reverse", "convert", "dynamic_gather", "torch_index_select"}
HLO_WRITES = {"scatter": 2, "dynamic_update_slice": 1}  # op -> operand index of what it writes
NO_OP_TARGETS = {
    "shape_assertion",
    "Sharding",
    "SPMDFullToShardShape",
    "SPMDShardToFullShape",
    "annotate_device_placement",
    "MoveToHost",
    "MoveToDevice",
}  # custom_call targets that compute nothing
FUSED_PRODUCERS = {
    "stablehlo.broadcast_in_dim",
    "stablehlo.constant",
    "stablehlo.iota",
    "stablehlo.dynamic_broadcast_in_dim",
    "stablehlo.broadcast",
    "chlo.constant",
    "chlo.constant_like",
}


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


def _float_dtype(n: OpNode) -> str:
    """The first floating element type of an op's results then operands; float32 for integer-only ops."""
    return next((ELEM_DTYPES[t.elem] for t in (*n.results, *n.operands) if t.elem in ELEM_DTYPES), "float32")


def _mn(shape) -> dict:
    n = shape[-1] if shape else 1
    return {"m": math.prod(shape[:-1]) if shape else 1, "n": n}


def _int(value, default: int) -> int:
    """An IntegerAttr as the parser keeps it (``"4 : i64"``), or a plain int."""
    if isinstance(value, int):
        return value
    m = re.match(r"\s*(-?\d+)", str(value)) if value is not None else None
    return int(m[1]) if m else default


def _pad_source(g: OpGraph, n: OpNode) -> tuple[OpNode | None, list[int] | None]:
    """The ``tensor.pad`` an op's input comes from (looked through expand/collapse_shape) and its low pads."""
    src = n.operand_defs[0] if n.operand_defs else -1
    while src >= 0 and g.nodes[src].name in ("tensor.expand_shape", "tensor.collapse_shape"):
        src = g.nodes[src].operand_defs[0] if g.nodes[src].operand_defs else -1
    if src < 0 or g.nodes[src].name != "tensor.pad":
        return None, None
    p = g.nodes[src]
    lo, hi = p.attrs.get("static_low"), p.attrs.get("static_high")
    if not (isinstance(lo, list) and lo == hi and len(lo) == 4 and all(v >= 0 for v in lo)):
        return None, None
    return p, lo


def _unpadded(g: OpGraph, n: OpNode, layout: str, shape: tuple) -> tuple[tuple, int]:
    """``(input shape without the pad, pad)`` when the input is a symmetric ``tensor.pad`` on H and W only."""
    p, lo = _pad_source(g, n)
    h, w = layout.index("h"), layout.index("w")
    if p is None or len(layout) != 4:
        return shape, 0
    others = [lo[i] for i in range(4) if i not in (h, w)]
    if others != [0, 0] or lo[h] != lo[w]:
        return shape, 0
    return p.operands[0].shape, lo[h]


def _conv(g: OpGraph, n: OpNode) -> dict | str | None:
    x, f = n.operands[0].shape, n.operands[1].shape
    strides = n.attrs.get("strides", [1, 1])
    dil = n.attrs.get("dilations", [1, 1])
    in_layout, f_layout = CONV_LAYOUTS[n.name]
    if (
        len(x) != len(in_layout)
        or len(f) != len(f_layout)
        or not isinstance(strides, list)
        or len(set(strides)) != 1
        or (isinstance(dil, list) and len(set(dil)) != 1)
    ):
        return None
    kh, kw = f[f_layout.index("h")], f[f_layout.index("w")]
    if kh != kw:
        return f"kernel {kh}x{kw}"
    dilation = dil[0] if isinstance(dil, list) else 1
    if "g" in in_layout:  # grouped: x [N, G, C/G, H, W], f [G, F/G, C/G, KH, KW] (or [F/G, G, ...])
        groups = x[1]
        batch, c_in = x[0], x[1] * x[2]
        c_out = groups * f[f_layout.index("f")]
        padded = _pad_source(g, n)[0]
        h, w, pad = x[3], x[4], 0
        if padded is not None:
            lo = padded.attrs["static_low"]
            if lo[:2] == [0, 0] and lo[2] == lo[3]:
                h, w, pad = padded.operands[0].shape[2], padded.operands[0].shape[3], lo[2]
    else:
        shape, pad = _unpadded(g, n, in_layout, x)
        batch, c_in = shape[in_layout.index("n")], shape[in_layout.index("c")]
        h, w = shape[in_layout.index("h")], shape[in_layout.index("w")]
        if n.name.startswith("linalg.depthwise"):
            groups, c_out = c_in, c_in
        else:
            groups, c_out = 1, f[f_layout.index("f")]
    return {
        "op": "conv2d",
        "batch": batch,
        "c_in": c_in,
        "c_out": c_out,
        "h": h,
        "w": w,
        "kernel": kh,
        "stride": strides[0],
        "padding": pad,
        "groups": groups,
        "dilation": dilation,
    }


def _pool(g: OpGraph, n: OpNode) -> dict | str | None:
    layout, op = POOLS[n.name]
    x, window = n.operands[0].shape, n.operands[1].shape
    strides = n.attrs.get("strides", [1, 1])
    dil = n.attrs.get("dilations", [1, 1])
    if len(x) != 4 or len(window) != 2 or not isinstance(strides, list) or len(set(strides)) != 1:
        return None
    if window[0] != window[1] or (isinstance(dil, list) and set(dil) != {1}):
        return f"window {window[0]}x{window[1]}, dilations {dil}"
    shape, pad = _unpadded(g, n, layout, x)
    return {
        "op": op,
        "batch": shape[layout.index("n")],
        "c_in": shape[layout.index("c")],
        "h": shape[layout.index("h")],
        "w": shape[layout.index("w")],
        "kernel": window[0],
        "stride": strides[0],
        "padding": pad,
    }


def _reduction_kind(g: OpGraph, n: OpNode) -> str | None:
    """``sum`` / ``max`` from a reduction body (None when it multiplies and adds: a contraction)."""
    body = set(_body(g, n))
    if {"arith.mulf", "arith.addf"} <= body or {"arith.muli", "arith.addi"} <= body:
        return None
    if body & {
        "arith.maximumf",
        "arith.maxnumf",
        "arith.minimumf",
        "arith.minnumf",
        "arith.cmpf",
        "arith.cmpi",
        "arith.maxsi",
        "arith.minsi",
        "stablehlo.maximum",
        "stablehlo.minimum",
        "stablehlo.compare",
    }:
        return "max"
    return "sum"


def _consumers(g: OpGraph) -> dict[int, list[int]]:
    cached = getattr(g, "_consumers", None)
    if cached is None:
        cached = {}
        for src, dst in g.edges:
            cached.setdefault(src, []).append(dst)
        object.__setattr__(g, "_consumers", cached)
    return cached


def _feeds_only(g: OpGraph, i: int, targets: tuple[str, ...], through: set[str]) -> bool:
    """Whether every use of node ``i`` (looked through ``through`` ops and cast-only generics) is one of ``targets``."""
    uses, seen = list(_consumers(g).get(i, [])), set()
    if not uses:
        return False
    while uses:
        j = uses.pop()
        if j in seen:
            continue
        seen.add(j)
        node = g.nodes[j]
        if node.name in targets:
            continue
        if node.name in through or _is_cast(g, node):
            uses += _consumers(g).get(j, [])
            continue
        return False
    return True


# ------------------------------------------------------------------------------------------------ linalg
LINALG_GEMMS = (
    "linalg.matmul",
    "linalg.matmul_transpose_b",
    "linalg.batch_matmul",
    "linalg.batch_matmul_transpose_b",
    "linalg.matvec",
)
VIEWS = {"tensor.expand_shape", "tensor.collapse_shape", "tensor.cast", "tensor.reshape"}


def _linalg(g: OpGraph, n: OpNode, shapes: list) -> dict | str | None:  # noqa: C901 - one table
    name = n.name
    if (
        name in ("linalg.matmul", "linalg.matmul_transpose_b")
        and len(shapes) >= 2
        and len(shapes[0]) == 2
        and len(shapes[1]) == 2
    ):
        (m, k), nn = shapes[0], (shapes[1][1] if name == "linalg.matmul" else shapes[1][0])
        return {"op": "matmul", "m": m, "n": nn, "k": k}
    if (
        name in ("linalg.batch_matmul", "linalg.batch_matmul_transpose_b")
        and len(shapes) >= 2
        and len(shapes[0]) == 3
        and len(shapes[1]) == 3
    ):
        (b, m, k), nn = shapes[0], (shapes[1][2] if name == "linalg.batch_matmul" else shapes[1][1])
        return {"op": "bmm", "batch": b, "m": m, "n": nn, "k": k}
    if name == "linalg.matvec" and len(shapes) >= 2 and len(shapes[0]) == 2:
        return {"op": "matmul", "m": shapes[0][0], "n": 1, "k": shapes[0][1]}
    if name in CONV_LAYOUTS and len(shapes) >= 2:
        return _conv(g, n)
    if name in POOLS and len(shapes) >= 2:
        return _pool(g, n)
    if name == "linalg.softmax" and shapes and shapes[0]:
        return {"op": "softmax", **_mn(shapes[0])}
    if name in ("linalg.reduce", "linalg.generic") and "reduction" in n.iterator_types or name == "linalg.reduce":
        kind = _reduction_kind(g, n)
        if kind is None:
            return "multiply-accumulate generic"
        m = max(n.results[0].numel if n.results else 1, 1)
        return {"op": kind, "m": m, "n": max(n.operands[0].numel // m, 1)}
    if (
        name == "linalg.generic"
        and n.iterator_types
        and set(n.iterator_types) == {"parallel"}
        and not _is_cast(g, n)
        and n.results
        and n.results[0].shape
    ):
        n_in = sum(1 for t in n.operands[: len(n.operands) - len(n.results)] if t.shape)
        shape = n.results[0].shape
        return {"op": "add" if n_in >= 2 else "gelu", "m": math.prod(shape[:-1]), "n": shape[-1]}
    if name == "linalg.transpose":
        if _feeds_only(g, n.index, LINALG_GEMMS, VIEWS):
            return {}
        return {"op": "copy", **_mn(n.results[0].shape)}
    if name in ("linalg.copy", "tensor.concat") and n.results:
        return {"op": "copy", **_mn(n.results[0].shape)}
    if name == "tensor.insert_slice" and n.operands:
        return {"op": "copy", **_mn(n.operands[0].shape)}
    if name == "tensor.pad":
        if _feeds_only(g, n.index, tuple(CONV_LAYOUTS) + tuple(POOLS), VIEWS):
            return {}
        return {"op": "copy", **_mn(n.results[0].shape)}
    if name == "linalg.generic" and (_is_cast(g, n) or (n.results and not n.results[0].shape)):
        return {}  # a dtype cast fused into its consumer, or a scalar computation
    return None


# ------------------------------------------------------------------------------------------------ StableHLO
def _dims_list(text: str, key: str) -> list[int]:
    m = re.search(key + r"\s*=\s*\[([^\]]*)\]", text)
    return [int(v) for v in m[1].split(",") if v.strip()] if m else []


def _dot_general(n: OpNode) -> dict | None:
    lhs, rhs = n.operands[0].shape, n.operands[1].shape
    text = str(n.attrs.get("dot_dimension_numbers", ""))
    lb, rb = _dims_list(text, "lhs_batching_dimensions"), _dims_list(text, "rhs_batching_dimensions")
    lc, rc = _dims_list(text, "lhs_contracting_dimensions"), _dims_list(text, "rhs_contracting_dimensions")
    batch = math.prod(lhs[i] for i in lb)
    k = math.prod(lhs[i] for i in lc)
    m = math.prod(d for i, d in enumerate(lhs) if i not in lb + lc)
    nn = math.prod(d for i, d in enumerate(rhs) if i not in rb + rc)
    if lb:
        return {"op": "bmm", "batch": batch, "m": m, "n": nn, "k": k}
    return {"op": "matmul", "m": m, "n": nn, "k": k}


def _conv_layout(text: str) -> tuple[list[str], list[str], list[str]] | None:
    """``#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>`` (or the ``raw`` form) -> three layouts."""
    m = re.search(r"\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]", text)
    if m:
        return tuple([v.strip() for v in part.split(",")] for part in m.groups())
    raw = {k: int(v) for k, v in re.findall(r"(\w+_dimension)\s*=\s*(\d+)", text)}
    found = re.findall(r"(\w+_spatial_dimensions)\s*=\s*\[([^\]]*)\]", text)
    spatial = {k: [int(v) for v in vs.split(",")] for k, vs in found}
    try:

        def layout(rank, named, spatial_dims):
            out = ["?"] * rank
            for label, i in named.items():
                out[i] = label
            for j, i in enumerate(spatial_dims):
                out[i] = str(j)
            return out

        s_in, s_k, s_out = (spatial[f"{p}_spatial_dimensions"] for p in ("input", "kernel", "output"))
        rank = len(s_in) + 2
        return (
            layout(rank, {"b": raw["input_batch_dimension"], "f": raw["input_feature_dimension"]}, s_in),
            layout(
                rank, {"i": raw["kernel_input_feature_dimension"], "o": raw["kernel_output_feature_dimension"]}, s_k
            ),
            layout(rank, {"b": raw["output_batch_dimension"], "f": raw["output_feature_dimension"]}, s_out),
        )
    except (KeyError, IndexError):
        return None


def _pairs(values, count: int) -> list[tuple[int, int]]:
    values = values if isinstance(values, list) else []
    if len(values) == 2 * count:
        return [(values[2 * i], values[2 * i + 1]) for i in range(count)]
    if len(values) == 1:
        return [(values[0], values[0])] * count
    return [(0, 0)] * count


def _square_padding(sizes: list[int], pads: list[tuple[int, int]]) -> tuple[list[int], int]:
    """Asymmetric pads -> one symmetric pad (the smallest) + the difference added to the input size, so the output
    size is unchanged: (lo + hi + size) is what the window slides over."""
    p = min(min(lo, hi) for lo, hi in pads) if pads else 0
    return [s + lo + hi - 2 * p for s, (lo, hi) in zip(sizes, pads)], max(p, 0)


def _convolution(n: OpNode) -> dict | str | None:
    layouts = _conv_layout(str(n.attrs.get("dimension_numbers", "")))
    if layouts is None:
        return "unreadable dimension_numbers"
    lin, ker, _ = layouts
    if len(lin) != 4 or "0" not in lin or "1" not in lin or "2" in lin:
        return f"{len(lin) - 2}-d"
    x, f = n.operands[0].shape, n.operands[1].shape
    if any(v != 1 for v in (n.attrs.get("lhs_dilation") or [1])):
        return "lhs dilation (a transposed convolution)"
    if _int(n.attrs.get("batch_group_count"), 1) != 1:
        return "batch_group_count"
    strides = n.attrs.get("window_strides") or [1, 1]
    dil = n.attrs.get("rhs_dilation") or [1, 1]
    kh, kw = f[ker.index("0")], f[ker.index("1")]
    if kh != kw or len(set(strides)) != 1 or len(set(dil)) != 1:
        return f"kernel {kh}x{kw}, strides {strides}, dilation {dil}"
    (h, w), pad = _square_padding([x[lin.index("0")], x[lin.index("1")]], _pairs(n.attrs.get("padding"), 2))
    groups = _int(n.attrs.get("feature_group_count"), 1)
    return {
        "op": "conv2d",
        "batch": x[lin.index("b")],
        "c_in": x[lin.index("f")],
        "c_out": f[ker.index("o")],
        "h": h,
        "w": w,
        "kernel": kh,
        "stride": strides[0],
        "padding": pad,
        "groups": groups,
        "dilation": dil[0],
    }


def _reduce_window(g: OpGraph, n: OpNode) -> dict | str | None:
    x = n.operands[0].shape
    window = n.attrs.get("window_dimensions") or []
    strides = n.attrs.get("window_strides") or [1] * len(window)
    if len(window) != len(x):
        return None
    spatial = [i for i, (w, s) in enumerate(zip(window, strides)) if w > 1 or s > 1]
    kind = _reduction_kind(g, n)
    if (
        len(spatial) != 2
        or len({window[i] for i in spatial}) != 1
        or len({strides[i] for i in spatial}) != 1
        or any(v != 1 for v in (n.attrs.get("base_dilations") or [1]) + (n.attrs.get("window_dilations") or [1]))
    ):
        return f"window {window}, strides {strides}"
    pads = _pairs(n.attrs.get("padding"), len(x))
    (h, w), pad = _square_padding([x[i] for i in spatial], [pads[i] for i in spatial])
    rest = [d for i, d in enumerate(x) if i not in spatial]
    return {
        "op": "max_pool2d" if kind == "max" else "avg_pool2d",
        "batch": rest[0] if rest else 1,
        "c_in": math.prod(rest[1:]) if len(rest) > 1 else 1,
        "h": h,
        "w": w,
        "kernel": window[spatial[0]],
        "stride": strides[spatial[0]],
        "padding": min(pad, window[spatial[0]] // 2),
    }


def _full_operands(g: OpGraph, n: OpNode) -> int:
    """Operands read element by element at the result's size (not broadcasts, constants or iotas: XLA fuses them)."""
    numel = n.results[0].numel if n.results else 0
    full = 0
    for t, src in zip(n.operands, n.operand_defs):
        if t.numel != numel or not t.shape:
            continue
        if src >= 0 and g.nodes[src].name in FUSED_PRODUCERS:
            continue
        full += 1
    return full


def _stablehlo(g: OpGraph, n: OpNode) -> dict | str | None:
    dialect, _, op = n.name.partition(".")
    if n.name == "stablehlo.dot_general":
        return _dot_general(n)
    if n.name == "stablehlo.dot":
        lhs, rhs = n.operands[0].shape, n.operands[1].shape
        return {"op": "matmul", "m": lhs[0] if len(lhs) == 2 else 1, "n": rhs[1] if len(rhs) == 2 else 1, "k": lhs[-1]}
    if n.name == "stablehlo.convolution":
        return _convolution(n)
    if n.name == "stablehlo.reduce":
        m = max(n.results[0].numel, 1)
        kind = "max" if len(n.results) > 1 else (_reduction_kind(g, n) or "sum")
        return {"op": kind, "m": m, "n": max(n.operands[0].numel // m, 1)}
    if n.name == "stablehlo.reduce_window":
        return _reduce_window(g, n)
    if n.name == "stablehlo.transpose":
        if _feeds_only(
            g, n.index, ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"), {"stablehlo.reshape"}
        ):
            return {}
        return {"op": "copy", **_mn(n.results[0].shape)}
    if op in HLO_COPIES and n.results:
        return {"op": "copy", **_mn(n.results[0].shape)}
    if op in HLO_WRITES and len(n.operands) > HLO_WRITES[op]:
        return {"op": "copy", **_mn(n.operands[HLO_WRITES[op]].shape)}
    if n.name == "stablehlo.custom_call" and str(n.attrs.get("call_target_name", "")).strip('"') in NO_OP_TARGETS:
        return {}
    if op.removeprefix("broadcast_") in HLO_ELEMENTWISE and n.results and dialect in ("stablehlo", "chlo"):
        op = op.removeprefix("broadcast_")  # chlo.broadcast_add & co.: an elementwise op with implicit broadcast
        full, shape = _full_operands(g, n), n.results[0].shape
        if not shape:
            return {}  # scalar arithmetic (a count, a shape check): folded or fused, no kernel of its own
        if op in HLO_UNARY and full == 1:
            return {"op": HLO_UNARY[op], **_mn(shape)}
        if op in HLO_BINARY and full >= 2:
            return {"op": HLO_BINARY[op], **_mn(shape)}
        if op in HLO_BINARY and full == 1:
            return {"op": HLO_BINARY[op] + "_scalar", **_mn(shape)}
        return {"op": "ewise", **_mn(shape), "inputs": min(full, 3)}
    return None


# ------------------------------------------------------------------------------------------------ walk
def _scopes(g: OpGraph) -> dict[int, dict[str, OpNode]]:
    """Functions by symbol name, per symbol table (the text's module, or each module nested in it)."""
    scopes: dict[int, dict[str, OpNode]] = {}
    for n in g.nodes:
        if n.name == "func.func" and (n.parent < 0 or g.nodes[n.parent].name == "builtin.module"):
            scopes.setdefault(n.parent, {})[str(n.attrs.get("sym_name", "")).strip('"')] = n
    return scopes


def _entry(funcs: dict[str, OpNode]) -> OpNode | None:
    """``@main``, else the only public function, else the first."""
    if "main" in funcs:
        return funcs["main"]
    public = [f for f in funcs.values() if str(f.attrs.get("sym_visibility", '"public"')).strip('"') == "public"]
    if len(public) == 1:
        return public[0]
    return next(iter(funcs.values()), None)


def _walk(g: OpGraph, func: OpNode, funcs: dict[str, OpNode], depth: int = 0):
    """The ops of a function in order, a ``func.call`` replaced by its callee's ops (recursively)."""
    for n in g.children(func.index):
        if n.name == "func.call":
            callee = funcs.get(str(n.attrs.get("callee", "")).lstrip("@").strip('"'))
            if callee is not None and depth < 32:
                yield from _walk(g, callee, funcs, depth + 1)
                continue
        yield n


def recognise(g: OpGraph, unmapped: Counter | None = None) -> list[dict]:
    """One workload dict per recognised kernel (keys: mlir_op, node, op, dtype and the op's shape params).

    Ops that launch work but have no mapping are counted in ``unmapped`` (``"<op name>"`` or ``"<op name>
    (<reason>)"``) when a Counter is given.
    """
    unmapped = Counter() if unmapped is None else unmapped
    scopes = _scopes(g)  # several modules in one text: each one's entry function, in order
    nodes = (
        [n for funcs in scopes.values() for n in _walk(g, _entry(funcs), funcs)]
        if scopes
        else [n for n in g.nodes if n.parent < 0]
    )
    out = []
    for n in nodes:
        if n.name in FREE or n.name == "func.func" or (n.dialect == "arith" and not any(t.shape for t in n.results)):
            continue  # free ops, and scalar (index) arithmetic
        shapes = [t.shape for t in n.operands]
        if any(d < 0 for t in (*n.operands, *n.results) for d in t.shape):
            unmapped[f"{n.name} (dynamic shape: bind it with --dim)"] += 1
            continue
        if n.dialect in ("stablehlo", "chlo"):
            row, dtype = _stablehlo(g, n), _float_dtype(n)
        else:  # GEMMs and convolutions need float data (an int8 GEMM is another kernel); the rest are memory-bound
            row = _linalg(g, n, shapes)
            gemm = isinstance(row, dict) and row.get("op") in ("matmul", "bmm", "conv2d")
            dtype = _dtype(g, n) if gemm else (_dtype(g, n) or _float_dtype(n))
        if isinstance(row, dict) and not row:
            continue  # a kernel-free op (fused cast, transpose into a GEMM, pad into a conv)
        if row is None or isinstance(row, str):
            unmapped[n.name + (f" ({row})" if row else "")] += 1
            continue
        if dtype is None:
            unmapped[f"{n.name} ({n.operands[0].elem if n.operands else '?'} data)"] += 1
            continue
        try:
            params = validate(row["op"], {k: v for k, v in row.items() if k != "op"}, dtype)
        except WorkloadError as exc:
            unmapped[f"{n.name} ({exc})"] += 1
            continue
        out.append({"mlir_op": n.name, "node": n.index, "op": row["op"], "dtype": dtype, **params})
    return out


def unmapped_line(unmapped: Mapping[str, int]) -> str:
    """``N op(s) not costed (no workload mapping): name xcount, ...`` (empty when nothing is unmapped)."""
    if not unmapped:
        return ""
    items = sorted(unmapped.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"{sum(unmapped.values())} MLIR op(s) have no workload mapping (not costed): " + ", ".join(
        f"{k} x{v}" for k, v in items
    )


def workloads_from_mlir(
    text: str, where: str = "mlir", dims: Mapping[str, object] | None = None, strict: bool = False
) -> pd.DataFrame:
    """Workload descriptions (mlir_op, node, op, dtype + shape columns) recognised in an MLIR module.

    ``dims`` binds dynamic dimensions of the entry function's arguments (``{"%arg0:0": 1024}`` or
    ``{"%arg0": "1024x512"}``; see :mod:`features.mlir.dynamic`); a dynamic dimension left unbound is one
    FeatureError naming it. Shape columns are nullable integers (a column an op does not use is <NA>); an empty
    frame (with those columns) when nothing is recognised. ``frame.attrs["unmapped"]`` counts the ops that launch
    work but have no mapping; they are warned about in one line (``strict=True``: a FeatureError with that line).
    """
    from features.mlir.dynamic import specialise

    g = parse_mlir(text, where)
    dynamic = any(
        d < 0
        for n in g.nodes
        if n.parent < 0 or g.nodes[n.parent].name == "func.func"
        for t in (*n.operands, *n.results)
        for d in t.shape
    )
    if dims or dynamic:
        static = specialise(text, dims, where, stablehlo=any(n.dialect in ("stablehlo", "chlo") for n in g.nodes))
        if static is not None:
            g = parse_mlir(static, where)
    unmapped: Counter = Counter()
    rows = recognise(g, unmapped)
    df = pd.DataFrame(rows, columns=["mlir_op", "node", "op", "dtype", *SHAPE_PARAMS])
    df = df.astype({c: "Int64" for c in ("node", *SHAPE_PARAMS)})
    df.attrs["unmapped"] = dict(unmapped)
    if unmapped:
        line = f"{where}: {unmapped_line(unmapped)}"
        if strict:
            raise FeatureError(line)
        warnings.warn(line, stacklevel=2)
    return df
