"""NVIDIA aiconfigurator's performance database of LLM kernels (``aiconfigurator/``, Apache-2.0; see
``../shared/data/README.md``): GEMMs, attention, MoE and collectives measured with each serving framework's own ops.

Layout: ``aiconfigurator/data/<system>/<kind>/<framework>/<version>/<table>.parquet`` (latency in milliseconds).
``<system>`` is aiconfigurator's GPU name, mapped to a registry id by :data:`SYSTEMS` (``a100_sxm``, ``h100_sxm``,
``h200_sxm``, ``b200_sxm``, ``l40s``; the RTX PRO 6000 Blackwell Server Edition is expected as ``rtx_pro_6000`` or
``rtx6000_pro``); a folder not in that table is resolved through the registry's aliases, first its own name, then the
``device`` strings of its tables (``NVIDIA A100-SXM4-80GB``, ``NVIDIA H100 80GB HBM3``, ``NVIDIA H200``,
``NVIDIA B200``, ``NVIDIA L40S``, ``NVIDIA RTX PRO 6000 Blackwell Server Edition``); neither is one
:class:`~data.importers.DatasetError` line. ``<framework>`` is ``vllm``, ``sglang``, ``trtllm`` or ``nccl``.

Tables -> rows of the one schema (:mod:`data.ops` conventions):

* ``gemm/.../gemm_perf``: ``linear`` (y = x W^T) with ``m, n, k``; ``gemm_dtype`` bfloat16 -> bfloat16, fp8 /
  fp8_static (e4m3, per-tensor scales) -> float8_e4m3fn, fp8_block -> fp8_block, int8_wo / int4_wo (weight-only) as
  named, sq (SmoothQuant W8A8) -> int8; other formats (nvfp4, ...) are skipped and counted.
* ``attention/.../context_attention_perf`` (prefill): ``sdpa`` batch = batch_size, heads = num_heads,
  num_kv_heads = num_key_value_heads, head_dim, seq_len = isl, kv_len = isl + step, causal 1 (``step`` is 0 in every
  context table: no prefix-cache rows), dtype = attn_dtype, kv_dtype = kv_cache_dtype (fp8 -> float8_e4m3fn).
* ``attention/.../generation_attention_perf`` (decode, one new token per sequence): ``sdpa`` seq_len 1,
  kv_len = isl + step, causal 0. ``isl`` is 1 in every table and ``step`` 2^j - 1, so the cache lengths are 2 ...
  131072. Checked on the data: reading ``2 batch kv_len num_kv_heads head_dim`` KV bytes in the rows' KV dtype, the
  largest decodes (over 200 MB of cache) run at 28-93% (5th percentile to maximum) of the H200's 4.8 TB/s, 53-89% of
  the L40S's 864 GB/s and 33-85% of the A100's 2.04 TB/s, never above: a cache of ``isl + step`` tokens, read once.
* ``encoder_attention/.../encoder_attention_perf`` (a vision encoder's self-attention): ``sdpa`` batch, heads,
  seq_len = kv_len = isl, head_dim, causal 0.
* ``moe/.../moe_perf``: ``moe`` m = num_tokens, k = hidden_size, n = inter_size, experts = num_experts, topk,
  tp = moe_tp_size, ep = moe_ep_size, dtype = moe_dtype mapped as for GEMMs (no int8 MoE op). Only
  ``distribution == balanced`` (the op models balanced routing; power-law rows are skipped and counted), and no
  non-gated expert MLPs (``kernel_source`` ``*nongated*``; the op is a gated SwiGLU). ``num_tokens`` is the global
  token count before expert-parallel dispatch, as the op assumes (``A = ceil(m topk / ep)`` assignments a GPU):
  at 8192+ tokens the H200's vLLM latency at ep 2 / 4 / 8 is 0.52 / 0.28 / 0.17 of ep 1 (TensorRT-LLM 0.51 / 0.26 /
  0.14), near 1 / ep, where a per-GPU count would keep it near 1.
* ``comm/nccl/<version>/nccl_perf``: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``
  (``alltoall``) with n = message_size, gpus = num_gpus; ``nccl_dtype`` half -> float16 (NCCL's ``ncclHalf``; the
  bytes are a bfloat16's), int8 -> int8. ``message_size`` counts ELEMENTS: at 64M+ elements the half rows take
  1.9-2.0x the int8 rows' time for all-gather on every GPU (2x the bytes; byte counts would give 1x), and the custom
  all-reduce tables' bfloat16 rows take the time of NCCL's half all-reduce at the same size (both bandwidth-bound
  there). Reductions over 8 GPUs are the exception (all-reduce 1.5x on the H200, 1.8x on the L40S).
* ``comm/<framework>/<version>/custom_allreduce_perf``: ``all_reduce`` n = message_size (elements), gpus = num_gpus,
  dtype = allreduce_dtype; ``backend`` / ``kernel_source`` says whether it was replayed from a CUDA graph or called
  eagerly.

``timing_method`` (the harness, ``features.physics.TIMING_HARNESS``): ``cuda_graph`` for tables timed by replaying a
CUDA graph of several back-to-back calls (GEMM, attention, MoE, the graph custom all-reduces and TensorRT-LLM's,
whose small-message floor of 2.6-3.5 us on the H200 is a graph's, not an eager call's 20-30 us), ``stream_loop`` (a
stream of calls timed between two events, harness ``back_to_back``) for the fp8_block GEMMs (no graph: the README
of the database), the eager all-reduces and the NCCL tables (the database does not say how NCCL was timed; its 5 us
floor on two H200s is a loop of calls with no framework dispatch; an assumption).
NVML ``power`` (W) -> ``power_w``, ``energy_j = power_w x runtime``, ``power_limit`` -> ``meta.power_limit_w``.

Which tables: ``reuse.yaml`` declarations are skipped (they point at another version's table; a folder that also
holds its own table keeps it: the declaration only fills shapes that table lacks). A table whose rows name another
release than its folder (another framework, or another major.minor version: e.g. a TensorRT-LLM all-reduce table
copied into an SGLang folder) is a copy of that release's table and skipped. ``versions="newest"`` (the default)
takes per GPU, table and framework the newest version folder with a complete table of its own;
``"newest+power"`` adds every version whose table carries NVML power; ``"all"`` every version; or a list of versions.

Skipped and counted (:class:`Report`): table kinds with no op in the registry (:data:`SKIPPED_KINDS`: MLA and its
BMMs, linear / state-space attention, mHC, MSA / sparse attention, quantisation kernels, KDA, MLP modules) and wide
expert-parallel tables (``wideep_*``: DeepEP dispatch / combine and EPLB-routed experts); rows whose dtype has no row
dtype (nvfp4, mxfp4, w4afp8, fp8 attention math: ``sdpa`` has no fp8 kernel), non-balanced MoE routing, sliding-window
attention whose window is shorter than its keys (a window at least as long attends to all of them and is kept), rows
without a positive latency, exact duplicate rows, and shapes the op's own rules refuse (``data.costs``).

``source`` = ``aiconfigurator-<framework>@<version folder>`` (``aiconfigurator-nccl@<version>`` for NCCL);
``env`` = the table's framework and version strings, device and kernel_source; ``meta`` = the table file, its
kernel_source, the original dtype names, power limit, ``isl`` / ``step`` / ``window_size`` of attention rows, the
routing distribution, and ``timestamp_known: false`` (the tables carry no time: the Unix epoch).

``python -m data.importers.aiconfigurator [data_root]`` prints what each table gave and what was skipped and why,
and the per-hop link latency fitted on the NCCL tables (``conf/hardware/*.yaml`` ``interconnect.latency_us``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from packaging.version import InvalidVersion, Version

from data.costs import first_problem, shape_problems
from data.hardware import HardwareRegistry
from data.importers import DatasetError, data_root, finish
from data.ops import OPS

FOLDER = Path("aiconfigurator") / "data"
SOURCE = "aiconfigurator"
# aiconfigurator's system folder -> registry id (the registry also lists each folder name as an alias)
SYSTEMS = {
    "a100_sxm": "A100-SXM4-80GB",
    "h100_sxm": "H100-SXM",
    "h200_sxm": "H200-SXM",
    "b200_sxm": "B200",
    "l40s": "L40S",
    "rtx_pro_6000": "RTX-PRO-6000",
    "rtx6000_pro": "RTX-PRO-6000",
}
# table file stem -> (its kind folder, the short name the ``kinds`` option takes)
TABLES = {
    "gemm_perf": ("gemm", "gemm"),
    "context_attention_perf": ("attention", "context_attention"),
    "generation_attention_perf": ("attention", "generation_attention"),
    "encoder_attention_perf": ("encoder_attention", "encoder_attention"),
    "moe_perf": ("moe", "moe"),
    "nccl_perf": ("comm", "nccl"),
    "custom_allreduce_perf": ("comm", "custom_allreduce"),
}
KINDS = tuple(short for _, short in TABLES.values())
SKIPPED_KINDS = {
    "mla": "multi-head latent attention (DeepSeek MLA): no op in the registry",
    "mla_bmm": "MLA's batched latent projections: no op in the registry",
    "linear_attention": "linear / state-space attention (GDN, Mamba2): no op in the registry",
    "mhc": "mHC modules: no op in the registry",
    "msa": "MSA attention modules: no op in the registry",
    "sparse_attention": "sparse (DSA) attention modules: no op in the registry",
    "quantize": "activation quantisation kernels: no op in the registry",
    "kda": "KDA (kimi delta attention): no op in the registry",
    "mlp": "whole MLP modules: no op in the registry",
}
WIDEEP = "wide expert parallelism (DeepEP dispatch / combine, EPLB-routed experts): no op in the registry"
LINEAR_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "fp8": "float8_e4m3fn",
    "fp8_static": "float8_e4m3fn",
    "fp8_block": "fp8_block",
    "int8_wo": "int8_wo",
    "int4_wo": "int4_wo",
    "sq": "int8",
}
MOE_DTYPES = {k: v for k, v in LINEAR_DTYPES.items() if v in OPS["moe"].dtypes}
ATTENTION_DTYPES = {"bfloat16": "bfloat16", "float16": "float16"}
KV_CACHE_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "fp8": "float8_e4m3fn"}
NCCL_DTYPES = {"half": "float16", "bfloat16": "bfloat16", "float": "float32", "int8": "int8"}
ALLREDUCE_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "float32"}
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter"}
NCCL_OPS["alltoall"] = "all_to_all"
GRAPH, STREAM = "cuda_graph", "stream_loop"  # timing_method: replayed CUDA graph; back-to-back calls between events
POWER_METHOD = "nvml_power"
VERSION_POLICIES = ("newest", "newest+power", "all")
# the columns a table needs to be mapped
NEEDS = {
    "gemm_perf": ("gemm_dtype", "m", "n", "k", "latency"),
    "context_attention_perf": (
        "batch_size",
        "isl",
        "num_heads",
        "num_key_value_heads",
        "head_dim",
        "attn_dtype",
        "kv_cache_dtype",
        "step",
        "latency",
    ),
    "encoder_attention_perf": ("batch_size", "isl", "num_heads", "head_dim", "attn_dtype", "latency"),
    "moe_perf": (
        "moe_dtype",
        "num_tokens",
        "hidden_size",
        "inter_size",
        "topk",
        "num_experts",
        "moe_tp_size",
        "moe_ep_size",
        "distribution",
        "latency",
    ),
    "nccl_perf": ("nccl_dtype", "num_gpus", "message_size", "op_name", "latency"),
    "custom_allreduce_perf": ("allreduce_dtype", "num_gpus", "message_size", "latency"),
}
NEEDS["generation_attention_perf"] = NEEDS["context_attention_perf"]


@dataclass
class Table:
    """One table file of the database and what its folder and ``collection_meta.yaml`` say about it."""

    system: str
    kind: str
    framework: str
    version: str
    path: Path
    status: str | None = None  # collection_meta: complete / partial; None where the folder has none
    provenance: str | None = None
    copy_of: str | None = None  # the release its rows name, where that is not its folder's

    @property
    def stem(self) -> str:
        return self.path.stem

    @property
    def name(self) -> str:
        return TABLES[self.stem][1]

    @property
    def rel(self) -> str:
        return f"{self.system}/{self.kind}/{self.framework}/{self.version}/{self.path.name}"

    @property
    def source(self) -> str:
        return f"{SOURCE}-{self.framework.lower()}@{self.version}"


@dataclass
class Report:
    """What an import read: rows per (hardware, table, op, dtype) and rows skipped per (what, reason)."""

    imported: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    tables: list = field(default_factory=list)

    def skip(self, what: str, reason: str, rows: int) -> None:
        if rows:
            self.skipped[(what, reason)] += int(rows)

    def skipped_by_reason(self) -> dict[str, int]:
        out: Counter = Counter()
        for (_, reason), n in self.skipped.items():
            out[reason] += n
        return dict(out)

    def lines(self) -> list[str]:
        out = [f"{len(self.tables)} tables read: {', '.join(self.tables)}"]
        frame = pd.Series(self.imported, dtype=int)
        if len(frame):
            frame.index.names = ["hardware", "table", "op", "dtype"]
            out.append(frame.rename("rows").reset_index().to_string(index=False))
        out.append(f"imported {int(frame.sum()):,} rows; skipped {sum(self.skipped.values()):,}:")
        for (what, reason), n in sorted(self.skipped.items()):
            out.append(f"  {what}: {n:,} ({reason})")
        return out


def _version_key(text: str):
    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def _major_minor(text: str) -> tuple | str:
    try:
        return Version(str(text)).release[:2]
    except InvalidVersion:
        return str(text)


def _rows_in(path: Path) -> int:
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path}: not a readable parquet file ({' '.join(str(exc).split())[:200]})") from None


def _read(path: Path, columns=None) -> pd.DataFrame:
    try:
        if columns is not None:
            names = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in names]
        return pq.read_table(path, columns=columns).to_pandas()
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path}: not a readable parquet file ({' '.join(str(exc).split())[:200]})") from None


def _yaml(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise DatasetError(f"{path}: not readable YAML ({' '.join(str(exc).split())[:200]})") from None


def _copy_of(table: Table) -> str | None:
    """The release a table's rows name where it is not its folder's (another framework, or another major.minor
    version): the table is a copy of that release's. None for a table of its own (or one whose rows name none)."""
    labels = _read(table.path, ["framework", "version"])
    framework = sorted({str(v) for v in labels["framework"].dropna().unique()}) if "framework" in labels else []
    versions = sorted({str(v) for v in labels["version"].dropna().unique()}) if "version" in labels else []
    own_framework = table.framework.lower()
    if own_framework != "nccl" and framework and all(f.lower() != own_framework for f in framework):
        return f"{framework[0]} {versions[0] if versions else '?'}"
    if versions and all(_major_minor(v) != _major_minor(table.version) for v in versions):
        return f"{framework[0] if framework and own_framework != 'nccl' else table.framework} {versions[0]}"
    return None


