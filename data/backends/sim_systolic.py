"""Cycle-level systolic-array simulation with SCALE-Sim (``scalesim`` 3.0.0 on PyPI; Samajdar et al., 2018).

Per workload, the GEMM it performs is handed to SCALE-Sim in its GEMM mode (topology row ``M, N, K``):

* ``matmul`` / ``linear`` / ``dense``: M = m, N = n, K = k;
* ``bmm``: one GEMM (m, n, k) simulated, cycles and traffic x ``batch`` (the batch's GEMMs run one after another);
* ``conv2d``: its im2col GEMM, which is how SCALE-Sim maps a convolution onto the array anyway:
  M = batch * h_out * w_out (output pixels), K = c_in * kernel^2 (window), N = c_out (filters).

SCALE-Sim runs the array cycle by cycle (operand demand matrices for the configured dataflow, os / ws / is)
against double-buffered SRAMs and reports, per layer: compute cycles, stall cycles, utilisation, mapping
efficiency, SRAM reads/writes, DRAM reads/writes and their cycle windows. Row columns:

* ``latency_cycles`` = SCALE-Sim's *overall* cycles (first DRAM read to last DRAM write of the output),
  ``runtime_ms`` = latency_cycles / clock (the hardware entry's ``boost_clock_mhz``);
* ``meta``: compute / stall cycles, utilisation %, mapping efficiency %, SRAM and DRAM reads/writes in words
  and bytes (``word_bytes`` of the hardware entry), the dataflow and array size;
* energy: SCALE-Sim 3.0.0 has no energy model, so ``energy_j`` stays empty and ``meta.energy_note`` says why.

For a single fold on an R x C output-stationary array (M <= R, N <= C) SCALE-Sim's compute cycles are
``K + R + C - 3``: operands enter skewed over R - 1 rows and C - 1 columns, then K multiply-accumulate steps;
F folds (ceil(M/R) * ceil(N/C)) take ``F * (K + R + C - 2) - 1`` (tested in tests/test_sim_systolic.py).

Ops that are not GEMM-like (norms, elementwise, attention, networks) become error rows naming the reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path

import numpy as np

from data.backends import base_row, environment
from data.hardware import HardwareSpec
from data.workloads import count_cost, validate

GEMM_OPS = ("matmul", "linear", "dense", "bmm", "conv2d")

_CFG = """[general]
run_name = layer

[architecture_presets]
ArrayHeight: {rows}
ArrayWidth: {cols}
IfmapSramSzkB: {ifmap_kb}
FilterSramSzkB: {filter_kb}
OfmapSramSzkB: {ofmap_kb}
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth: 10
Dataflow: {dataflow}
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: false
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: 8
RandomNumberGeneratorSeed: 40

[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""


def _numpy2_compat() -> None:
    """scalesim 3.0.0's memory model calls ``int(max(list of 1-element arrays))``, which NumPy 2.4 rejects
    (only 0-d arrays convert to int). Give that one module a ``max`` that reduces the same values to a scalar;
    the simulation itself is untouched."""
    import scalesim.memory.double_buffered_scratchpad_mem as dbm

    if getattr(dbm, "_costmodel_compat", False):
        return

    def _max(*args):
        values = args[0] if len(args) == 1 else args
        return np.max(np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in values]))

    dbm.max = _max
    dbm._costmodel_compat = True


def gemm_of(op: str, p: dict) -> tuple[int, int, int, int]:
    """``(M, N, K, repeats)`` of the GEMM a workload performs (see the module docstring)."""
    if op in ("matmul", "linear", "dense"):
        return p["m"], p["n"], p["k"], 1
    if op == "bmm":
        return p["m"], p["n"], p["k"], p["batch"]
    if op == "conv2d":
        h_out = (p["h"] + 2 * p["padding"] - p["kernel"]) // p["stride"] + 1
        w_out = (p["w"] + 2 * p["padding"] - p["kernel"]) // p["stride"] + 1
        return p["batch"] * h_out * w_out, p["c_out"], p["c_in"] * p["kernel"] ** 2, 1
    raise ValueError(f"sim-systolic simulates GEMM-like ops ({', '.join(GEMM_OPS)}), not {op!r}")


