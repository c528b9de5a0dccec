"""The shipped pack of real runtime measurements as a backend: it replays measured rows, it measures nothing.

The main job's default (``collect.backends: [cpu, reference]``) trains the runtime model on every real measurement
it has: this machine's CPU, measured now, plus the pack in ``reference/`` (``data.reference.load_reference``:
NeuSight on 5 GPUs, the H200 set, DeepBench on 10 GPUs, aiconfigurator's LLM kernels on 3). A fresh clone needs
nothing else and no network.

Which rows (``conf/collect/backend/reference.yaml``): ``sources`` (name prefixes, null = all), ``hardware_ids``
(null = all), ``exclude_hardware`` (e.g. a GPU kept aside to calibrate on later), ``exclude_dtypes`` (e.g. the
quantised formats, for a model that has no cost for them), and ``cap``: at most that many rows
per (source, hardware, op, dtype) for the sources it names (a seeded sample, ``seed``), every row of the others;
per source one number for every op, or a mapping from op name or op family (``data.workloads.OPS``) to a number,
with ``default`` for the rest (``{neusight: {gemm: 3000, conv: 300, elementwise: 40, default: 100}}``, the main
job's; 0 leaves an op out). NeuSight's 151k rows are 86% of the pack; a cap per GPU and op keeps every op and GPU
and the job in minutes (more GEMM rows help the pack's own GPUs, not a new one: ``benchmarks/reference_sample.py``).

:class:`ReferenceBackend` satisfies ``data.backends.Backend``: ``rows()`` is what collection takes (every selected
row, validated, ``backend = reference``); ``measure(workload)`` looks one workload up (``hardware`` in the workload
picks the GPU; the median runtime of its rows) and is an error row where the pack has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from data.reference import PACK_NAME, REFERENCE_DIR, load_reference
from data.schema import validate
from data.workloads import OPS, shape_id

GROUP = ("source", "hardware", "op", "dtype")


class ReferenceBackend:
    """Replays the measured rows of the reference pack (module docstring)."""

    def __init__(
        self,
        name: str = "reference",
        path: str | None = None,
        sources=None,
        hardware_ids=None,
        exclude_hardware=None,
        cap: dict | None = None,
        seed: int = 0,
        verify: bool = True,
        exclude_dtypes=None,
    ):
        self.name = name
        self.path = Path(path) if path else REFERENCE_DIR / PACK_NAME
        self.sources = list(sources) if sources else None
        self.hardware_ids = list(hardware_ids) if hardware_ids else None
        self.exclude_hardware = list(exclude_hardware) if exclude_hardware else None
        self.exclude_dtypes = list(exclude_dtypes) if exclude_dtypes else None
        self.cap = check_cap(cap)  # a bad cap fails here, before any backend measures
        self.seed = int(seed)
        self.verify = verify
        self._rows: pd.DataFrame | None = None

    @property
    def hardware(self):
        """None: the pack holds many GPUs, every one of them already in the hardware registry (conf/hardware)."""
        return None

    def pack(self) -> pd.DataFrame:
        """The whole pack (loaded once; checksum checked unless ``verify`` is false)."""
        if self._rows is None:
            self._rows = load_reference(self.path, verify=self.verify)
        return self._rows

    def rows(self) -> pd.DataFrame:
        """The selected rows as measurement rows of this backend (``backend`` = its name; ``source`` kept)."""
        from data.schema import register_backend

        rows = select(
            self.pack(),
            self.sources,
            self.hardware_ids,
            self.cap,
            self.seed,
            self.exclude_hardware,
            self.exclude_dtypes,
        )
        if rows.empty:
            raise ValueError(
                f"reference backend: no pack rows match sources={self.sources} hardware_ids={self.hardware_ids}"
            )
        register_backend(self.name)
        return validate(rows.assign(backend=self.name))

    def measure(self, workload: dict) -> dict:
        """The pack's row of one workload (``op``, ``params``, ``dtype``, and ``hardware`` to choose the GPU)."""
        from data.backends import base_row

        pack = self.pack()
        sid = shape_id(workload["op"], workload["params"])
        hit = pack[(pack["shape_id"] == sid) & (pack["dtype"] == workload["dtype"])]
        if workload.get("hardware"):
            hit = hit[hit["hardware"] == workload["hardware"]]
        hardware = str(hit["hardware"].iloc[0]) if len(hit) else str(workload.get("hardware") or "unknown")
        row = base_row(workload, hardware, self.name, "reference", {"pack": str(self.path)})
        if hit.empty:
            return {**row, "status": "error", "error": "workload not in the reference pack"}
        hit = hit[hit["hardware"] == hardware]
        first = hit.iloc[0]
        return {
            **row,
            "source": first["source"],
            "env": first["env"],
            "status": "ok",
            "runtime_ms": float(hit["runtime_ms"].median()),
            "flops": float(first["flops"]),
            "bytes": float(first["bytes"]),
            "timing_method": first["timing_method"],
        }