def _wanted(framework: str, frameworks) -> bool:
    return frameworks is None or framework.lower() in frameworks


def discover(base: Path, report: Report, systems=None, kinds=None, frameworks=None) -> list[Table]:
    """Every table under ``base`` (``.../aiconfigurator/data``) of the selected systems, kinds and frameworks; what
    cannot be mapped is counted in ``report`` (rows from the files' metadata, nothing read)."""
    found = []
    for sys_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        if systems is not None and sys_dir.name not in systems:
            continue
        for kind_dir in sorted(p for p in sys_dir.iterdir() if p.is_dir()):
            files = [f for f in sorted(kind_dir.glob("*/*/*.parquet")) if _wanted(f.parent.parent.name, frameworks)]
            if kind_dir.name in SKIPPED_KINDS or kind_dir.name not in {k for k, _ in TABLES.values()}:
                reason = SKIPPED_KINDS.get(kind_dir.name, f"table kind {kind_dir.name!r}: no mapping")
                for f in files if kinds is None else ():  # what a whole import leaves out
                    report.skip(f"{sys_dir.name}/{kind_dir.name}", reason, _rows_in(f))
                continue
            for version_dir in sorted(p for p in kind_dir.glob("*/*") if p.is_dir()):
                framework = version_dir.parent.name
                meta = _yaml(version_dir / "collection_meta.yaml")
                tables_meta = meta.get("tables") or {}
                for f in sorted(version_dir.glob("*.parquet")):
                    what = f"{sys_dir.name}/{kind_dir.name}/{f.stem}"
                    if not _wanted(framework, frameworks):
                        continue
                    if f.stem not in TABLES or TABLES[f.stem][0] != kind_dir.name:
                        reason = WIDEEP if f.stem.startswith("wideep") else f"table {f.stem!r}: no mapping"
                        if kinds is None:
                            report.skip(what, reason, _rows_in(f))
                        continue
                    if kinds is not None and TABLES[f.stem][1] not in kinds:
                        continue
                    status = (tables_meta.get(f.stem) or {}).get("status")
                    found.append(
                        Table(
                            sys_dir.name, kind_dir.name, framework, version_dir.name, f, status, meta.get("provenance")
                        )
                    )
    return found


