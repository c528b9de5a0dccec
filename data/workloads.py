"""Workload definitions: one place that knows each op, its shape parameters and how to build it.

A workload is ``(op, params, dtype)``. The same builder serves three callers:

* the CPU backend runs it on real tensors;
* :func:`count_cost` runs it on ``meta`` tensors under :class:`torch.utils.flop_counter.FlopCounterMode`
  to get FLOPs and bytes without allocating (used by the simulators and the featurizer, so a user who
  only gives shapes gets the same FLOPs/bytes the measured rows carry);
* validation (:func:`validate`) for rows a user hands in.

Conventions (one for every source; importers map theirs onto these):

* ``matmul``  A[m,k] @ B[k,n]
* ``bmm``     A[batch,m,k] @ B[batch,k,n]
* ``linear``  input [m,k] (m = batch x tokens) -> Linear(k, n, bias=True) -> [m,n]
* ``conv2d``  input [batch,c_in,h,w], Conv2d(c_in, c_out, kernel, stride, padding, bias=True); optional
  ``groups`` (default 1; depthwise = ``groups == c_in``, both channel counts divisible by it) and ``dilation``
  (default 1)
* ``max_pool2d`` / ``avg_pool2d`` input [batch,c_in,h,w], a ``kernel`` x ``kernel`` window, ``stride``,
  ``padding`` (at most kernel // 2, as torch requires); ``adaptive_avg_pool2d`` input [batch,c_in,h,w] ->
  [batch,c_in,out_size,out_size] (a 1x1 output is a ``mean`` over h*w: what eager PyTorch launches for it)
* ``batchnorm`` BatchNorm2d(c_in) in inference mode over [batch,c_in,h,w] (running statistics; 1-d inputs
  [batch,c_in,length] have h = length, w = 1); ``rmsnorm`` RMSNorm(n) over [m,n]
* ``embedding`` ids [m] (m = batch x tokens) -> Embedding(k, n) -> [m,n]: a row gather from a [k,n] table
  (one_hot(ids)[m,k] @ table[k,n] computed as a lookup); the weight bytes are the rows a lookup can touch,
  min(m, k) x n, not the whole table
* ``layernorm`` LayerNorm(n) over input [m,n]; ``softmax`` over the last dim of [m,n]
* ``add`` x[m,n] + y[m,n]; ``gelu`` gelu(x[m,n])
* elementwise: binary ``add, mul, div, pow`` (two [m,n] tensors), ``*_scalar`` (tensor op Python scalar,
  one [m,n] tensor read: NeuSight's ``addu, mulu, divu, powu``), unary ``relu, gelu, tanh, silu, sigmoid,
  hardtanh`` (hardtanh = clamp to [-1, 1]; ReLU6 is the same kernel with other bounds)
* ``ewise`` any other pointwise kernel: an [m,n] output computed from ``inputs`` tensors of [m,n] (0 = a
  fill such as ``zeros`` or ``arange``, 1..3; scalar and broadcast operands are not counted): the builder
  runs ``full`` / ``neg`` / ``sub`` / ``addcmul`` for 0 / 1 / 2 / 3 inputs
* ``copy`` a copy kernel writing [m,n] from as many elements (``clone``, a reshape or ``contiguous`` of a
  non-contiguous tensor, ``cat``, a dtype cast, a gather by index)
* reductions ``sum, mean, max`` over the last dim of [m,n] -> [m]
* ``sdpa`` q, k, v [batch, heads, seq_len, head_dim] -> F.scaled_dot_product_attention(is_causal=causal)
  (FlopCounterMode counts 4*b*h*s^2*d whether causal or not: the dense work, not the unmasked half);
  optional ``kv_len`` (default ``seq_len``): keys and values [batch, heads, kv_len, head_dim] (cross-attention,
  decoding one token against a cache); FLOPs 4*b*h*seq_len*kv_len*d
* ``dense`` (family ``fpga``) an hls4ml Dense layer: input [m,k] (m = 1 sample) -> [m,n], k = d_in,
  n = d_out; the torch builder is the float reference of the layer (fixed-point width lives in ``config``)
* networks (family ``network``), see :mod:`data.networks`: ``mlp`` (batch, width, depth), ``cnn``
  (batch, width, depth, h), ``transformer`` (batch, seq_len, width, heads, depth), ``resnet`` (batch,
  width, depth, h), ``gated_mlp`` (batch, width, depth);
  :func:`data.networks.layers` splits one into its layer workloads in the conventions above.

Optional parameters (``OpSpec.optional``: name -> default, an int or the name of another parameter) keep
the rows that do not use them exactly as before: a missing, NaN or 0 value (0 is what a feature frame holds for
an unused column) takes the default, and :func:`validate` drops a value equal to its default, so ``conv2d`` with
``groups=1`` has the shape_id, validation, FLOPs and bytes of a ``conv2d`` row without ``groups``.

``flops`` is what FlopCounterMode counts (it counts matmul/conv/attention FLOPs and nothing for
elementwise, normalisation, pooling, gather or softmax ops, whose cost is memory traffic). ``bytes`` is every
input, weight and output tensor touched once.
"""

