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
SOURCES = ("neusight", "kerneltuner", "wa_hls4ml", "hopper", "deepbench")


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


def finish(
    df: pd.DataFrame,
    *,
    source: str,
    env: dict | list[dict],
    meta: list[dict] | None = None,
    config: list[dict] | None = None,
) -> pd.DataFrame:
    """Complete mapped rows into schema rows and validate them (``env``: the software, one for all rows or one per row).

    ``df`` has ``op, dtype, hardware`` and the op's shape columns plus whatever measurements the source has;
    this adds ``family, shape_id, flops, bytes, backend, source, env, meta, config, timestamp`` (unless set)
    and validates. FLOPs/bytes are computed once per distinct (op, shape, dtype).
    """
    df = df.reset_index(drop=True).copy()
    for p in SHAPE_PARAMS:
        if p not in df.columns:
            df[p] = None
    shapes = df[list(SHAPE_PARAMS)].to_dict("records")
    # every parameter the op reads, optional ones too (a grouped conv is not costed as a dense one); missing = None
    keys = [
        (op, tuple((p, None if pd.isna(row[p]) else row[p]) for p in OPS[op].names), dt)
        for op, dt, row in zip(df["op"], df["dtype"], shapes)
    ]
    by_op: dict[str, list] = {}
    for k in dict.fromkeys(keys):
        by_op.setdefault(k[0], []).append(k)
    shape = {}  # validated, defaults dropped: one vectorised shape check per op
    for op, ks in by_op.items():
        shape.update(zip(ks, validate_many(op, [dict(k[1]) for k in ks], [k[2] for k in ks]), strict=True))
    # the closed forms of data.costs, one numpy pass per op: equal to count_cost's FlopCounterMode counts (tested per
    # op in tests/test_costs.py), which took 74 of a NeuSight import's 110 s row by row
    names = sorted({n for k in shape for n in OPS[k[0]].names})
    params = {n: np.array([float(p.get(n, np.nan)) for p in shape.values()]) for n in names}
    flops, nbytes = op_costs_of([k[0] for k in shape], params, [k[2] for k in shape])
    costs = dict(zip(shape, zip(flops.tolist(), nbytes.tolist(), strict=True), strict=True))
    ids = {k: shape_id(k[0], p) for k, p in shape.items()}
    df["flops"] = [costs[k][0] for k in keys]
    df["bytes"] = [costs[k][1] for k in keys]
    df["shape_id"] = [ids[k] for k in keys]
    df["family"] = [family(op) for op in df["op"]]
    df["backend"] = "import"
    df["source"] = source
    if isinstance(env, dict):
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
        df["meta"] = [_json(m) for m in meta]
    if config is not None:
        df["config"] = [_json(c) for c in config]
    return validate(df)