def select(tables: list[Table], versions, report: Report) -> list[Table]:
    """The tables to import under a version policy (module docstring); copies are skipped under every policy."""
    if isinstance(versions, str) and versions not in VERSION_POLICIES:
        raise DatasetError(
            f"versions must be one of {', '.join(VERSION_POLICIES)} or a list of versions, got {versions!r}"
        )
    own = []
    for t in tables:
        t.copy_of = _copy_of(t)
        if t.copy_of is not None:
            report.skip(
                f"{t.system}/{t.kind}/{t.stem}",
                f"its rows name another release ({t.copy_of}) than its folder: that release's table, not this one's",
                _rows_in(t.path),
            )
        else:
            own.append(t)
    if not isinstance(versions, str):
        wanted = {str(v) for v in versions}
        return [t for t in own if t.version in wanted]
    if versions == "all":
        return own
    newest: dict[tuple, Table] = {}
    for t in own:
        if t.status not in (None, "complete"):
            continue
        key = (t.system, t.stem, t.framework.lower())
        if key not in newest or _version_key(t.version) > _version_key(newest[key].version):
            newest[key] = t
    chosen = set(map(id, newest.values()))
    if versions == "newest+power":
        chosen |= {id(t) for t in own if "power" in pq.read_schema(t.path).names}
    return [t for t in own if id(t) in chosen]


