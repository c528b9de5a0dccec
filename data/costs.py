"""FLOPs and bytes of rows of any op, vectorised, and the one shape check.

:func:`costs` evaluates the closed forms of the op registry (``data.ops``: each op's ``flops`` and ``tensors``)
over numpy arrays, one array per shape parameter and a row per workload, grouped by (op, dtype, KV dtype). They equal
what :func:`data.workloads.count_cost` counts with ``FlopCounterMode`` on ``meta`` tensors (exact, ~0.1-1 ms a row;
``tests/test_costs.py`` checks every op on random shapes, optional parameters and dtypes included):

* ``flops``: ``2 m n k`` per GEMM (a bias add is not counted), ``2 b c_out h_out w_out (c_in / groups) kernel^2``
  per convolution, ``4 b heads seq_len kv_len head_dim`` per attention (causal or not), ``6 A k n / tp`` per MoE
  layer, 0 for memory-bound ops and collectives; a network is the sum of its layers;
* ``bytes``: every input, weight and output tensor once, ``elements x`` the bytes of the tensor's role in the row's
  dtype (``data.ops.itemsize``: a quantised GEMM's int4 weights 0.5, its bfloat16 output 2; an fp8 KV cache 1).

Optional parameters enter at their effective value (:func:`with_defaults`: a missing column, NaN or 0 is the
default), so a conv2d row without ``groups`` is costed as ``groups = 1``.

:func:`shape_problems` is the one shape check behind :func:`validate` (one workload) and
``features.tabular.TabularFeaturizer.check`` (a frame): integers only (no booleans, no NaN / inf, no fractions),
every parameter and every tensor's element count and byte size within int64, the op's own rules (the registry's
``constraints``), a dtype the op has a kernel for and, where the device's memory is known, no tensor (nor all of
them together) larger than that memory. Each problem is one line that echoes at most :data:`ECHO_CHARS` characters
of the input.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from data.ops import BEYOND_INT64, DTYPE_INFO, KV_DTYPES, OPS, ZERO_OK, Params, Problem, itemsize, tensors_of

INT64_MAX = 2**63 - 1
ECHO_CHARS = 200  # at most this much of a user's value is echoed back in an error message
# bytes per element of a row's activations, by dtype (tf32 and fixed store float32)
ITEMSIZE = {name: d.act for name, d in DTYPE_INFO.items()}


class WorkloadError(ValueError):
    """A workload description that cannot be built (unknown op, missing or invalid shape)."""


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


def _rows_shape(p: Params) -> tuple:
    return np.broadcast(*(np.asarray(v) for v in p.values())).shape if p else ()


def with_defaults(op: str, params: Params) -> dict[str, np.ndarray]:
    """The op's parameters with every optional one at its effective value: a missing column, NaN or 0 (what a
    feature frame holds for an unused column) becomes the default (an int, or another parameter)."""
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
    :func:`validate` drops it (so a conv2d row with ``groups = 1`` is the row that never had groups)."""
    p = dict(params)
    for name, default in OPS[op].optional:
        base = p[default] if isinstance(default, str) else float(default)
        p[name] = np.where(p[name] == base, 0.0, p[name])
    return p


def gemm_dims(op: str, params: Mapping[str, float]) -> tuple[float, float, float, float] | None:
    """``(batch, M, N, K)`` of the matrix product one workload lowers to (the registry's ``gemm``), or None for an
    op without one; optional parameters at their effective values."""
    spec = OPS[op]
    if spec.gemm is None:
        return None
    p = with_defaults(op, {k: np.array([float(params[k])]) for k in spec.names if params.get(k) is not None})
    return tuple(float(np.ravel(v)[0]) for v in spec.gemm(p))


def elements(dims: Sequence[np.ndarray]) -> np.ndarray:
    out = np.ones(np.broadcast(*dims).shape) if dims else np.ones(())
    for d in dims:
        out = out * d
    return out


