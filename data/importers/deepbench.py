"""Baidu DeepBench GEMM and forward-convolution timings (``deepbench/{train,inference}/*.xlsx``; baidu-research/
DeepBench @da81ba7, Apache-2.0): 10 GPUs of four generations (Maxwell, Pascal, Volta, Turing; AMD Vega),
CUDA 7.5-10.1 / cuDNN 5-7.6, ROCm 1.7.1 / MIOpen 1.3.

Reading. A results sheet is a stack of sections, each opened by a title in column 0 (``Dense Matrix
Multiplication``, ``Convolution``, ``Recurrent Layers - ...``, ``Sparse Matrix Multiplication``, ``All-Reduce``);
the header is the title row itself (GEMM) or the next non-empty row (Convolution). Sections and columns are found
by their names (the layout shifts by a row or two and conv columns change order between files); an unknown title
in column 0 is an error, not a guess. The sheet's ``Precision`` line fixes the dtype; the ``Specs`` sheet names the
GPU (mapped to a registry id by :data:`DEVICES`) and the software (``env``).

Conventions, DeepBench -> ours (:mod:`data.workloads`):

* GEMM ``M, N, K, A/B Transpose`` -> ``matmul``. DeepBench calls cuBLAS (column-major): C[M,N] = op(A)[M,K]
  op(B)[K,N]. A column-major C[M,N] is the row-major C^T[N,M] = op(B)^T op(A)^T, which is exactly the cuBLAS
  call PyTorch makes for ``A_ours[m,k] @ B_ours[k,n]`` with **m = N, n = M, k = K** (PyTorch swaps the operands;
  DeepBench's N is the minibatch / token dimension, our ``m``). FLOPs (2 M N K) and bytes are symmetric in m, n;
  the mapping matters for which kernel ran. The transposes become our operands' storage, kept in ``config``
  (part of a row's identity): ``transpose_a`` = DeepBench's *B Transpose* (A_ours stored [k, m], used as .t()),
  ``transpose_b`` = DeepBench's *A Transpose* (B_ours stored [n, k], used as .t(): ``T N`` is ``nn.Linear``
  without bias, cuBLAS ``tn``, the kernels NeuSight's linear rows name). The source M, N, K, flags and the
  application name go to ``meta``. The TERAFLOPS column equals our flops / time (tests).
* Convolution forward -> ``conv2d``: batch = N, c_in = C, c_out = K, h = H, w = W, kernel = R = S, stride, padding.
  Our conv2d has a square kernel and one stride / padding, so rows with R != S (DeepSpeech's 20x5 and 10x5
  filters, ...), unequal pads or unequal strides are skipped and counted. Backward timings (wrt inputs /
  parameters) are other ops: kept in ``meta`` only (``bwd_data_ms``, ``bwd_filter_ms``), as is cuDNN's chosen
  algorithm (observed on the device). The source's P, Q (output size) are not used: some files compute them with
  another formula (78.5 for 79); FLOPs come from our conv2d on the mapped shape.
* dtypes, from the sheet's ``Precision`` line: ``Float`` -> float32. ``16 bit inputs, 16 bit multiplication,
  32 bit addition`` (V100, T4 ``FP16 ip, Mixed math``: tensor cores) -> float16. ``16 bit inputs, 32 bit
  multiplication, 32 bit addition`` (P100 ``Psuedo FP16``) -> float16 as well: fp16 storage with fp32 math is
  what a float16 matmul / conv in PyTorch runs on a GPU without tensor cores (cuBLAS GemmEx with an fp32 compute
  type; cuDNN's pseudo-half configuration), so these rows are P100's float16, at about its FP32 rate; the precision
  line stays in ``env``. ``GEMM, Conv: Int8 multiplication, 32 bit accumulation`` (the inference workbooks):
  skipped and counted, int8 is not a dtype of :mod:`data.workloads`.
* Skipped sections (counted per sheet): recurrent layers, sparse GEMM, all-reduce. ``N/A*`` cells are not
  measurements. The Xeon Phi 7250 (KNL) workbook is skipped and counted: a KNL roofline depends on the MCDRAM
  mode (flat / cache / DDR4 only), which the workbook does not record.
* Timing: DeepBench times a loop of back-to-back calls on the host after a warm-up and reports the mean per call
  in whole microseconds (``timing_method = host_loop_mean``): a 10 us kernel carries +-5% rounding. Its launch
  floor is that of a C++ loop calling the libraries, not of a PyTorch stream: the physics model reads these rows
  as timing harness ``library_loop`` (``features.physics.SOURCE_HARNESS``).
* Hardware: the Specs sheet's ``GPU Model`` via :data:`DEVICES` (an unknown name is one clear error). The P100 is
  taken as the PCIe 16 GB board (the host is an ASUS X99-E WS workstation board, PCIe only; the workbook does not
  say 12 or 16 GB); the V100 as SXM2 16 GB (the Specs sheet says DGX-1 and its Xeon E5-2698 v4 is the DGX-1's;
  the DGX-1 shipped 16 GB, later 32 GB boards: clocks, SMs, bandwidth and peaks are the same).
* Repeated shapes: a few configurations appear twice in a sheet (e.g. ResNet 14x14x256 -> 1024 at batch 16);
  both rows are kept as measured.

Measured, ``python -m data.importers.deepbench`` (reads the workbooks and NeuSight's GEMM files; no GPU involved):

* 3198 rows on 10 GPUs: per GPU sheet 160 GEMM + 86 forward-conv rows (8 conv rows with non-square filters
  skipped), 13 sheets (10 float32; float16 on V100 / T4 tensor cores and P100 pseudo fp16). Skipped and counted:
  the 4 int8 inference workbooks (275 rows each), the KNL workbook (342), recurrent (53-54 per sheet) and
  all-reduce (25-35) sections. No pads or strides differ between height and width in these files.
* DeepBench vs NeuSight, float32 GEMMs (:func:`cross_check`). No (m, n, k) is in both (NeuSight's shapes are
  random, DeepBench's come from networks, multiples of 8-32). On neighbouring shapes (DeepBench ``T N`` GEMMs with
  NeuSight linear rows whose m, n, k are each within 20%: 11 per GPU), DeepBench's achieved TFLOP/s is a median
  1.46x NeuSight's on P100 (range 1.29-3.42), 1.59x on V100 (1.05-2.01; its SXM2 board boosts to 1530 MHz, NeuSight's
  PCIe board to 1380: 1.11x of it) and 1.23x on T4 (1.03-1.63). At the plateau they agree better: the 90th percentile
  of achieved / float32 peak over GEMMs >= 10 GFLOP is 0.97 (DeepBench) vs 0.76 (NeuSight) on P100, 0.90 vs 0.88 on
  V100, 0.56 vs 0.42 on T4. Reading: the two sources agree within a few % on what a V100 reaches and differ by
  up to 1.3x at the plateau and 1.2-1.6x at mid sizes, where NeuSight's unaligned shapes (odd m, n, k) and its
  timing (CUDA events around calls vs DeepBench's host-timed mean of a back-to-back loop, older cuBLAS) differ.
  A model trained on both sees this as source-dependent noise of that size on the same GPU.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from data.hardware import HardwareRegistry
from data.importers import DatasetError, data_root, finish
from data.workloads import WorkloadError, validate

SOURCE = "deepbench@da81ba7"
FOLDERS = ("train", "inference")
TIMING_METHOD = "host_loop_mean"

# The Specs sheet's "GPU Model" -> registry id (see the module docstring for the P100 / V100 variants).
DEVICES = {
    "nvidia tesla m40": "M40",
    "nvidia titanx": "TITAN-X-Maxwell",
    "nvidia titanx pascal": "TITAN-X-Pascal",
    "nvidia titanxp": "TITAN-Xp",
    "nvidia gtx titanxp": "TITAN-Xp",
    "nvidia 1080ti": "GTX-1080-Ti",
    "nvidia gtx 1080 ti": "GTX-1080-Ti",
    "nvidia tesla p100": "P100-PCIe-16GB",
    "nvidia v100": "V100-SXM2-16GB",
    "nvidia t4": "T4",
    "amd mi25": "MI25",
    "amd vega frontier edition 16gb": "Vega-FE",
}
CPU_WORKBOOKS = {"intel(r) xeon phi(tm) 7250f": "Xeon Phi 7250 (KNL): no clean CPU spec (MCDRAM mode not recorded)"}
# The sheet's Precision line -> our dtype (None: skipped, with the reason)
PRECISIONS = {
    "float": ("float32", None),
    "16 bit inputs, 16 bit multiplication, 32 bit addition": ("float16", None),
    "16 bit inputs, 32 bit multiplication, 32 bit addition": ("float16", None),
    "gemm, conv: int8 multiplication, 32 bit accumulation": (None, "int8 (no int8 dtype in data.workloads)"),
}
SECTIONS = {
    "dense matrix multiplication": "gemm",
    "convolution": "conv",
    "sparse matrix multiplication": "sparse",
    "recurrent layers - vanilla": "rnn",
    "recurrent layers - lstm": "rnn",
    "recurrent layers - gru": "rnn",
    "all-reduce": "all-reduce",
}
GEMM_COLS = ("m", "n", "k", "a transpose", "b transpose", "time", "teraflops")
CONV_COLS = ("w", "h", "c", "n", "k", "s", "r", "pad_w", "pad_h", "horizontal stride", "vertical stride", "forward")


def _norm(text) -> str:
    """A header or title in one canonical form: the part before any '(', lower case, single spaces."""
    return " ".join(re.sub(r"\(.*", "", str(text)).lower().split())


def _name(text) -> str:
    """A device name or precision line in one canonical form: lower case, single spaces (also for NBSP)."""
    return " ".join(str(text).lower().split())


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class Section:
    kind: str
    title: str
    row: int  # 0-based row index of the title
    columns: dict[str, int]  # canonical header -> column index
    rows: list[tuple[int, tuple]] = field(default_factory=list)  # (0-based row index, cells) of non-empty rows


@dataclass
class SheetReport:
    """What one results sheet gave: rows imported per op and rows skipped per reason."""

    file: str
    sheet: str
    hardware: str
    dtype: str | None
    imported: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)  # (reason, section kind) -> rows

    def line(self) -> str:
        got = ", ".join(f"{n} {op}" for op, n in sorted(self.imported.items())) or "0 rows"
        by_reason: dict[str, list[str]] = {}
        for (reason, kind), n in sorted(self.skipped.items()):
            by_reason.setdefault(reason, []).append(f"{n} {kind}")
        why = "; ".join(f"{reason}: {', '.join(parts)}" for reason, parts in by_reason.items())
        return f"deepbench {self.file} [{self.sheet}] {self.hardware} {self.dtype or '-'}: imported {got}" + (
            f"; skipped {sum(self.skipped.values())} ({why})" if why else ""
        )

    def skipped_by_reason(self) -> dict[str, int]:
        out: Counter = Counter()
        for (reason, _), n in self.skipped.items():
            out[reason] += n
        return dict(out)


def sections(rows: list[tuple], where: str) -> tuple[str | None, list[Section]]:
    """The sheet's Precision line and its sections, found by their titles in column 0."""
    precision, found = None, []
    i = 0
    while i < len(rows):
        r = rows[i]
        head = r[0] if r else None
        if isinstance(head, str) and head.strip():
            title = _norm(head)
            if title == "precision":
                precision = " ".join(str(r[1]).split()) if len(r) > 1 and r[1] is not None else None
                i += 1
                continue
            if title not in SECTIONS:
                raise DatasetError(f"{where} row {i + 1}: unknown section title {head!r}")
            header_row = i
            if not any(isinstance(v, str) for v in r[1:]):  # header on the next non-empty row
                header_row = next((j for j in range(i + 1, len(rows)) if any(v is not None for v in rows[j])), i)
            columns = {}
            for c, v in enumerate(rows[header_row]):
                if c > 0 and isinstance(v, str) and _norm(v) and _norm(v) not in columns:
                    columns[_norm(v)] = c
            sec = Section(SECTIONS[title], " ".join(head.split()), i, columns)
            j = header_row + 1
            while j < len(rows) and not (rows[j] and isinstance(rows[j][0], str) and rows[j][0].strip()):
                if any(v is not None for v in rows[j]):
                    sec.rows.append((j, rows[j]))
                j += 1
            found.append(sec)
            i = j
            continue
        i += 1
    return precision, found


