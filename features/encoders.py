"""Three encodings of a sample (workload + hardware), one place to get them: :func:`get_encoder`.

    enc = get_encoder("tabular", registry=reg)   # DataFrame: shapes, FLOPs, bytes, roofline, hardware, MLIR op
    histogram
    enc = get_encoder("graph", registry=reg)     # torch_geometric.data.Data per sample
    enc = get_encoder("tokens")                  # integer ids over a fixed, saved vocabulary

A sample's *source* is MLIR text, an already parsed :class:`~features.mlir.graph.OpGraph`, or a list
of layer dicts (a network without MLIR, e.g. wa-hls4ml dense layers: ``d_in, d_out, precision,
reuse_factor``). All three become an ``OpGraph`` first (:func:`to_graph`), and graph and token
encodings are computed from that one structure, so layer chains and MLIR modules share a code path.

* **tabular** = ``features.tabular.TabularFeaturizer`` (unchanged) + ``mlir_op_<dialect>_<op>``
  counts over the fixed vocabulary :data:`OP_VOCAB` (+ ``mlir_op_other``), ``mlir_n_ops``,
  ``mlir_n_edges`` and ``mlir_available`` (0 for rows without MLIR, whose histogram is all zero).
* **graph**: node features (:func:`node_features`): op one-hot over :data:`OP_VOCAB` + other
  (optional: ``GraphEncoder(op_names=False)`` drops it), op-class one-hot over
  :data:`features.mlir.graph.OP_CLASSES` (contraction / elementwise / reduction / data movement /
  fill / view-constant / scalar body / control), dialect one-hot, element-type one-hot, log2 element
  bits, result rank, log2(1 + result numel), log2(1 + numel of all operands), log2(1 + d) of the
  result's last 4 dims, #operands, #results, #regions, nesting depth, #parallel and #reduction
  iterators, log2 reuse factor, and the analytic cost of the node
  (:func:`features.mlir.graph.node_cost`): log2(1 + iteration space), log2(1 + FLOPs), log2(1 + bytes),
  log2(1 + FLOPs/byte), log2(1 + roofline ns). Per node also ``roofline_ms`` = max(FLOPs / peak,
  bytes / bandwidth) on the sample's hardware (a 1 TFLOP/s, 100 GB/s reference machine when none is
  given) and ``kernel`` (1 for nodes that launch work). Edges: SSA
  def-use (``edge_attr`` [1, 0]) and region nesting parent -> child ([0, 1]). Graph-level ``u``
  [1, H] = the hardware spec vector (:func:`hardware_vector`, the same numbers as the tabular
  ``hw_*`` columns) and ``hw_known`` (0 when no hardware is given, e.g. an FPGA part).
* **tokens**: per op ``[op, <res>, type, bits?, rank, dim buckets..., <arg>, type, dims... ]`` with
  dims as log2 buckets (``dim:2^b`` = floor(log2 d), ``dim:?`` dynamic); ``ids`` is the flat sequence
  ``<bos> op-group <sep> op-group ... <eos>``; ``per_node`` is the [nodes, WIDTH] matrix of the
  groups padded with ``<pad>`` (for a layer chain: one vector per layer). Unknown ops map to
  ``<dialect>.*`` (or ``<unk>``); the vocabulary is ``features/mlir_vocab.json`` (built by
  :func:`build_vocab`, committed; a test checks that the file and the code agree).

**The Encoder protocol** (:class:`Encoder`): what the training path (``pipelines.experiment``) and the served model
(``models.pyfunc``) ask of an encoding: ``transform(rows) -> X`` for a model's ``fit`` / ``predict``, and ``unit``:
``"kernel"`` (one row = one workload, op + shape; an MLIR row is lowered to its kernels first and their costs are
combined per the target's rule) or ``"network"`` (one row = one MLIR module, encoded whole). An encoder is one file
and one config, ``conf/encoder/<name>.yaml`` (``_target_`` + options); :func:`build_encoder` builds it from that
config (the hardware registry is passed to a constructor that takes ``registry``), and the served model stores the
same config in its meta. ``features.tabular.TabularFeaturizer`` / ``PowerFeaturizer`` are kernel encoders as they are.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from data.hardware import HardwareRegistry, HardwareSpec
from features.mlir.graph import OP_CLASSES, OpGraph, OpNode, from_layers, launch_kernels, node_costs, parse_mlir
from features.tabular import FeatureError, TabularFeaturizer

VOCAB_PATH = Path(__file__).resolve().parent / "mlir_vocab.json"

# Fixed op vocabulary: what torch-mlir's linalg-on-tensors export of every workload uses, the other
# common upstream structured / elementwise ops, a TOSA and StableHLO core, and hls4ml-style layers.
OP_VOCAB: tuple[str, ...] = (
    "func.func",
    "func.return",
    "func.call",
    "arith.constant",
    "arith.addf",
    "arith.subf",
    "arith.mulf",
    "arith.divf",
    "arith.negf",
    "arith.remf",
    "arith.maximumf",
    "arith.minimumf",
    "arith.maxnumf",
    "arith.minnumf",
    "arith.cmpf",
    "arith.select",
    "arith.extf",
    "arith.truncf",
    "arith.sitofp",
    "arith.fptosi",
    "arith.index_cast",
    "arith.addi",
    "arith.subi",
    "arith.muli",
    "arith.divsi",
    "arith.cmpi",
    "arith.andi",
    "arith.ori",
    "arith.xori",
    "math.exp",
    "math.log",
    "math.erf",
    "math.tanh",
    "math.sqrt",
    "math.rsqrt",
    "math.powf",
    "math.absf",
    "math.fma",
    "math.exp2",
    "math.log1p",
    "math.sin",
    "math.cos",
    "tensor.empty",
    "tensor.pad",
    "tensor.yield",
    "tensor.expand_shape",
    "tensor.collapse_shape",
    "tensor.extract_slice",
    "tensor.insert_slice",
    "tensor.cast",
    "tensor.extract",
    "tensor.reshape",
    "tensor.concat",
    "linalg.generic",
    "linalg.yield",
    "linalg.index",
    "linalg.fill",
    "linalg.matmul",
    "linalg.batch_matmul",
    "linalg.matvec",
    "linalg.batch_matvec",
    "linalg.dot",
    "linalg.conv_2d_nchw_fchw",
    "linalg.conv_2d_nhwc_hwcf",
    "linalg.depthwise_conv_2d_nchw_chw",
    "linalg.depthwise_conv_2d_nhwc_hwc",
    "linalg.pooling_nchw_max",
    "linalg.pooling_nchw_sum",
    "linalg.transpose",
    "linalg.broadcast",
    "linalg.reduce",
    "linalg.map",
    "linalg.softmax",
    "linalg.elementwise",
    "scf.for",
    "scf.yield",
    "scf.if",
    "ml_program.global",
    "ml_program.global_load",
    "tosa.matmul",
    "tosa.conv2d",
    "tosa.add",
    "tosa.mul",
    "tosa.sub",
    "tosa.exp",
    "tosa.reciprocal",
    "tosa.reduce_sum",
    "tosa.reduce_max",
    "tosa.reshape",
    "tosa.transpose",
    "tosa.const",
    "tosa.clamp",
    "tosa.tanh",
    "tosa.erf",
    "tosa.sigmoid",
    "tosa.rsqrt",
    "tosa.cast",
    "stablehlo.dot_general",
    "stablehlo.convolution",
    "stablehlo.add",
    "stablehlo.multiply",
    "stablehlo.subtract",
    "stablehlo.divide",
    "stablehlo.exponential",
    "stablehlo.maximum",
    "stablehlo.reduce",
    "stablehlo.broadcast_in_dim",
    "stablehlo.reshape",
    "stablehlo.transpose",
    "stablehlo.constant",
    "stablehlo.rsqrt",
    "stablehlo.tanh",
    "stablehlo.convert",
    "stablehlo.return",
    "layer.dense",
    "layer.conv1d",
    "layer.conv2d",
    "layer.activation",
)
DIALECTS: tuple[str, ...] = (
    "func",
    "arith",
    "math",
    "tensor",
    "linalg",
    "scf",
    "ml_program",
    "memref",
    "vector",
    "tosa",
    "stablehlo",
    "torch",
    "layer",
)
ELEM_TYPES: tuple[str, ...] = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "i1", "index", "fixed")
MAX_DIM_BUCKET = 31
WIDTH = 24  # tokens per op group in ``per_node`` (groups are truncated to it)


def _col(name: str) -> str:
    return "mlir_op_" + name.replace(".", "_")


HIST_COLUMNS: tuple[str, ...] = (
    *(_col(n) for n in OP_VOCAB),
    "mlir_op_other",
    "mlir_n_ops",
    "mlir_n_edges",
    "mlir_available",
)


def to_graph(source, where: str = "input") -> OpGraph:
    """MLIR text | OpGraph | list of layer dicts -> OpGraph."""
    if isinstance(source, OpGraph):
        return source
    if isinstance(source, str):
        return parse_mlir(source, where)
    if isinstance(source, (list, tuple)):
        return from_layers(list(source), where)
    raise FeatureError(f"{where}: expected MLIR text, an OpGraph or a list of layer dicts, got {type(source).__name__}")


def op_histogram(g: OpGraph) -> dict[str, float]:
    counts = dict.fromkeys(HIST_COLUMNS, 0.0)
    for n in g.nodes:
        key = _col(n.name)
        counts[key if key in counts and n.name in _OP_SET else "mlir_op_other"] += 1
    counts.update(mlir_n_ops=float(len(g.nodes)), mlir_n_edges=float(len(g.edges)), mlir_available=1.0)
    return counts


_OP_SET = frozenset(OP_VOCAB)


# --------------------------------------------------------------------------- hardware
HW_COLUMNS = (
    "hw_is_gpu",
    "hw_sm_count",
    "hw_clock_mhz",
    "hw_memory_gb",
    "hw_l2_mb",
    "hw_log2_peak_flops",
    "hw_log2_peak_fp32",
    "hw_log2_bandwidth",
    "hw_ridge_intensity",
    "hw_known",
)


def hardware_vector(spec: HardwareSpec | None, dtype: str = "float32") -> np.ndarray:
    """The spec numbers the tabular featurizer uses (same names as its ``hw_*`` columns) + ``hw_known``."""
    if spec is None:
        return np.zeros(len(HW_COLUMNS), np.float32)
    peak, bw = spec.peak_flops(dtype), spec.bandwidth_bytes_s
    return np.array(
        [
            spec.kind == "gpu",
            spec.sm_count,
            spec.boost_clock_mhz,
            spec.memory_gb,
            spec.l2_cache_mb,
            math.log2(peak),
            math.log2(spec.peak_flops("float32")),
            math.log2(bw),
            peak / bw,
            1.0,
        ],
        np.float32,
    )


# --------------------------------------------------------------------------- the protocol
@runtime_checkable
class Encoder(Protocol):
    """Rows (a DataFrame of workload or network descriptions) -> a model's ``X``; see the module docstring.

    Optional attribute ``unit``: ``"kernel"`` (default) or ``"network"``."""

    def transform(self, rows: pd.DataFrame) -> Any: ...


def encoder_unit(encoder) -> str:
    """``"kernel"`` or ``"network"`` (an encoder without a ``unit`` attribute encodes kernels)."""
    return getattr(encoder, "unit", "kernel")


def build_encoder(spec: Mapping, registry: HardwareRegistry | None = None, **context) -> Encoder:
    """The encoder a config describes: ``{"_target_": "module.Class", **options}`` (``conf/encoder/<name>.yaml``).

    ``registry`` and ``context`` (e.g. ``layers=``) go to the constructor only where it takes them."""
    spec = dict(spec)
    target = spec.pop("_target_", None)
    if not isinstance(target, str) or "." not in target:
        raise FeatureError(f"an encoder config needs _target_: module.Class, got {target!r}")
    module, _, name = target.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    params = inspect.signature(cls).parameters
    given = {k: v for k, v in {"registry": registry, **context}.items() if k in params and k not in spec}
    encoder = cls(**spec, **given)
    if not isinstance(encoder, Encoder):
        raise FeatureError(f"{target} is not an encoder (it needs transform(rows))")
    return encoder


def network_rows(
    model_input, registry: HardwareRegistry | None = None, trained_hardware: list[str] | None = None
) -> tuple[list[dict], list[str | None]]:
    """Rows of ``mlir`` + ``hardware`` (+ ``dtype``, default float32) checked one by one: the one path of network
    inputs (training and serving). Returns the records and the resolved hardware id per row (``None`` without a
    registry). With ``trained_hardware``, other hardware is refused. Bad input raises ``FeatureError`` naming the
    row."""
    from data.workloads import DTYPES

    df = pd.DataFrame(model_input).reset_index(drop=True)
    missing = [c for c in ("mlir", "hardware") if c not in df.columns]
    if missing:
        raise FeatureError(f"networks lack column(s) {', '.join(missing)} (give mlir module text + hardware)")
    if df.empty:
        raise FeatureError("no networks given")
    records, hardware = [], []
    for i, row in enumerate(df.to_dict("records")):
        where = f"row {i}"
        text, dtype = row["mlir"], row.get("dtype")
        row["dtype"] = dtype if isinstance(dtype, str) else "float32"
        if not isinstance(text, str) or not text.strip():
            raise FeatureError(f"{where}: empty mlir (give the network's MLIR module text)")
        hw = None
        if registry is not None:
            try:
                hw = registry.resolve(row["hardware"])
            except KeyError as exc:  # UnknownHardwareError: the registry's one line
                raise FeatureError(f"{where}: {exc}") from None
            if trained_hardware and hw not in trained_hardware:
                raise FeatureError(
                    f"{where}: hardware {hw!r} is not among the hardware this network model was "
                    f"trained on ({', '.join(trained_hardware)})"
                )
        if row["dtype"] not in DTYPES:
            raise FeatureError(f"{where}: unknown dtype {row['dtype']!r}; known dtypes: {', '.join(DTYPES)}")
        records.append(row)
        hardware.append(hw)
    return records, hardware


# --------------------------------------------------------------------------- tabular
class TabularEncoder:
    """Tabular features + MLIR op histogram. MLIR comes from an ``mlir`` text column or, with a store,
    from ``mlir_sha256``; rows without either keep the plain tabular features and a zero histogram."""

    name = "tabular"
    unit = "kernel"

    def __init__(self, registry: HardwareRegistry, store=None):
        self.tabular = TabularFeaturizer(registry)
        self.store = store

    def _text(self, row) -> str | None:
        text = row.get("mlir")
        if isinstance(text, str) and text.strip():
            return text
        sha = row.get("mlir_sha256")
        if self.store is not None and isinstance(sha, str) and sha:
            return self.store.get(sha)
        return None

    def transform(self, workloads: pd.DataFrame) -> pd.DataFrame:
        X = self.tabular.transform(workloads)
        hist = []
        for i, row in enumerate(workloads.reset_index(drop=True).to_dict("records")):
            text = self._text(row)
            hist.append(op_histogram(parse_mlir(text, f"row {i}")) if text else dict.fromkeys(HIST_COLUMNS, 0.0))
        return pd.concat([X, pd.DataFrame(hist, columns=list(HIST_COLUMNS))], axis=1)


# --------------------------------------------------------------------------- graph
_ELEM_INDEX = {e: i for i, e in enumerate(ELEM_TYPES)}
_OP_INDEX = {n: i for i, n in enumerate(OP_VOCAB)}
_DIALECT_INDEX = {d: i for i, d in enumerate(DIALECTS)}
NODE_NUMERIC = (
    "log2_bits",
    "rank",
    "log2_numel",
    "log2_operand_numel",
    "log2_d0",
    "log2_d1",
    "log2_d2",
    "log2_d3",
    "n_operands",
    "n_results",
    "n_regions",
    "depth",
    "n_parallel",
    "n_reduction",
    "log2_reuse_factor",
    "log2_iterations",
    "log2_flops",
    "log2_bytes",
    "log2_intensity",
    "log2_roofline_ns",
)
_CLASS_INDEX = {c: i for i, c in enumerate(OP_CLASSES)}
OP_NAME_FEATURES = len(OP_VOCAB) + 1
# default width (with the op-name one-hot); ``GraphEncoder(op_names=False)`` drops the first OP_NAME_FEATURES
NODE_FEATURES = OP_NAME_FEATURES + len(OP_CLASSES) + len(DIALECTS) + 1 + len(ELEM_TYPES) + 1 + len(NODE_NUMERIC)
# reference machine for the roofline of graphs without hardware (hw_known = 0): 1 TFLOP/s, 100 GB/s
REFERENCE_PEAK_FLOPS, REFERENCE_BANDWIDTH = 1e12, 1e11


def _elem_index(elem: str) -> int:
    return _ELEM_INDEX.get(elem, len(ELEM_TYPES))


def roofline_ms(flops: float, nbytes: float, peak_flops: float, bandwidth: float) -> float:
    """Williams et al. (2009) roofline time of one op: max(FLOPs / peak, bytes / bandwidth), in ms."""
    return 1e3 * max(flops / peak_flops, nbytes / bandwidth)


def node_features(
    n: OpNode,
    g: OpGraph | None = None,
    peak_flops: float = REFERENCE_PEAK_FLOPS,
    bandwidth: float = REFERENCE_BANDWIDTH,
) -> np.ndarray:
    """One node's feature vector (width :data:`NODE_FEATURES`; see the module docstring)."""
    from features.mlir.graph import node_cost

    cost = node_cost(n, g if g is not None else OpGraph([n], []))
    v = np.zeros(NODE_FEATURES, np.float32)
    v[_OP_INDEX.get(n.name, len(OP_VOCAB))] = 1
    off = OP_NAME_FEATURES
    v[off + _CLASS_INDEX[cost.op_class]] = 1
    off += len(OP_CLASSES)
    v[off + _DIALECT_INDEX.get(n.dialect, len(DIALECTS))] = 1
    off += len(DIALECTS) + 1
    main = n.results[0] if n.results else (n.operands[0] if n.operands else None)
    v[off + (_elem_index(main.elem) if main else len(ELEM_TYPES))] = 1
    off += len(ELEM_TYPES) + 1
    dims = list(main.shape[-4:]) if main else []
    dims = [0] * (4 - len(dims)) + dims
    reuse = n.attrs.get("reuse_factor", 1)
    roof_ns = 1e6 * roofline_ms(cost.flops, cost.bytes, peak_flops, bandwidth)
    v[off:] = [
        math.log2(1 + (main.bits if main else 0)),
        len(main.shape) if main else 0,
        math.log2(1 + (main.numel if main else 0)),
        math.log2(1 + sum(t.numel for t in n.operands)),
        *(math.log2(1 + max(d, 0)) for d in dims),
        len(n.operands),
        len(n.results),
        n.n_regions,
        n.depth,
        n.iterator_types.count("parallel"),
        n.iterator_types.count("reduction"),
        math.log2(reuse) if isinstance(reuse, int) and reuse > 0 else 0.0,
        math.log2(1 + cost.iterations),
        math.log2(1 + cost.flops),
        math.log2(1 + cost.bytes),
        math.log2(1 + cost.flops / cost.bytes) if cost.bytes else 0.0,
        math.log2(1 + roof_ns),
    ]
    return v