# --------------------------------------------------------------------------- table -> rows
def _need(df: pd.DataFrame, table: Table) -> None:
    missing = [c for c in NEEDS[table.stem] if c not in df.columns]
    if missing:
        raise DatasetError(f"{table.path}: missing column(s) {', '.join(missing)} (a {table.stem} table needs them)")


def _mapped(df: pd.DataFrame, column: str, mapping: dict, table: Table, report: Report, what: str) -> pd.Series:
    """``column`` mapped through ``mapping``; rows whose value it lacks are counted (and come back as NaN)."""
    out = df[column].astype(str).map(mapping)
    for value, n in df.loc[out.isna(), column].astype(str).value_counts().items():
        report.skip(f"{table.system}/{table.name}", f"{what} {value!r}: no row dtype", n)
    return out


def _text(df: pd.DataFrame, column: str) -> pd.Series:
    """A column as text; '' per row where the table has no such column (an optional one: kernel_source, ...)."""
    return df[column].astype(str) if column in df.columns else pd.Series("", index=df.index, dtype=object)


def _int(df: pd.DataFrame, column: str) -> np.ndarray:
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)


def _gemm(df, table, report):
    dtype = _mapped(df, "gemm_dtype", LINEAR_DTYPES, table, report, "gemm_dtype")
    out = pd.DataFrame({"op": "linear", "dtype": dtype, "m": _int(df, "m"), "n": _int(df, "n"), "k": _int(df, "k")})
    out["timing_method"] = np.where(dtype == "fp8_block", STREAM, GRAPH)
    return out, {"source_dtype": df["gemm_dtype"].astype(str)}


