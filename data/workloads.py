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
* ``conv2d``  input [batch,c_in,h,w], Conv2d(c_in, c_out, kernel, stride, padding, bias=True)
* ``layernorm`` LayerNorm(n) over input [m,n]; ``softmax`` over the last dim of [m,n]
* ``add`` x[m,n] + y[m,n]; ``gelu`` gelu(x[m,n])
* elementwise: binary ``add, mul, div, pow`` (two [m,n] tensors), ``*_scalar`` (tensor op Python scalar,
  one [m,n] tensor read: NeuSight's ``addu, mulu, divu, powu``), unary ``relu, gelu, tanh``
* reductions ``sum, mean, max`` over the last dim of [m,n] -> [m]
* ``sdpa`` q, k, v [batch, heads, seq_len, head_dim] -> F.scaled_dot_product_attention(is_causal=causal)
  (FlopCounterMode counts 4*b*h*s^2*d whether causal or not: the dense work, not the unmasked half)
* ``dense`` (family ``fpga``) an hls4ml Dense layer: input [m,k] (m = 1 sample) -> [m,n], k = d_in,
  n = d_out; the torch builder is the float reference of the layer (fixed-point width lives in ``config``)
* networks (family ``network``), see :mod:`data.networks`: ``mlp`` (batch, width, depth), ``cnn``
  (batch, width, depth, h), ``transformer`` (batch, seq_len, width, heads, depth), ``resnet`` (batch,
  width, depth, h), ``gated_mlp`` (batch, width, depth);
  :func:`data.networks.layers` splits one into its layer workloads in the conventions above.

``flops`` is what FlopCounterMode counts (it counts matmul/conv/attention FLOPs and nothing for
elementwise, normalisation or softmax ops, whose cost is memory traffic). ``bytes`` is every input,
weight and output tensor touched once.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

# Every shape parameter any op uses; the measurement schema has one nullable column per name.
SHAPE_PARAMS: tuple[str, ...] = (
    "batch", "m", "n", "k", "c_in", "c_out", "h", "w", "kernel", "stride", "padding",
    "heads", "seq_len", "head_dim", "causal", "width", "depth",
)
# parameters that may be 0 (all others must be >= 1)
ZERO_OK: frozenset[str] = frozenset({"padding", "causal"})

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
    params: tuple[str, ...]
    build: Callable[[Mapping[str, int], torch.dtype, str], tuple[Callable, tuple, tuple]]
    # build returns (fn, inputs, weights); fn(*inputs) runs the op


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
    mod = torch.nn.Conv2d(p["c_in"], p["c_out"], p["kernel"], stride=p["stride"],
                          padding=p["padding"], bias=True, device=device, dtype=dtype)
    x = _t((p["batch"], p["c_in"], p["h"], p["w"]), dtype, device)
    return mod, (x,), tuple(mod.parameters())


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
    q, k, v = (_t(shape, dtype, device) for _ in range(3))
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
    "conv2d": OpSpec("conv", ("batch", "c_in", "c_out", "h", "w", "kernel", "stride", "padding"), _conv2d),
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
    "sum": OpSpec("reduction", ("m", "n"), _reduce(torch.sum)),
    "mean": OpSpec("reduction", ("m", "n"), _reduce(torch.mean)),
    "max": OpSpec("reduction", ("m", "n"), _reduce(torch.amax)),
    "sdpa": OpSpec("attention", ("batch", "heads", "seq_len", "head_dim", "causal"), _sdpa),
    "dense": OpSpec("fpga", ("m", "n", "k"), _linear),
    "mlp": OpSpec("network", ("batch", "width", "depth"), _network("mlp")),
    "cnn": OpSpec("network", ("batch", "width", "depth", "h"), _network("cnn")),
    "transformer": OpSpec("network", ("batch", "seq_len", "width", "heads", "depth"), _network("transformer")),
    "resnet": OpSpec("network", ("batch", "width", "depth", "h"), _network("resnet")),
    "gated_mlp": OpSpec("network", ("batch", "width", "depth"), _network("gated_mlp")),
}


def validate(op: str, params: Mapping[str, object], dtype: str = "float32") -> dict[str, int]:
    """Return the op's shape parameters as plain ints, or raise :class:`WorkloadError` naming the problem.

    The one shape check (``data.costs.shape_problems``, which the featurizer runs over whole frames): every shape
    parameter an integer (no booleans, NaN, inf or fractions; integer-valued text is read as the integer) within
    int64, each tensor's element count and byte size within int64, and the op's own rules. One line per problem,
    echoing at most ``data.costs.ECHO_CHARS`` characters of a value.
    """
    import numbers

    import numpy as np

    from data.costs import echo, first_problem, shape_problems  # data.costs imports this module

    if not isinstance(op, str) or op not in OPS:
        raise WorkloadError(f"unknown op {echo(op, 80)}; known ops: {', '.join(OPS)}")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise WorkloadError(f"unknown dtype {echo(dtype, 80)}; known dtypes: {', '.join(DTYPES)}")
    raw = {}
    for name in OPS[op].params:
        raw[name] = np.empty(1, object)
        raw[name][0] = params.get(name)
    values, problems = shape_problems(op, OPS[op].params, ZERO_OK, raw, 1, dtypes=np.array([dtype], object))
    found = first_problem(problems)
    if found is not None:
        raise WorkloadError(found[1])
    out: dict[str, int] = {}
    for name in OPS[op].params:  # exact ints (a float64 holds integers exactly only up to 2^53)
        value = raw[name][0]
        try:
            out[name] = int(value) if isinstance(value, (numbers.Integral, str)) else int(values[name][0])
        except ValueError:  # text such as "64.0"
            out[name] = int(values[name][0])
    return out


def family(op: str) -> str:
    if op not in OPS:
        raise WorkloadError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    return OPS[op].family


def shape_id(op: str, params: Mapping[str, int]) -> str:
    """Stable id of an (op, shape) configuration, the grouping key for held-out-shape splits."""
    key = op + "|" + ",".join(f"{k}={params.get(k)}" for k in OPS[op].params)
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