from __future__ import annotations

import functools
import hashlib
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

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
)
# parameters that may be 0 (all others must be >= 1)
ZERO_OK: frozenset[str] = frozenset({"padding", "causal", "inputs"})
MAX_EWISE_INPUTS = 3

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "tf32": torch.float32,  # float32 storage, tensor-core TF32 math (GPU only)
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    # fixed point on an FPGA (hls4ml ap_fixed<bits, int_bits>): the bit width is a number in the row's
    # ``config`` (``precision_bits``), so models can interpolate between widths and the dtype stays one
    # category; the torch builder uses float32 as the layer's numerical reference.
    "fixed": torch.float32,
}


class WorkloadError(ValueError):
    """A workload description that cannot be built (unknown op, missing or invalid shape)."""


@dataclass(frozen=True)
class OpSpec:
    family: str
    params: tuple[str, ...]  # required
    build: Callable[[Mapping[str, int], torch.dtype, str], tuple[Callable, tuple, tuple]]
    # build returns (fn, inputs, weights); fn(*inputs) runs the op
    optional: tuple[tuple[str, int | str], ...] = ()  # (name, default: an int or another parameter's name)

    @property
    def names(self) -> tuple[str, ...]:
        """Every shape parameter the op reads: the required ones, then the optional ones."""
        return self.params + tuple(name for name, _ in self.optional)


def _t(shape, dtype, device):
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.randn(shape, dtype=dtype, device=device)


def _matmul(p, dtype, device):
    a, b = _t((p["m"], p["k"]), dtype, device), _t((p["k"], p["n"]), dtype, device)
    return torch.matmul, (a, b), ()


def _bmm(p, dtype, device):
    a = _t((p["batch"], p["m"], p["k"]), dtype, device)
    b = _t((p["batch"], p["k"], p["n"]), dtype, device)
    return torch.bmm, (a, b), ()


def _linear(p, dtype, device):
    mod = torch.nn.Linear(p["k"], p["n"], bias=True, device=device, dtype=dtype)
    return mod, (_t((p["m"], p["k"]), dtype, device),), tuple(mod.parameters())


def _conv2d(p, dtype, device):
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
        dtype=dtype,
    )
    x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
    return mod, (x,), tuple(mod.parameters())


def _pool(fn, **extra):
    def builder(p, dtype, device):
        x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
        return (
            functools.partial(fn, kernel_size=p["kernel"], stride=p["stride"], padding=p["padding"], **extra),
            (x,),
            (),
        )

    return builder


def _adaptive_avg_pool2d(p, dtype, device):
    x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
    return functools.partial(F.adaptive_avg_pool2d, output_size=p["out_size"]), (x,), ()


def _batchnorm(p, dtype, device):
    mod = torch.nn.BatchNorm2d(p["c_in"], device=device, dtype=dtype).eval()
    x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
    return mod, (x,), (mod.weight, mod.bias, mod.running_mean, mod.running_var)


def _rmsnorm(p, dtype, device):
    mod = torch.nn.RMSNorm(p["n"], device=device, dtype=dtype)
    return mod, (_t((p["m"], p["n"]), dtype, device),), tuple(mod.parameters())