def _cell(cells: tuple, col: int | None):
    return cells[col] if col is not None and col < len(cells) else None


def _is_data(sec: Section, cells: tuple, shape_cols: tuple[str, ...]) -> bool:
    """A measurement row (some shape cell is a number), not a footnote or a sub-header."""
    return any(_num(_cell(cells, sec.columns.get(c))) is not None for c in shape_cols)


def _need(sec: Section, names, where: str) -> None:
    missing = [n for n in names if n not in sec.columns]
    if missing:
        raise DatasetError(f"{where} section {sec.title!r}: missing column(s) {', '.join(missing)}")


def _int(value, name: str, where: str) -> int:
    x = _num(value)
    if x is None or x != int(x):
        raise DatasetError(f"{where}: {name} must be an integer, got {value!r}")
    return int(x)


def _gemm_rows(sec: Section, where: str, report: SheetReport, base: dict):
    _need(sec, GEMM_COLS, where)
    col = sec.columns
    named = set(col.values())
    for j, cells in sec.rows:
        if not _is_data(sec, cells, ("m", "n", "k")):
            continue
        at = f"{where} row {j + 1}"
        t = _num(_cell(cells, col["time"]))
        if t is None or t <= 0:
            report.skipped[(f"no time ({_cell(cells, col['time'])!r})", "gemm")] += 1
            continue
        M, N, K = (_int(_cell(cells, col[c]), c.upper(), at) for c in ("m", "n", "k"))
        flags = [str(_cell(cells, col[c])).strip().upper() for c in ("a transpose", "b transpose")]
        if any(f not in ("N", "T") for f in flags):
            raise DatasetError(f"{at}: transpose flags must be N or T, got {flags}")
        notes = [str(v) for c, v in enumerate(cells) if c > 1 and c not in named and isinstance(v, str)]
        row = {**base, "op": "matmul", "m": N, "n": M, "k": K, "runtime_ms": t}
        config = {"transpose_a": int(flags[1] == "T"), "transpose_b": int(flags[0] == "T")}
        meta = {
            "file": report.file,
            "sheet": report.sheet,
            "row": j + 1,
            "application": _app(cells),
            "source_M": M,
            "source_N": N,
            "source_K": K,
            "source_transpose": "".join(flags),
            "source_teraflops": _num(_cell(cells, col["teraflops"])),
            "note": "; ".join(notes) or None,
            "timestamp_known": False,
            "device_name": base["_device"],
        }
        report.imported["matmul"] += 1
        yield row, config, meta


