"""Closed-form FLOPs, bytes and tensor shapes of every op, vectorised over rows, and the one shape check.

:func:`data.workloads.count_cost` builds an op on ``meta`` tensors under ``FlopCounterMode``: exact, but ~0.1-1 ms a
row. Here the same two numbers come from closed forms over numpy arrays (one array per shape parameter, a row per
workload), equal to ``count_cost`` for every op (``tests/test_costs.py`` checks each op of ``OPS`` against it on
random shapes, optional parameters included, and fails for an op without a closed form here):

* ``flops``: what FlopCounterMode counts: ``2 m n k`` per GEMM (the bias add of ``linear`` / ``conv2d`` is not
  counted), ``2 b c_out h_out w_out (c_in / groups) kernel^2`` per convolution with
  ``h_out = (h + 2 padding - dilation (kernel - 1) - 1) // stride + 1``, ``4 b heads seq_len kv_len head_dim`` for
  SDPA (causal or not), 0 for elementwise, normalisation, pooling, gather, copy, softmax and reduction ops; a
  network is the sum of its layers (``data/networks.py``);
* ``bytes``: every input, weight and output tensor once, ``elements x itemsize`` of the dtype's torch storage
  (embedding ids are int64 whatever the dtype; its weight bytes are the min(m, k) rows a lookup can touch).

Optional parameters (``OpSpec.optional``) enter at their effective value (:func:`with_defaults`: a missing column,
NaN or 0 is the default), so a conv2d row without ``groups`` is costed as ``groups = 1``.

:data:`FORMS` also names each tensor and its dims (``matmul`` A [m,k], B [k,n], output [m,n]; a network's
``weights`` are one tensor of all its parameters, plus its largest ``activation``, which is not counted in ``bytes``
since ``count_cost`` counts only the network's input, parameters and output). :func:`shape_problems` is the one
shape check behind ``data.workloads.validate`` (one workload) and ``features.tabular.TabularFeaturizer.check`` (a
frame): integers only (no booleans, no NaN / inf, no fractions), every parameter and every tensor's element count
and byte size within int64, the op's own rules (a dilated kernel that fits the padded input, groups that divide
both channel counts, pooling padding at most half the kernel, 0..3 ``ewise`` inputs, a 0/1 ``causal``, heads that
divide a transformer's width) and, where the device's memory is known, no tensor (nor all of them together) larger
than that memory: a tensor that cannot exist on the device is refused naming it, its size and the memory. Each
problem is one line that echoes at most :data:`ECHO_CHARS` characters of the input.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from data.workloads import MAX_EWISE_INPUTS, OPS, ZERO_OK, count_cost

INT64_MAX = 2**63 - 1
BEYOND_INT64 = 2.0**63  # float64 values >= this are beyond int64 (float64 has no INT64_MAX)
ECHO_CHARS = 200  # at most this much of a user's value is echoed back in an error message
# storage bytes per element of each dtype (the torch dtype of data.workloads.DTYPES: tf32 and fixed store float32)
ITEMSIZE = {"float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2, "fixed": 4}
OWN_ITEMSIZE = {"int64": 8}  # tensors whose dtype is not the row's (embedding ids)
CNN_MAX_DEPTH = 63  # width x 2^(depth-1) channels: deeper than this is beyond int64 for any width >= 1

Params = Mapping[str, np.ndarray]
Tensor = tuple  # (name, dims: tuple of arrays, counted in bytes: bool, own dtype or None: the row's)


def echo(value, limit: int = ECHO_CHARS) -> str:
    """``repr`` of a user's value on one line, cut to ``limit`` characters (a 5 MB cell is not sent back)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, str) and len(value) > limit:
        text = f"{repr(value[:limit])[: limit + 2]}... ({len(value)} characters)"
    else:
        text = repr(value)
        if len(text) > limit:
            text = f"{text[:limit]}... ({len(text)} characters)"
    return " ".join(text.splitlines())


def fmt_dim(x: float) -> str:
    """A tensor dimension for a message: ``4096``, ``10^9`` (an exact power of ten >= 10^4) or ``3.1e+20``."""
    if not math.isfinite(x):
        return str(x)
    if x >= 1e4:
        k = round(math.log10(x))
        if 10**k == x:
            return f"10^{k}"
        if x >= 1e15:
            return f"{x:.3g}"
    return str(int(x))