def _embedding(p, dtype, device):
    mod = torch.nn.Embedding(p["k"], p["n"], device=device, dtype=dtype)
    if device == "meta":
        ids = torch.empty((p["m"],), dtype=torch.int64, device=device)
    else:
        ids = torch.randint(0, p["k"], (p["m"],), device=device)
    # the rows a lookup can touch (at most m of the k): the table's bytes that move, not its size
    return mod, (ids,), (mod.weight[: min(p["m"], p["k"])],)


def _ewise(p, dtype, device):
    shape, n_in = (p["m"], p["n"]), p["inputs"]
    if n_in == 0:
        return functools.partial(torch.full, shape, 1.0, dtype=dtype, device=device), (), ()
    fn = {1: torch.neg, 2: torch.sub, 3: torch.addcmul}[n_in]
    return fn, tuple(_t(shape, dtype, device) for _ in range(n_in)), ()


def _layernorm(p, dtype, device):
    mod = torch.nn.LayerNorm(p["n"], device=device, dtype=dtype)
    return mod, (_t((p["m"], p["n"]), dtype, device),), tuple(mod.parameters())


def _softmax(p, dtype, device):
    return functools.partial(torch.softmax, dim=-1), (_t((p["m"], p["n"]), dtype, device),), ()


def _add(p, dtype, device):
    return torch.add, (_t((p["m"], p["n"]), dtype, device), _t((p["m"], p["n"]), dtype, device)), ()


def _gelu(p, dtype, device):
    return F.gelu, (_t((p["m"], p["n"]), dtype, device),), ()


def _binary(fn, positive_rhs=False):
    def builder(p, dtype, device):
        x, y = _t((p["m"], p["n"]), dtype, device), _t((p["m"], p["n"]), dtype, device)
        if positive_rhs:  # pow / div: keep the result finite on random inputs
            x, y = x.abs() + 0.5, y.abs() + 0.5
        return fn, (x, y), ()

    return builder


def _with_scalar(fn, scalar, keyword="other", positive=False):
    def builder(p, dtype, device):
        x = _t((p["m"], p["n"]), dtype, device)
        if positive:
            x = x.abs() + 0.5
        return functools.partial(fn, **{keyword: scalar}), (x,), ()

    return builder


def _unary(fn):
    def builder(p, dtype, device):
        return fn, (_t((p["m"], p["n"]), dtype, device),), ()

    return builder


def _reduce(fn):
    def builder(p, dtype, device):
        return functools.partial(fn, dim=-1), (_t((p["m"], p["n"]), dtype, device),), ()

    return builder


def _sdpa(p, dtype, device):
    shape = (p["batch"], p["heads"], p["seq_len"], p["head_dim"])
    kv_shape = (p["batch"], p["heads"], p.get("kv_len", p["seq_len"]), p["head_dim"])
    q, k, v = _t(shape, dtype, device), _t(kv_shape, dtype, device), _t(kv_shape, dtype, device)
    return functools.partial(F.scaled_dot_product_attention, is_causal=bool(p["causal"])), (q, k, v), ()


def _network(name):
    def builder(p, dtype, device):
        from data.networks import build_network  # networks are built from the ops above

        return build_network(name, p, dtype, device)

    return builder