def _app(cells: tuple) -> str | None:
    return cells[1].strip() if len(cells) > 1 and isinstance(cells[1], str) and cells[1].strip() else None


def _conv_rows(sec: Section, where: str, report: SheetReport, base: dict):
    _need(sec, CONV_COLS, where)
    col = sec.columns
    for j, cells in sec.rows:
        if not _is_data(sec, cells, ("w", "h", "c", "n", "k")):
            continue
        at = f"{where} row {j + 1}"
        v = {c: _cell(cells, col[c]) for c in CONV_COLS}
        fwd = _num(v["forward"])
        if fwd is None or fwd <= 0:
            report.skipped[(f"no forward time ({v['forward']!r})", "conv")] += 1
            continue
        s = {c: _int(v[c], c, at) for c in CONV_COLS if c != "forward"}
        reason = (
            "non-square filter (R != S)"
            if s["r"] != s["s"]
            else "unequal padding (pad_h != pad_w)"
            if s["pad_h"] != s["pad_w"]
            else "unequal strides"
            if s["horizontal stride"] != s["vertical stride"]
            else None
        )
        shape = {
            "batch": s["n"],
            "c_in": s["c"],
            "c_out": s["k"],
            "h": s["h"],
            "w": s["w"],
            "kernel": s["r"],
            "stride": s["vertical stride"],
            "padding": s["pad_h"],
        }
        if reason is None:
            try:
                validate("conv2d", shape)
            except WorkloadError:
                reason = "a shape our conv2d rejects"
        if reason:
            report.skipped[(reason, "conv")] += 1
            continue
        bwd = {
            name: _num(_cell(cells, col.get(src)))
            for name, src in (("bwd_data_ms", "wrt inputs"), ("bwd_filter_ms", "wrt parameters"))
        }
        meta = {
            "file": report.file,
            "sheet": report.sheet,
            "row": j + 1,
            "application": _app(cells),
            **{f"source_{k.replace(' ', '_')}": x for k, x in s.items()},
            "source_P": _num(_cell(cells, col.get("p"))),
            "source_Q": _num(_cell(cells, col.get("q"))),
            "source_teraflops": _num(_cell(cells, col.get("fwd teraflops"))),
            "algorithm": _cell(cells, col.get("forward algorithm")),
            **bwd,
            "timestamp_known": False,
            "device_name": base["_device"],
        }
        report.imported["conv2d"] += 1
        yield {**base, "op": "conv2d", **shape, "runtime_ms": fwd}, None, meta