class GraphEncoder:
    """One ``torch_geometric.data.Data`` per sample: x [N, F], edge_index [2, E], edge_attr [E, 2], u [1, H],
    ``roofline_ms`` [N] (per-node analytic roofline on the sample's hardware) and ``kernel`` [N] (1 for
    nodes that launch work: not a view, constant, control op or scalar body op).

    ``op_names=False`` drops the op-name one-hot (the first :data:`OP_NAME_FEATURES` columns), leaving the
    op classes, which transfer to op names never seen in training. ``fusion=True`` counts kernels as a fusing
    runtime launches them (``features.mlir.graph.launch_kernels``: fills and single-use elementwise producers fold
    into their consumer)."""

    name = "graph"
    unit = "network"

    def __init__(self, registry: HardwareRegistry | None = None, op_names: bool = True, fusion: bool = False):
        self.registry = registry
        self.op_names = bool(op_names)
        self.fusion = bool(fusion)

    def transform(self, rows) -> list:
        """One graph per row of ``mlir`` + ``hardware`` (+ ``dtype``): :func:`network_rows`, then :meth:`encode`."""
        records, _ = network_rows(rows, self.registry)
        return [
            self.encode(r["mlir"], hardware=r["hardware"], dtype=r["dtype"], where=f"row {i}")
            for i, r in enumerate(records)
        ]

    @property
    def n_features(self) -> int:
        return NODE_FEATURES if self.op_names else NODE_FEATURES - OP_NAME_FEATURES

    def encode(self, source, hardware: str | None = None, dtype: str = "float32", where: str = "input"):
        import torch
        from torch_geometric.data import Data

        g = to_graph(source, where)
        spec = None
        if hardware is not None:
            if self.registry is None:
                raise FeatureError("graph encoder: a hardware name needs a registry")
            try:
                spec = self.registry.get(hardware)
            except KeyError as exc:
                raise FeatureError(f"{where}: {exc}") from None
        peak, bw = (
            (spec.peak_flops(dtype), spec.bandwidth_bytes_s)
            if spec is not None
            else (REFERENCE_PEAK_FLOPS, REFERENCE_BANDWIDTH)
        )
        x = (
            np.stack([node_features(n, g, peak, bw) for n in g.nodes])
            if g.nodes
            else np.zeros((0, NODE_FEATURES), np.float32)
        )
        if not self.op_names:
            x = np.ascontiguousarray(x[:, OP_NAME_FEATURES:])
        costs = node_costs(g)
        roof = [roofline_ms(c.flops, c.bytes, peak, bw) for c in costs]
        kernel = launch_kernels(g, fusion=self.fusion)
        pairs = [*g.edges, *g.nesting]
        kinds = [[1.0, 0.0]] * len(g.edges) + [[0.0, 1.0]] * len(g.nesting)
        edge_index = torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1)
        return Data(
            x=torch.from_numpy(x),
            edge_index=edge_index,
            edge_attr=torch.tensor(kinds, dtype=torch.float32).reshape(-1, 2),
            u=torch.from_numpy(hardware_vector(spec, dtype)).unsqueeze(0),
            roofline_ms=torch.tensor(roof, dtype=torch.float32),
            kernel=torch.tensor(kernel, dtype=torch.float32),
            num_nodes=len(g.nodes),
        )


