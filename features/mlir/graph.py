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
Pretty-form StableHLO (JAX's ``lower(...).as_text()``) is first re-printed in the generic form by jaxlib's MLIR,
which registers the StableHLO dialects (:func:`_stablehlo_to_generic`).
Malformed text raises :class:`features.tabular.FeatureError` with ``line:column`` of the first error.
Parsed graphs are cached in memory (LRU) keyed by the sha256 of the text.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import threading
from dataclasses import dataclass, field

from features.tabular import FeatureError

# attributes kept per node (values as python ints/lists where the attribute is an integer array,
# else the attribute's printed form); everything else is dropped
KEY_ATTRS = (
    "iterator_types",
    "indexing_maps",
    "strides",
    "dilations",
    "static_low",
    "static_high",
    "permutation",
    "dimensions",
    "predicate",
    "callee",
    # StableHLO (dot_general, convolution, reduce_window, broadcast_in_dim) and function names
    "dot_dimension_numbers",
    "dimension_numbers",
    "feature_group_count",
    "batch_group_count",
    "window_strides",
    "padding",
    "lhs_dilation",
    "rhs_dilation",
    "window_dimensions",
    "base_dilations",
    "window_dilations",
    "broadcast_dimensions",
    "call_target_name",
    "sym_name",
    "sym_visibility",
)


@dataclass(frozen=True)
class TensorType:
    elem: str  # element type as printed: f32, f16, bf16, i8, index, ... ("fixed" for layers)
    shape: tuple[int, ...]  # () for scalars; -1 for a dynamic dimension
    bits: int = 0  # element bit width (0 when it has none, e.g. index)

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
    operand_defs: list[int]  # defining node of each operand, -1 for block arguments
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
        return [int(x) for x in attr]  # DenseI64ArrayAttr, ArrayAttr of IntegerAttr
    except (TypeError, ValueError):
        pass
    try:
        return [int(attr[i]) for i in range(len(attr))]  # DenseIntElementsAttr
    except (TypeError, ValueError, IndexError):
        return str(attr)


def _location(diag) -> str:
    """``"-":6:23`` (a FileLineColLoc's printed form) -> ``6:23``."""
    text = str(diag.location)  # loc("-":6:23)
    inner = text[text.find("(") + 1 : text.rfind(")")]
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
        nodes.append(
            OpNode(
                i,
                name,
                name.split(".", 1)[0] if "." in name else "",
                [_type_info(r.type) for r in op.results],
                [_type_info(v.type) for v in op.operands],
                defs,
                attrs,
                iters,
                len(op.regions),
                parent,
                depth,
            )
        )
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
        generic = _stablehlo_to_generic(text, exc)
        if generic is None:
            raise parse_error(exc) from None
        try:
            module = ir.Module.parse(generic, ctx)
        except ir.MLIRError as exc2:
            raise parse_error(exc2) from None
    return _build(module, sha)


# dialects whose pretty form torch-mlir's MLIR cannot read (not registered there); jaxlib's MLIR registers them
JAX_DIALECTS = ("stablehlo", "chlo", "mhlo", "sdy", "vhlo")


def _stablehlo_to_generic(text: str, exc) -> str | None:
    """Pretty-form StableHLO (what ``jax.jit(f).lower(...).as_text()`` prints) -> the generic form, re-printed by
    jaxlib's MLIR, which has the StableHLO dialects; None when the parse failed for another reason. Without jax
    installed, or when jaxlib cannot read it either, a FeatureError names the problem (line:column)."""
    diags = list(getattr(exc, "error_diagnostics", []) or [])
    first = diags[0].message if diags else str(exc)
    missing = re.search(r"Dialect `(\w+)' not found", first)
    if not missing or missing[1] not in JAX_DIALECTS:
        return None
    try:
        from jax._src.interpreters import mlir as jax_mlir
        from jaxlib.mlir import ir as jir
    except ImportError:
        raise FeatureError(
            f"mlir:{_location(diags[0]) if diags else '?'}: pretty-form {missing[1]} needs jax "
            "(its MLIR registers the StableHLO dialects): pip install jax, or give the generic op "
            "form"
        ) from None
    ctx = getattr(_LOCAL, "jax_ctx", None)
    if ctx is None:
        ctx = _LOCAL.jax_ctx = jax_mlir.make_ir_context()
        ctx.allow_unregistered_dialects = True
    try:
        return jir.Module.parse(text, ctx).operation.get_asm(print_generic_op_form=True)
    except jir.MLIRError as exc2:
        raise parse_error(exc2) from None


BYTECODE_MAGIC = b"ML\xefR"


def _from_bytecode(data: bytes, where: str) -> str:
    """MLIR bytecode -> generic-form text: upstream dialects with torch-mlir's MLIR, StableHLO portable artifacts
    (VHLO, what ``jax.export`` serializes) with jaxlib's ``stablehlo.deserialize_portable_artifact``."""
    from torch_mlir import ir

    try:
        return ir.Module.parse(data, _context()).operation.get_asm(print_generic_op_form=True)
    except ir.MLIRError:
        pass
    try:
        from jax._src.interpreters import mlir as jax_mlir
        from jaxlib.mlir import ir as jir
        from jaxlib.mlir.dialects import stablehlo
    except ImportError:
        raise FeatureError(
            f"{where}: MLIR bytecode that is not upstream MLIR (a StableHLO portable artifact?) needs "
            "jax to read: pip install jax, or give the text form"
        ) from None
    ctx = jax_mlir.make_ir_context()
    try:
        return stablehlo.deserialize_portable_artifact(ctx, data).operation.get_asm(print_generic_op_form=True)
    except (jir.MLIRError, ValueError, RuntimeError) as exc:
        raise FeatureError(f"{where}: unreadable MLIR bytecode: {' '.join(str(exc).split())[:200]}") from None


def decode_mlir(data: bytes, where: str = "mlir") -> str:
    """MLIR file bytes -> text. MLIR text is UTF-8 (anything else is one FeatureError naming the first bad byte);
    MLIR bytecode (``ML\\xefR`` magic, e.g. a ``jax.export`` artifact) is read and printed in the generic form."""
    if data.startswith(BYTECODE_MAGIC):
        return _from_bytecode(data, where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FeatureError(
            f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, line "
            f"{line}): MLIR files are UTF-8"
        ) from None


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
        raise FeatureError(where + msg[len("mlir") :] if msg.startswith("mlir") else msg) from None


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
        get = {
            k: next((layer[a] for a in alias if a in layer and layer[a] is not None), None)
            for k, alias in LAYER_KEYS.items()
        }
        bits = int(get["precision"]) if get["precision"] is not None else 32
        elem = "fixed" if get["precision"] is not None else "f32"
        attrs = {"reuse_factor": int(get["reuse_factor"] or 1)}
        if layer.get("strategy") is not None:
            attrs["strategy"] = str(layer["strategy"]).lower()
        op = str(layer.get("op", layer.get("type", "dense"))).lower()
        nodes.append(
            OpNode(
                i,
                f"layer.{op}",
                "layer",
                [TensorType(elem, (d_out,), bits)],
                [TensorType(elem, (d_in,), bits)],
                [i - 1],
                attrs,
            )
        )
        if i:
            edges.append((i - 1, i))
    return OpGraph(nodes, edges, text_sha256(repr(layers)))


# --------------------------------------------------------------------------- analytic per-node cost
# Coarse op classes that transfer across op names (a conv never seen in training is still a contraction).
OP_CLASSES: tuple[str, ...] = (
    "contraction",
    "elementwise",
    "reduction",
    "data_movement",
    "fill",
    "view_constant",
    "scalar_body",
    "control",
)
_CONTRACTIONS = (
    "linalg.matmul",
    "linalg.batch_matmul",
    "linalg.matvec",
    "linalg.batch_matvec",
    "linalg.dot",
    "linalg.vecmat",
    "linalg.batch_vecmat",
    "linalg.matmul_transpose_a",
    "linalg.matmul_transpose_b",
    "linalg.batch_matmul_transpose_a",
    "linalg.batch_matmul_transpose_b",
    "tosa.matmul",
    "tosa.conv2d",
    "stablehlo.dot_general",
    "stablehlo.convolution",
    "layer.dense",
    "layer.conv1d",
    "layer.conv2d",
)
_VIEWS = (
    "arith.constant",
    "tensor.empty",
    "tensor.expand_shape",
    "tensor.collapse_shape",
    "tensor.cast",
    "tensor.reshape",
    "tosa.reshape",
    "tosa.const",
    "stablehlo.reshape",
    "stablehlo.constant",
    "ml_program.global",
    "ml_program.global_load",
    "tensor.extract",
)
_MOVES = (
    "linalg.transpose",
    "linalg.broadcast",
    "linalg.copy",
    "tensor.pad",
    "tensor.extract_slice",
    "tensor.insert_slice",
    "tensor.concat",
    "tosa.transpose",
    "stablehlo.transpose",
    "stablehlo.broadcast_in_dim",
)
_REDUCTIONS = ("linalg.reduce", "linalg.softmax", "tosa.reduce_sum", "tosa.reduce_max", "stablehlo.reduce")
_CONTROL = (
    "func.func",
    "func.return",
    "func.call",
    "scf.for",
    "scf.if",
    "scf.yield",
    "linalg.yield",
    "tensor.yield",
    "stablehlo.return",
    "linalg.index",
)
# body ops that are not arithmetic (they move or index values, they compute nothing)
_NOT_ARITH = ("arith.constant", "arith.index_cast", "arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi")


@dataclass(frozen=True)
class NodeCost:
    """Analytic quantities of one node (0 for ops that launch no work)."""

    op_class: str
    iterations: float  # iteration-space size (product of the loop extents)
    flops: float  # iterations x arithmetic ops in the body
    bytes: float  # operand + result numel x element bytes (0 for views, constants and body ops)


def _map_results(text: str) -> tuple[list[str], list[str]]:
    """``affine_map<(d0, d1)[s0] -> (d0, 0)>`` -> (dims ``[d0, d1]``, results ``[d0, 0]``)."""
    body = text[text.find("<") + 1 : text.rfind(">")]
    lhs, _, rhs = body.partition("->")
    dims = lhs[lhs.find("(") + 1 : lhs.find(")")]
    res = rhs.strip()[1:-1]
    split = lambda s: [p.strip() for p in s.split(",") if p.strip()]  # noqa: E731 (no nested commas in results)
    return split(dims), split(res)


def iteration_extents(n: OpNode) -> list[int] | None:
    """Loop extents of a ``linalg.generic``-style op from ``indexing_maps`` + operand shapes, else None.

    Operands are ins then outs, one map each; loop dim ``dk`` takes its extent from the first operand
    dim whose map result is the plain ``dk`` (a dim only seen inside an expression, e.g. ``d2 * 2 + d5``,
    is found from another operand, usually the filter; if none has it, its extent counts as 1).
    """
    maps = n.attrs.get("indexing_maps")
    if not isinstance(maps, list) or len(maps) != len(n.operands):
        return None
    extents: dict[str, int] = {}
    order: list[str] = []
    for text, t in zip(maps, n.operands):
        dims, results = _map_results(text)
        order = order or dims
        for r, d in zip(results, t.shape):
            if r in dims and r not in extents and d > 0:
                extents[r] = d
    return [extents.get(d, 1) for d in order]


def _body_arith(n: OpNode, g: OpGraph) -> int:
    """Arithmetic ops (arith.* / math.*, not casts or constants) nested in ``n``'s regions."""
    count, stack = 0, [n.index]
    kids = _children_index(g)
    while stack:
        for c in kids.get(stack.pop(), ()):
            node = g.nodes[c]
            if node.dialect in ("arith", "math") and node.name not in _NOT_ARITH:
                count += 1
            stack.append(c)
    return count


def _children_index(g: OpGraph) -> dict[int, list[int]]:
    cached = getattr(g, "_kids", None)
    if cached is None:
        cached = {}
        for m in g.nodes:
            if m.parent >= 0:
                cached.setdefault(m.parent, []).append(m.index)
        object.__setattr__(g, "_kids", cached)
    return cached


def _numel(ts) -> int:
    return max((t.numel for t in ts), default=0)


def _bytes(ts) -> float:
    return float(sum(t.numel * max(t.bits, 8) / 8 for t in ts))


def op_class(n: OpNode, g: OpGraph | None = None) -> str:
    """The coarse class of a node (see :data:`OP_CLASSES`)."""
    name = n.name
    if name in _CONTROL:
        return "control"
    if g is not None and n.parent >= 0 and g.nodes[n.parent].dialect in ("linalg", "tensor") and n.depth >= 2:
        return "scalar_body"
    if name in _VIEWS:
        return "view_constant"
    if name == "linalg.fill":
        return "fill"
    if name in _MOVES:
        return "data_movement"
    if name.startswith("linalg.pooling"):
        return "reduction"
    if name in _CONTRACTIONS or name.startswith(("linalg.conv", "linalg.depthwise_conv")):
        return "contraction"
    if name in _REDUCTIONS:
        return "reduction"
    if "reduction" in n.iterator_types:
        # a generic whose body multiplies and accumulates (mulf + addf) is a contraction, else a reduction
        if g is not None:
            body = {g.nodes[c].name for c in _children_index(g).get(n.index, ())}
            if {"arith.mulf", "arith.addf"} <= body:
                return "contraction"
        return "reduction"
    return "elementwise"


def node_cost(n: OpNode, g: OpGraph) -> NodeCost:
    """Iteration space, FLOPs and bytes of one node, from the MLIR alone.

    * ``linalg.generic`` (and any op with ``indexing_maps``): iterations = product of
      :func:`iteration_extents`; named linalg ops have implicit maps, so their loop nest is read off
      the shapes: matmul-like = result numel x the first input's last dim (the reduced K), conv /
      pooling = result numel x filter (window) numel / output channels, reduce / softmax = the input
      numel, everything else = the largest operand/result numel;
    * FLOPs = iterations x the arithmetic ops of the body (``linalg.matmul``'s implicit body is
      ``mulf`` + ``addf``: 2 MNK); ops without a body count one op per iteration when elementwise,
      2 per iteration when a contraction (``layer.dense``: 2 d_in d_out);
    * bytes = (operand + result numel) x element bytes; views, constants, control and body ops move
      nothing (0). ``layer.dense`` adds its d_in x d_out weights.
    """
    cls = op_class(n, g)
    if cls in ("control", "scalar_body", "view_constant"):
        return NodeCost(cls, 0.0, 0.0, 0.0)
    name, ins = n.name, n.operands
    ext = iteration_extents(n)
    if ext is not None:
        iters = float(math.prod(ext))
    elif name.startswith("linalg.conv") or name.startswith("linalg.depthwise") or name.startswith("linalg.pooling"):
        # filter / window numel per output element: pooling windows whole, channel-first filters
        # ([F, C, KH, KW], depthwise [C, KH, KW]) over their first dim, channel-last over their last
        out, filt = _numel(n.results), (ins[1] if len(ins) > 1 else None)
        per_out = filt.numel if filt is not None else 1
        if filt is not None and filt.shape and not name.startswith("linalg.pooling"):
            per_out //= max(filt.shape[0] if ("fchw" in name or "nchw" in name) else filt.shape[-1], 1)
        iters = float(out * max(per_out, 1))
    elif cls == "contraction" and name.startswith("linalg.") and ins and ins[0].shape:
        iters = float(max(_numel(n.results), 1) * max(ins[0].shape[-1], 1))
    elif name == "layer.dense" and ins and n.results:
        iters = float(ins[0].numel * n.results[0].numel)
    elif cls == "reduction" and ins:
        iters = float(ins[0].numel)
    else:
        iters = float(max(_numel(n.results), _numel(ins)))
    body = _body_arith(n, g)
    if body == 0 and n.n_regions == 0:
        body = 2 if cls == "contraction" else (1 if cls in ("elementwise", "reduction") else 0)
    nbytes = _bytes(ins) + _bytes(n.results)
    if name == "layer.dense" and ins and n.results:
        nbytes += ins[0].numel * n.results[0].numel * max(ins[0].bits, 1) / 8
    return NodeCost(cls, iters, iters * body, nbytes)


def node_costs(g: OpGraph) -> list[NodeCost]:
    """:func:`node_cost` of every node (cached on the graph)."""
    cached = getattr(g, "_costs", None)
    if cached is None:
        cached = [node_cost(n, g) for n in g.nodes]
        object.__setattr__(g, "_costs", cached)
    return cached


_TRANSPOSES = ("linalg.transpose", "tosa.transpose", "stablehlo.transpose")
LAUNCHES = ("contraction", "elementwise", "reduction", "data_movement", "fill")  # classes that run as a kernel


def launch_kernels(g: OpGraph, fusion: bool = False) -> list[float]:
    """Per node, 1 if it launches a kernel, else 0.

    ``fusion=False``: every node of a working class (not a view, constant, control op or body op) is a kernel.
    ``fusion=True`` counts what a fusing runtime launches (loop fusion as XLA / TorchInductor do it): a
    ``linalg.fill`` (an accumulator's initial value) is folded into its consumer, and an elementwise node whose
    result feeds exactly one working node, itself elementwise or a reduction, is fused into it, and so is a transpose
    feeding exactly one contraction (a GEMM reads a transposed operand through its layout flag; views between them
    are looked through). Matters for decomposed ops: a LayerNorm lowers to ~15 linalg ops, which eager PyTorch runs
    as one kernel.
    """
    classes = [c.op_class for c in node_costs(g)]
    kernel = [float(c in LAUNCHES) for c in classes]
    if not fusion:
        return kernel
    uses: dict[int, set[int]] = {}
    for src, dst in g.edges:
        uses.setdefault(src, set()).add(dst)

    def consumers(i: int, seen: frozenset = frozenset()) -> set[int]:
        out = set()
        for d in uses.get(i, ()):
            if classes[d] == "view_constant" and d not in seen:
                out |= consumers(d, seen | {d})
            else:
                out.add(d)
        return out

    for i, cls in enumerate(classes):
        if cls == "fill":
            kernel[i] = 0.0
        elif cls == "elementwise":
            cons = consumers(i)
            if len(cons) == 1 and classes[next(iter(cons))] in ("elementwise", "reduction"):
                kernel[i] = 0.0
        elif g.nodes[i].name in _TRANSPOSES:
            cons = consumers(i)
            if len(cons) == 1 and classes[next(iter(cons))] == "contraction":
                kernel[i] = 0.0
    return kernel