def op_costs(op: str, params: Params, dtype: str = "float32", kv_dtype: str | None = None):
    """``(flops, bytes)`` of rows of one ``op`` in one ``dtype`` (``params``: name -> float64 array, valid shapes;
    optional parameters missing, NaN or 0 take their defaults; ``kv_dtype``: the KV cache's storage, default the
    dtype): the registry's closed forms (``data.ops``)."""
    with np.errstate(all="ignore"):
        p = with_defaults(op, params)
        flops = np.asarray(OPS[op].flops(p), float) * np.ones(_rows_shape(p))
        nbytes = np.zeros(_rows_shape(p))
        for _name, dims, counted, role in tensors_of(op, dtype, p):
            if counted:
                nbytes = nbytes + elements(dims) * itemsize(dtype, role, kv_dtype)
        return flops, np.asarray(nbytes, float)


def costs(ops, params: Params, dtypes, groups=None, kv_dtypes=None) -> tuple[np.ndarray, np.ndarray]:
    """``(flops, bytes)`` per row of mixed ops: ``ops`` and ``dtypes`` arrays of names, ``params`` arrays per shape
    parameter (valid shapes; an op's unused parameters are ignored, an optional one missing, NaN or 0 is its
    default), ``kv_dtypes`` the KV cache's dtype per row (missing or empty: the row's dtype). Rows are grouped by
    (op, dtype, KV dtype); every group is one numpy pass. ``groups`` is accepted for callers that factorised the ops
    already (``pd.factorize(ops)``)."""
    ops = np.asarray(ops, object)
    n = len(ops)
    dtypes = np.asarray(dtypes, object)
    kv = np.full(n, "", object) if kv_dtypes is None else np.asarray(kv_dtypes, object)
    kv = np.where(pd.isna(kv) | (kv == "") | ~np.array([op in OPS and OPS[op].kv for op in ops], bool), "", kv)
    keys = pd.MultiIndex.from_arrays([ops, dtypes, kv])
    codes, uniques = pd.factorize(keys)
    flops, nbytes = np.zeros(n), np.zeros(n)
    for c, (op, dtype, kv_dtype) in enumerate(uniques):
        rows = np.flatnonzero(codes == c) if len(uniques) > 1 else slice(None)
        used = [k for k in OPS[op].names if k in params]
        p = {k: np.asarray(params[k], float)[rows] for k in used}
        flops[rows], nbytes[rows] = op_costs(op, p, dtype, kv_dtype or None)
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
        given = np.full(n, "float32", object) if dtypes is None else np.asarray(dtypes, object)
        if dtypes is not None:
            problems.append(
                (
                    np.isin(given, list(DTYPE_INFO)) & ~np.isin(given, spec.dtypes),
                    lambda i: f"op {op!r} has no {given[i]} kernel; its dtypes: {', '.join(spec.dtypes)}",
                )
            )
        if spec.constraints is not None:
            problems += spec.constraints(op, p, given)
        problems += _tensor_problems(op, p, n, dtypes, memory_gb, hardware)
    return p, problems


def _tensor_problems(op, p, n, dtypes, memory_gb, hardware) -> list[Problem]:
    """Each tensor beyond int64 or the device memory, and all of them together beyond the memory; a quantised
    format's tensors are its own (one pass per distinct dtype)."""
    given = np.full(n, "float32", object) if dtypes is None else np.asarray(dtypes, object)
    known = np.array([d in DTYPE_INFO and d in OPS[op].dtypes for d in given], bool)
    out: list[Problem] = []
    for dtype in pd.unique(given[known]) if known.any() else ["float32"]:
        on = (given == dtype) & known if known.any() else np.ones(n, bool)
        out += _tensor_problems_of(op, p, n, dtype, on, dtypes is not None, memory_gb, hardware)
    return out


