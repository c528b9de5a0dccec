"""Tabular encoding: layer-shape features + hardware-spec features, joined by hardware name.

Input is a *workload description* frame: ``op``, ``hardware``, optional ``dtype`` (default float32)
and the op's shape columns (``data.workloads.SHAPE_PARAMS``). Measured rows are such frames too, so
training and prediction go through the same code. FLOPs and bytes are derived from the description (the closed
forms of ``data.costs``, equal to ``data.workloads.count_cost``), never read from a measurement, so a user who
gives only shapes gets the same features. Optional shape parameters (``groups``, ``dilation``, ``kv_len``) hold 0
where they are at their default (``data.workloads.validate`` drops such values), and a grouped conv is featurized as
one GEMM per group. ``tensor_bytes`` (the bytes of the inputs, weights and outputs, once) is both the roofline's
memory traffic and the lower bound of a kernel's peak memory (``models.roofline.RooflineModel`` docstring).
Hardware enters only through its spec numbers, which is what lets a model predict for a GPU that has a spec but no
measurements.

Hardware-normalised, dimensionless features (:func:`transfer_features`) describe a workload *relative to* the
GPU it runs on, so that what is learned on some GPUs transfers to another (NeuSight, Lee et al. ASPLOS'25,
predicts unseen GPUs from a tile/wave decomposition of the kernel the same way): wave counts and tail-wave
occupancy at a few tile sizes, arithmetic intensity relative to the ridge point, bytes relative to the L2
cache, a memory-bound flag and the wave-quantised roofline time.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from data.costs import costs, drop_defaults, echo, first_problem, shape_problems, with_defaults
from data.hardware import HardwareRegistry, HardwareSpec
from data.ops import DTYPE_INFO, KV_DTYPES, OPS, SHAPE_PARAMS

DTYPE_BYTES = {name: d.act for name, d in DTYPE_INFO.items()}  # bytes per element of a row's activations
REQUIRED = ("op", "hardware")
MATH_FAMILIES = ("gemm", "conv", "attention", "moe")  # the families whose dtype needs the GPU's math units


def peak_rate(spec: HardwareSpec, dtype: str) -> float:
    """The spec's dense peak FLOP/s for a row dtype's math (``data.ops.DTYPE_INFO`` ``rate``: fp8 rows run at the
    spec's fp8 rate, weight-only int4 at its bfloat16 rate), float32's where the spec lists no such rate."""
    return spec.peak_flops(DTYPE_INFO[dtype].rate)


def unit_problem(spec: HardwareSpec, dtype: str) -> str | None:
    """Why ``spec`` cannot run matrix math in ``dtype`` (None where it can): a GPU needs a rate for a dtype that
    needs its own units (bfloat16 before Ampere, fp8 before Ada / Hopper, int8 without int8 tensor cores); a CPU
    has no kernels for the quantised GEMM formats."""
    info = DTYPE_INFO[dtype]
    if spec.kind == "gpu" and info.needs_units and info.rate not in spec.peak_tflops:
        return (
            f"hardware {spec.id!r} has no {info.rate} units (its spec lists no {info.rate} peak): it cannot run "
            f"{dtype} matrix math"
        )
    if spec.kind == "cpu" and info.matrix:
        return f"hardware {spec.id!r} is a CPU: no {dtype} kernels"
    return None


class FeatureError(ValueError):
    """A workload description that cannot be featurized; the message names the row and the problem."""


def roofline_s(flops, nbytes, peak_flops, bandwidth):
    """Classic roofline lower bound (Williams et al. 2009): max(compute time, memory time)."""
    return np.maximum(np.asarray(flops) / np.asarray(peak_flops), np.asarray(nbytes) / np.asarray(bandwidth))


TILES = (64, 128, 256)  # square output-tile edges for the wave features (cuBLAS/CUTLASS tiles span 64..256)


def gemm_mn(op, params, groups=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(batch, M, N, K)`` of the GEMM each row lowers to (the registry's ``gemm``: matmul, bmm, linear; conv2d
    as implicit GEMM, one per group; attention, MoE), NaN for rows of other ops; ``params`` maps shape names to
    arrays (an optional parameter missing, NaN or 0 is its default), ``groups`` is ``pd.factorize(op)`` where the
    caller has it."""
    op = np.asarray(op, object)
    dims = tuple(np.full(len(op), np.nan) for _ in range(4))
    codes, names = groups if groups is not None else pd.factorize(op)
    for c, name in enumerate(names):
        if name in GEMM_OPS:
            rows = codes == c
            got = OPS[name].gemm(
                with_defaults(name, {k: np.asarray(params[k], float)[rows] for k in OPS[name].names if k in params})
            )
            for out, values in zip(dims, got):
                out[rows] = values
    return dims


# the ops whose tabular wave features read a GEMM (attention and MoE keep their memory-bound form here)
GEMM_OPS = ("matmul", "bmm", "linear", "conv2d")


def work_tiles(op, params, nbytes, dtype_bytes, tile: int) -> np.ndarray:
    """Output tiles of ``tile x tile`` a kernel is split into (the unit of work one SM takes at a time), per row.

    GEMM-like ops (matmul, bmm, linear; conv2d as implicit GEMM: the registry's ``gemm``):
    ``batch * ceil(M / tile) * ceil(N / tile)`` (NVIDIA, "Matrix Multiplication Background User's Guide",
    tile quantization). Other ops (memory-bound: elementwise, norms, softmax, reductions) have no GEMM tiles;
    their work is approximated by the elements they move, ``bytes / dtype_bytes``, in blocks of ``tile**2``
    elements: ``ceil(elements / tile**2)``. Arrays in (``params``: shape name -> array), an array out; one
    workload (an op name, a dict of ints) gives a float.
    """
    if isinstance(op, str):
        return float(work_tiles([op], {k: [v] for k, v in params.items()}, [nbytes], [dtype_bytes], tile)[0])
    return _tiles(gemm_mn(op, params), np.asarray(nbytes, float), np.asarray(dtype_bytes, float), tile)


def _tiles(gemm, nbytes, dtype_bytes, tile):
    batch, m, n = gemm[:3]
    return np.where(np.isnan(m), np.ceil(nbytes / dtype_bytes / tile**2), batch * np.ceil(m / tile) * np.ceil(n / tile))


def transfer_features(
    op, params, flops, nbytes, dtype_bytes, sm_count, l2_bytes, peak, bw, groups=None
) -> dict[str, np.ndarray]:
    """Dimensionless, hardware-normalised features (module docstring); arrays in, arrays of columns out.

    ``params``: shape name -> array (or a list of one dict per row); ``groups``: ``pd.factorize(op)`` where the
    caller has it. Per tile size T (``TILES``), with ``tiles``
    from :func:`work_tiles` and ``S`` = SM count:

    * ``waves_T = ceil(tiles / S)`` (log2 in the column ``log2_waves_T``): rounds of one tile per SM;
    * ``wave_eff_T = tiles / (waves_T * S)``: occupancy of the SM slots over all waves (1 = no idle SM in
      the tail wave; 1 tile on 108 SMs = 0.009);
    * ``log2_wave_ms_T``: wave-quantised compute time ``waves_T * (flops / tiles) / (peak / S)`` (each wave costs
      one full tile's FLOPs per SM), for ops with FLOPs; memory-bound ops get their memory time.

    Then ``log2_intensity_over_ridge = log2((flops / bytes) / (peak / bw))`` (> 0: compute-bound by the
    roofline), ``memory_bound`` (that flag), ``log2_bytes_over_l2 = log2(bytes / L2 bytes)``,
    ``log2_bytes_per_sm``, ``log2_flops_per_sm``, ``log2_roofline_compute_ms`` / ``log2_roofline_memory_ms`` and
    ``log2_wave_roofline_ms = log2(max(wave_ms_128, memory time))``: the roofline with 128x128 wave quantisation.
    """
    if not isinstance(params, Mapping):  # one dict per row
        params = {k: np.array([float(p.get(k, 0)) for p in params]) for k in SHAPE_PARAMS}
    flops, nbytes = np.asarray(flops, float), np.asarray(nbytes, float)
    sms, peak, bw = np.asarray(sm_count, float), np.asarray(peak, float), np.asarray(bw, float)
    sms = np.maximum(sms, 1.0)
    dtype_bytes = np.nan_to_num(np.asarray(dtype_bytes, float), nan=4.0)  # fixed point (FPGA): no torch width
    memory_ms = nbytes / bw * 1e3
    gemm = gemm_mn(op, params, groups)
    out: dict[str, np.ndarray] = {}
    for t in TILES:
        tiles = np.maximum(_tiles(gemm, nbytes, dtype_bytes, t), 1.0)
        waves = np.ceil(tiles / sms)
        wave_ms = np.where(flops > 0, waves * (flops / tiles) / (peak / sms) * 1e3, memory_ms)
        out[f"log2_waves_{t}"] = np.log2(waves)
        out[f"wave_eff_{t}"] = tiles / (waves * sms)
        out[f"log2_wave_ms_{t}"] = np.log2(wave_ms)
    intensity_ratio = (flops / nbytes) / (peak / bw)
    out["log2_intensity_over_ridge"] = np.log2(intensity_ratio + 1e-6)
    out["memory_bound"] = (intensity_ratio < 1).astype(float)
    out["log2_bytes_over_l2"] = np.log2(nbytes / np.maximum(np.asarray(l2_bytes, float), 1.0))
    out["log2_bytes_per_sm"] = np.log2(nbytes / sms)
    out["log2_flops_per_sm"] = np.log2(flops / sms + 1)
    out["log2_roofline_compute_ms"] = np.log2(flops / peak * 1e3 + 1e-9)
    out["log2_roofline_memory_ms"] = np.log2(memory_ms)
    out["log2_wave_roofline_ms"] = np.log2(np.maximum(2 ** out["log2_wave_ms_128"], memory_ms))
    return out


# Columns on an absolute scale of one GPU (times, spec numbers, per-SM amounts): dropped by ``transfer_columns``.
ABSOLUTE_SCALE = (
    "hw_",
    "roofline_",
    "log2_roofline",
    "log2_wave_ms_",
    "log2_wave_roofline_ms",
    "log2_bytes_per_sm",
    "log2_flops_per_sm",
)
TRANSFER_KEEP = ("hw_ridge_intensity", "hw_log2_bandwidth")  # the roofline's two spec numbers stay


def transfer_columns(columns) -> list[str]:
    """The subset of feature columns meant to transfer to an unseen GPU: shape, op and dtype columns, the
    dimensionless :func:`transfer_features` (waves, tail-wave occupancy, intensity / ridge, bytes / L2) and the
    ridge point and bandwidth; no absolute times, SM counts, clocks or cache sizes, which let trees recognise
    the training GPUs one by one instead of learning a rule that carries over."""
    return [c for c in columns if not str(c).startswith(ABSOLUTE_SCALE) or c in TRANSFER_KEEP]


class _Cell:
    """An unhashable cell (a list, a dict) stood in for while factorizing a column; compares by identity."""

    def __init__(self, value):
        self.value = value


def _factorize(values: np.ndarray) -> tuple[np.ndarray, list]:
    """``(codes, uniques)`` of one column, -1 for missing cells (None / NaN); unhashable cells become :class:`_Cell`.

    ``pd.factorize`` (hashing in C) for long columns; a dict for a few cells, where its fixed cost dominates."""
    if len(values) <= 16:
        index: dict = {}
        codes = np.empty(len(values), np.intp)
        for i, v in enumerate(values):
            if v is None or v is pd.NA or (isinstance(v, float) and v != v):
                codes[i] = -1
                continue
            key = v if isinstance(v, Hashable) else _Cell(v)
            try:
                codes[i] = index.setdefault(key, len(index))
            except TypeError:  # hashable type, unhashable content: a tuple holding a list
                codes[i] = index.setdefault(_Cell(v), len(index))
        return codes, list(index)
    try:
        codes, uniques = pd.factorize(values)
    except TypeError:  # a list or dict in a cell (JSON input)
        codes, uniques = pd.factorize(np.array([v if isinstance(v, Hashable) else _Cell(v) for v in values], object))
    return np.asarray(codes), list(uniques)


def _value(cell):
    """The user's value of a factorized cell (an unhashable one was wrapped in :class:`_Cell`)."""
    return cell.value if isinstance(cell, _Cell) else cell


def _empty(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


EMPTY_OP = "empty op cell (give an op, e.g. matmul)"
EMPTY_HARDWARE = "empty hardware cell (give a hardware id from conf/hardware, e.g. H100-SXM)"
# a column pandas renamed because a CSV header repeated it ("m", "m.1"): a duplicate, refused like one
_RENAMED = re.compile("^(" + "|".join(("op", "hardware", "dtype", "kv_dtype", "mlir", *SHAPE_PARAMS)) + r")\.[0-9]+$")


def _unit_problem(ops, specs, hw_codes, dt_names, dt_codes):
    """The rows of a matrix family (:data:`MATH_FAMILIES`) whose hardware has no units for their dtype
    (:func:`unit_problem`), each distinct (hardware, dtype) pair looked up once."""
    math = np.isin(ops, [op for op, spec in OPS.items() if spec.family in MATH_FAMILIES])
    if not math.any():
        return None
    keys = hw_codes.astype(np.int64) * (len(dt_names) + 1) + dt_codes
    codes, uniques = pd.factorize(keys[math])
    bad = {}
    for code, key in enumerate(uniques):
        hw_c, dt_c = divmod(int(key), len(dt_names) + 1)
        spec = specs[hw_c] if 0 <= hw_c < len(specs) else None
        dtype = dt_names[dt_c] if 0 <= dt_c < len(dt_names) else None
        if spec is not None and isinstance(dtype, str) and dtype in DTYPE_INFO:
            message = unit_problem(spec, dtype)
            if message is not None:
                bad[code] = message
    if not bad:
        return None
    rows = np.full(len(ops), -1)
    rows[math] = codes
    return np.isin(rows, list(bad)) & math, lambda i: bad[int(rows[i])]


def kv_dtypes_of(df: pd.DataFrame) -> np.ndarray:
    """The ``kv_dtype`` column of a checked frame ('' where absent: the row's dtype)."""
    if "kv_dtype" not in df.columns:
        return np.full(len(df), "", object)
    return df["kv_dtype"].fillna("").astype(str).to_numpy(object)


def _column_problem(codes: np.ndarray, bad: dict[int, str]):
    """The rows whose cell is one of the ``bad`` distinct values (code -> message; -1 = an empty cell)."""
    if not bad:
        return None
    return np.isin(codes, list(bad)), lambda i: bad[int(codes[i])]


@dataclass
class _Checked:
    """A validated workload frame as arrays: what :meth:`TabularFeaturizer.check` returns as a frame."""

    frame: pd.DataFrame  # the input, index reset
    ops: np.ndarray  # op names (object)
    dtypes: np.ndarray  # dtype names (object), float32 where missing
    hardware: np.ndarray  # resolved hardware ids (object)
    shapes: dict[str, np.ndarray]  # float64 per shape parameter, 0 where the row's op does not use it
    kv_dtypes: np.ndarray  # a KV cache's dtype per row ('' where the op reads none or it is the row's dtype)


class TabularFeaturizer:
    def __init__(self, registry: HardwareRegistry):
        self.registry = registry

    def check(self, workloads: pd.DataFrame) -> pd.DataFrame:
        """Validate a description frame at the boundary: returns a normalised copy or raises FeatureError.

        The one validation of workload frames (CLI, Python API, REST and MLIR kernels all come here): each column
        once; a known op, dtype and hardware per row (an empty cell is named); shape values that are integers (no
        booleans, NaN, inf or fractions) within int64, and tensors within int64 and within the hardware's memory
        (``data.costs.shape_problems``). Vectorised: one pass per column and per op, no per-row Python for
        well-formed input. The error names the first bad row in one line, echoing at most
        ``data.costs.ECHO_CHARS`` characters of a cell.
        """
        c = self._check(workloads)
        cols = {col: c.frame[col] for col in c.frame.columns}
        cols.update(
            op=pd.Series(c.ops, dtype=str),
            hardware=pd.Series(c.hardware, dtype=str),
            dtype=pd.Series(c.dtypes, dtype=str),
            kv_dtype=pd.Series(c.kv_dtypes, dtype=str),
        )
        for col in SHAPE_PARAMS:
            cols[col] = c.shapes[col]
        return pd.DataFrame(cols, index=c.frame.index)

    def transform(self, workloads: pd.DataFrame) -> pd.DataFrame:
        c = self._check(workloads)
        return self._features(c.ops, c.dtypes, c.hardware, c.shapes, c.kv_dtypes)

    def features(self, df: pd.DataFrame) -> pd.DataFrame:
        """The feature frame of a frame :meth:`check` already validated and normalised."""
        return self._features(
            df["op"].to_numpy(object),
            df["dtype"].to_numpy(object),
            df["hardware"].to_numpy(object),
            {p: df[p].to_numpy(float) for p in SHAPE_PARAMS},
            kv_dtypes_of(df),
        )

    def _check(self, workloads) -> _Checked:
        if not isinstance(workloads, pd.DataFrame):
            raise FeatureError(f"expected a DataFrame of workloads, got {type(workloads).__name__}")
        columns = workloads.columns
        if columns.has_duplicates:
            dup = list(dict.fromkeys(columns[columns.duplicated()]))
            raise FeatureError(f"duplicate column(s) {', '.join(echo(c, 40) for c in dup[:5])}: give each column once")
        renamed = [c for c in columns if isinstance(c, str) and _RENAMED.match(c)]
        if renamed:
            raise FeatureError(
                f"column {echo(renamed[0], 40)} repeats column {renamed[0].rsplit('.', 1)[0]!r} "
                "(a CSV reader renames a repeated header): give each column once"
            )
        missing = [c for c in REQUIRED if c not in columns]
        if missing:
            raise FeatureError(
                f"workloads lack column(s) {', '.join(missing)} (need op, hardware, dtype and shape columns)"
            )
        df = workloads.reset_index(drop=True)
        n = len(df)
        problems = []

        # op, dtype, hardware: each distinct cell value looked up once
        op_codes, op_names = _factorize(df["op"].to_numpy(object))
        bad = {-1: EMPTY_OP} if (op_codes < 0).any() else {}
        for c, v in enumerate(op_names):
            if _empty(v):
                bad[c] = EMPTY_OP
            elif not isinstance(v, str) or v not in OPS:
                bad[c] = f"unknown op {echo(_value(v), 80)}; known ops: {', '.join(OPS)}"
        problems.append(_column_problem(op_codes, bad))

        if "dtype" in df.columns:
            dt_codes, dt_names = _factorize(df["dtype"].to_numpy(object))
            if (dt_codes < 0).any():  # a missing dtype is float32
                dt_codes = np.where(dt_codes < 0, len(dt_names), dt_codes)
                dt_names.append("float32")
        else:
            dt_codes, dt_names = np.zeros(n, np.intp), ["float32"]
        bad = {
            c: f"unknown dtype {echo(_value(v), 80)}; known dtypes: {', '.join(DTYPE_INFO)}"
            for c, v in enumerate(dt_names)
            if not isinstance(v, str) or v not in DTYPE_INFO
        }
        problems.append(_column_problem(dt_codes, bad))

        hw_codes, hw_names = _factorize(df["hardware"].to_numpy(object))
        bad = {-1: EMPTY_HARDWARE} if (hw_codes < 0).any() else {}
        specs = []
        for c, v in enumerate(hw_names):
            spec = self.registry.get(v) if isinstance(v, str) and v in self.registry else None
            specs.append(spec)
            if _empty(v):
                bad[c] = EMPTY_HARDWARE
            elif spec is None:
                bad[c] = f"unknown hardware {echo(_value(v), 80)}; known: {', '.join(self.registry.ids)}"
            elif "float32" not in spec.peak_tflops:
                bad[c] = (
                    f"hardware {spec.id!r} ({spec.kind}) has no float32 peak FLOP/s in its spec: no tabular features"
                )
        problems.append(_column_problem(hw_codes, bad))
        specs.append(None)  # code -1 (an empty cell) indexes the last entry
        memory_gb = np.array([np.nan if s is None else s.memory_gb for s in specs], float)[hw_codes]
        hardware = np.array([None if s is None else s.id for s in specs], object)[hw_codes]
        dtypes = np.array([v if isinstance(v, str) and v in DTYPE_INFO else None for v in dt_names], object)[dt_codes]
        kv_dtypes = np.full(n, "", object)
        if "kv_dtype" in df.columns:  # a KV cache's storage, where an op reads one (empty: the row's dtype)
            kv_codes, kv_names = _factorize(df["kv_dtype"].to_numpy(object))
            bad = {
                c: f"unknown kv_dtype {echo(_value(v), 80)}; KV cache dtypes: {', '.join(KV_DTYPES)}"
                for c, v in enumerate(kv_names)
                if not _empty(v) and (not isinstance(v, str) or v.strip() not in KV_DTYPES)
            }
            problems.append(_column_problem(kv_codes, bad))
            names = np.array([v.strip() if isinstance(v, str) else "" for v in kv_names] + [""], object)
            kv_dtypes = names[kv_codes]
        # shapes: one numpy pass over the rows of each op (data.costs.shape_problems)
        shapes = {p: np.zeros(n) for p in SHAPE_PARAMS}
        raw = {p: df[p].to_numpy() for p in SHAPE_PARAMS if p in df.columns}
        ops = np.empty(n, object)
        for c, op in enumerate(op_names):
            if not isinstance(op, str) or op not in OPS:
                continue
            rows = np.flatnonzero(op_codes == c)
            whole = len(rows) == n
            params = OPS[op].names
            group = {p: raw[p] if whole else raw[p][rows] for p in params if p in raw}
            values, found = shape_problems(
                op,
                group,
                len(rows),
                dtypes=dtypes if whole else dtypes[rows],
                memory_gb=memory_gb if whole else memory_gb[rows],
                hardware=hardware if whole else hardware[rows],
            )
            first = first_problem(found)
            if first is not None:
                problems.append((np.arange(n) == rows[first[0]], lambda _, message=first[1]: message))
            values = drop_defaults(op, values)  # an optional parameter at its default is 0, as validate drops it
            for p in params:
                shapes[p][rows] = values[p]
            ops[rows] = op
        problems.append(_unit_problem(ops, specs, hw_codes, dt_names, dt_codes))
        kv_dtypes = np.where(np.isin(ops, [op for op, spec in OPS.items() if spec.kv]), kv_dtypes, "")
        kv_dtypes = np.where(kv_dtypes == dtypes, "", kv_dtypes)
        first = first_problem([p for p in problems if p is not None])
        if first is not None:
            raise FeatureError(f"row {first[0]}: {first[1]}")
        return _Checked(df, ops, dtypes, hardware, shapes, kv_dtypes)

    def _features(
        self,
        ops: np.ndarray,
        dtypes: np.ndarray,
        hardware: np.ndarray,
        shapes: dict[str, np.ndarray],
        kv_dtypes: np.ndarray | None = None,
    ) -> pd.DataFrame:
        """Vectorised over rows: FLOPs and bytes from the closed forms of ``data.costs`` (one numpy pass per op),
        spec numbers looked up once per hardware (peak FLOP/s once per hardware and dtype) and spread by index;
        the columns fill one float64 matrix, wrapped in one DataFrame."""
        n = len(ops)
        op_codes, op_names = _factorize(ops)
        flops, nbytes = costs(ops, shapes, dtypes, groups=(op_codes, op_names), kv_dtypes=kv_dtypes)
        hw_codes, hw_ids = _factorize(hardware)
        dt_codes, dt_names = _factorize(dtypes)
        specs = [self.registry.get(h) for h in hw_ids]

        def spec_column(value) -> np.ndarray:
            return np.array([value(s) for s in specs], float)[hw_codes]

        pair_codes, pairs = pd.factorize(hw_codes * len(dt_names) + dt_codes)
        peak = np.array([peak_rate(specs[p // len(dt_names)], dt_names[p % len(dt_names)]) for p in pairs], float)[
            pair_codes
        ]
        bw = spec_column(lambda s: s.bandwidth_bytes_s)

        X = dict(shapes)  # columns collected first, one matrix at the end
        for op in OPS:
            X[f"op_{op}"] = (op_codes == op_names.index(op)).astype(float) if op in op_names else np.zeros(n)
        for dt in DTYPE_INFO:
            X[f"dtype_{dt}"] = (dt_codes == dt_names.index(dt)).astype(float) if dt in dt_names else np.zeros(n)
        X["dtype_bytes"] = np.array([DTYPE_BYTES.get(dt, np.nan) for dt in dt_names], float)[dt_codes]
        X["log2_flops"] = np.log2(flops + 1)
        X["log2_bytes"] = np.log2(nbytes)
        X["tensor_bytes"] = nbytes  # inputs + weights + outputs once: the peak-memory lower bound (models/roofline.py)
        X["log2_intensity"] = np.log2(flops / nbytes + 1e-3)
        X["hw_is_gpu"] = spec_column(lambda s: s.kind == "gpu")
        X["hw_sm_count"] = spec_column(lambda s: s.sm_count)
        X["hw_clock_mhz"] = spec_column(lambda s: s.boost_clock_mhz)
        X["hw_memory_gb"] = spec_column(lambda s: s.memory_gb)
        X["hw_l2_mb"] = spec_column(lambda s: s.l2_cache_mb)
        X["hw_log2_peak_flops"] = np.log2(peak)
        X["hw_log2_peak_fp32"] = np.log2(spec_column(lambda s: s.peak_flops("float32")))
        X["hw_log2_bandwidth"] = np.log2(bw)
        X["hw_ridge_intensity"] = peak / bw
        X["roofline_compute_ms"] = flops / peak * 1e3
        X["roofline_memory_ms"] = nbytes / bw * 1e3
        X["roofline_ms"] = roofline_s(flops, nbytes, peak, bw) * 1e3
        X["log2_roofline_ms"] = np.log2(X["roofline_ms"])
        X.update(
            transfer_features(
                ops,
                shapes,
                flops,
                nbytes,
                X["dtype_bytes"],
                X["hw_sm_count"],
                X["hw_l2_mb"] * 2**20,
                peak,
                bw,
                groups=(op_codes, op_names),
            )
        )
        matrix = np.empty((n, len(X)), order="F")  # column-major: each column is one contiguous write, and it is
        for j, values in enumerate(X.values()):  # already the layout of a DataFrame's float block (no copy)
            matrix[:, j] = values
        return pd.DataFrame(matrix, columns=_columns(tuple(X)), copy=False)


@functools.lru_cache(maxsize=4)
def _columns(names: tuple[str, ...]) -> pd.Index:
    """The feature columns' Index, built once (building an Index of 84 strings costs more than the features of a
    row)."""
    return pd.Index(names)


class PowerFeaturizer(TabularFeaturizer):
    """The tabular features plus the spec-driven analytical power model's terms (for power surrogates).

    Appends, per row, from the hardware's spec sheet and the ``sim-roofline`` simulator's formulas
    (``data/backends/sim_roofline.py``, reused, not copied): ``hw_tdp_w``, ``hw_idle_power_w``,
    ``analytical_runtime_ms`` (tile/wave-quantised roofline runtime), ``analytical_utilisation`` (u) and
    ``analytical_power_w`` = idle + (TDP - idle) * u. The columns of :class:`TabularFeaturizer` are kept
    unchanged and first. Hardware without ``tdp_w`` (the local CPU) cannot be featurized here.
    """

    def __init__(self, registry: HardwareRegistry, **sim_options):
        super().__init__(registry)
        self.sim_options = dict(sim_options)  # SimRooflineBackend constants; defaults = the simulator's

    def transform(self, workloads: pd.DataFrame) -> pd.DataFrame:
        from data.backends.sim_roofline import SimRooflineBackend, analytical_power_w, utilisation

        df = self.check(workloads)  # once: the tabular columns and the power terms both read the checked frame
        X = self.features(df)
        hw_codes, hw_ids = _factorize(df["hardware"].to_numpy(object))
        sims = [SimRooflineBackend(self.registry.get(hw), **self.sim_options) for hw in hw_ids]
        no_tdp = np.isin(hw_codes, [c for c, sim in enumerate(sims) if sim.hardware.tdp_w is None])
        if no_tdp.any():
            i = int(np.argmax(no_tdp))
            raise FeatureError(
                f"row {i}: hardware {df.at[i, 'hardware']!r} has no tdp_w in its spec: no power prediction"
            )
        # the simulator's runtime, vectorised per hardware (SimRooflineBackend.runtimes_s, the formula it uses for
        # one workload): each row's GEMM (a grouped conv: one per group), its bytes and its dtype's peak
        ops, dtypes = df["op"].to_numpy(object), df["dtype"].to_numpy(object)
        gemm = gemm_mn(ops, {p: df[p].to_numpy(float) for p in SHAPE_PARAMS})
        nbytes = X["tensor_bytes"].to_numpy()
        runtime_s = np.empty(len(df))
        for c, sim in enumerate(sims):
            rows = np.flatnonzero(hw_codes == c)
            dt_codes, dt_names = _factorize(dtypes[rows])
            peak = np.array([peak_rate(sim.hardware, dt) for dt in dt_names], float)[dt_codes]
            runtime_s[rows] = sim.runtimes_s(tuple(d[rows] for d in gemm), nbytes[rows], peak)
        idle = np.array([sim.idle_power_w() for sim in sims], float)[hw_codes]
        tdp = np.array([float(sim.hardware.tdp_w) for sim in sims], float)[hw_codes]
        peak = np.exp2(X["hw_log2_peak_flops"].to_numpy())
        bw = np.exp2(X["hw_log2_bandwidth"].to_numpy())
        flops = np.exp2(X["log2_flops"].to_numpy()) - 1
        u = utilisation(flops, nbytes, runtime_s, peak, bw)
        X["hw_tdp_w"] = tdp
        X["hw_idle_power_w"] = idle
        X["analytical_runtime_ms"] = runtime_s * 1e3
        X["log2_analytical_runtime_ms"] = np.log2(runtime_s * 1e3)
        X["analytical_utilisation"] = u
        X["analytical_power_w"] = analytical_power_w(u, idle, tdp)
        X["analytical_power_frac"] = (X["analytical_power_w"] - X["hw_idle_power_w"]) / (
            X["hw_tdp_w"] - X["hw_idle_power_w"]
        )
        return X