def simulate_gemm(
    m: int, n: int, k: int, *, rows: int, cols: int, dataflow: str, ifmap_kb: int, filter_kb: int, ofmap_kb: int
) -> dict:
    """Run SCALE-Sim on one GEMM; returns its per-layer report items by name."""
    _numpy2_compat()
    from scalesim.scale_sim import scalesim

    with tempfile.TemporaryDirectory(prefix="scalesim-") as tmp:
        d = Path(tmp)
        (d / "arch.cfg").write_text(
            _CFG.format(
                rows=rows, cols=cols, dataflow=dataflow, ifmap_kb=ifmap_kb, filter_kb=filter_kb, ofmap_kb=ofmap_kb
            )
        )
        (d / "gemm.csv").write_text(f"Layer,M,N,K,\nlayer,{m},{n},{k},\n")
        (d / "layout.csv").write_text("Layer name,\n")  # no custom SRAM layout
        with contextlib.redirect_stdout(io.StringIO()):
            sim = scalesim(
                save_disk_space=True,
                verbose=False,
                config=str(d / "arch.cfg"),
                topology=str(d / "gemm.csv"),
                layout=str(d / "layout.csv"),
                input_type_gemm=True,
            )
            sim.run_scale(top_path=str(d / "out"))
        layer = sim.runner.single_layer_sim_object_list[0]
        overall, compute, stall, util, mapping_eff, compute_util = layer.get_compute_report_items()
        detail = [float(x) for x in layer.get_detail_report_items()]
    return {
        "overall_cycles": int(overall),
        "compute_cycles": int(compute),
        "stall_cycles": int(stall),
        "utilization_pct": float(util),
        "mapping_efficiency_pct": float(mapping_eff),
        "compute_utilization_pct": float(compute_util),
        "ifmap_sram_reads": detail[2],
        "filter_sram_reads": detail[5],
        "ofmap_sram_writes": detail[8],
        "ifmap_dram_reads": detail[11],
        "filter_dram_reads": detail[14],
        "ofmap_dram_writes": detail[17],
    }


class SimSystolicBackend:
    """One workload in, one row out, on a systolic-array hardware entry (``kind: accelerator``)."""

    name = "sim-systolic"

    def __init__(self, hardware: HardwareSpec, source: str = "sim-systolic"):
        cfg = hardware.extra.get("systolic")
        if hardware.kind != "accelerator" or not cfg:
            raise ValueError(
                f"hardware {hardware.id!r} is not a systolic accelerator (needs kind: accelerator "
                "and a 'systolic' section)"
            )
        if not hardware.boost_clock_mhz:
            raise ValueError(f"hardware {hardware.id!r}: boost_clock_mhz (the array clock) is required")
        self.hardware, self.source, self.cfg = hardware, source, dict(cfg)

    def measure(self, workload: dict) -> dict:
        import scalesim

        c = self.cfg
        env = environment(
            simulator="scalesim",
            scalesim=getattr(scalesim, "__version__", "3.0.0"),
            array=f"{c['array_rows']}x{c['array_cols']}",
            dataflow=c["dataflow"],
        )
        row = base_row(workload, self.hardware.id, self.name, self.source, env)
        op, dtype = workload["op"], workload["dtype"]
        try:
            p = validate(op, workload["params"], dtype)
            row["flops"], row["bytes"] = count_cost(op, p, dtype)
            m, n, k, reps = gemm_of(op, p)
            r = simulate_gemm(
                m,
                n,
                k,
                rows=int(c["array_rows"]),
                cols=int(c["array_cols"]),
                dataflow=c["dataflow"],
                ifmap_kb=int(c["ifmap_sram_kb"]),
                filter_kb=int(c["filter_sram_kb"]),
                ofmap_kb=int(c["ofmap_sram_kb"]),
            )
            word = float(c.get("word_bytes", 1))
            cycles = r["overall_cycles"] * reps
            meta = {
                "gemm_mnk": [m, n, k],
                "gemm_repeats": reps,
                "dataflow": c["dataflow"],
                "array": [int(c["array_rows"]), int(c["array_cols"])],
                "word_bytes": word,
                **{key: (v * reps if key.endswith(("cycles", "reads", "writes")) else v) for key, v in r.items()},
                "sram_bytes": word * reps * (r["ifmap_sram_reads"] + r["filter_sram_reads"] + r["ofmap_sram_writes"]),
                "dram_bytes": word * reps * (r["ifmap_dram_reads"] + r["filter_dram_reads"] + r["ofmap_dram_writes"]),
                "energy_note": "scalesim 3.0.0 has no energy model; energy_j left empty",
            }
            row.update(
                status="ok",
                error=None,
                latency_cycles=float(cycles),
                runtime_ms=cycles / (self.hardware.boost_clock_mhz * 1e6) * 1e3,
                timing_method="simulated",
                meta=_dumps(meta),
            )
        except Exception as exc:  # an op the array cannot run, or a simulator failure: an error row
            row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500], runtime_ms=None)
            row.setdefault("flops", 0.0)
            row.setdefault("bytes", 1.0)
        return row


def _dumps(d: dict) -> str:
    return json.dumps(d, sort_keys=True, default=float)


def expected_os_compute_cycles(m: int, n: int, k: int, rows: int, cols: int) -> int:
    """SCALE-Sim's output-stationary compute cycles (module docstring): F * (K + R + C - 2) - 1."""
    folds = math.ceil(m / rows) * math.ceil(n / cols)
    return folds * (k + rows + cols - 2) - 1