# --------------------------------------------------------------------------- closed forms
@dataclass(frozen=True)
class Form:
    """An op's closed forms over arrays of its shape parameters (float64, one entry per row; optional parameters at
    their effective values, :func:`with_defaults`)."""

    flops: Callable[[Params], np.ndarray]
    tensors: Callable[[Params], list]  # [(name, (dim arrays), counted in bytes[, bytes per element])]


def _tensor(name, dims, counted=True, dtype=None) -> Tensor:
    """A tensor of a form; ``dtype`` (a key of :data:`OWN_ITEMSIZE`: int64 ids) fixes its element size, else the
    row's dtype sets it."""
    return (name, dims, counted, dtype)


def _conv_out(p: Params, side: str) -> np.ndarray:
    """Output side of a (dilated) convolution: ``(h + 2 padding - dilation (kernel - 1) - 1) // stride + 1``."""
    span = p["dilation"] * (p["kernel"] - 1) + 1
    return np.floor_divide(p[side] + 2 * p["padding"] - span, p["stride"]) + 1


def _pool_out(p: Params, side: str) -> np.ndarray:
    return np.floor_divide(p[side] + 2 * p["padding"] - p["kernel"], p["stride"]) + 1


def _gemm_tensors(p):
    return [_tensor("A", (p["m"], p["k"])), _tensor("B", (p["k"], p["n"])), _tensor("output", (p["m"], p["n"]))]


def _bmm_tensors(p):
    b = p["batch"]
    return [
        _tensor("A", (b, p["m"], p["k"])),
        _tensor("B", (b, p["k"], p["n"])),
        _tensor("output", (b, p["m"], p["n"])),
    ]


def _linear_tensors(p):
    return [
        _tensor("input", (p["m"], p["k"])),
        _tensor("weight", (p["n"], p["k"])),
        _tensor("bias", (p["n"],)),
        _tensor("output", (p["m"], p["n"])),
    ]


def _conv_tensors(p):
    """A grouped conv's weight is [c_out, c_in / groups, kernel, kernel] (depthwise: c_in / groups = 1)."""
    b, ci, co, k = p["batch"], p["c_in"], p["c_out"], p["kernel"]
    return [
        _tensor("input", (b, ci, p["h"], p["w"])),
        _tensor("weight", (co, ci / p["groups"], k, k)),
        _tensor("bias", (co,)),
        _tensor("output", (b, co, _conv_out(p, "h"), _conv_out(p, "w"))),
    ]


def _conv_flops(p):
    return (
        2
        * p["batch"]
        * p["c_out"]
        * _conv_out(p, "h")
        * _conv_out(p, "w")
        * (p["c_in"] / p["groups"])
        * p["kernel"] ** 2
    )


def _pool_tensors(p):
    b, c = p["batch"], p["c_in"]
    return [_tensor("input", (b, c, p["h"], p["w"])), _tensor("output", (b, c, _pool_out(p, "h"), _pool_out(p, "w")))]


def _adaptive_pool_tensors(p):
    b, c = p["batch"], p["c_in"]
    return [_tensor("input", (b, c, p["h"], p["w"])), _tensor("output", (b, c, p["out_size"], p["out_size"]))]


def _batchnorm_tensors(p):
    """Inference batchnorm: x, y and four per-channel vectors (weight, bias, running mean and variance)."""
    x = (p["batch"], p["c_in"], p["h"], p["w"])
    return [
        _tensor("input", x),
        *(_tensor(name, (p["c_in"],)) for name in ("weight", "bias", "running_mean", "running_var")),
        _tensor("output", x),
    ]


def _rmsnorm_tensors(p):
    return [_tensor("input", (p["m"], p["n"])), _tensor("weight", (p["n"],)), _tensor("output", (p["m"], p["n"]))]


def _embedding_tensors(p):
    """int64 ids [m], the table rows a lookup can touch (min(m, k) of the k) and the output [m, n]."""
    return [
        _tensor("ids", (p["m"],), dtype="int64"),
        _tensor("weight", (np.minimum(p["m"], p["k"]), p["n"])),
        _tensor("output", (p["m"], p["n"])),
    ]


def _ewise_tensors(p):
    """``inputs`` [m, n] tensors (0 for a fill) and the [m, n] output."""
    return [_tensor("inputs", (p["inputs"], p["m"], p["n"])), _tensor("output", (p["m"], p["n"]))]