OPS: dict[str, OpSpec] = {
    "matmul": OpSpec("gemm", ("m", "n", "k"), _matmul),
    "bmm": OpSpec("gemm", ("batch", "m", "n", "k"), _bmm),
    "linear": OpSpec("gemm", ("m", "n", "k"), _linear),
    "conv2d": OpSpec(
        "conv",
        ("batch", "c_in", "c_out", "h", "w", "kernel", "stride", "padding"),
        _conv2d,
        optional=(("groups", 1), ("dilation", 1)),
    ),
    "max_pool2d": OpSpec("pool", ("batch", "c_in", "h", "w", "kernel", "stride", "padding"), _pool(F.max_pool2d)),
    "avg_pool2d": OpSpec("pool", ("batch", "c_in", "h", "w", "kernel", "stride", "padding"), _pool(F.avg_pool2d)),
    "adaptive_avg_pool2d": OpSpec("pool", ("batch", "c_in", "h", "w", "out_size"), _adaptive_avg_pool2d),
    "batchnorm": OpSpec("norm", ("batch", "c_in", "h", "w"), _batchnorm),
    "rmsnorm": OpSpec("norm", ("m", "n"), _rmsnorm),
    "embedding": OpSpec("data_movement", ("m", "n", "k"), _embedding),
    "copy": OpSpec("data_movement", ("m", "n"), _unary(torch.clone)),
    "layernorm": OpSpec("norm", ("m", "n"), _layernorm),
    "softmax": OpSpec("softmax", ("m", "n"), _softmax),
    "add": OpSpec("elementwise", ("m", "n"), _add),
    "gelu": OpSpec("elementwise", ("m", "n"), _gelu),
    "mul": OpSpec("elementwise", ("m", "n"), _binary(torch.mul)),
    "div": OpSpec("elementwise", ("m", "n"), _binary(torch.div, positive_rhs=True)),
    "pow": OpSpec("elementwise", ("m", "n"), _binary(torch.pow, positive_rhs=True)),
    "add_scalar": OpSpec("elementwise", ("m", "n"), _with_scalar(torch.add, 1.0)),
    "mul_scalar": OpSpec("elementwise", ("m", "n"), _with_scalar(torch.mul, 2.0)),
    "div_scalar": OpSpec("elementwise", ("m", "n"), _with_scalar(torch.div, 2.0)),
    "pow_scalar": OpSpec("elementwise", ("m", "n"), _with_scalar(torch.pow, 2.0, keyword="exponent", positive=True)),
    "relu": OpSpec("elementwise", ("m", "n"), _unary(torch.relu)),
    "tanh": OpSpec("elementwise", ("m", "n"), _unary(torch.tanh)),
    "silu": OpSpec("elementwise", ("m", "n"), _unary(F.silu)),
    "sigmoid": OpSpec("elementwise", ("m", "n"), _unary(torch.sigmoid)),
    "hardtanh": OpSpec("elementwise", ("m", "n"), _unary(F.hardtanh)),
    "ewise": OpSpec("elementwise", ("m", "n", "inputs"), _ewise),
    "sum": OpSpec("reduction", ("m", "n"), _reduce(torch.sum)),
    "mean": OpSpec("reduction", ("m", "n"), _reduce(torch.mean)),
    "max": OpSpec("reduction", ("m", "n"), _reduce(torch.amax)),
    "sdpa": OpSpec(
        "attention", ("batch", "heads", "seq_len", "head_dim", "causal"), _sdpa, optional=(("kv_len", "seq_len"),)
    ),
    "dense": OpSpec("fpga", ("m", "n", "k"), _linear),
    "mlp": OpSpec("network", ("batch", "width", "depth"), _network("mlp")),
    "cnn": OpSpec("network", ("batch", "width", "depth", "h"), _network("cnn")),
    "transformer": OpSpec("network", ("batch", "seq_len", "width", "heads", "depth"), _network("transformer")),
    "resnet": OpSpec("network", ("batch", "width", "depth", "h"), _network("resnet")),
    "gated_mlp": OpSpec("network", ("batch", "width", "depth"), _network("gated_mlp")),
}


def validate(op: str, params: Mapping[str, object], dtype: str = "float32") -> dict[str, int]:
    """Return the op's shape parameters as plain ints, or raise :class:`WorkloadError` naming the problem.

    A thin wrapper around the one shape check (``data.costs.shape_problems``, which the featurizer runs over whole
    frames): every shape parameter an integer (no booleans, NaN, inf or fractions; integer-valued text is read as
    the integer) within int64, each tensor's element count and byte size within int64, and the op's own rules
    (a kernel that fits, groups that divide the channels, pooling padding, ``ewise`` inputs, ...). One line per
    problem, echoing at most ``data.costs.ECHO_CHARS`` characters of a value. Optional parameters: a missing,
    NaN or 0 value is the default and a value equal to the default is dropped from the result.
    """
    return validate_many(op, [params], [dtype])[0]