def _attention(df, table, report):
    dtype = _mapped(df, "attn_dtype", ATTENTION_DTYPES, table, report, "attention math dtype")
    isl = _int(df, "isl")
    decode = table.stem == "generation_attention_perf"
    encoder = table.stem == "encoder_attention_perf"
    step = np.zeros(len(df)) if encoder else _int(df, "step")
    kv_len = isl + step
    out = pd.DataFrame(
        {
            "op": "sdpa",
            "dtype": dtype,
            "batch": _int(df, "batch_size"),
            "heads": _int(df, "num_heads"),
            "num_kv_heads": _int(df, "num_heads" if encoder else "num_key_value_heads"),
            "seq_len": np.ones(len(df)) if decode else isl,
            "kv_len": kv_len,
            "head_dim": _int(df, "head_dim"),
            "causal": 0 if decode or encoder else 1,
            "timing_method": GRAPH,
        }
    )
    extra = {"source_dtype": df["attn_dtype"].astype(str), "isl": df["isl"]}
    if not encoder:
        kv = _mapped(df, "kv_cache_dtype", KV_CACHE_DTYPES, table, report, "kv_cache_dtype")
        out.loc[kv.isna(), "dtype"] = np.nan
        out["kv_dtype"] = np.where(kv.to_numpy() == dtype.to_numpy(), "", kv.fillna("").to_numpy())
        extra.update(source_kv_dtype=df["kv_cache_dtype"].astype(str), step=df["step"])
    if "beam_width" in df.columns:
        beams = _int(df, "beam_width") > 1
        report.skip(f"{table.system}/{table.name}", "beam search (beam_width > 1): not an sdpa", int(beams.sum()))
        out.loc[beams, "dtype"] = np.nan
    if "window_size" in df.columns:
        window = np.nan_to_num(_int(df, "window_size"))
        short = (window > 0) & (window < kv_len)
        report.skip(
            f"{table.system}/{table.name}",
            "sliding window shorter than the keys: the op attends to all of them",
            int((short & out["dtype"].notna().to_numpy()).sum()),
        )
        out.loc[short, "dtype"] = np.nan
        extra["window_size"] = df["window_size"]
    return out, extra


def _moe(df, table, report):
    what = f"{table.system}/{table.name}"
    balanced = df["distribution"].astype(str) == "balanced"
    for value, n in df.loc[~balanced, "distribution"].astype(str).value_counts().items():
        report.skip(what, f"routing {value!r}: the op models balanced routing", n)
    nongated = _text(df, "kernel_source").str.contains("nongated").to_numpy() & balanced.to_numpy()
    report.skip(what, "non-gated expert MLP: the op is a gated (SwiGLU) one", int(nongated.sum()))
    keep = balanced.to_numpy() & ~nongated
    dtype = pd.Series(np.nan, index=df.index, dtype=object)
    dtype[keep] = _mapped(df[keep], "moe_dtype", MOE_DTYPES, table, report, "moe_dtype")
    out = pd.DataFrame(
        {
            "op": "moe",
            "dtype": dtype,
            "m": _int(df, "num_tokens"),
            "k": _int(df, "hidden_size"),
            "n": _int(df, "inter_size"),
            "experts": _int(df, "num_experts"),
            "topk": _int(df, "topk"),
            "tp": _int(df, "moe_tp_size"),
            "ep": _int(df, "moe_ep_size"),
            "timing_method": GRAPH,
        }
    )
    return out, {"source_dtype": df["moe_dtype"].astype(str), "distribution": df["distribution"].astype(str)}


def _nccl(df, table, report):
    op = df["op_name"].astype(str).map(NCCL_OPS)
    for value, n in df.loc[op.isna(), "op_name"].astype(str).value_counts().items():
        report.skip(f"{table.system}/{table.name}", f"NCCL op {value!r}: no op in the registry", n)
    dtype = _mapped(df, "nccl_dtype", NCCL_DTYPES, table, report, "nccl_dtype")
    dtype[op.isna()] = np.nan
    out = pd.DataFrame(
        {
            "op": op.fillna("all_reduce"),
            "dtype": dtype,
            "n": _int(df, "message_size"),
            "gpus": _int(df, "num_gpus"),
            "timing_method": STREAM,
        }
    )
    return out, {"source_dtype": df["nccl_dtype"].astype(str), "source_op": df["op_name"].astype(str)}