def _mn(*names):
    """Ops on [m, n] tensors: ``names`` = the tensors, each [m, n] (inputs first, the output last)."""
    return lambda p: [_tensor(name, (p["m"], p["n"])) for name in names]


def _layernorm_tensors(p):
    return [
        _tensor("input", (p["m"], p["n"])),
        _tensor("weight", (p["n"],)),
        _tensor("bias", (p["n"],)),
        _tensor("output", (p["m"], p["n"])),
    ]


def _reduce_tensors(p):
    return [_tensor("input", (p["m"], p["n"])), _tensor("output", (p["m"],))]


def _sdpa_tensors(p):
    """q and the output [b, heads, seq_len, d]; k and v [b, heads, kv_len, d] (kv_len = seq_len by default)."""
    q = (p["batch"], p["heads"], p["seq_len"], p["head_dim"])
    kv = (p["batch"], p["heads"], p["kv_len"], p["head_dim"])
    return [_tensor("q", q), _tensor("k", kv), _tensor("v", kv), _tensor("output", q)]


def _zero(p):
    return np.zeros(np.broadcast(*p.values()).shape) if p else np.zeros(0)


def _network(inputs, weights, activation, output):
    def tensors(p):
        return [
            _tensor("input", inputs(p)),
            _tensor("weights", (weights(p),)),
            _tensor("activation", activation(p), counted=False),
            _tensor("output", output(p)),
        ]

    return tensors


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


# weights per block: transformer LN 2 x 2w, qkv 3w^2 + 3w, proj w^2 + w, fc1 4w^2 + 4w, fc2 4w^2 + w = 12w^2 + 13w;
# resnet block 2 x (9w^2 + w); gated_mlp gate + up 2 x (2w^2 + 2w), down 2w^2 + w = 6w^2 + 5w
FORMS: dict[str, Form] = {
    "matmul": Form(lambda p: 2 * p["m"] * p["n"] * p["k"], _gemm_tensors),
    "bmm": Form(lambda p: 2 * p["batch"] * p["m"] * p["n"] * p["k"], _bmm_tensors),
    "linear": Form(lambda p: 2 * p["m"] * p["n"] * p["k"], _linear_tensors),
    "dense": Form(lambda p: 2 * p["m"] * p["n"] * p["k"], _linear_tensors),
    "conv2d": Form(_conv_flops, _conv_tensors),
    "max_pool2d": Form(_zero, _pool_tensors),
    "avg_pool2d": Form(_zero, _pool_tensors),
    "adaptive_avg_pool2d": Form(_zero, _adaptive_pool_tensors),
    "batchnorm": Form(_zero, _batchnorm_tensors),
    "rmsnorm": Form(_zero, _rmsnorm_tensors),
    "embedding": Form(_zero, _embedding_tensors),
    "layernorm": Form(_zero, _layernorm_tensors),
    "softmax": Form(_zero, _mn("input", "output")),
    **{op: Form(_zero, _mn("x", "y", "output")) for op in ("add", "mul", "div", "pow")},
    **{
        op: Form(_zero, _mn("input", "output"))
        for op in (
            "copy",
            "gelu",
            "relu",
            "tanh",
            "silu",
            "sigmoid",
            "hardtanh",
            "add_scalar",
            "mul_scalar",
            "div_scalar",
            "pow_scalar",
        )
    },
    "ewise": Form(_zero, _ewise_tensors),
    **{op: Form(_zero, _reduce_tensors) for op in ("sum", "mean", "max")},
    "sdpa": Form(lambda p: 4 * p["batch"] * p["heads"] * p["seq_len"] * p["kv_len"] * p["head_dim"], _sdpa_tensors),
    "mlp": Form(
        lambda p: 2 * p["depth"] * p["batch"] * p["width"] ** 2,
        _network(
            lambda p: (p["batch"], p["width"]),
            lambda p: p["depth"] * (p["width"] ** 2 + p["width"]),
            lambda p: (p["batch"], p["width"]),
            lambda p: (p["batch"], p["width"]),
        ),
    ),
    "cnn": Form(
        lambda p: _cnn(p)[0],
        _network(
            lambda p: (p["batch"], 3 + 0 * p["h"], p["h"], p["h"]),
            lambda p: _cnn(p)[1],
            lambda p: (_cnn(p)[2],),
            lambda p: (p["batch"], 10 + 0 * p["batch"]),
        ),
    ),
    "transformer": Form(
        lambda p: (
            p["depth"]
            * (24 * p["batch"] * p["seq_len"] * p["width"] ** 2 + 4 * p["batch"] * p["seq_len"] ** 2 * p["width"])
        ),
        _network(
            lambda p: (p["batch"], p["seq_len"], p["width"]),
            lambda p: p["depth"] * (12 * p["width"] ** 2 + 13 * p["width"]),
            lambda p: (p["batch"], p["seq_len"], 4 * p["width"]),
            lambda p: (p["batch"], p["seq_len"], p["width"]),
        ),
    ),
    "resnet": Form(
        lambda p: (
            54 * p["batch"] * p["width"] * p["h"] ** 2
            + 36 * p["depth"] * p["batch"] * p["width"] ** 2 * p["h"] ** 2
            + 20 * p["batch"] * p["width"]
        ),
        _network(
            lambda p: (p["batch"], 3 + 0 * p["h"], p["h"], p["h"]),
            lambda p: 28 * p["width"] + p["depth"] * 2 * (9 * p["width"] ** 2 + p["width"]) + 10 * p["width"] + 10,
            lambda p: (p["batch"], p["width"], p["h"], p["h"]),
            lambda p: (p["batch"], 10 + 0 * p["batch"]),
        ),
    ),
    "gated_mlp": Form(
        lambda p: 12 * p["depth"] * p["batch"] * p["width"] ** 2,
        _network(
            lambda p: (p["batch"], p["width"]),
            lambda p: p["depth"] * (6 * p["width"] ** 2 + 5 * p["width"]),
            lambda p: (p["batch"], 2 * p["width"]),
            lambda p: (p["batch"], p["width"]),
        ),
    ),
}


