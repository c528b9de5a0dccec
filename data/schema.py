"""The one measurement-row schema. Every backend and importer writes these rows; every reader validates them.

A row is one workload (op + shape + dtype) on one hardware by one backend. Units are in the names.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pandera.pandas as pa

from data.ops import DTYPE_INFO, KV_DTYPES, OPS, SHAPE_PARAMS

STATUSES = ("ok", "error")
BACKEND_CONF_DIR = Path(__file__).resolve().parent.parent / "conf" / "collect" / "backend"
_registered_backends: set[str] = {"import"}  # "import": rows of a public dataset (data/importers)


def register_backend(name: str) -> None:
    """Make ``name`` a valid ``backend`` value in this process (``data.collect`` registers every backend it runs,
    e.g. one whose config lives outside ``conf/collect/backend``)."""
    _registered_backends.add(str(name))


def known_backends() -> set[str]:
    """The backends that exist: one per ``conf/collect/backend/<name>.yaml``, ``import``, and those registered."""
    return {p.stem for p in BACKEND_CONF_DIR.glob("*.yaml")} | _registered_backends


def _known_backend(column: pd.Series) -> pd.Series:
    return column.isin(known_backends())


def _nullable(dtype, *checks) -> pa.Column:
    return pa.Column(dtype, checks=list(checks), nullable=True, required=True)


MeasurementSchema = pa.DataFrameSchema(
    {
        "op": pa.Column(str, pa.Check.isin(list(OPS))),
        "family": pa.Column(str),
        "dtype": pa.Column(str, pa.Check.isin(list(DTYPE_INFO))),
        "kv_dtype": _nullable(str, pa.Check.isin(["", *KV_DTYPES])),  # a KV cache's storage (attention; '': dtype)
        **{p: _nullable("Int64", pa.Check.ge(0)) for p in SHAPE_PARAMS},
        "shape_id": pa.Column(str, pa.Check.str_length(1, 64)),
        "hardware": pa.Column(str, pa.Check.str_length(1, 128)),
        "backend": pa.Column(
            str,
            pa.Check(
                _known_backend,
                error="backend: not a known backend (conf/collect/backend/, import, or data.schema.register_backend)",
            ),
        ),
        "status": pa.Column(str, pa.Check.isin(list(STATUSES))),
        "error": _nullable(str),
        "runtime_ms": _nullable(float, pa.Check.gt(0)),
        "runtime_iqr_ms": _nullable(float, pa.Check.ge(0)),
        "runtime_repeats": _nullable("Int64", pa.Check.ge(1)),
        "runtime_cv": _nullable(float, pa.Check.ge(0)),  # coefficient of variation (std/mean) of repeats
        "power_w": _nullable(float, pa.Check.gt(0)),
        "energy_j": _nullable(float, pa.Check.gt(0)),
        "peak_mem_bytes": _nullable(float, pa.Check.ge(0)),
        # FPGA / accelerator resources and cycle counts (synthesis or cycle-level simulation results)
        **{
            c: _nullable(float, pa.Check.ge(0))
            for c in ("lut", "ff", "dsp", "bram_18k", "uram", "latency_cycles", "interval_cycles")
        },
        # how the numbers were obtained, and the device state while they were
        "timing_method": _nullable(str),  # e.g. blocked_autorange, cuda_events, cuda_graph, simulated
        "power_method": _nullable(str),  # e.g. nvml_energy_counter, nvml_power_sampled, rapl
        "sm_clock_mhz": _nullable(float, pa.Check.ge(0)),
        "mem_clock_mhz": _nullable(float, pa.Check.ge(0)),
        "temperature_c": _nullable(float),
        "throttled": _nullable("boolean"),
        "flops": pa.Column(float, pa.Check.ge(0)),
        "bytes": pa.Column(float, pa.Check.gt(0)),
        "config": _nullable(str),  # JSON: knobs that are not shapes (tunables, reuse factor, ...); features may use
        "source": pa.Column(str),  # provenance: backend sweep name or "<dataset>@<upstream commit>"
        "meta": _nullable(str),  # JSON: provenance details never used as features (kernel names, grid, pass)
        "mlir_sha256": _nullable(str, pa.Check.str_length(64, 64)),  # MLIR text of the workload (features/mlir store)
        "env": pa.Column(str),  # JSON: library versions, threads, host, method notes
        "timestamp": pa.Column(pd.DatetimeTZDtype("ns", "UTC")),
    },
    checks=[
        # a synthesis result or a cycle-level simulation may give cycles and no wall time
        pa.Check(
            lambda df: (df["status"] != "ok") | df["runtime_ms"].notna() | df["latency_cycles"].notna(),
            error="rows with status 'ok' need runtime_ms (or latency_cycles)",
        ),
        pa.Check(
            lambda df: (df["status"] != "error") | df["error"].notna(),
            error="rows with status 'error' need an error message",
        ),
    ],
    strict=True,
    coerce=True,
    ordered=False,
    name="measurement",
)

COLUMNS: list[str] = list(MeasurementSchema.columns)


class SchemaViolation(ValueError):
    """Rows that do not fit the measurement schema; the message names the column and check."""


def validate(df: pd.DataFrame) -> pd.DataFrame:
    """Coerce and validate; raises :class:`SchemaViolation` with a one-line message naming the problem."""
    df = df.copy()
    for col in COLUMNS:  # optional measurements may be absent from a backend's rows
        if col not in df.columns and MeasurementSchema.columns[col].nullable:
            df[col] = None
    try:
        return MeasurementSchema.validate(df)[COLUMNS]
    except (pa.errors.SchemaError, pa.errors.SchemaErrors) as exc:
        first = " ".join(str(exc).split())  # pandera's messages span lines; keep one
        if isinstance(exc, pa.errors.SchemaErrors):
            first = "; ".join(" ".join(str(e).split()) for e in exc.schema_errors)
        raise SchemaViolation(f"measurement rows fail the schema: {first[:400]}") from None


def dataset_hash(df: pd.DataFrame) -> str:
    """Content hash of a dataset (row order and values), independent of the file's bytes."""
    h = hashlib.sha256()
    h.update(",".join(df.columns).encode())
    h.update(
        pd.util.hash_pandas_object(
            df.astype({c: str for c in df.columns if df[c].dtype == object}), index=False
        ).values.tobytes()
    )
    return h.hexdigest()