def _tensor_problems_of(op, p, n, dtype, on, named, memory_gb, hardware) -> list[Problem]:
    memory = None if memory_gb is None else np.where(np.asarray(memory_gb, float) > 0, memory_gb, np.nan) * 2.0**30
    tensors = tensors_of(op, dtype, p)
    out: list[Problem] = []
    total = np.zeros(n)

    def what(tensor, i, with_dtype=True):
        name, dims, _, role = tensor
        shape = "x".join(fmt_dim(float(np.broadcast_to(d, (n,))[i])) for d in dims)
        label = role if role not in ("act", "weight", "out", "kv") else (dtype if named else None)
        return f"{op} {name} {shape}" + (f" {label}" if with_dtype and label is not None else "")

    def where(i):
        return f"{hardware[i]} memory {float(memory_gb[i]):g} GB"

    for t in tensors:
        count = np.broadcast_to(elements(t[1]), (n,))
        nbytes = count * itemsize(dtype, t[3])
        if t[2]:
            total = total + nbytes
        if memory is not None:
            out.append(
                (
                    on & (nbytes > memory),
                    lambda i, t=t, nbytes=nbytes: f"{what(t, i)} = {nbytes[i]:.1e} bytes exceeds {where(i)}",
                )
            )
        out.append(
            (
                on & (count >= BEYOND_INT64),
                lambda i, t=t, count=count: f"{what(t, i, False)} = {count[i]:.1e} elements is beyond int64",
            )
        )
        out.append(
            (
                on & (nbytes >= BEYOND_INT64),
                lambda i, t=t, nbytes=nbytes: f"{what(t, i)} = {nbytes[i]:.1e} bytes is beyond int64",
            )
        )
    if memory is not None:
        names = ", ".join(t[0] for t in tensors if t[2])
        out.append(
            (
                on & (total > memory),
                lambda i: f"{op} tensors together ({names}) = {total[i]:.1e} bytes exceed {where(i)}",
            )
        )
    return out


# --------------------------------------------------------------------------- one workload
def validate(op: str, params: Mapping[str, object], dtype: str = "float32", kv_dtype: str | None = None) -> dict:
    """Return the op's shape parameters as plain ints, or raise :class:`WorkloadError` naming the problem.

    A thin wrapper around the one shape check (:func:`shape_problems`, which the featurizer runs over whole
    frames): every shape parameter an integer (no booleans, NaN, inf or fractions; integer-valued text is read as
    the integer) within int64, each tensor's element count and byte size within int64, the op's own rules and a
    dtype the op has a kernel for (``kv_dtype``: a KV cache's storage, :data:`data.ops.KV_DTYPES`). One line per
    problem, echoing at most :data:`ECHO_CHARS` characters of a value. Optional parameters: a missing, NaN or 0
    value is the default and a value equal to the default is dropped from the result.
    """
    if kv_dtype is not None and not _unset_text(kv_dtype) and kv_dtype not in KV_DTYPES:
        raise WorkloadError(f"unknown kv_dtype {echo(kv_dtype, 80)}; KV cache dtypes: {', '.join(KV_DTYPES)}")
    return validate_many(op, [params], [dtype])[0]


def _unset_text(value) -> bool:
    return value is None or (isinstance(value, float) and value != value) or str(value).strip() == ""


def validate_many(op: str, rows: Sequence[Mapping[str, object]], dtypes: Sequence[str]) -> list[dict[str, int]]:
    """:func:`validate` of many rows of one ``op`` in one vectorised pass of the shape check (an importer's tens of
    thousands of distinct shapes); raises :class:`WorkloadError` with the first bad row's problem."""
    if not isinstance(op, str) or op not in OPS:
        raise WorkloadError(f"unknown op {echo(op, 80)}; known ops: {', '.join(OPS)}")
    for dtype in dtypes:
        if not isinstance(dtype, str) or dtype not in DTYPE_INFO:
            raise WorkloadError(f"unknown dtype {echo(dtype, 80)}; known dtypes: {', '.join(DTYPE_INFO)}")
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
            if unset(value):
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


def unset(value) -> bool:
    """None, NaN, pandas' NA (whose truth value raises) or 0: an optional parameter left at its default."""
    if value is None:
        return True
    try:
        return bool(value != value or value == 0)
    except TypeError:
        return True