def has_closed_form(op: str) -> bool:
    return op in FORMS


def _form(op: str) -> Form:
    if op not in FORMS:
        raise NotImplementedError(
            f"op {op!r} has no closed form in data/costs.py FORMS: add its FLOPs and tensors "
            "there (tests/test_costs.py checks them against count_cost)"
        )
    return FORMS[op]


def _rows_shape(p: Params) -> tuple:
    return np.broadcast(*(np.asarray(v) for v in p.values())).shape if p else ()


def with_defaults(op: str, params: Params) -> dict[str, np.ndarray]:
    """The op's parameters with every optional one at its effective value: a missing column, NaN or 0 (what a
    feature frame holds for an unused column) is the default (``OpSpec.optional``: an int or another parameter)."""
    p = {k: np.asarray(v, float) for k, v in params.items()}
    shape = _rows_shape(p)
    for name, default in OPS[op].optional:
        base = p[default] if isinstance(default, str) else np.full(shape, float(default))
        if name not in p:
            p[name] = base
        else:
            with np.errstate(invalid="ignore"):
                p[name] = np.where(np.isnan(p[name]) | (p[name] == 0), base, p[name])
    return p


def drop_defaults(op: str, params: Params) -> dict[str, np.ndarray]:
    """The inverse of :func:`with_defaults` for a frame: an optional parameter equal to its default becomes 0, as
    ``data.workloads.validate`` drops it (so a conv2d row with ``groups = 1`` is the row that never had groups)."""
    p = dict(params)
    for name, default in OPS[op].optional:
        base = p[default] if isinstance(default, str) else float(default)
        p[name] = np.where(p[name] == base, 0.0, p[name])
    return p


def elements(dims: Sequence[np.ndarray]) -> np.ndarray:
    out = np.ones(np.broadcast(*dims).shape) if dims else np.ones(())
    for d in dims:
        out = out * d
    return out


def _itemsizes(tensor: Tensor, itemsize):
    """Bytes per element of one of a form's tensors: its own (int64 ids) or the rows' dtype's."""
    return itemsize if tensor[3] is None else OWN_ITEMSIZE[tensor[3]]