def _custom_allreduce(df, table, report):
    dtype = _mapped(df, "allreduce_dtype", ALLREDUCE_DTYPES, table, report, "allreduce_dtype")
    label = _text(df, "kernel_source").str.lower()
    if "backend" in df.columns:
        label = label + " " + df["backend"].astype(str).str.lower()
    out = pd.DataFrame(
        {
            "op": "all_reduce",
            "dtype": dtype,
            "n": _int(df, "message_size"),
            "gpus": _int(df, "num_gpus"),
            "timing_method": np.where(label.str.contains("eager"), STREAM, GRAPH),
        }
    )
    extra = {"source_dtype": df["allreduce_dtype"].astype(str)}
    for column in ("backend", "implementation"):
        if column in df.columns:
            extra[column] = df[column].astype(str)
    return out, extra


MAPPERS = {
    "gemm_perf": _gemm,
    "context_attention_perf": _attention,
    "generation_attention_perf": _attention,
    "encoder_attention_perf": _attention,
    "moe_perf": _moe,
    "nccl_perf": _nccl,
    "custom_allreduce_perf": _custom_allreduce,
}


def _json_per_row(parts: dict[str, pd.Series | object], n: int) -> pd.Series:
    """One JSON object per row (keys sorted) from columns and constants, built once per distinct combination."""
    frame = pd.DataFrame({k: (v.to_numpy() if isinstance(v, pd.Series) else [v] * n) for k, v in parts.items()})
    if not len(frame):
        return pd.Series([], dtype=object)
    group = frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(group, return_index=True)[1]
    text = []
    for r in frame.iloc[first].to_dict("records"):
        clean = {}
        for k, v in r.items():
            if v is None or (isinstance(v, float) and v != v):
                continue
            clean[k] = v.item() if isinstance(v, np.generic) else v
        text.append(json.dumps(clean, sort_keys=True, default=str))
    return pd.Series(np.array(text, dtype=object)[group])


