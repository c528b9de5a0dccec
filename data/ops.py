"""The op registry: every op the project costs, declared once.

An :class:`Op` entry holds everything the rest of the code needs to know about one op:

* ``family`` (``gemm``, ``conv``, ``attention``, ``moe``, ``collective``, ``norm``, ``elementwise``, ...) and
  ``params``, the required shape parameters, with ``optional`` ones and their defaults (an int, or the name of
  another parameter whose value is the default);
* ``build``: the torch reference of the op, ``build(p, dtype_name, device) -> (fn, inputs, weights)`` where
  ``fn(*inputs)`` runs it (the CPU backend times it on real tensors; ``data.workloads.count_cost`` runs it on
  ``meta`` tensors under ``FlopCounterMode``);
* ``flops`` and ``tensors``: closed forms over numpy arrays of the shape parameters (one entry per row), equal to
  what ``count_cost`` counts (``tests/test_costs.py`` checks every op on random shapes, optional parameters
  included). A tensor is ``(name, dims, counted, role)``: ``role`` picks its bytes per element from the row's
  dtype (:data:`ROLES`);
* ``gemm``: the ``(batch, M, N, K)`` of the matrix product the op lowers to (GEMMs, implicit-GEMM convolutions,
  fused attention, grouped expert GEMMs), for tile and wave quantisation; ``rows``: the contiguous row lengths of
  its two operands (their alignment decides vector loads); ``wire``: elements a collective moves over the links
  per GPU; ``constraints``: the op's own shape rules beyond positive integers;
* ``dtypes``: the dtypes it has a kernel for (quantised formats exist only for matrix ops and collectives).

Conventions (one for every source; importers map theirs onto these):

* ``matmul``  A[m,k] @ B[k,n]; ``bmm`` A[batch,m,k] @ B[batch,k,n]
* ``linear``  input [m,k] (m = batch x tokens) -> Linear(k, n, bias=True) -> [m,n] (y = x W^T; W [n,k]); in a
  quantised dtype the bias-free GEMM of that format (:data:`DTYPE_INFO`)
* ``conv2d``  input [batch,c_in,h,w], Conv2d(c_in, c_out, kernel, stride, padding, bias=True); optional
  ``groups`` (default 1; depthwise = ``groups == c_in``) and ``dilation`` (default 1)
* ``max_pool2d`` / ``avg_pool2d`` input [batch,c_in,h,w], a ``kernel`` x ``kernel`` window, ``stride``,
  ``padding`` (at most kernel // 2); ``adaptive_avg_pool2d`` [batch,c_in,h,w] -> [batch,c_in,out_size,out_size]
* ``batchnorm`` BatchNorm2d(c_in) in inference mode over [batch,c_in,h,w]; ``rmsnorm`` RMSNorm(n) over [m,n];
  ``layernorm`` LayerNorm(n) over [m,n]; ``softmax`` over the last dim of [m,n]
* ``embedding`` ids [m] -> Embedding(k, n) -> [m,n]: the weight bytes are the min(m, k) rows a lookup can touch
* elementwise on [m,n]: binary ``add, mul, div, pow``, ``*_scalar`` (tensor op Python scalar), unary ``relu, gelu,
  tanh, silu, sigmoid, hardtanh``; ``ewise`` any other pointwise kernel with ``inputs`` (0..3) [m,n] operands;
  ``copy`` [m,n] -> [m,n]; reductions ``sum, mean, max`` over the last dim of [m,n] -> [m]
* ``sdpa`` q [batch, heads, seq_len, head_dim], k and v [batch, num_kv_heads, kv_len, head_dim] ->
  F.scaled_dot_product_attention(is_causal=causal, enable_gqa); optional ``kv_len`` (default ``seq_len``: decoding
  is ``seq_len`` 1 against a cache of ``kv_len``) and ``num_kv_heads`` (default ``heads``; fewer is grouped-query
  attention, 1 multi-query); the keys and values are stored in the row's ``kv_dtype`` (default its ``dtype``: an
  fp8 KV cache is ``kv_dtype = float8_e4m3fn``). FlopCounterMode counts ``4 b heads seq_len kv_len head_dim``
  whether causal or not (the dense work)
* ``moe`` the expert feed-forward of a mixture-of-experts layer on one GPU (a fused MoE kernel): ``m`` tokens of
  hidden size ``k``, ``experts`` experts with a gated MLP of intermediate size ``n`` each (gate and up
  projections [2n, k], down [k, n]: SwiGLU), each token routed to ``topk`` experts; optional ``tp`` (default 1:
  each expert's ``n`` split over ``tp`` GPUs) and ``ep`` (default 1: the experts split over ``ep`` GPUs). The GPU
  runs ``A = ceil(m topk / ep)`` token-expert assignments (balanced routing) through its ``experts / ep`` local
  experts of ``n / tp``: ``6 A k n / tp`` FLOPs, the weights of the experts those assignments reach at random
  (:func:`experts_touched`)
* collectives over ``gpus`` GPUs of one node, ``n`` elements of the row's dtype: ``all_reduce`` ([n] in, [n] out),
  ``all_gather`` ([n / gpus] in, [n] out), ``reduce_scatter`` ([n] in, [n / gpus] out), ``all_to_all`` ([n] in,
  [n] out); ``wire`` = what a ring moves per GPU: ``2 (g - 1) / g n`` for an all-reduce, ``(g - 1) / g n`` else
* ``dense`` (family ``fpga``) an hls4ml Dense layer [m,k] -> [m,n]
* networks (family ``network``, :mod:`data.networks`): ``mlp, cnn, transformer, resnet, gated_mlp``

Optional parameters: a missing, NaN or 0 value takes the default, and ``data.workloads.validate`` drops a value
equal to its default, so ``conv2d`` with ``groups=1`` is the row without ``groups``.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

# Every shape parameter any op uses; the measurement schema has one nullable column per name.
SHAPE_PARAMS: tuple[str, ...] = (
    "batch",
    "m",
    "n",
    "k",
    "c_in",
    "c_out",
    "h",
    "w",
    "kernel",
    "stride",
    "padding",
    "heads",
    "seq_len",
    "head_dim",
    "causal",
    "width",
    "depth",
    "groups",
    "dilation",
    "out_size",
    "kv_len",
    "inputs",
    "num_kv_heads",
    "experts",
    "topk",
    "tp",
    "ep",
    "gpus",
)
ZERO_OK: frozenset[str] = frozenset({"padding", "causal", "inputs"})  # may be 0 (all others must be >= 1)
MAX_EWISE_INPUTS = 3
FP8_BLOCK = 128  # block-scaled fp8: one scale per 1 x 128 activation block and per 128 x 128 weight block
WO_GROUP = 128  # weight-only int4: one bf16 scale per 128 weights of a row (group-wise quantisation)


# --------------------------------------------------------------------------- dtypes
@dataclass(frozen=True)
class DType:
    """A dtype of a row: ``torch`` stores its activations; ``act`` / ``weight`` / ``out`` are the bytes per element
    of a matrix op's activations, weights and output (a quantised GEMM writes bfloat16); ``rate`` is the
    ``peak_tflops`` key of a spec its math runs at (``data.hardware``); ``matrix`` marks a format only matrix ops and
    collectives have kernels for; ``needs_units``: a GPU whose spec lists no ``rate`` cannot run it."""

    torch_name: str  # the torch dtype that stores the activations (resolved lazily: :attr:`torch`)
    act: float
    weight: float
    out: float
    rate: str
    matrix: bool = False
    needs_units: bool = False
    note: str = ""

    @property
    def torch(self):
        """The torch dtype of the activations (imports torch)."""
        return getattr(_torch(), self.torch_name)


DTYPE_INFO: dict[str, DType] = {
    "float32": DType("float32", 4, 4, 4, "float32"),
    "tf32": DType("float32", 4, 4, 4, "tf32", note="float32 storage, TF32 tensor-core math (GPU only)"),
    "float16": DType("float16", 2, 2, 2, "float16"),
    "bfloat16": DType("bfloat16", 2, 2, 2, "bfloat16", needs_units=True),
    "float8_e4m3fn": DType(
        "float8_e4m3fn", 1, 1, 2, "fp8", matrix=True, needs_units=True, note="e4m3, per-tensor scales"
    ),
    "fp8_block": DType(
        "float8_e4m3fn",
        1,
        1,
        2,
        "fp8",
        matrix=True,
        needs_units=True,
        note=f"e4m3, one float32 scale per 1 x {FP8_BLOCK} activation and {FP8_BLOCK} x {FP8_BLOCK} weight block",
    ),
    "int8": DType("int8", 1, 1, 2, "int8", matrix=True, needs_units=True, note="W8A8 (SmoothQuant), int8 math"),
    "int8_wo": DType("bfloat16", 2, 1, 2, "bfloat16", matrix=True, needs_units=True, note="int8 weights only"),
    "int4_wo": DType(
        "bfloat16", 2, 0.5, 2, "bfloat16", matrix=True, needs_units=True, note="int4 weights only, grouped scales"
    ),
    # fixed point on an FPGA (hls4ml ap_fixed<bits, int_bits>): the width is ``precision_bits`` in the row's config
    "fixed": DType("float32", 4, 4, 4, "float32"),
}
DTYPE_NAMES = tuple(DTYPE_INFO)
FLOAT_DTYPES = tuple(name for name, d in DTYPE_INFO.items() if not d.matrix)
KV_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn")  # a KV cache's storage
QUANTISED_GEMM = tuple(name for name, d in DTYPE_INFO.items() if d.matrix)
COLLECTIVE_DTYPES = ("float32", "float16", "bfloat16", "int8")

# a tensor's bytes per element, by role: the row dtype's activation / weight / output bytes, the KV cache's, or fixed
FIXED_ITEMSIZE = {"int64": 8.0, "int32": 4.0, "float32": 4.0, "bfloat16": 2.0}
ROLES = ("act", "weight", "out", "kv", *FIXED_ITEMSIZE)


def itemsize(dtype: str, role: str = "act", kv_dtype: str | None = None) -> float:
    """Bytes per element of a tensor of ``role`` in a row of ``dtype`` (``kv_dtype``: its KV cache's)."""
    if role in FIXED_ITEMSIZE:
        return FIXED_ITEMSIZE[role]
    if role == "kv":
        return DTYPE_INFO[kv_dtype or dtype].act
    return getattr(DTYPE_INFO[dtype], role)


# --------------------------------------------------------------------------- the entry
Params = Mapping[str, np.ndarray]
Tensor = tuple  # (name, dims: tuple of arrays, counted in bytes: bool, role)
Problem = tuple  # (mask over rows, describe: row -> one-line message)


@dataclass(frozen=True)
class Op:
    family: str
    params: tuple[str, ...]
    builder: Callable  # build(p, dtype, device[, kv_dtype=]) -> (fn, inputs, weights): :meth:`build`
    flops: Callable[[Params], np.ndarray]
    tensors: Callable[[Params], list]
    optional: tuple[tuple[str, int | str], ...] = ()
    gemm: Callable[[Params], tuple] | None = None
    rows: Callable[[Params], tuple] | None = None
    wire: Callable[[Params], np.ndarray] | None = None
    constraints: Callable[[str, Params, np.ndarray], list] | None = None  # (op, params, dtypes) -> problems
    dtypes: tuple[str, ...] = field(default=FLOAT_DTYPES)
    kv: bool = False  # reads a KV cache stored in the row's ``kv_dtype`` (its builder takes ``kv_dtype=``)

    def build(self, p: Mapping[str, int], dtype: str, device: str, **kw):
        """The op's torch reference at shape ``p`` (ints) in ``dtype`` on ``device`` (imports torch)."""
        return self.builder(p, dtype, device, **kw)

    @property
    def names(self) -> tuple[str, ...]:
        """Every shape parameter the op reads: the required ones, then the optional ones."""
        return self.params + tuple(name for name, _ in self.optional)

    @property
    def pointwise(self) -> bool:
        """One output element from the same element of each input: fusable into a neighbouring kernel."""
        return self.family == "elementwise"


def _tensor(name, dims, counted=True, role="act") -> Tensor:
    return (name, dims, counted, role)


# --------------------------------------------------------------------------- torch references
# torch is imported the first time a reference is built (costing rows needs only numpy: a served prediction never
# builds one), and lands in this module's globals for the builders below.
@functools.lru_cache(maxsize=1)
def _tf():
    """``(torch, torch.nn.functional, DTYPES)``: torch imported on first use."""
    torch = importlib.import_module("torch")
    functional = importlib.import_module("torch.nn.functional")
    return torch, functional, {name: getattr(torch, d.torch_name) for name, d in DTYPE_INFO.items()}


def _torch():
    return _tf()[0]


def __getattr__(name: str):
    """``DTYPES`` (dtype name -> torch dtype) on first access, importing torch."""
    if name == "DTYPES":
        return _tf()[2]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fn(path: str):
    """A torch callable named ``torch.<name>``, ``F.<name>`` (torch.nn.functional) or ``nn.<Module>``."""
    torch, F, _ = _tf()
    where, name = path.split(".", 1)
    return getattr({"torch": torch, "F": F, "nn": torch.nn}[where], name)


def _t(shape, dtype, device):
    """A tensor of ``shape``: empty on ``meta``, random values elsewhere (``dtype``: a name of :data:`DTYPES` or a
    torch dtype)."""
    torch, DTYPES = _tf()[0], _tf()[2]
    dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device=device)
    if dtype.is_floating_point and dtype.itemsize >= 2:
        return torch.randn(shape, dtype=dtype, device=device)
    if dtype.is_floating_point:  # fp8: drawn in float32, then rounded
        return torch.randn(shape, device=device).to(dtype)
    return torch.randint(-8, 8, shape, device=device).to(dtype)


