"""wa-hls4ml FPGA synthesis results (``wa_hls4ml/results_{resource,latency}.csv``; Dendendelen/wa-hls4ml-search
@8e70542): one hls4ml Dense layer d_in -> d_out per row, synthesised with Vivado HLS at a 5 ns clock.

Mapping: op ``dense`` (family ``fpga``), k = d_in, n = d_out, m = 1 (one sample); dtype ``fixed`` with the bit
width in ``config.precision_bits`` (plus ``reuse_factor`` and ``strategy``): dtype stays one category that every
featurizer already encodes, and the width is a number a model can interpolate over, where 7 dtype names
``fixed<2>``..``fixed<14>`` would each be a separate category. Targets: ``lut, ff, dsp, bram_18k, uram`` (the
``*_hls`` estimates), ``latency_cycles`` = ``WorstLatency_hls``, ``interval_cycles`` = ``IntervalMax_hls``;
``BestLatency_hls``, ``IntervalMin_hls`` and the clock periods go to ``meta``. ``runtime_ms`` stays empty
(cycles are what synthesis reports; a 0-cycle combinational layer has no positive runtime to write).
A failed synthesis (``hls_synth_success`` false) is an error row with no targets: it only teaches feasibility.
Hardware: the part whose totals the ``Available*_hls`` columns give (xcvu13p, checked on import).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from data.hardware import HardwareRegistry
from data.importers import DatasetError, data_root, finish, need, require_columns

SOURCE = "wa-hls4ml@8e70542"
FILES = ("results_resource.csv", "results_latency.csv")
HARDWARE = "xcvu13p"
TARGETS = {
    "LUT_hls": "lut",
    "FF_hls": "ff",
    "DSP_hls": "dsp",
    "BRAM_18K_hls": "bram_18k",
    "URAM_hls": "uram",
    "WorstLatency_hls": "latency_cycles",
    "IntervalMax_hls": "interval_cycles",
}
_AVAILABLE = {
    "AvailableLUT_hls": "lut",
    "AvailableFF_hls": "ff",
    "AvailableDSP_hls": "dsp",
    "AvailableBRAM_18K_hls": "bram_18k",
    "AvailableURAM_hls": "uram",
}
_META = ("model_name", "BestLatency_hls", "IntervalMin_hls", "TargetClockPeriod_hls", "EstimatedClockPeriod_hls")


def import_wa_hls4ml(root: str | Path | None = None, registry: HardwareRegistry | None = None) -> pd.DataFrame:
    root = data_root(root)
    registry = registry or HardwareRegistry.from_dir()
    part = registry.get(HARDWARE)
    totals = part.extra.get("resources", {})
    rows, metas, configs = [], [], []
    for name in FILES:
        path = need(root / "wa_hls4ml" / name)
        src = pd.read_csv(path)
        require_columns(
            src, ["d_in", "d_out", "prec", "rf", "strategy", "hls_synth_success", *TARGETS, *_AVAILABLE], path
        )
        ok = src["hls_synth_success"].astype(str).str.lower() == "true"
        for col, key in _AVAILABLE.items():  # the rows' part must be the registry's part
            seen = set(src.loc[ok, col].dropna().astype(int))
            if seen and seen != {int(totals.get(key, -1))}:
                raise DatasetError(f"{path}: {col} {sorted(seen)} does not match {HARDWARE} {key}={totals.get(key)}")
        for j, r in enumerate(src.to_dict("records")):
            row = {
                "op": "dense",
                "dtype": "fixed",
                "m": 1,
                "k": int(r["d_in"]),
                "n": int(r["d_out"]),
                "hardware": part.id,
                "timing_method": "vivado_hls_estimate",
            }
            if ok.iat[j]:
                missing = [c for c in TARGETS if pd.isna(r[c])]
                if missing:
                    raise DatasetError(f"{path} row {j}: synthesised but {', '.join(missing)} empty")
                row.update(status="ok", **{TARGETS[c]: float(r[c]) for c in TARGETS})
            else:
                row.update(status="error", error="hls synthesis failed (hls_synth_success = False)")
            rows.append(row)
            configs.append(
                {"precision_bits": int(r["prec"]), "reuse_factor": int(r["rf"]), "strategy": str(r["strategy"])}
            )
            metas.append(
                {"file": f"wa_hls4ml/{name}", "row": j, "timestamp_known": False, **{c: r[c] for c in _META if c in r}}
            )
    env = {"dataset": "wa_hls4ml", "tool": "hls4ml + Vivado HLS", "clock_period_ns": 5.0}
    return finish(pd.DataFrame(rows), source=SOURCE, env=env, meta=metas, config=configs)