def _refused(rows: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """A mask of the rows the op's own shape rules refuse (``data.costs.shape_problems``: e.g. experts not a
    multiple of ep) and one example message per op; checked once per distinct shape."""
    bad = np.zeros(len(rows), bool)
    messages = []
    for op, idx in rows.groupby("op", sort=True).indices.items():
        names = list(OPS[op].names)
        part = rows.iloc[idx][[*names, "dtype"]]
        group = part.groupby([*names, "dtype"], sort=False, dropna=False).ngroup().to_numpy()
        first = np.unique(group, return_index=True)[1]
        distinct = part.iloc[first]
        raw = {name: distinct[name].to_numpy(dtype=float) for name in names}
        _, problems = shape_problems(op, raw, len(distinct), dtypes=distinct["dtype"].to_numpy(dtype=object))
        refused = np.zeros(len(distinct), bool)
        for mask, _ in problems:
            if mask is not None:
                refused |= np.asarray(mask, bool)
        if refused.any():
            messages.append(first_problem(problems)[1])
            bad[idx] = refused[group]
    return bad, messages


def read_table(table: Table, hardware: str, report: Report) -> pd.DataFrame:
    """One table as mapped rows (schema columns before ``finish``, plus ``source``, ``env`` and ``meta`` text)."""
    df = _read(table.path)
    _need(df, table)
    what = f"{table.system}/{table.name}"
    dups = df.duplicated().to_numpy()
    report.skip(what, "exact duplicate row", int(dups.sum()))
    df = df[~dups].reset_index(drop=True)
    out, extra = MAPPERS[table.stem](df, table, report)
    latency = pd.to_numeric(df["latency"], errors="coerce").to_numpy(dtype=float)
    no_time = ~(latency > 0) & out["dtype"].notna().to_numpy()
    report.skip(what, "no positive latency", int(no_time.sum()))
    out["runtime_ms"] = latency
    out["hardware"] = hardware
    if "power" in df.columns:
        power = pd.to_numeric(df["power"], errors="coerce").to_numpy(dtype=float)
        power = np.where(power > 0, power, np.nan)
        out["power_w"] = power
        out["energy_j"] = power * latency / 1e3
        out["power_method"] = np.where(np.isnan(power), None, POWER_METHOD)

    def column(name, default):
        return df[name].astype(str) if name in df.columns else default

    kernel = column("kernel_source", "")
    out["env"] = _json_per_row(
        {
            "collector": SOURCE,
            "framework": column("framework", table.framework),
            "version": column("version", table.version),
            "device": column("device", ""),
            "kernel_source": kernel,
        },
        len(df),
    ).to_numpy()
    limit = df["power_limit"] if "power_limit" in df.columns else None
    out["meta"] = _json_per_row(
        {
            "table": table.rel,
            "kernel_source": kernel,
            "provenance": table.provenance,
            "timestamp_known": False,
            **({"power_limit_w": limit} if limit is not None else {}),
            **extra,
        },
        len(df),
    ).to_numpy()
    out["source"] = table.source
    keep = out["dtype"].notna().to_numpy() & ~no_time
    out = out[keep].reset_index(drop=True)
    refused, messages = _refused(out)
    report.skip(what, f"shape refused by the op's rules (e.g. {messages[0]})" if messages else "", int(refused.sum()))
    return out[~refused].reset_index(drop=True)


def system_id(system_dir: Path, registry: HardwareRegistry) -> str:
    """The registry id of a system folder: :data:`SYSTEMS`, else the registry's aliases of the folder name, else of
    the ``device`` strings in its tables; neither is one :class:`DatasetError` line."""
    name = system_dir.name
    if name in SYSTEMS and SYSTEMS[name] in registry:
        return registry.resolve(SYSTEMS[name])
    if name in registry:
        return registry.resolve(name)
    devices = set()
    for f in sorted(system_dir.glob("*/*/*/*.parquet")):
        if "device" in pq.read_schema(f).names:
            devices |= {str(d) for d in _read(f, ["device"])["device"].dropna().unique()}
    known = sorted({registry.resolve(d) for d in devices if d in registry})
    if len(known) == 1:
        return known[0]
    seen = ", ".join(sorted(devices)) or "none"
    if name in SYSTEMS:
        raise DatasetError(
            f"aiconfigurator GPU folder {name!r} is {SYSTEMS[name]!r}, which the hardware registry lacks (devices: "
            f"{seen}): add conf/hardware/{SYSTEMS[name]}.yaml"
        )
    raise DatasetError(
        f"aiconfigurator GPU folder {name!r} (device {seen}) is not a known system ({', '.join(SYSTEMS)}) and no "
        f"registry alias resolves it to one GPU: add the name to conf/hardware/<id>.yaml aliases"
    )


def _systems(base: Path, gpus, registry: HardwareRegistry) -> dict[str, str]:
    """System folder -> registry id, for the folders selected by ``gpus`` (folder names or registry ids)."""
    if not base.is_dir():
        raise DatasetError(f"expected dataset folder {base} is missing")
    folders = sorted(p for p in base.iterdir() if p.is_dir())
    if not folders:
        raise DatasetError(f"no GPU folders in {base}")
    wanted = None if gpus is None else {str(g) for g in ([gpus] if isinstance(gpus, str) else gpus)}
    out = {}
    for folder in folders:
        if wanted is not None and folder.name not in wanted:
            ids = {SYSTEMS.get(folder.name)}
            if not (ids & wanted) and not any(g in registry and registry.resolve(g) in ids for g in wanted):
                continue
        out[folder.name] = system_id(folder, registry)
    if wanted is not None and not out:
        raise DatasetError(
            f"no aiconfigurator GPU folder matches {sorted(wanted)} (folders: {[f.name for f in folders]})"
        )
    return out


def _kinds(kinds) -> set[str] | None:
    if kinds is None:
        return None
    given = {str(k) for k in ([kinds] if isinstance(kinds, str) else kinds)}
    groups = {"attention": {"context_attention", "generation_attention"}, "comm": {"nccl", "custom_allreduce"}}
    out = set()
    for k in given:
        if k not in KINDS and k not in groups:
            raise DatasetError(f"unknown aiconfigurator table kind {k!r}; kinds: {', '.join((*KINDS, *groups))}")
        out |= groups.get(k, {k})
    return out


def read_all(
    root: str | Path | None = None,
    registry: HardwareRegistry | None = None,
    *,
    gpus: Iterable[str] | str | None = None,
    kinds: Iterable[str] | str | None = None,
    frameworks: Iterable[str] | str | None = None,
    versions: str | Iterable[str] = "newest",
) -> tuple[pd.DataFrame, Report]:
    """Schema rows of the selected tables and the :class:`Report` of what was read and skipped."""
    registry = registry or HardwareRegistry.from_dir()
    base = data_root(root) / FOLDER
    systems = _systems(base, gpus, registry)
    fws = (
        None
        if frameworks is None
        else {str(f).lower() for f in ([frameworks] if isinstance(frameworks, str) else frameworks)}
    )
    report = Report()
    tables = select(discover(base, report, set(systems), _kinds(kinds), fws), versions, report)
    frames = []
    for t in tables:
        rows = read_table(t, systems[t.system], report)
        report.tables.append(t.rel)
        for (op, dtype), n in rows.groupby(["op", "dtype"]).size().items():
            report.imported[(systems[t.system], t.name, op, dtype)] += int(n)
        frames.append(rows)
    if not frames or not sum(len(f) for f in frames):
        raise DatasetError(
            f"no aiconfigurator rows imported from {base} (gpus={gpus}, kinds={kinds}, frameworks={frameworks}, "
            f"versions={versions})"
        )
    df = pd.concat(frames, ignore_index=True)
    source, env, meta = df.pop("source"), df.pop("env"), df.pop("meta")
    return finish(df, source=source, env=env, meta=meta), report


def import_aiconfigurator(
    root: str | Path | None = None,
    registry: HardwareRegistry | None = None,
    *,
    gpus: Iterable[str] | str | None = None,
    kinds: Iterable[str] | str | None = None,
    frameworks: Iterable[str] | str | None = None,
    versions: str | Iterable[str] = "newest",
    verbose: bool = True,
) -> pd.DataFrame:
    """The database's GEMM, attention, MoE and collective tables as schema rows (module docstring).

    ``gpus``: system folders or registry ids (default all); ``kinds``: :data:`KINDS` (``attention`` and ``comm`` name
    both of theirs); ``frameworks``: ``vllm``, ``sglang``, ``trtllm``, ``nccl``; ``versions``: ``newest`` (per GPU,
    table and framework), ``newest+power``, ``all`` or a list of version folders. ``verbose`` prints the report."""
    df, report = read_all(root, registry, gpus=gpus, kinds=kinds, frameworks=frameworks, versions=versions)
    if verbose:
        print("\n".join(report.lines()), flush=True)
    return df


# --------------------------------------------------------------------------- the shipped pack's sample
PACK_KINDS = ("gemm", "context_attention", "generation_attention", "moe", "nccl", "custom_allreduce")
PACK_FRAMEWORKS = ("vllm", "nccl")  # one serving framework (vLLM) and the framework-free NCCL tables
PACK_ROWS = 600  # at most this many rows per (source, GPU, op, dtype, KV dtype, prefill / decode); collectives whole


def pack_sample(rows: pd.DataFrame, per_group: int = PACK_ROWS, seed: int = 0) -> pd.DataFrame:
    """At most ``per_group`` rows of each (source, hardware, op, dtype, KV dtype, prefill or decode), drawn evenly over
    the octaves of
    the size that matters most (``m`` of a GEMM or MoE: small-M decode GEMMs as well as large; ``kv_len`` of an
    attention: every cache length), seeded; collectives (a few hundred rows a GPU) are kept whole."""
    rng = np.random.default_rng(seed)
    rows = rows.reset_index(drop=True)
    size = rows["m"].astype(float).where(rows["op"] != "sdpa", rows["kv_len"].astype(float))
    size = size.fillna(rows["seq_len"].astype(float))
    frame = pd.DataFrame(
        {
            "group": rows.groupby(  # causal: a prefill, not: a decode (one table each)
                ["source", "hardware", "op", "dtype", rows["kv_dtype"].fillna(""), rows["causal"].fillna(-1)],
                sort=False,
                dropna=False,
            ).ngroup(),
            "octave": np.floor(np.log2(size.fillna(1.0).clip(lower=1.0))),
            "draw": rng.random(len(rows)),
        }
    )
    # rank within its octave first, so every octave gives rows before any gives a second one
    frame["rank"] = frame.groupby(["group", "octave"])["draw"].rank(method="first")
    order = frame.sort_values(["group", "rank", "draw"], kind="mergesort")
    keep = order.groupby("group", sort=False).head(per_group).index
    whole = rows.index[rows["family"] == "collective"]
    return rows.loc[sorted(set(keep) | set(whole))].reset_index(drop=True)


def pack_rows(root=None, registry: HardwareRegistry | None = None, per_group: int = PACK_ROWS, seed: int = 0):
    """The rows the shipped pack takes (``data.reference``): vLLM's and NCCL's GEMM, attention, MoE and collective
    tables, the newest version per GPU and table plus every version with NVML power, sampled by :func:`pack_sample`."""
    rows = import_aiconfigurator(
        root, registry, kinds=PACK_KINDS, frameworks=PACK_FRAMEWORKS, versions="newest+power", verbose=False
    )
    return pack_sample(rows, per_group, seed)


# --------------------------------------------------------------------------- the link latency fit
def fit_link_latency(root=None, max_elements: int = 4096) -> pd.DataFrame:
    """Per GPU folder and NCCL version, the per-hop latency of its links: the least-squares slope of the median
    all-gather / reduce-scatter latency at <= ``max_elements`` elements over the ring's hops (gpus - 1), and the
    intercept (a collective's fixed cost). What ``conf/hardware/*.yaml`` ``interconnect.latency_us`` cites."""
    base = data_root(root) / FOLDER
    out = []
    for path in sorted(base.glob("*/comm/nccl/*/nccl_perf.parquet")):
        df = _read(path)
        small = df[(df["message_size"] <= max_elements) & df["op_name"].isin(["all_gather", "reduce_scatter"])]
        median = small.groupby("num_gpus")["latency"].median() * 1e3
        if len(median) < 2:
            continue
        slope, intercept = np.polyfit(median.index.to_numpy(float) - 1, median.to_numpy(), 1)
        out.append(
            {
                "system": path.parents[3].name,
                "nccl": path.parent.name,
                "latency_us_per_hop": round(float(slope), 2),
                "fixed_us": round(float(intercept), 2),
                "gpus": ",".join(map(str, median.index)),
            }
        )
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m data.importers.aiconfigurator [data_root]``: what the default import reads and skips (and how
    long it takes), then the per-hop link latency fitted on the NCCL tables."""
    import time

    argv = sys.argv[1:] if argv is None else argv
    try:
        t0 = time.perf_counter()
        df, report = read_all(argv[0] if argv else None)
        seconds = time.perf_counter() - t0
        fit = fit_link_latency(argv[0] if argv else None)
    except (DatasetError, ValueError, KeyError) as exc:
        print(f"aiconfigurator: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    print(f"\n{len(df):,} rows in {seconds:.1f} s\n\nper-hop link latency (NCCL, small messages):")
    print(fit.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