def _specs(wb, where: str) -> dict[str, str]:
    if "Specs" not in wb.sheetnames:
        raise DatasetError(f"{where}: no Specs sheet")
    specs = {}
    for r in wb["Specs"].iter_rows(values_only=True):
        if r and isinstance(r[0], str) and len(r) > 1 and r[1] not in (None, "", "-"):
            specs[r[0].strip()] = " ".join(str(r[1]).split())
    return specs


def _env_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def workbooks(root: Path) -> list[Path]:
    base = root / "deepbench"
    files = sorted(p for folder in FOLDERS for p in (base / folder).glob("*.xlsx"))
    if not files:
        raise DatasetError(f"no DeepBench workbooks (*.xlsx) in {base}/{{{','.join(FOLDERS)}}}")
    return files


def read_workbook(path: Path, root: Path, registry: HardwareRegistry) -> tuple[list[pd.DataFrame], list[SheetReport]]:
    """Schema rows (one frame per imported sheet) and a report per results sheet of one workbook."""
    import openpyxl

    rel = str(path.relative_to(root))
    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        specs = _specs(wb, rel)
        device = specs.get("GPU Model") or specs.get("CPU Model")
        if device is None:
            raise DatasetError(f"{rel}: the Specs sheet names no GPU Model")
        cpu_reason = CPU_WORKBOOKS.get(_name(device)) if "GPU Model" not in specs else None
        if cpu_reason is None:
            hw_id = DEVICES.get(_name(device))
            if hw_id is None:
                raise DatasetError(
                    f"{rel}: unknown GPU {device!r} in the Specs sheet; known: "
                    f"{', '.join(sorted(set(DEVICES.values())))} (add it to DEVICES and conf/hardware)"
                )
            hardware = registry.resolve(hw_id)
        frames, reports = [], []
        for ws in wb.worksheets:
            if ws.title == "Specs":
                continue
            where = f"{rel} [{ws.title}]"
            precision, secs = sections(list(ws.iter_rows(values_only=True)), where)
            if precision is None:
                raise DatasetError(f"{where}: no Precision line")
            if _name(precision) not in PRECISIONS:
                raise DatasetError(f"{where}: unknown precision {precision!r}")
            dtype, why = PRECISIONS[_name(precision)]
            report = SheetReport(rel, ws.title, "CPU (skipped)" if cpu_reason else hardware, dtype)
            reports.append(report)
            for sec in secs:
                shape_cols = {"gemm": ("m", "n", "k"), "conv": ("w", "h", "c", "n", "k")}.get(sec.kind)
                n = sum(
                    1
                    for _, cells in sec.rows
                    if (_is_data(sec, cells, shape_cols) if shape_cols else any(_num(v) is not None for v in cells))
                )
                if cpu_reason or why or sec.kind not in ("gemm", "conv"):
                    report.skipped[(cpu_reason or why or "not a GEMM / convolution", sec.kind)] += n
            if cpu_reason or why:
                continue
            base = {"dtype": dtype, "hardware": hardware, "timing_method": TIMING_METHOD, "_device": device}
            out = [r for sec in secs if sec.kind == "gemm" for r in _gemm_rows(sec, where, report, base)]
            out += [r for sec in secs if sec.kind == "conv" for r in _conv_rows(sec, where, report, base)]
            if not out:
                continue
            env = {_env_key(k): v for k, v in specs.items() if k != "GPU Model"}
            env.update(dataset=rel, sheet=ws.title, precision=precision)
            df = pd.DataFrame([r for r, _, _ in out]).drop(columns="_device")
            frames.append(
                finish(df, source=SOURCE, env=env, meta=[m for _, _, m in out], config=[c for _, c, _ in out])
            )
        return frames, reports
    finally:
        wb.close()


