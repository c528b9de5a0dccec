"""How far the spec-only sim-roofline model (runtime and the analytical power model) is from the H200.

    python benchmarks/sim_power_check.py            # no GPU needed; ~10 s

Simulates every configuration of ``../shared/data/hopper/h200_kernels.csv`` (mapped as in
``cuda_power_check.py``; SDPA is skipped: the simulator has no attention op) on the registry's
``H200-SXM`` spec and prints, per op and dtype, the median and mean absolute percentage error of
runtime, power and energy per call against the file (reference = median over its passes), beside the
noise floor between the file's two passes. Nothing is fitted: every constant is a spec-sheet value or
a documented default of ``data/backends/sim_roofline.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pandas as pd  # noqa: E402
from cuda_power_check import DEFAULT_CSV, SHAPE_COLS, reference, workload  # noqa: E402


def noise_floor(path: Path) -> pd.DataFrame:
    """Per op/dtype median |pass0 - pass1| / mean of the two, for power and runtime."""
    df = pd.read_csv(path)
    df[SHAPE_COLS] = df[SHAPE_COLS].fillna(-1)
    key = ["op", "dtype", *SHAPE_COLS]
    p = df.pivot_table(index=key, columns="pass", values=["power_w", "runtime_ms"]).dropna()
    out = pd.DataFrame(index=p.index)
    for col in ("power_w", "runtime_ms"):
        a, b = p[(col, 0)], p[(col, 1)]
        out[f"{col}_pass_diff"] = (a - b).abs() / ((a + b) / 2)
    return out.reset_index().groupby(["op", "dtype"])[["power_w_pass_diff", "runtime_ms_pass_diff"]].median()


def main() -> int:
    from data.backends.sim_roofline import SimRooflineBackend
    from data.hardware import HardwareRegistry

    ref = reference(DEFAULT_CSV)
    ref = ref[ref["op"] != "sdpa"]
    sim = SimRooflineBackend(HardwareRegistry.from_dir().get("H200-SXM"))
    rows = []
    for _, r in ref.iterrows():
        m = sim.measure(workload(r))
        rows.append(
            {
                "op": r["op"],
                "dtype": r["dtype"],
                "runtime_ape": abs(m["runtime_ms"] - r["runtime_ms"]) / r["runtime_ms"],
                "power_ape": abs(m["power_w"] - r["power_w"]) / r["power_w"],
                "energy_ape": abs(m["energy_j"] * 1e3 - r["power_w"] * r["runtime_ms"])
                / (r["power_w"] * r["runtime_ms"]),
            }
        )
    res = pd.DataFrame(rows)
    g = res.groupby(["op", "dtype"])
    table = pd.concat(
        [
            g.size().rename("n"),
            (100 * g[["runtime_ape", "power_ape", "energy_ape"]].median()).add_prefix("MedAPE_"),
            (100 * g[["power_ape", "energy_ape"]].mean()).add_prefix("MAPE_"),
            (100 * noise_floor(DEFAULT_CSV)).add_prefix("noise_"),
        ],
        axis=1,
    ).dropna(subset=["n"])
    pd.set_option("display.width", 220)
    print(table.to_string(float_format=lambda x: f"{x:.1f}"))
    print(
        f"all {len(res)} configurations: MedAPE runtime {100 * res['runtime_ape'].median():.1f}%, "
        f"power {100 * res['power_ape'].median():.1f}%, energy {100 * res['energy_ape'].median():.1f}%; "
        f"MAPE power {100 * res['power_ape'].mean():.1f}%, energy {100 * res['energy_ape'].mean():.1f}% "
        f"(sim-roofline on the H200-SXM spec vs {DEFAULT_CSV.name}; no fitting)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