# --------------------------------------------------------------------------- tokens
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>", "<sep>", "<res>", "<arg>")


def build_vocab() -> list[str]:
    """The token vocabulary, in id order (the saved ``features/mlir_vocab.json`` must equal this)."""
    return [
        *SPECIALS,
        *OP_VOCAB,
        *(f"{d}.*" for d in DIALECTS),
        *(f"type:{e}" for e in (*ELEM_TYPES, "other")),
        *(f"bits:{b}" for b in range(1, 65)),
        *(f"rank:{r}" for r in range(9)),
        "dim:0",
        "dim:?",
        *(f"dim:2^{b}" for b in range(MAX_DIM_BUCKET + 1)),
        *(f"rf:2^{b}" for b in range(17)),
        "strategy:latency",
        "strategy:resource",
    ]


def save_vocab(path: Path = VOCAB_PATH) -> None:
    path.write_text(json.dumps({"version": 1, "tokens": build_vocab()}, indent=0) + "\n")


@functools.lru_cache(maxsize=4)
def load_vocab(path: str = str(VOCAB_PATH)) -> dict[str, int]:
    tokens = json.loads(Path(path).read_text())["tokens"]
    return {t: i for i, t in enumerate(tokens)}


def dim_token(d: int) -> str:
    if d < 0:
        return "dim:?"
    if d == 0:
        return "dim:0"
    return f"dim:2^{min(int(math.log2(d)), MAX_DIM_BUCKET)}"