def read_all(
    root: str | Path | None = None, registry: HardwareRegistry | None = None
) -> tuple[pd.DataFrame, list[SheetReport]]:
    """Every imported row and the per-sheet reports."""
    root = data_root(root)
    registry = registry or HardwareRegistry.from_dir()
    frames, reports = [], []
    for path in workbooks(root):
        with warnings.catch_warnings():  # openpyxl: "Unknown extension is not supported" on some workbooks
            warnings.filterwarnings("ignore", message="Unknown extension", category=UserWarning)
            f, r = read_workbook(path, root, registry)
        frames += f
        reports += r
    if not frames:
        raise DatasetError(f"no GEMM or convolution rows imported from {root / 'deepbench'}")
    return pd.concat(frames, ignore_index=True), reports


def import_deepbench(
    root: str | Path | None = None, registry: HardwareRegistry | None = None, verbose: bool = True
) -> pd.DataFrame:
    """Every GEMM and forward-convolution timing of every workbook as schema rows; prints one summary line per
    results sheet (rows imported, rows skipped and why) unless ``verbose=False``."""
    df, reports = read_all(root, registry)
    if verbose:
        for r in reports:
            print(r.line(), flush=True)
    return df


# ------------------------------------------------------------------------- cross-source check
def cross_check(
    deepbench: pd.DataFrame, neusight: pd.DataFrame, tolerance: float = 0.2, min_gflop: float = 10.0
) -> pd.DataFrame:
    """DeepBench vs NeuSight float32 GEMMs on the GPU models both measured (P100, V100, T4).

    The two sources share no (m, n, k) shape: NeuSight's are random, DeepBench's are multiples of 16/32 from real
    networks. Two comparisons per GPU model: ``neighbors`` / ``ratio_median``: every DeepBench ``T N`` GEMM (the
    ``nn.Linear`` kernel) that has NeuSight linear rows with each of m, n, k within ``tolerance`` (relative, in
    log space) is compared with the median achieved TFLOP/s (flops / runtime) of those rows; and the plateau:
    the 90th percentile of achieved TFLOP/s over GEMMs of >= ``min_gflop`` GFLOP (DeepBench: every matmul;
    NeuSight: linear and bmm), as a fraction of the board's float32 peak.
    """
    from data.hardware import HardwareRegistry

    registry = HardwareRegistry.from_dir()
    model = {"P100-PCIe-16GB": "P100", "V100-SXM2-16GB": "V100", "V100-PCIe-32GB": "V100", "T4": "T4"}

    def tflops(df):
        return (df["flops"] / (df["runtime_ms"] * 1e-3) / 1e12).to_numpy()

    def plateau(df):
        big = df[df["flops"] >= min_gflop * 1e9]
        if not len(big):
            return float("nan"), ""
        peaks = {h: registry.get(h).peak_flops("float32") / 1e12 for h in big["hardware"].unique()}
        return float(pd.Series(tflops(big) / big["hardware"].map(peaks).to_numpy()).quantile(0.9)), ",".join(
            sorted(peaks)
        )

    db = deepbench[(deepbench["dtype"] == "float32") & (deepbench["op"] == "matmul")]
    ns = neusight[(neusight["dtype"] == "float32") & neusight["op"].isin(["linear", "bmm"])]
    out = []
    for gpu in ("P100", "V100", "T4"):
        d = db[db["hardware"].map(model) == gpu]
        n = ns[ns["hardware"].map(model) == gpu]
        tn = d[[json.loads(c) == {"transpose_a": 0, "transpose_b": 1} for c in d["config"]]]
        lin = n[n["op"] == "linear"]
        shapes = np.log(lin[["m", "n", "k"]].to_numpy(float))
        lin_tflops = tflops(lin)
        ratios = []
        for x, t in zip(np.log(tn[["m", "n", "k"]].to_numpy(float)), tflops(tn)):
            near = (np.abs(shapes - x) <= np.log1p(tolerance)).all(axis=1)
            if near.any():
                ratios.append(t / np.median(lin_tflops[near]))
        (db_plateau, db_hw), (ns_plateau, ns_hw) = plateau(d), plateau(n)
        out.append(
            {
                "gpu": gpu,
                "deepbench": db_hw,
                "neusight": ns_hw,
                "neighbors": len(ratios),
                "ratio_median": float(np.median(ratios)) if ratios else float("nan"),
                "ratio_min": float(np.min(ratios)) if ratios else float("nan"),
                "ratio_max": float(np.max(ratios)) if ratios else float("nan"),
                "db_p90_of_peak": db_plateau,
                "ns_p90_of_peak": ns_plateau,
            }
        )
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m data.importers.deepbench [data_root]``: per-sheet summary, rows per GPU / dtype, cross-check."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        root = data_root(argv[0] if argv else None)
        df, reports = read_all(root)
    except (DatasetError, ValueError, KeyError) as exc:
        print(f"deepbench: error: {exc}", file=sys.stderr)
        return 2
    for r in reports:
        print(r.line())
    counts = df.groupby(["hardware", "dtype", "op"]).size().unstack(fill_value=0)
    print(f"\n{len(df)} rows on {df['hardware'].nunique()} GPUs:\n{counts.to_string()}")
    from data.importers.neusight import import_neusight

    neusight = import_neusight(root, kinds=("bmm", "linear"))
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.precision", 3):
        print(
            "\nfloat32 GEMMs, DeepBench / NeuSight achieved TFLOP/s on neighbouring shapes (m, n, k within 20%),"
            "\nand the 90th percentile of achieved / peak FLOP/s over GEMMs >= 10 GFLOP:"
        )
        print(cross_check(df, neusight).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
