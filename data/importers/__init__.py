"""Importers: public datasets mapped into the one measurement schema (:mod:`data.schema`).

One module per source, one function each (``import_<source>(root=None) -> DataFrame``) returning validated
rows with ``backend = "import"`` and provenance in ``source`` (``<dataset>@<upstream commit>``), ``env`` (the
software the source measured with) and ``meta`` (JSON: everything observed by running on the device -- kernel
names, grid/block sizes, clocks at the end of a window, pass index -- kept for provenance, never a feature).
Every importer reads the shared data folder in place (``root``, default ``<repo>/../shared/data``).

Common rules (see :func:`finish`):

* shapes are mapped onto the op conventions of :mod:`data.workloads`; ``flops``/``bytes`` are recomputed from
  the mapped shape with :func:`data.costs.costs` (the closed forms equal to :func:`data.workloads.count_cost`, which
  the backends use: ``tests/test_costs.py``), so imported and measured rows agree
  (a source's own flops column goes to ``meta.source_flops`` and the tests compare the two);
* hardware names go through the registry aliases (``conf/hardware/*.yaml``);
* ``timestamp`` is the measurement time where the source records one, otherwise the Unix epoch with
  ``meta.timestamp_known = false`` (deterministic: re-importing gives the same dataset hash).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from data.costs import costs as op_costs_of
from data.schema import validate
from data.workloads import OPS, SHAPE_PARAMS, family, shape_id, validate_many

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROOT = REPO.parent / "shared" / "data"
EPOCH = pd.Timestamp(0, tz="UTC")

# Every source has a module data/importers/<name>.py with a function import_<name>(root=None, registry=None).
SOURCES = ("neusight", "kerneltuner", "wa_hls4ml", "hopper", "deepbench", "aiconfigurator")


class DatasetError(ValueError):
    """A source folder or file that is missing or not in the expected format (one clear line)."""


def data_root(root: str | Path | None) -> Path:
    path = Path(root) if root is not None else DEFAULT_ROOT
    if not path.is_dir():
        raise DatasetError(f"shared data folder {path} does not exist (pass root=... / data_root=...)")
    return path


def need(path: Path) -> Path:
    if not path.exists():
        raise DatasetError(f"expected dataset file {path} is missing")
    return path


def require_columns(df: pd.DataFrame, columns: Iterable[str], where: Path | str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DatasetError(f"{where}: missing column(s) {', '.join(missing)}")


def _json(d) -> str | None:
    if d is None:
        return None
    return json.dumps(
        {
            k: (v.item() if isinstance(v, np.generic) else v)
            for k, v in d.items()
            if not (isinstance(v, float) and v != v)
        },
        sort_keys=True,
        default=str,
    )


def _strings(values, n: int, name: str) -> pd.Series | None:
    """Per-row JSON text given as a Series of strings (an importer that built one string per distinct value)."""
    if isinstance(values, pd.Series):
        if len(values) != n:
            raise ValueError(f"finish: {name} has {len(values)} entries for {n} rows")
        return values.reset_index(drop=True)
    return None


def finish(
    df: pd.DataFrame,
    *,
    source: str | pd.Series,
    env: dict | list[dict] | pd.Series,
    meta: list[dict] | pd.Series | None = None,
    config: list[dict] | None = None,
) -> pd.DataFrame:
    """Complete mapped rows into schema rows and validate them (``env``: the software, one for all rows or one per row).

    ``df`` has ``op, dtype, hardware`` and the op's shape columns plus whatever measurements the source has (and
    ``kv_dtype``, a KV cache's storage, where the op reads one); this adds ``family, shape_id, flops, bytes, backend,
    source, env, meta, config, timestamp`` (unless set) and validates. FLOPs/bytes are computed once per distinct
    (op, shape, dtype, KV dtype), found by one vectorised grouping of the rows. ``source``, ``env`` and ``meta`` may
    be given per row as Series of strings (JSON for ``env`` / ``meta``), which a large import builds once per
    distinct value.
    """
    df = df.reset_index(drop=True).copy()
    n = len(df)
    for p in SHAPE_PARAMS:
        if p not in df.columns:
            df[p] = None
    # every parameter the op reads, optional ones too (a grouped conv is not costed as a dense one); missing = None.
    # One grouping over op, dtype, KV dtype (missing or '': the dtype) and every shape column gives the distinct
    # workloads; each is checked, costed and named once and the results are spread back over its rows.
    kv = df["kv_dtype"].fillna("").astype(str) if "kv_dtype" in df.columns else pd.Series("", index=df.index)
    by = ["op", "dtype", *SHAPE_PARAMS]
    group = df[by].assign(_kv=kv).groupby([*by, "_kv"], sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(group, return_index=True)[1]  # the first row of group 0, 1, ...
    keys = []
    for r, kv_dtype in zip(df.loc[first, by].to_dict("records"), kv.to_numpy()[first], strict=True):
        params = tuple((p, None if pd.isna(r[p]) else r[p]) for p in OPS[r["op"]].names)
        keys.append((r["op"], params, r["dtype"], kv_dtype if OPS[r["op"]].kv else ""))
    by_op: dict[str, list] = {}
    for k in dict.fromkeys(keys):
        by_op.setdefault(k[0], []).append(k)
    shape = {}  # validated, defaults dropped: one vectorised shape check per op
    for op, ks in by_op.items():
        shape.update(zip(ks, validate_many(op, [dict(k[1]) for k in ks], [k[2] for k in ks]), strict=True))
    # the closed forms of data.costs, one numpy pass per (op, dtype, KV dtype): equal to count_cost's FlopCounterMode
    # counts (tested per op in tests/test_costs.py), which took 74 of a NeuSight import's 110 s row by row
    names = sorted({n for k in shape for n in OPS[k[0]].names})
    params = {n: np.array([float(p.get(n, np.nan)) for p in shape.values()]) for n in names}
    flops, nbytes = op_costs_of([k[0] for k in shape], params, [k[2] for k in shape], kv_dtypes=[k[3] for k in shape])
    costs = dict(zip(shape, zip(flops.tolist(), nbytes.tolist(), strict=True), strict=True))
    ids = {k: shape_id(k[0], p) for k, p in shape.items()}
    df["flops"] = np.array([costs[k][0] for k in keys], float)[group]
    df["bytes"] = np.array([costs[k][1] for k in keys], float)[group]
    df["shape_id"] = np.array([ids[k] for k in keys], object)[group]
    df["family"] = df["op"].map({op: family(op) for op in df["op"].unique()})
    df["backend"] = "import"
    given = _strings(source, n, "source")
    df["source"] = given if given is not None else source
    given = _strings(env, n, "env")
    if given is not None:
        df["env"] = given
    elif isinstance(env, dict):
        df["env"] = json.dumps(env, sort_keys=True)
    else:  # one per row
        df["env"] = [json.dumps(e, sort_keys=True) for e in env]
    if "timestamp" not in df.columns:
        df["timestamp"] = EPOCH
    if "status" not in df.columns:
        df["status"] = "ok"
    if "error" not in df.columns:
        df["error"] = None
    if meta is not None:
        given = _strings(meta, n, "meta")
        df["meta"] = given if given is not None else [_json(m) for m in meta]
    if config is not None:
        df["config"] = [_json(c) for c in config]
    return validate(df)