# the identity of a row: what a rerun of the same sweep would measure again
KEY_FIELDS: tuple[str, ...] = ("op", "dtype", "kv_dtype", *SHAPE_PARAMS, "config", "hardware", "backend")


def _plain(value):
    """None for missing (None, NaN, pd.NA); ints for integral numbers; str for the rest."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool):
        return value
    try:
        if float(value) == int(value):
            return int(value)
    except (TypeError, ValueError, OverflowError):
        pass
    return str(value)


def row_key(row: Mapping) -> str:
    """Stable 16-hex key of a row's identity: op, shape parameters, dtype, config, hardware, backend.

    Two rows with the same key are the same measurement request (a rerun of a sweep skips them). It
    works on a schema row or on a workload dict augmented with ``hardware`` and ``backend``: shape
    parameters may sit at the top level or under ``params``; ``config`` may be a JSON string or a dict.
    """
    params = row.get("params") or {}
    config = row.get("config")
    if not isinstance(config, (str, Mapping)):  # None, NaN or pd.NA: no config
        config = None
    if isinstance(config, str):
        config = json.loads(config) if config else None
    # only the fields a row sets: a column added to the schema later leaves every earlier row's key as it was
    ident = {f: _plain(params.get(f, row.get(f))) for f in KEY_FIELDS if f != "config"}
    ident = {f: v for f, v in ident.items() if v is not None and v != ""}
    if config:
        ident["config"] = config
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