def select(
    pack: pd.DataFrame,
    sources=None,
    hardware_ids=None,
    cap: dict | None = None,
    seed: int = 0,
    exclude_hardware=None,
    exclude_dtypes=None,
) -> pd.DataFrame:
    """Rows of ``sources`` (prefixes) and ``hardware_ids``, none of ``exclude_hardware`` or ``exclude_dtypes``; at most
    ``cap[prefix]`` rows per (source, hardware, op, dtype) of a source starting with that prefix (seeded sample;
    :func:`op_cap`: one number, or one per op / op family), every row of the others; pack order kept."""
    keep = np.ones(len(pack), bool)
    source = pack["source"].astype(str)
    if sources:
        keep &= source.str.startswith(tuple(sources)).to_numpy()
    if hardware_ids:
        keep &= pack["hardware"].isin(list(hardware_ids)).to_numpy()
    if exclude_hardware:
        keep &= ~pack["hardware"].isin(list(exclude_hardware)).to_numpy()
    if exclude_dtypes:
        keep &= ~pack["dtype"].isin(list(exclude_dtypes)).to_numpy()
    rng = np.random.default_rng(seed)
    for prefix, spec in check_cap(cap).items():
        if spec is None:
            continue
        capped = keep & source.str.startswith(str(prefix)).to_numpy()
        for key, idx in pack[capped].groupby(list(GROUP), sort=True).indices.items():
            n = op_cap(spec, key[GROUP.index("op")])
            positions = np.flatnonzero(capped)[idx]
            if n is not None and len(positions) > n:
                keep[rng.permutation(positions)[n:]] = False
    return pack[keep].reset_index(drop=True)


def check_cap(cap: dict | None) -> dict:
    """``cap`` as given, after checking each source's entry (:func:`op_cap`): a key of a per-op mapping that is neither
    an op, an op family nor ``default`` is one error (a typo would cap nothing)."""
    families = {o.family for o in OPS.values()}
    for prefix, spec in (cap or {}).items():
        if isinstance(spec, Mapping):
            unknown = sorted(str(k) for k in spec if k != "default" and k not in OPS and k not in families)
            if unknown:
                raise ValueError(
                    f"reference cap for {prefix!r}: {', '.join(map(repr, unknown))} is not an op, an op family or "
                    f"'default' (families: {', '.join(sorted(families))})"
                )
    return dict(cap or {})


def op_cap(spec, op: str) -> int | None:
    """The cap of one op under a source's ``spec``: a number (every op), None (no cap), or a mapping from op name,
    op family or ``default`` to a number or None (the op's own entry first, then its family's, then ``default``; no
    entry: no cap)."""
    if not isinstance(spec, Mapping):
        return None if spec is None else int(spec)
    family = OPS[op].family if op in OPS else None
    for key in (op, family, "default"):
        if key in spec:
            return None if spec[key] is None else int(spec[key])
    return None


def training_summary(rows: pd.DataFrame) -> str:
    """What a model trains on, per backend and source: rows, hardware, dtypes, ops; real vs simulated."""
    ok = rows[rows["status"] == "ok"]
    lines = [f"training data: {len(ok):,} measured rows on {ok['hardware'].nunique()} hardware"]
    for (backend, source), part in ok.groupby(["backend", "source"], sort=True):
        kind = "SIMULATED" if backend.startswith("sim") else "real"
        hw = sorted(part["hardware"].unique())
        methods = sorted({str(m) for m in part["timing_method"].dropna().unique()})
        lines.append(
            f"  {backend}/{source} ({kind}): {len(part):,} rows on {len(hw)} hardware "
            f"({', '.join(hw[:6])}{', ...' if len(hw) > 6 else ''}); dtypes "
            f"{', '.join(sorted(part['dtype'].unique()))}; {part['op'].nunique()} ops"
            + (f"; timing {', '.join(methods)}" if methods else "")
        )
    return "\n".join(lines)