def _matmul(p, dtype, device):
    torch = _tf()[0]
    if DTYPE_INFO[dtype].matrix:
        return _quantised_gemm(p, dtype, device, bias=False)
    a, b = _t((p["m"], p["k"]), dtype, device), _t((p["k"], p["n"]), dtype, device)
    return torch.matmul, (a, b), ()


def _bmm(p, dtype, device):
    torch = _tf()[0]
    a = _t((p["batch"], p["m"], p["k"]), dtype, device)
    b = _t((p["batch"], p["k"], p["n"]), dtype, device)
    return torch.bmm, (a, b), ()


def _linear(p, dtype, device):
    torch, DTYPES = _tf()[0], _tf()[2]
    if DTYPE_INFO[dtype].matrix:
        return _quantised_gemm(p, dtype, device, bias=False)
    mod = torch.nn.Linear(p["k"], p["n"], bias=True, device=device, dtype=DTYPES[dtype])
    return mod, (_t((p["m"], p["k"]), dtype, device),), tuple(mod.parameters())


def _ceil(a, b):
    return -(-a // b)


def _quantised_gemm(p, dtype, device, bias):
    """A GEMM of a quantised format, x [m,k] times the weight W [n,k] stored in that format, out [m,n] bfloat16.

    float8_e4m3fn: ``torch._scaled_mm`` with per-tensor scales (the fp8 kernel itself); fp8_block: the block scales
    (1 x 128 for x, 128 x 128 for W) applied to a bfloat16 product of the dequantised operands; int8 (W8A8): the
    int8 operands' product with per-row and per-channel scales; int8_wo / int4_wo: a bfloat16 x times W dequantised
    from int8 / packed int4 (two a byte, one bfloat16 scale per 128 weights of a row)."""
    torch = _tf()[0]
    m, n, k = p["m"], p["n"], p["k"]
    bf16 = torch.bfloat16
    if dtype == "float8_e4m3fn":
        x, w = _t((m, k), dtype, device), _t((n, k), dtype, device)
        sa, sb = _t((), "float32", device), _t((), "float32", device)

        def fp8(x, sa):
            return torch._scaled_mm(x, w.t(), scale_a=sa, scale_b=sb, out_dtype=bf16)

        return fp8, (x, sa), (w, sb)
    if dtype == "fp8_block":
        x, w = _t((m, k), dtype, device), _t((n, k), dtype, device)
        sx = _t((m, _ceil(k, FP8_BLOCK)), "float32", device)
        sw = _t((_ceil(n, FP8_BLOCK), _ceil(k, FP8_BLOCK)), "float32", device)

        def fp8_block(x, sx):
            return torch.matmul(x.to(bf16), w.to(bf16).t())

        return fp8_block, (x, sx), (w, sw)
    if dtype == "int8":
        x, w = _t((m, k), dtype, device), _t((n, k), dtype, device)
        sx, sw = _t((m, 1), "float32", device), _t((1, n), "float32", device)

        def int8(x, sx):
            return (torch.matmul(x.to(bf16), w.to(bf16).t()) * sx * sw).to(bf16)

        return int8, (x, sx), (w, sw)
    x = _t((m, k), "bfloat16", device)
    if dtype == "int8_wo":
        w, s = _t((n, k), "int8", device), _t((n, 1), "bfloat16", device)

        def int8_wo(x):
            return torch.matmul(x, (w.to(bf16) * s).t())

        return int8_wo, (x,), (w, s)
    w = _t((n, _ceil(k, 2)), torch.uint8, device)  # int4_wo: two 4-bit weights a byte
    s = _t((n, _ceil(k, WO_GROUP)), "bfloat16", device)

    def int4_wo(x):
        full = _unpack_int4(w, k, bf16) * s.repeat_interleave(WO_GROUP, dim=1)[:, :k]
        return torch.matmul(x, full.t())

    return int4_wo, (x,), (w, s)


def _conv2d(p, dtype, device):
    torch, DTYPES = _tf()[0], _tf()[2]
    mod = torch.nn.Conv2d(
        p["c_in"],
        p["c_out"],
        p["kernel"],
        stride=p["stride"],
        padding=p["padding"],
        dilation=p.get("dilation", 1),
        groups=p.get("groups", 1),
        bias=True,
        device=device,
        dtype=DTYPES[dtype],
    )
    x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
    return mod, (x,), tuple(mod.parameters())


def _pool(fn, **extra):
    def builder(p, dtype, device):
        x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
        return (
            functools.partial(_fn(fn), kernel_size=p["kernel"], stride=p["stride"], padding=p["padding"], **extra),
            (x,),
            (),
        )

    return builder


def _adaptive_avg_pool2d(p, dtype, device):
    F = _tf()[1]
    x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
    return functools.partial(F.adaptive_avg_pool2d, output_size=p["out_size"]), (x,), ()


def _batchnorm(p, dtype, device):
    torch, DTYPES = _tf()[0], _tf()[2]
    mod = torch.nn.BatchNorm2d(p["c_in"], device=device, dtype=DTYPES[dtype]).eval()
    x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
    return mod, (x,), (mod.weight, mod.bias, mod.running_mean, mod.running_var)


def _module_mn(cls):
    def builder(p, dtype, device):
        DTYPES = _tf()[2]
        mod = _fn(cls)(p["n"], device=device, dtype=DTYPES[dtype])
        return mod, (_t((p["m"], p["n"]), dtype, device),), tuple(mod.parameters())

    return builder


def _embedding(p, dtype, device):
    torch, DTYPES = _tf()[0], _tf()[2]
    mod = torch.nn.Embedding(p["k"], p["n"], device=device, dtype=DTYPES[dtype])
    if device == "meta":
        ids = torch.empty((p["m"],), dtype=torch.int64, device=device)
    else:
        ids = torch.randint(0, p["k"], (p["m"],), device=device)
    return mod, (ids,), (mod.weight[: min(p["m"], p["k"])],)


def _ewise(p, dtype, device):
    torch, DTYPES = _tf()[0], _tf()[2]
    shape, n_in = (p["m"], p["n"]), p["inputs"]
    if n_in == 0:
        return functools.partial(torch.full, shape, 1.0, dtype=DTYPES[dtype], device=device), (), ()
    fn = {1: torch.neg, 2: torch.sub, 3: torch.addcmul}[n_in]
    return fn, tuple(_t(shape, dtype, device) for _ in range(n_in)), ()


def _binary(fn, positive_rhs=False):
    def builder(p, dtype, device):
        x, y = _t((p["m"], p["n"]), dtype, device), _t((p["m"], p["n"]), dtype, device)
        if positive_rhs:  # pow / div: keep the result finite on random inputs
            x, y = x.abs() + 0.5, y.abs() + 0.5
        return _fn(fn), (x, y), ()

    return builder


def _with_scalar(fn, scalar, keyword="other", positive=False):
    def builder(p, dtype, device):
        x = _t((p["m"], p["n"]), dtype, device)
        if positive:
            x = x.abs() + 0.5
        return functools.partial(_fn(fn), **{keyword: scalar}), (x,), ()

    return builder


def _unary(fn):
    def builder(p, dtype, device):
        return _fn(fn), (_t((p["m"], p["n"]), dtype, device),), ()

    return builder


def _reduce(fn):
    def builder(p, dtype, device):
        return functools.partial(_fn(fn), dim=-1), (_t((p["m"], p["n"]), dtype, device),), ()

    return builder


def _sdpa(p, dtype, device, kv_dtype=None):
    F = _tf()[1]
    heads, kv_heads = p["heads"], p.get("num_kv_heads", p["heads"])
    kv_len = p.get("kv_len", p["seq_len"])
    q = _t((p["batch"], heads, p["seq_len"], p["head_dim"]), dtype, device)
    kv_shape = (p["batch"], kv_heads, kv_len, p["head_dim"])
    k, v = _t(kv_shape, kv_dtype or dtype, device), _t(kv_shape, kv_dtype or dtype, device)
    causal, gqa = bool(p["causal"]), kv_heads != heads

    def sdpa(q, k, v):
        k, v = k.to(q.dtype), v.to(q.dtype)  # an fp8 cache is dequantised as the kernel loads it
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    return sdpa, (q, k, v), ()


def experts_touched(local, assignments):
    """The experts ``assignments`` token-expert pairs routed uniformly at random over ``local`` experts reach, on
    average: ``local (1 - (1 - 1 / local)^assignments)``, rounded (a decode step's few tokens read few experts'
    weights; a long prefill reads them all)."""
    local, assignments = np.asarray(local, float), np.asarray(assignments, float)
    with np.errstate(divide="ignore"):
        reach = -local * np.expm1(assignments * np.log1p(-1.0 / local))
    return np.maximum(1.0, np.round(np.where(local > 1, reach, 1.0)))


def _moe_sizes(p):
    """``(local experts, local intermediate size, assignments on this GPU, experts touched)`` of a ``moe`` row."""
    experts, ep, tp = p["experts"], p.get("ep", 1), p.get("tp", 1)
    local, inter = experts // ep, p["n"] // tp
    assignments = _ceil(p["m"] * p["topk"], ep)
    return local, inter, assignments, int(experts_touched(local, assignments))


def _unpack_int4(w, cols: int, dtype):
    """Two signed 4-bit weights a byte (low nibble first) -> ``cols`` values of ``dtype`` along the last dim."""
    torch = _tf()[0]
    low, high = (w & 15).to(dtype) - 8, (w >> 4).to(dtype) - 8
    return torch.stack((low, high), dim=-1).reshape(*w.shape[:-1], -1)[..., :cols]


def _moe(p, dtype, device):
    """Balanced routing: assignment ``a`` goes to local expert ``a mod touched``; each runs the gated MLP
    ``down(silu(gate x) * up x)`` as batched one-row GEMMs (the FLOPs of a grouped GEMM), summed back per token.
    Quantised formats store the experts' weights in that format (fp8, int8, int4 packed two a byte) and take
    bfloat16 tokens."""
    torch, F, DTYPES = _tf()
    m, k = p["m"], p["k"]
    _, inter, assignments, touched = _moe_sizes(p)
    info = DTYPE_INFO[dtype]
    work = torch.bfloat16 if info.matrix else DTYPES[dtype]
    packed = info.weight == 0.5
    wdtype = torch.uint8 if packed else torch.int8 if dtype == "int8_wo" else info.torch
    x = _t((m, k), work, device)
    ids, weights = _t((m, p["topk"]), torch.int32, device), _t((m, p["topk"]), torch.float32, device)
    w13 = _t((touched, 2 * inter, _ceil(k, 2) if packed else k), wdtype, device)
    w2 = _t((touched, k, _ceil(inter, 2) if packed else inter), wdtype, device)

    def moe(x, ids, weights):
        up = _unpack_int4(w13, k, work) if packed else w13.to(work)
        down = _unpack_int4(w2, inter, work) if packed else w2.to(work)
        expert = torch.arange(assignments, device=x.device) % touched
        token = torch.arange(assignments, device=x.device) % m
        h = torch.bmm(x[token].unsqueeze(1), up[expert].transpose(1, 2))
        g = F.silu(h[..., :inter]) * h[..., inter:]
        y = torch.bmm(g, down[expert].transpose(1, 2)).squeeze(1)
        return torch.zeros((m, k), dtype=work, device=x.device).index_add(0, token, y)

    return moe, (x, ids, weights), (w13, w2)


def _collective(kind):
    """A single-process reference of the collective's local data movement (the wire time is the cost model's)."""

    def builder(p, dtype, device):
        torch = _tf()[0]
        n, g = p["n"], p["gpus"]
        x = _t((n // g if kind == "all_gather" else n,), dtype, device)
        if kind == "all_gather":
            return (lambda x: x.repeat(g)), (x,), ()
        if kind == "reduce_scatter":
            return (lambda x: x[: n // g].clone()), (x,), ()
        return torch.clone, (x,), ()

    return builder


def _network(name):
    def builder(p, dtype, device):
        DTYPES = _tf()[2]
        from data import networks  # the torch modules of the networks (imports torch)

        return networks.build_network(name, p, DTYPES[dtype], device)

    return builder


# --------------------------------------------------------------------------- closed forms
def _zero(p):
    return np.zeros(np.broadcast(*p.values()).shape) if p else np.zeros(0)


def conv_out(p: Params, side: str) -> np.ndarray:
    """Output side of a (dilated) convolution: ``(h + 2 padding - dilation (kernel - 1) - 1) // stride + 1``."""
    span = p["dilation"] * (p["kernel"] - 1) + 1
    return np.floor_divide(p[side] + 2 * p["padding"] - span, p["stride"]) + 1


def _pool_out(p: Params, side: str) -> np.ndarray:
    return np.floor_divide(p[side] + 2 * p["padding"] - p["kernel"], p["stride"]) + 1


def _gemm_flops(p):
    return 2 * p["m"] * p["n"] * p["k"]


def _gemm_tensors(p):
    """Float: A [m,k], B [k,n], output [m,n]. A quantised format's tensors: ``_quantised_tensors``."""
    return [_tensor("A", (p["m"], p["k"])), _tensor("B", (p["k"], p["n"])), _tensor("output", (p["m"], p["n"]))]


def _linear_tensors(p):
    return [
        _tensor("input", (p["m"], p["k"])),
        _tensor("weight", (p["n"], p["k"])),
        _tensor("bias", (p["n"],)),
        _tensor("output", (p["m"], p["n"])),
    ]


def quantised_tensors(dtype: str, p: Params) -> list:
    """The tensors of a GEMM (x [m,k] times W [n,k]) in quantised format ``dtype``, as its reference builds them."""
    m, n, k = p["m"], p["n"], p["k"]
    out = _tensor("output", (m, n), role="bfloat16")
    if dtype == "float8_e4m3fn":
        scales = _tensor("scales", (2 + 0 * m,), role="float32")
        return [_tensor("input", (m, k)), _tensor("weight", (n, k), role="weight"), scales, out]
    if dtype == "fp8_block":
        blocks = lambda x: np.ceil(x / FP8_BLOCK)
        return [
            _tensor("input", (m, k)),
            _tensor("input_scales", (m, blocks(k)), role="float32"),
            _tensor("weight", (n, k), role="weight"),
            _tensor("weight_scales", (blocks(n), blocks(k)), role="float32"),
            out,
        ]
    if dtype == "int8":
        return [
            _tensor("input", (m, k)),
            _tensor("input_scales", (m,), role="float32"),
            _tensor("weight", (n, k), role="weight"),
            _tensor("weight_scales", (n,), role="float32"),
            out,
        ]
    if dtype == "int8_wo":
        return [_tensor("input", (m, k)), _tensor("weight", (n, k), role="weight"), _tensor("scales", (n,)), out]
    return [  # int4_wo: packed two a byte (odd k rounds up), a scale per WO_GROUP weights of a row
        _tensor("input", (m, k)),
        _tensor("weight", (n, 2 * np.ceil(k / 2)), role="weight"),
        _tensor("scales", (n, np.ceil(k / WO_GROUP))),
        out,
    ]


def _bmm_tensors(p):
    b = p["batch"]
    return [
        _tensor("A", (b, p["m"], p["k"])),
        _tensor("B", (b, p["k"], p["n"])),
        _tensor("output", (b, p["m"], p["n"])),
    ]


def _conv_tensors(p):
    """A grouped conv's weight is [c_out, c_in / groups, kernel, kernel] (depthwise: c_in / groups = 1)."""
    b, ci, co, k = p["batch"], p["c_in"], p["c_out"], p["kernel"]
    return [
        _tensor("input", (b, ci, p["h"], p["w"])),
        _tensor("weight", (co, ci / p["groups"], k, k)),
        _tensor("bias", (co,)),
        _tensor("output", (b, co, conv_out(p, "h"), conv_out(p, "w"))),
    ]


def _conv_flops(p):
    out = conv_out(p, "h") * conv_out(p, "w")
    return 2 * p["batch"] * p["c_out"] * out * (p["c_in"] / p["groups"]) * p["kernel"] ** 2


def _conv_gemm(p):
    """Implicit GEMM: a grouped conv is ``groups`` independent GEMMs (depthwise: N = 1, K = kernel^2)."""
    g = p["groups"]
    return g, p["batch"] * conv_out(p, "h") * conv_out(p, "w"), p["c_out"] / g, p["c_in"] / g * p["kernel"] ** 2


def _pool_tensors(p):
    b, c = p["batch"], p["c_in"]
    return [_tensor("input", (b, c, p["h"], p["w"])), _tensor("output", (b, c, _pool_out(p, "h"), _pool_out(p, "w")))]


def _adaptive_pool_tensors(p):
    b, c = p["batch"], p["c_in"]
    return [_tensor("input", (b, c, p["h"], p["w"])), _tensor("output", (b, c, p["out_size"], p["out_size"]))]


def _batchnorm_tensors(p):
    x = (p["batch"], p["c_in"], p["h"], p["w"])
    return [
        _tensor("input", x),
        *(_tensor(name, (p["c_in"],)) for name in ("weight", "bias", "running_mean", "running_var")),
        _tensor("output", x),
    ]


def _norm_tensors(*params):
    return lambda p: [
        _tensor("input", (p["m"], p["n"])),
        *(_tensor(name, (p["n"],)) for name in params),
        _tensor("output", (p["m"], p["n"])),
    ]


def _embedding_tensors(p):
    return [
        _tensor("ids", (p["m"],), role="int64"),
        _tensor("weight", (np.minimum(p["m"], p["k"]), p["n"])),
        _tensor("output", (p["m"], p["n"])),
    ]


def _ewise_tensors(p):
    return [_tensor("inputs", (p["inputs"], p["m"], p["n"])), _tensor("output", (p["m"], p["n"]))]


def _mn(*names):
    return lambda p: [_tensor(name, (p["m"], p["n"])) for name in names]


def _reduce_tensors(p):
    return [_tensor("input", (p["m"], p["n"])), _tensor("output", (p["m"],))]


def _sdpa_flops(p):
    return 4 * p["batch"] * p["heads"] * p["seq_len"] * p["kv_len"] * p["head_dim"]


def _sdpa_tensors(p):
    q = (p["batch"], p["heads"], p["seq_len"], p["head_dim"])
    kv = (p["batch"], p["num_kv_heads"], p["kv_len"], p["head_dim"])
    return [_tensor("q", q), _tensor("k", kv, role="kv"), _tensor("v", kv, role="kv"), _tensor("output", q)]


# A decode-like attention (few query rows per KV head) runs the query heads that share a KV head as the rows of one
# tile (FlashAttention-3's pack_gqa, FlashDecoding, vLLM's paged decode kernels): M = seq_len x group.
PACK_GQA_ROWS = 128


def sdpa_gemm(p):
    """The two GEMMs of a fused attention as one: per (sequence, head) ``M`` query rows, ``N = head_dim``,
    ``K = 2 x`` the keys a query sees (all ``kv_len``; causal: ``kv_len - seq_len / 2`` on average, the queries
    being the last ``seq_len`` positions). Query heads sharing a KV head are packed into ``M`` while they fit a tile
    (:data:`PACK_GQA_ROWS`)."""
    group = p["heads"] / p["num_kv_heads"]
    packed = p["seq_len"] * group <= PACK_GQA_ROWS
    batch = np.where(packed, p["batch"] * p["num_kv_heads"], p["batch"] * p["heads"])
    m = np.where(packed, p["seq_len"] * group, p["seq_len"])
    keys = np.where(p["causal"] > 0, p["kv_len"] - p["seq_len"] / 2.0, p["kv_len"])
    return batch, m, p["head_dim"] + 0 * m, np.maximum(2 * keys, 1)


def _moe_arrays(p):
    local, inter = p["experts"] / p["ep"], p["n"] / p["tp"]
    assignments = np.ceil(p["m"] * p["topk"] / p["ep"])
    return local, inter, assignments, experts_touched(local, assignments)


def _moe_flops(p):
    _, inter, assignments, _ = _moe_arrays(p)
    return 6 * assignments * p["k"] * inter


def moe_tensors(dtype: str, p: Params) -> list:
    """Tokens [m,k] in and out, top-k ids (int32) and weights (float32), the touched experts' gate / up [2n', k]
    and down [k, n'] weights (n' = n / tp) in the weight format (packed two a byte for int4)."""
    _, inter, _, touched = _moe_arrays(p)
    info = DTYPE_INFO[dtype]
    act = "bfloat16" if info.matrix else "act"
    pad = (lambda x: 2 * np.ceil(x / 2)) if info.weight == 0.5 else (lambda x: x)
    return [
        _tensor("tokens", (p["m"], p["k"]), role=act),
        _tensor("topk_ids", (p["m"], p["topk"]), role="int32"),
        _tensor("topk_weights", (p["m"], p["topk"]), role="float32"),
        _tensor("w13", (touched, 2 * inter, pad(p["k"])), role="weight"),
        _tensor("w2", (touched, p["k"], pad(inter)), role="weight"),
        _tensor("output", (p["m"], p["k"]), role=act),
    ]


def _moe_gemm(p):
    """The grouped GEMM of the touched experts: per expert ``A / touched`` rows, N = 3 n' (gate, up and down
    outputs), K = k: the FLOPs of both projections."""
    _, inter, assignments, touched = _moe_arrays(p)
    return touched, np.ceil(assignments / touched), 3 * inter, p["k"]


def _collective_tensors(kind):
    def tensors(p):
        part = p["n"] / p["gpus"]
        shard_in, shard_out = kind == "all_gather", kind == "reduce_scatter"
        return [_tensor("input", (part if shard_in else p["n"],)), _tensor("output", (part if shard_out else p["n"],))]

    return tensors


def _wire(factor):
    return lambda p: factor * (p["gpus"] - 1) / p["gpus"] * p["n"]


def _cnn(p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(flops, weights, largest activation)`` of ``data.networks.CNN``: block i is Conv2d(c_{i-1}, width 2^i, 3,
    stride 1 if i == 0 else 2, padding 1) + ReLU (c_{-1} = 3), then a global mean and Linear(c_last, 10)."""
    b, width, depth, h = p["batch"], p["width"], p["depth"], p["h"]
    flops, weights, act = np.zeros(b.shape), np.zeros(b.shape), np.zeros(b.shape)
    c_prev, side = np.full(b.shape, 3.0), h.copy()
    finite = np.isfinite(depth)
    top = int(min(np.max(depth, initial=0, where=finite), CNN_MAX_DEPTH)) if finite.any() else 0
    for i in range(top):
        on = depth > i
        c = width * 2.0**i
        if i > 0:
            side = np.where(on, np.floor_divide(side - 1, 2) + 1, side)  # (side + 2*1 - 3) // 2 + 1
        flops = np.where(on, flops + 2 * b * c * side * side * c_prev * 9, flops)
        weights = np.where(on, weights + c * c_prev * 9 + c, weights)
        act = np.where(on, np.maximum(act, b * c * side * side), act)
        c_prev = np.where(on, c, c_prev)
    deep = depth > CNN_MAX_DEPTH  # refused by the channel check; keep the arrays finite-or-inf, never wrong
    flops = np.where(deep, np.inf, flops + 2 * b * c_prev * 10)
    weights = np.where(deep, np.inf, weights + 10 * c_prev + 10)
    return flops, weights, act


CNN_MAX_DEPTH = 63  # width x 2^(depth-1) channels: deeper than this is beyond int64 for any width >= 1


def _network_tensors(inputs, weights, activation, output):
    """A network's input, all its parameters as one tensor, its output; its largest activation is named (for the
    memory check) but not counted, as ``count_cost`` counts only the network's input, parameters and output."""

    def tensors(p):
        return [
            _tensor("input", inputs(p)),
            _tensor("weights", (weights(p),)),
            _tensor("activation", activation(p), counted=False),
            _tensor("output", output(p)),
        ]

    return tensors


# --------------------------------------------------------------------------- per-op shape rules
BEYOND_INT64 = 2.0**63


def _conv_rules(op, p, dtypes):
    span = p["dilation"] * (p["kernel"] - 1) + 1

    def at(name, i):
        return int(p[name][i])

    out = [
        (
            p[side] + 2 * p["padding"] < span,
            lambda i, side=side: (
                "op 'conv2d': "
                + (f"kernel {at('kernel', i)}" if at("dilation", i) == 1 else f"dilated kernel span {int(span[i])}")
                + f" larger than padded input {side}={at(side, i)}"
            ),
        )
        for side in ("h", "w")
    ]
    out.append(
        (
            (np.fmod(p["c_in"], p["groups"]) > 0) | (np.fmod(p["c_out"], p["groups"]) > 0),
            lambda i: (
                f"op 'conv2d': c_in {at('c_in', i)} and c_out {at('c_out', i)} must be multiples of groups "
                f"{at('groups', i)}"
            ),
        )
    )
    return out


def _pool_rules(op, p, dtypes):
    out = [
        (
            2 * p["padding"] > p["kernel"],
            lambda i: (
                f"op {op!r}: padding {int(p['padding'][i])} must be at most half the kernel {int(p['kernel'][i])}"
            ),
        )
    ]
    for side in ("h", "w"):
        out.append(
            (
                p[side] + 2 * p["padding"] < p["kernel"],
                lambda i, side=side: (
                    f"op {op!r}: kernel {int(p['kernel'][i])} larger than padded input {side}={int(p[side][i])}"
                ),
            )
        )
    return out


def _ewise_rules(op, p, dtypes):
    return [
        (
            p["inputs"] > MAX_EWISE_INPUTS,
            lambda i: f"op 'ewise': inputs must be 0..{MAX_EWISE_INPUTS}, got {_fmt(p['inputs'][i])}",
        )
    ]


def _divides(op, p, whole, part, what):
    """``part`` divides ``whole``: one line naming both."""
    return (
        np.fmod(p[whole], p[part]) > 0,
        lambda i: f"op {op!r}: {whole} {int(p[whole][i])} must be a multiple of {part} {int(p[part][i])}{what}",
    )


def _causal_rule(op, p):
    return (
        (p["causal"] != 0) & (p["causal"] != 1) & ~np.isnan(p["causal"]),
        lambda i: f"op {op!r}: shape parameter 'causal' must be 0 or 1, got {_fmt(p['causal'][i])}",
    )


def _sdpa_rules(op, p, dtypes):
    return [
        _causal_rule(op, p),
        _divides(op, p, "heads", "num_kv_heads", " (each KV head serves a whole group of query heads)"),
        (
            (p["causal"] == 1) & (p["seq_len"] > p["kv_len"]),
            lambda i: (
                f"op 'sdpa': a causal attention's seq_len {int(p['seq_len'][i])} cannot exceed its kv_len "
                f"{int(p['kv_len'][i])} (the queries are the last positions of the keys)"
            ),
        ),
    ]


def _moe_rules(op, p, dtypes):
    return [
        _divides(op, p, "experts", "ep", " (whole experts per GPU)"),
        _divides(op, p, "n", "tp", " (whole columns of each expert per GPU)"),
        (
            p["topk"] > p["experts"],
            lambda i: f"op 'moe': topk {int(p['topk'][i])} exceeds experts {int(p['experts'][i])}",
        ),
    ]


def _collective_rules(op, p, dtypes):
    rules = [
        (p["gpus"] < 2, lambda i: f"op {op!r}: a collective needs gpus >= 2, got {int(p['gpus'][i])}"),
    ]
    if op in ("all_gather", "reduce_scatter"):
        rules.append(_divides(op, p, "n", "gpus", " (one equal shard per GPU)"))
    return rules


def _transformer_rules(op, p, dtypes):
    return [_divides(op, p, "width", "heads", "")]


def _cnn_rules(op, p, dtypes):
    channels = p["width"] * np.exp2(np.minimum(p["depth"], 1100) - 1)
    return [
        (
            channels >= BEYOND_INT64,
            lambda i: f"op 'cnn': the last block's width x 2^(depth-1) = {channels[i]:.3g} channels is beyond int64",
        )
    ]


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    return str(int(x)) if x < 1e15 else f"{x:.3g}"


FP8_ALIGN = 16  # cuBLASLt's fp8 GEMMs need K and N in multiples of 16 (torch._scaled_mm checks the same)


def _gemm_rules(op, p, dtypes):
    fp8 = np.asarray(dtypes, object) == "float8_e4m3fn"
    return [
        (
            fp8 & ((np.fmod(p["k"], FP8_ALIGN) > 0) | (np.fmod(p["n"], FP8_ALIGN) > 0)),
            lambda i: (
                f"op {op!r}: an fp8 GEMM needs k and n in multiples of {FP8_ALIGN}, got k {int(p['k'][i])}, "
                f"n {int(p['n'][i])}"
            ),
        )
    ]


# --------------------------------------------------------------------------- the registry
def _gemm_rows(p):
    return p["k"], p["n"]  # A [.., k] rows and the output's / B's rows of n (linear's weight [n, k]: k)


def _mn_rows(p):
    return p["n"], p["n"]


GEMM_DTYPES = FLOAT_DTYPES + QUANTISED_GEMM
MOE_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "fp8_block", "int8_wo", "int4_wo")
_elementwise = dict(family="elementwise", params=("m", "n"), flops=_zero, rows=_mn_rows)


def _elementwise_op(build, *tensors):
    return Op(builder=build, tensors=_mn(*tensors), **_elementwise)


OPS: dict[str, Op] = {
    "matmul": Op(
        "gemm",
        ("m", "n", "k"),
        _matmul,
        _gemm_flops,
        _gemm_tensors,
        gemm=lambda p: (1 + 0 * p["m"], p["m"], p["n"], p["k"]),
        rows=_gemm_rows,
        constraints=_gemm_rules,
        dtypes=GEMM_DTYPES,
    ),
    "bmm": Op(
        "gemm",
        ("batch", "m", "n", "k"),
        _bmm,
        lambda p: 2 * p["batch"] * p["m"] * p["n"] * p["k"],
        _bmm_tensors,
        gemm=lambda p: (p["batch"], p["m"], p["n"], p["k"]),
        rows=_gemm_rows,
    ),
    "linear": Op(
        "gemm",
        ("m", "n", "k"),
        _linear,
        _gemm_flops,
        _linear_tensors,
        gemm=lambda p: (1 + 0 * p["m"], p["m"], p["n"], p["k"]),
        rows=_gemm_rows,
        constraints=_gemm_rules,
        dtypes=GEMM_DTYPES,
    ),
    "conv2d": Op(
        "conv",
        ("batch", "c_in", "c_out", "h", "w", "kernel", "stride", "padding"),
        _conv2d,
        _conv_flops,
        _conv_tensors,
        optional=(("groups", 1), ("dilation", 1)),
        gemm=_conv_gemm,
        rows=lambda p: (p["c_in"], p["c_out"]),  # channels: the implicit GEMM's K and N rows (NHWC kernels)
        constraints=_conv_rules,
    ),
    "max_pool2d": Op(
        "pool",
        ("batch", "c_in", "h", "w", "kernel", "stride", "padding"),
        _pool("F.max_pool2d"),
        _zero,
        _pool_tensors,
        constraints=_pool_rules,
    ),
    "avg_pool2d": Op(
        "pool",
        ("batch", "c_in", "h", "w", "kernel", "stride", "padding"),
        _pool("F.avg_pool2d"),
        _zero,
        _pool_tensors,
        constraints=_pool_rules,
    ),
    "adaptive_avg_pool2d": Op(
        "pool", ("batch", "c_in", "h", "w", "out_size"), _adaptive_avg_pool2d, _zero, _adaptive_pool_tensors
    ),
    "batchnorm": Op("norm", ("batch", "c_in", "h", "w"), _batchnorm, _zero, _batchnorm_tensors),
    "rmsnorm": Op("norm", ("m", "n"), _module_mn("nn.RMSNorm"), _zero, _norm_tensors("weight"), rows=_mn_rows),
    "layernorm": Op(
        "norm", ("m", "n"), _module_mn("nn.LayerNorm"), _zero, _norm_tensors("weight", "bias"), rows=_mn_rows
    ),
    "embedding": Op("data_movement", ("m", "n", "k"), _embedding, _zero, _embedding_tensors, rows=_mn_rows),
    "copy": Op("data_movement", ("m", "n"), _unary("torch.clone"), _zero, _mn("input", "output"), rows=_mn_rows),
    "softmax": Op(
        "softmax",
        ("m", "n"),
        _reduce("torch.softmax"),
        _zero,
        _mn("input", "output"),
        rows=_mn_rows,
    ),
    "add": _elementwise_op(_binary("torch.add"), "x", "y", "output"),
    "mul": _elementwise_op(_binary("torch.mul"), "x", "y", "output"),
    "div": _elementwise_op(_binary("torch.div", positive_rhs=True), "x", "y", "output"),
    "pow": _elementwise_op(_binary("torch.pow", positive_rhs=True), "x", "y", "output"),
    "add_scalar": _elementwise_op(_with_scalar("torch.add", 1.0), "input", "output"),
    "mul_scalar": _elementwise_op(_with_scalar("torch.mul", 2.0), "input", "output"),
    "div_scalar": _elementwise_op(_with_scalar("torch.div", 2.0), "input", "output"),
    "pow_scalar": _elementwise_op(_with_scalar("torch.pow", 2.0, keyword="exponent", positive=True), "input", "output"),
    "gelu": _elementwise_op(_unary("F.gelu"), "input", "output"),
    "relu": _elementwise_op(_unary("torch.relu"), "input", "output"),
    "tanh": _elementwise_op(_unary("torch.tanh"), "input", "output"),
    "silu": _elementwise_op(_unary("F.silu"), "input", "output"),
    "sigmoid": _elementwise_op(_unary("torch.sigmoid"), "input", "output"),
    "hardtanh": _elementwise_op(_unary("F.hardtanh"), "input", "output"),
    "ewise": Op(
        "elementwise",
        ("m", "n", "inputs"),
        _ewise,
        _zero,
        _ewise_tensors,
        rows=_mn_rows,
        constraints=_ewise_rules,
    ),
    "sum": Op("reduction", ("m", "n"), _reduce("torch.sum"), _zero, _reduce_tensors, rows=_mn_rows),
    "mean": Op("reduction", ("m", "n"), _reduce("torch.mean"), _zero, _reduce_tensors, rows=_mn_rows),
    "max": Op("reduction", ("m", "n"), _reduce("torch.amax"), _zero, _reduce_tensors, rows=_mn_rows),
    "sdpa": Op(
        "attention",
        ("batch", "heads", "seq_len", "head_dim", "causal"),
        _sdpa,
        _sdpa_flops,
        _sdpa_tensors,
        optional=(("kv_len", "seq_len"), ("num_kv_heads", "heads")),
        gemm=sdpa_gemm,
        rows=lambda p: (p["head_dim"], p["head_dim"]),
        constraints=_sdpa_rules,
        kv=True,
    ),
    "moe": Op(
        "moe",
        ("m", "n", "k", "experts", "topk"),
        _moe,
        _moe_flops,
        lambda p: moe_tensors("bfloat16", p),
        optional=(("tp", 1), ("ep", 1)),
        gemm=_moe_gemm,
        rows=lambda p: (p["k"], p["n"] / p["tp"]),
        constraints=_moe_rules,
        dtypes=MOE_DTYPES,
    ),
    **{
        kind: Op(
            "collective",
            ("n", "gpus"),
            _collective(kind),
            _zero,
            _collective_tensors(kind),
            wire=_wire(2.0 if kind == "all_reduce" else 1.0),
            constraints=_collective_rules,
            dtypes=COLLECTIVE_DTYPES,
        )
        for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
    },
    "dense": Op("fpga", ("m", "n", "k"), _linear, _gemm_flops, _linear_tensors, rows=_gemm_rows),
    "mlp": Op(
        "network",
        ("batch", "width", "depth"),
        _network("mlp"),
        lambda p: 2 * p["depth"] * p["batch"] * p["width"] ** 2,
        _network_tensors(
            lambda p: (p["batch"], p["width"]),
            lambda p: p["depth"] * (p["width"] ** 2 + p["width"]),
            lambda p: (p["batch"], p["width"]),
            lambda p: (p["batch"], p["width"]),
        ),
    ),
    "cnn": Op(
        "network",
        ("batch", "width", "depth", "h"),
        _network("cnn"),
        lambda p: _cnn(p)[0],
        _network_tensors(
            lambda p: (p["batch"], 3 + 0 * p["h"], p["h"], p["h"]),
            lambda p: _cnn(p)[1],
            lambda p: (_cnn(p)[2],),
            lambda p: (p["batch"], 10 + 0 * p["batch"]),
        ),
        constraints=_cnn_rules,
    ),
    # per block: LN 2 x 2w, qkv 3w^2 + 3w, proj w^2 + w, fc1 4w^2 + 4w, fc2 4w^2 + w = 12w^2 + 13w weights
    "transformer": Op(
        "network",
        ("batch", "seq_len", "width", "heads", "depth"),
        _network("transformer"),
        lambda p: (
            p["depth"]
            * (24 * p["batch"] * p["seq_len"] * p["width"] ** 2 + 4 * p["batch"] * p["seq_len"] ** 2 * p["width"])
        ),
        _network_tensors(
            lambda p: (p["batch"], p["seq_len"], p["width"]),
            lambda p: p["depth"] * (12 * p["width"] ** 2 + 13 * p["width"]),
            lambda p: (p["batch"], p["seq_len"], 4 * p["width"]),
            lambda p: (p["batch"], p["seq_len"], p["width"]),
        ),
        constraints=_transformer_rules,
    ),
    # stem 27w + w, per block 2 x (9w^2 + w), head 10w + 10 weights
    "resnet": Op(
        "network",
        ("batch", "width", "depth", "h"),
        _network("resnet"),
        lambda p: (
            54 * p["batch"] * p["width"] * p["h"] ** 2
            + 36 * p["depth"] * p["batch"] * p["width"] ** 2 * p["h"] ** 2
            + 20 * p["batch"] * p["width"]
        ),
        _network_tensors(
            lambda p: (p["batch"], 3 + 0 * p["h"], p["h"], p["h"]),
            lambda p: 28 * p["width"] + p["depth"] * 2 * (9 * p["width"] ** 2 + p["width"]) + 10 * p["width"] + 10,
            lambda p: (p["batch"], p["width"], p["h"], p["h"]),
            lambda p: (p["batch"], 10 + 0 * p["batch"]),
        ),
    ),
    # per block: gate + up 2 x (2w^2 + 2w), down 2w^2 + w = 6w^2 + 5w weights
    "gated_mlp": Op(
        "network",
        ("batch", "width", "depth"),
        _network("gated_mlp"),
        lambda p: 12 * p["depth"] * p["batch"] * p["width"] ** 2,
        _network_tensors(
            lambda p: (p["batch"], p["width"]),
            lambda p: p["depth"] * (6 * p["width"] ** 2 + 5 * p["width"]),
            lambda p: (p["batch"], 2 * p["width"]),
            lambda p: (p["batch"], p["width"]),
        ),
    ),
}
FAMILIES = tuple(dict.fromkeys(op.family for op in OPS.values()))


def tensors_of(op: str, dtype: str, p: Params) -> list:
    """The tensors of rows of ``op`` in ``dtype`` (a quantised GEMM's and a MoE's depend on the format)."""
    if op in ("matmul", "linear") and DTYPE_INFO[dtype].matrix:
        return quantised_tensors(dtype, p)
    if op == "moe":
        return moe_tensors(dtype, p)
    return OPS[op].tensors(p)


def family(op: str) -> str:
    return OPS[op].family