def validate_many(op: str, rows: Sequence[Mapping[str, object]], dtypes: Sequence[str]) -> list[dict[str, int]]:
    """:func:`validate` of many rows of one ``op`` in one vectorised pass of the shape check (an importer's tens of
    thousands of distinct shapes); raises :class:`WorkloadError` with the first bad row's problem."""
    import numpy as np

    from data.costs import echo, first_problem, shape_problems  # data.costs imports this module

    if not isinstance(op, str) or op not in OPS:
        raise WorkloadError(f"unknown op {echo(op, 80)}; known ops: {', '.join(OPS)}")
    for dtype in dtypes:
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise WorkloadError(f"unknown dtype {echo(dtype, 80)}; known dtypes: {', '.join(DTYPES)}")
    spec, n = OPS[op], len(rows)
    raw = {}
    for name in spec.names:
        raw[name] = np.empty(n, object)
        for i, r in enumerate(rows):  # cell by cell: a value that is itself a sequence stays one (bad) cell
            raw[name][i] = r.get(name)
    values, problems = shape_problems(op, raw, n, dtypes=np.array(list(dtypes), object))
    found = first_problem(problems)
    if found is not None:
        raise WorkloadError(found[1])
    out = []
    for i in range(n):
        row = {name: _exact(raw[name][i], values[name][i]) for name in spec.params}
        for name, default in spec.optional:
            value = raw[name][i]
            if _unset(value):
                continue
            ivalue = _exact(value, values[name][i])
            if ivalue != 0 and ivalue != (row[default] if isinstance(default, str) else default):
                row[name] = ivalue
        out.append(row)
    return out


def _exact(value, approx: float) -> int:
    """A validated value as an exact int (a float64 holds integers exactly only up to 2^53: 2**60 + 1 stays)."""
    if isinstance(value, (numbers.Integral, str)):
        try:
            return int(value)
        except ValueError:  # text such as "64.0"
            pass
    return int(approx)


def _default(spec: OpSpec, name: str, values: Mapping[str, int]) -> int:
    default = dict(spec.optional)[name]
    return int(values[default]) if isinstance(default, str) else int(default)


def _unset(value) -> bool:
    """None, NaN, pandas' NA (whose truth value raises) or 0: an optional parameter left at its default."""
    if value is None:
        return True
    try:
        return bool(value != value or value == 0)
    except TypeError:
        return True


def family(op: str) -> str:
    if op not in OPS:
        raise WorkloadError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    return OPS[op].family


def shape_id(op: str, params: Mapping[str, int]) -> str:
    """Stable id of an (op, shape) configuration, the grouping key for held-out-shape splits."""
    key = op + "|" + ",".join(f"{k}={params.get(k)}" for k in OPS[op].params)
    for name, _ in OPS[op].optional:  # only a value other than the default changes the id
        value = params.get(name)
        if not _unset(value) and int(value) != _default(OPS[op], name, params):
            key += f",{name}={int(value)}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def build(op: str, params: Mapping[str, int], dtype: str, device: str = "cpu"):
    """Build ``(fn, inputs, weights)`` for a validated workload on ``device``."""
    p = validate(op, params, dtype)
    return OPS[op].build(p, DTYPES[dtype], device)


def _nbytes(tensors) -> int:
    return int(sum(t.numel() * t.element_size() for t in tensors))


@functools.lru_cache(maxsize=65536)
def _count_cost_cached(op: str, items: tuple[tuple[str, int], ...], dtype: str) -> tuple[float, float]:
    fn, inputs, weights = build(op, dict(items), dtype, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return float(counter.get_total_flops()), float(_nbytes(inputs) + _nbytes(weights) + _nbytes(outs))


def count_cost(op: str, params: Mapping[str, object], dtype: str) -> tuple[float, float]:
    """FLOPs (FlopCounterMode) and bytes moved (inputs + weights + outputs once), without allocating."""
    p = validate(op, params, dtype)
    return _count_cost_cached(op, tuple(sorted(p.items())), dtype)