def op_costs(op: str, params: Params, itemsize) -> tuple[np.ndarray, np.ndarray]:
    """``(flops, bytes)`` of rows of one ``op`` (``params``: name -> float64 array, valid shapes; optional
    parameters missing, NaN or 0 take their defaults)."""
    form = _form(op)
    itemsize = np.asarray(itemsize, float)
    with np.errstate(all="ignore"):
        p = with_defaults(op, params)
        flops = np.asarray(form.flops(p), float)
        nbytes = sum(elements(t[1]) * _itemsizes(t, itemsize) for t in form.tensors(p) if t[2])
        return flops, np.asarray(nbytes * np.ones_like(itemsize), float)


def costs(
    ops, params: Params, dtypes, groups: tuple[np.ndarray, Sequence[str]] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(flops, bytes)`` per row of mixed ops: ``ops`` and ``dtypes`` arrays of names, ``params`` arrays per shape
    parameter (valid shapes; an op's unused parameters are ignored, an optional one missing, NaN or 0 is its
    default). Rows are grouped by op (``groups``: the ``(codes, names)`` of ``pd.factorize(ops)`` where the caller
    has them); every group is one numpy pass.

    An op of ``data.workloads.OPS`` without a closed form here is costed by ``count_cost`` row by row (exact, slow;
    ``tests/test_costs.py`` fails until its closed form is added)."""
    ops = np.asarray(ops, object)
    codes, names = groups if groups is not None else pd.factorize(ops)
    dt_codes, dt_names = pd.factorize(np.asarray(dtypes, object))
    itemsize = np.array([ITEMSIZE[d] for d in dt_names], float)[dt_codes]
    flops, nbytes = np.zeros(len(ops)), np.zeros(len(ops))
    for c, op in enumerate(names):
        rows = np.flatnonzero(codes == c) if len(names) > 1 else slice(None)
        used = [k for k in OPS[op].names if k in params]
        if op in FORMS:
            p = {k: np.asarray(params[k], float)[rows] for k in used}
            flops[rows], nbytes[rows] = op_costs(op, p, itemsize[rows])
        else:
            at = np.arange(len(ops))[rows]
            cost = [count_cost(op, {k: params[k][i] for k in used}, dt_names[dt_codes[i]]) for i in at]
            flops[at], nbytes[at] = np.array(cost, float).reshape(-1, 2).T
    return flops, nbytes


# --------------------------------------------------------------------------- the shape check
def numbers_of(raw) -> tuple[np.ndarray, np.ndarray]:
    """One column of user values -> ``(values, bad)``: float64 with NaN where missing (None / NaN), and a mask of
    cells that are not integers (booleans, inf, fractions, text that is not an integer, other objects).

    Numeric columns convert in one numpy step; object / string columns (JSON, a CSV column with text in it) go
    cell by cell. Integer-valued text (``"64"``) is accepted, as pandas reads a number column as text when one
    cell holds text."""
    arr = np.asarray(raw)
    if arr.dtype.kind in "iu":
        return arr.astype(float), np.zeros(arr.shape, bool)
    if arr.dtype.kind == "f":
        values = arr.astype(float)
        with np.errstate(invalid="ignore"):
            bad = np.isinf(values) | (np.isfinite(values) & (values != np.floor(values)))
        return np.where(bad, np.nan, values), bad
    if arr.dtype.kind == "b":
        return np.full(arr.shape, np.nan), np.ones(arr.shape, bool)
    values, bad = np.full(arr.shape, np.nan), np.zeros(arr.shape, bool)
    for i, v in enumerate(arr.astype(object).ravel()):
        x = _number(v)
        if x is None:
            bad[i] = True
        else:
            values[i] = x
    return values, bad


def _number(v) -> float | None:
    """A float for an integer-valued cell (NaN for a missing one), None for anything else."""
    if v is None or v is pd.NA or v is pd.NaT:
        return math.nan
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, str):
        try:
            return float(int(v.strip()))
        except ValueError:
            try:
                x = float(v)
            except ValueError:
                return None
            return x if math.isfinite(x) and x == int(x) else None
    if isinstance(v, numbers.Integral):
        return float(v)
    if isinstance(v, numbers.Real):
        x = float(v)
        if math.isnan(x):
            return math.nan
        return x if math.isfinite(x) and x == math.floor(x) else None
    return None


def value_problem(value) -> str:
    """Why a cell :func:`numbers_of` marked bad is not a shape parameter (the words after ``must be ...``)."""
    if isinstance(value, (bool, np.bool_)):
        return f"an integer, got {echo(value)} (a boolean)"
    if isinstance(value, (numbers.Real, str)):
        try:
            if math.isinf(float(value)):
                return f"a finite integer, got {echo(value)}"
        except (ValueError, OverflowError):
            pass
    return f"an integer, got {echo(value)}"


Problem = tuple  # (mask over rows, describe: row -> one-line message)


def first_problem(problems: Sequence[Problem]) -> tuple[int, str] | None:
    """The lowest row any problem flags and its message; on one row, the problem listed first wins."""
    best = None
    for mask, describe in problems:
        if mask is not None and np.asarray(mask).any():  # the method: a third of np.any's cost on one row
            i = int(np.argmax(mask))
            if best is None or i < best[0]:
                best = (i, describe)
    return None if best is None else (best[0], best[1](best[0]))


def shape_problems(
    op: str,
    raw: Mapping[str, np.ndarray],
    n: int,
    dtypes: np.ndarray | None = None,
    memory_gb: np.ndarray | None = None,
    hardware: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], list[Problem]]:
    """Check ``n`` rows of one ``op``: ``raw`` holds the user's values per shape parameter (a missing column is
    missing everywhere). Returns the parameters as float64 arrays (optional ones at their effective values,
    :func:`with_defaults`) and the problems found, in the order a row's problems are reported: each required
    parameter (not an integer, missing, beyond int64, too small), each optional one (not an integer, beyond int64,
    negative; missing, NaN or 0 is its default), the op's own constraints, then each tensor (beyond the device
    memory ``memory_gb`` where given, beyond int64) and all tensors together against the memory. ``dtypes``
    (names) give the itemsize; ``hardware`` names the device."""
    spec = OPS[op]
    problems: list[Problem] = []
    p: dict[str, np.ndarray] = {}
    needs = ", ".join(spec.params)
    optional = dict(spec.optional)
    for name in spec.names:
        values, bad = numbers_of(raw[name]) if name in raw else (np.full(n, np.nan), np.zeros(n, bool))
        column = raw.get(name)
        problems.append(
            (
                bad,
                lambda i, name=name, column=column: (
                    f"op {op!r}: shape parameter {name!r} must be {value_problem(column[i])}"
                ),
            )
        )
        if name not in optional:
            problems.append(
                (
                    np.isnan(values) & ~bad,
                    lambda i, name=name: f"op {op!r} needs shape parameter {name!r} (needs {needs})",
                )
            )
        problems.append(
            (
                values >= BEYOND_INT64,
                lambda i, name=name, values=values: (
                    f"op {op!r}: shape parameter {name!r} = {values[i]:.3g} is beyond int64 (max {INT64_MAX})"
                ),
            )
        )
        lowest = 0 if name in ZERO_OK or name in optional else 1
        problems.append(
            (
                values < lowest,
                lambda i, name=name, values=values: (
                    f"op {op!r}: shape parameter {name!r} must be >= {0 if name in ZERO_OK else 1}, "
                    f"got {int(values[i])}"
                ),
            )
        )
        p[name] = values
    with np.errstate(all="ignore"):
        p = with_defaults(op, p)
        problems += _constraints(op, p)
        if op in FORMS:
            problems += _tensor_problems(op, p, n, dtypes, memory_gb, hardware)
    return p, problems


def _constraints(op: str, p: Params) -> list[Problem]:
    """The op's own rules beyond positive integers: a (dilated) kernel that fits the padded input, groups that
    divide both channel counts, pooling padding at most half the kernel (as torch requires), 0..3 ``ewise``
    inputs, a 0/1 flag, heads that divide the width, a CNN whose channels stay within int64."""
    out: list[Problem] = []

    def at(name, i) -> int:
        return int(p[name][i])

    if op == "conv2d":
        span = p["dilation"] * (p["kernel"] - 1) + 1
        for side in ("h", "w"):
            out.append(
                (
                    p[side] + 2 * p["padding"] < span,
                    lambda i, side=side: (
                        "op 'conv2d': "
                        + (
                            f"kernel {at('kernel', i)}"
                            if at("dilation", i) == 1
                            else f"dilated kernel span {int(span[i])}"
                        )
                        + f" larger than padded input {side}={at(side, i)}"
                    ),
                )
            )
        out.append(
            (
                (np.fmod(p["c_in"], p["groups"]) > 0) | (np.fmod(p["c_out"], p["groups"]) > 0),
                lambda i: (
                    f"op 'conv2d': c_in {at('c_in', i)} and c_out {at('c_out', i)} must be multiples of groups "
                    f"{at('groups', i)}"
                ),
            )
        )
    if op in ("max_pool2d", "avg_pool2d"):
        out.append(
            (
                2 * p["padding"] > p["kernel"],
                lambda i: f"op {op!r}: padding {at('padding', i)} must be at most half the kernel {at('kernel', i)}",
            )
        )
        for side in ("h", "w"):
            out.append(
                (
                    p[side] + 2 * p["padding"] < p["kernel"],
                    lambda i, side=side: (
                        f"op {op!r}: kernel {at('kernel', i)} larger than padded input {side}={at(side, i)}"
                    ),
                )
            )
    if op == "ewise":
        out.append(
            (
                p["inputs"] > MAX_EWISE_INPUTS,
                lambda i: f"op 'ewise': inputs must be 0..{MAX_EWISE_INPUTS}, got {fmt_dim(p['inputs'][i])}",
            )
        )
    if "causal" in p:
        out.append(
            (
                (p["causal"] != 0) & (p["causal"] != 1) & ~np.isnan(p["causal"]),
                lambda i: f"op {op!r}: shape parameter 'causal' must be 0 or 1, got {fmt_dim(p['causal'][i])}",
            )
        )
    if op == "transformer":
        out.append(
            (
                np.fmod(p["width"], p["heads"]) > 0,
                lambda i: (
                    f"op 'transformer': width {int(p['width'][i])} must be a multiple of heads {int(p['heads'][i])}"
                ),
            )
        )
    if op == "cnn":
        channels = p["width"] * np.exp2(np.minimum(p["depth"], 1100) - 1)
        out.append(
            (
                channels >= BEYOND_INT64,
                lambda i: (
                    f"op 'cnn': the last block's width x 2^(depth-1) = {channels[i]:.3g} channels is beyond int64"
                ),
            )
        )
    return out


def _tensor_problems(op, p, n, dtypes, memory_gb, hardware) -> list[Problem]:
    if dtypes is None:
        itemsize = np.full(n, 4.0)
    else:  # one lookup per distinct dtype (None: an unknown dtype, reported elsewhere)
        codes, names = pd.factorize(np.asarray(dtypes, object))
        itemsize = np.array([ITEMSIZE.get(d, np.nan) for d in names] + [np.nan], float)[codes]
    memory = None if memory_gb is None else np.where(np.asarray(memory_gb, float) > 0, memory_gb, np.nan) * 2.0**30
    tensors = FORMS[op].tensors(p)
    out: list[Problem] = []
    total = np.zeros(n)

    def what(tensor, i, dtype=True):
        name, dims, _, own = tensor
        shape = "x".join(fmt_dim(float(np.broadcast_to(d, (n,))[i])) for d in dims)
        label = own if own is not None else (dtypes[i] if dtypes is not None else None)
        return f"{op} {name} {shape}" + (f" {label}" if dtype and label is not None else "")

    def where(i):
        return f"{hardware[i]} memory {float(memory_gb[i]):g} GB"

    for t in tensors:
        count = np.broadcast_to(elements(t[1]), (n,))
        nbytes = count * _itemsizes(t, itemsize)
        if t[2]:
            total = total + nbytes
        if memory is not None:
            out.append(
                (
                    nbytes > memory,
                    lambda i, t=t, nbytes=nbytes: f"{what(t, i)} = {nbytes[i]:.1e} bytes exceeds {where(i)}",
                )
            )
        out.append(
            (
                count >= BEYOND_INT64,
                lambda i, t=t, count=count: f"{what(t, i, dtype=False)} = {count[i]:.1e} elements is beyond int64",
            )
        )
        out.append(
            (
                nbytes >= BEYOND_INT64,
                lambda i, t=t, nbytes=nbytes: f"{what(t, i)} = {nbytes[i]:.1e} bytes is beyond int64",
            )
        )
    if memory is not None:
        names = ", ".join(t[0] for t in tensors if t[2])
        out.append(
            (total > memory, lambda i: f"{op} tensors together ({names}) = {total[i]:.1e} bytes exceed {where(i)}")
        )
    return out