def _type_tokens(t) -> list[str]:
    elem = t.elem if t.elem in _ELEM_INDEX else "other"
    toks = [f"type:{elem}"]
    if elem in ("fixed", "other") and 1 <= t.bits <= 64:
        toks.append(f"bits:{t.bits}")
    return toks + [f"rank:{min(len(t.shape), 8)}", *(dim_token(d) for d in t.shape)]


def op_tokens(n: OpNode) -> list[str]:
    toks = [n.name if n.name in _OP_SET else (f"{n.dialect}.*" if n.dialect in _DIALECT_INDEX else "<unk>")]
    for t in n.results:
        toks += ["<res>", *_type_tokens(t)]
    for t in n.operands:
        toks += ["<arg>", *_type_tokens(t)]
    rf = n.attrs.get("reuse_factor")
    if isinstance(rf, int) and rf > 0:
        toks.append(f"rf:2^{min(int(math.log2(rf)), 16)}")
    if n.attrs.get("strategy") in ("latency", "resource"):
        toks.append(f"strategy:{n.attrs['strategy']}")
    return toks


class TokenEncoder:
    """MLIR-aware tokenizer over the saved vocabulary: ``{"ids": LongTensor[T], "per_node": LongTensor[N, WIDTH]}``."""

    name = "tokens"
    unit = "network"

    def __init__(self, vocab_path: str | Path = VOCAB_PATH):
        self.vocab = load_vocab(str(vocab_path))

    def transform(self, rows) -> list:
        """One token encoding per row of ``mlir`` (+ ``hardware``, which the tokens do not see)."""
        records, _ = network_rows(rows)
        return [self.encode(r["mlir"], where=f"row {i}") for i, r in enumerate(records)]

    def tokens(self, source, where: str = "input") -> list[list[str]]:
        return [op_tokens(n) for n in to_graph(source, where).nodes]

    def encode(self, source, where: str = "input") -> dict:
        import torch

        unk = self.vocab["<unk>"]
        groups = [[self.vocab.get(t, unk) for t in grp] for grp in self.tokens(source, where)]
        flat = [self.vocab["<bos>"]]
        for grp in groups:
            flat += grp + [self.vocab["<sep>"]]
        flat[-1] = self.vocab["<eos>"]
        if len(flat) == 1:
            flat.append(self.vocab["<eos>"])
        per_node = torch.zeros((len(groups), WIDTH), dtype=torch.long)  # <pad> = 0
        for i, grp in enumerate(groups):
            per_node[i, : min(len(grp), WIDTH)] = torch.tensor(grp[:WIDTH], dtype=torch.long)
        return {"ids": torch.tensor(flat, dtype=torch.long), "per_node": per_node}


ENCODERS = {"tabular": TabularEncoder, "graph": GraphEncoder, "tokens": TokenEncoder}


def get_encoder(name: str, **kwargs):
    """``tabular`` (needs ``registry``; optional ``store``), ``graph`` (optional ``registry``), ``tokens``."""
    if name not in ENCODERS:
        raise FeatureError(f"unknown encoding {name!r}; known: {', '.join(ENCODERS)}")
    return ENCODERS[name](**kwargs)
