"""MLIR text -> op graph, with the real MLIR parser (the MLIR Python bindings shipped in torch-mlir).

Parsing goes through ``torch_mlir.ir.Module.parse`` (the C++ MLIR parser + verifier, all upstream
dialects registered: linalg, tensor, arith, math, func, tosa, scf, ...). Unregistered dialects are
allowed, so MLIR from other tools (StableHLO, IREE, ...) is accepted in the generic op form
(``"stablehlo.add"(%a, %b) : (...) -> ...``); the pretty form needs the dialect registered.

The graph:

* nodes = every operation in the module except the top-level ``builtin.module``, in pre-order (a
  parent before its children), so a ``linalg.generic`` is followed by the ops of its body. Named
  linalg ops carry their implicit body too (the parser materialises it), so the pretty and the
  generic form of a module give the same graph;
* edges = SSA def-use: one edge ``(defining op, using op)`` per operand that is an op result
  (operands that are block arguments, e.g. function arguments, have no defining op);
* ``parent`` = index of the enclosing op (-1 for ops directly in the module), the nesting relation.

Per node: name (``dialect.op``), dialect, result/operand element types and static shapes, and key
attributes (``iterator_types``, ``indexing_maps``, strides, dilations, pads, permutations).
Malformed text raises :class:`features.tabular.FeatureError` with ``line:column`` of the first error.
Parsed graphs are cached in memory (LRU) keyed by the sha256 of the text.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import dataclass, field

from features.tabular import FeatureError

# attributes kept per node (values as python ints/lists where the attribute is an integer array,
# else the attribute's printed form); everything else is dropped
KEY_ATTRS = ("iterator_types", "indexing_maps", "strides", "dilations", "static_low", "static_high",
             "permutation", "dimensions", "predicate", "callee")


@dataclass(frozen=True)
class TensorType:
    elem: str                   # element type as printed: f32, f16, bf16, i8, index, ... ("fixed" for layers)
    shape: tuple[int, ...]      # () for scalars; -1 for a dynamic dimension
    bits: int = 0               # element bit width (0 when it has none, e.g. index)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= max(d, 1)
        return n


@dataclass
class OpNode:
    index: int
    name: str
    dialect: str
    results: list[TensorType]
    operands: list[TensorType]
    operand_defs: list[int]     # defining node of each operand, -1 for block arguments
    attrs: dict = field(default_factory=dict)
    iterator_types: tuple[str, ...] = ()
    n_regions: int = 0
    parent: int = -1
    depth: int = 0


@dataclass
class OpGraph:
    nodes: list[OpNode]
    edges: list[tuple[int, int]]  # SSA def-use, (def, use)
    sha256: str = ""

    @property
    def nesting(self) -> list[tuple[int, int]]:
        return [(n.parent, n.index) for n in self.nodes if n.parent >= 0]

    def children(self, index: int) -> list[OpNode]:
        return [n for n in self.nodes if n.parent == index]


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_LOCAL = threading.local()


def _context():
    """One MLIR context per thread, reused: creating one (registering every dialect) costs ~13 ms, more
    than parsing a kernel module. Parsed modules are dropped after the walk; only uniqued types and
    attributes stay in the context."""
    ctx = getattr(_LOCAL, "ctx", None)
    if ctx is None:
        from torch_mlir import ir

        ctx = _LOCAL.ctx = ir.Context()
        ctx.allow_unregistered_dialects = True
    return ctx


def _type_info(t) -> TensorType:
    from torch_mlir import ir

    if isinstance(t, ir.ShapedType) and t.has_rank:
        shape = tuple(-1 if t.is_dynamic_dim(i) else int(d) for i, d in enumerate(t.shape))
        elem = t.element_type
    else:
        shape, elem = (), t
    bits = int(getattr(elem, "width", 0) or 0)
    return TensorType(str(elem), shape, bits)


def _attr_value(attr):
    try:
        return [int(x) for x in attr]           # DenseI64ArrayAttr, ArrayAttr of IntegerAttr
    except (TypeError, ValueError):
        pass
    try:
        return [int(attr[i]) for i in range(len(attr))]  # DenseIntElementsAttr
    except (TypeError, ValueError, IndexError):
        return str(attr)


def _location(diag) -> str:
    """``"-":6:23`` (a FileLineColLoc's printed form) -> ``6:23``."""
    text = str(diag.location)          # loc("-":6:23)
    inner = text[text.find("(") + 1:text.rfind(")")]
    parts = inner.rsplit(":", 2)
    return f"{parts[1]}:{parts[2]}" if len(parts) == 3 and parts[1].isdigit() else inner


def parse_error(exc, where: str = "mlir") -> FeatureError:
    diags = list(getattr(exc, "error_diagnostics", []) or [])
    if not diags:
        msg = " ".join(str(exc).split())
        return FeatureError(f"{where}: malformed MLIR: {msg[:300]}")
    d = diags[0]
    return FeatureError(f"{where}:{_location(d)}: malformed MLIR: {' '.join(d.message.split())[:300]}")


def _build(module, sha: str) -> OpGraph:
    nodes: list[OpNode] = []
    edges: list[tuple[int, int]] = []
    index: dict = {}

    def visit(op, parent: int, depth: int) -> None:
        i = len(nodes)
        index[op] = i
        name = op.name
        attrs, iters = {}, ()
        for key in KEY_ATTRS:
            if key in op.attributes:
                a = op.attributes[key]
                if key == "iterator_types":
                    # printed as #linalg.iterator_type<parallel>; keep the enum's name
                    iters = tuple(str(x).rsplit("<", 1)[-1].rstrip(">").strip('"') for x in a)
                    attrs[key] = list(iters)
                elif key == "indexing_maps":
                    attrs[key] = [str(m) for m in a]
                else:
                    attrs[key] = _attr_value(a)
        defs = []
        for v in op.operands:
            owner = v.owner
            src = index.get(owner, -1) if not _is_block(owner) else -1
            defs.append(src)
            if src >= 0:
                edges.append((src, i))
        nodes.append(OpNode(i, name, name.split(".", 1)[0] if "." in name else "", [_type_info(r.type) for r in op.results],
                            [_type_info(v.type) for v in op.operands], defs, attrs, iters, len(op.regions), parent, depth))
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    visit(child.operation, i, depth + 1)

    for top in module.body.operations:
        visit(top.operation, -1, 0)
    return OpGraph(nodes, edges, sha)


def _is_block(owner) -> bool:
    from torch_mlir import ir

    return isinstance(owner, ir.Block)


@functools.lru_cache(maxsize=4096)
def _parse_cached(sha: str, text: str) -> OpGraph:
    from torch_mlir import ir

    ctx = _context()
    try:
        module = ir.Module.parse(text, ctx)
    except ir.MLIRError as exc:
        raise parse_error(exc) from None
    return _build(module, sha)


def parse_mlir(text: str, where: str = "mlir") -> OpGraph:
    """Parse MLIR (pretty or generic form) into an :class:`OpGraph`; FeatureError with line:column if malformed.

    ``where`` names the source in the error (e.g. the file name). Cached by the text's sha256.
    """
    if not isinstance(text, str) or not text.strip():
        raise FeatureError(f"{where}: empty MLIR input")
    try:
        return _parse_cached(text_sha256(text), text)
    except FeatureError as exc:
        msg = str(exc)
        raise FeatureError(where + msg[len("mlir"):] if msg.startswith("mlir") else msg) from None


def to_generic(text: str) -> str:
    """Re-print a module in the generic op form (what other tools and unregistered dialects use)."""
    from torch_mlir import ir

    return ir.Module.parse(text, _context()).operation.get_asm(print_generic_op_form=True)


# --------------------------------------------------------------------------- networks without MLIR
LAYER_KEYS = {"precision": ("precision", "prec"), "reuse_factor": ("reuse_factor", "rf")}


def from_layers(layers: list[dict], where: str = "layers") -> OpGraph:
    """A network given as a list of layer dicts (no MLIR), e.g. hls4ml dense layers, as an op graph.

    Each layer ``{"op": "dense", "d_in": 64, "d_out": 32, "precision": 8, "reuse_factor": 4,
    "strategy": "latency"}`` becomes one node ``layer.<op>`` with operand shape ``[d_in]``, result
    shape ``[d_out]`` and a fixed-point element type of ``precision`` bits (``prec``/``rf`` are accepted
    as the wa-hls4ml column names); consecutive layers are chained by a def-use edge.
    """
    if not isinstance(layers, (list, tuple)) or not layers:
        raise FeatureError(f"{where}: expected a non-empty list of layer dicts")
    nodes, edges = [], []
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict):
            raise FeatureError(f"{where}[{i}]: expected a dict, got {type(layer).__name__}")
        try:
            d_in, d_out = int(layer["d_in"]), int(layer["d_out"])
        except (KeyError, TypeError, ValueError):
            raise FeatureError(f"{where}[{i}]: a layer needs integer d_in and d_out") from None
        get = {k: next((layer[a] for a in alias if a in layer and layer[a] is not None), None)
               for k, alias in LAYER_KEYS.items()}
        bits = int(get["precision"]) if get["precision"] is not None else 32
        elem = "fixed" if get["precision"] is not None else "f32"
        attrs = {"reuse_factor": int(get["reuse_factor"] or 1)}
        if layer.get("strategy") is not None:
            attrs["strategy"] = str(layer["strategy"]).lower()
        op = str(layer.get("op", layer.get("type", "dense"))).lower()
        nodes.append(OpNode(i, f"layer.{op}", "layer", [TensorType(elem, (d_out,), bits)],
                            [TensorType(elem, (d_in,), bits)], [i - 1], attrs))
        if i:
            edges.append((i - 1, i))
    return OpGraph(nodes, edges, text_sha256(repr(layers)))
