"""Hardware registry: spec sheets from ``conf/hardware/*.yaml`` plus the local CPU, detected and measured.

A :class:`HardwareSpec` is what lets a model predict for hardware it never ran on: every model sees
hardware only through these numbers (see ``features/tabular.py``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

CONF_DIR = Path(__file__).resolve().parent.parent / "conf" / "hardware"
NON_GPU_KINDS = ("fpga", "accelerator")  # specs without the GPU roofline fields
# the links between the GPUs of one node: NVLink generations (through NVSwitch on 8-GPU boards) and PCIe generations
INTERCONNECT_KINDS = ("nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie3", "pcie4", "pcie5")


class UnknownHardwareError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it one readable line
        return str(self.args[0])


@dataclass(frozen=True)
class HardwareSpec:
    id: str
    name: str
    kind: str  # gpu | cpu | fpga | accelerator
    vendor: str
    sm_count: int  # SMs / compute units (GPU); cores used (CPU); 0 for fpga/accelerator
    boost_clock_mhz: float
    memory_gb: float
    memory_bandwidth_gbs: float
    l2_cache_mb: float
    peak_tflops: dict[str, float]  # dense peak per dtype
    tdp_w: float | None = None
    idle_power_w: float | None = None  # board power at idle (W); the floor of the analytical power model
    idle_power_source: str | None = None  # where idle_power_w comes from (a measurement, or an assumption)
    cores_per_sm: int | None = None
    architecture: str | None = None
    aliases: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    # the GPU's links to the others of its node: kind (INTERCONNECT_KINDS), bandwidth_gbs (per GPU, one direction,
    # 10^9 B/s), latency_us (per hop), gpus_per_node, source; {} where the spec gives none
    interconnect: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; a dtype without a published rate falls back to float32's."""
        if "float32" not in self.peak_tflops and dtype not in self.peak_tflops:
            raise ValueError(f"hardware {self.id!r} ({self.kind}) has no peak FLOP/s for {dtype!r}")
        tflops = self.peak_tflops.get(dtype, self.peak_tflops.get("float32"))
        return float(tflops) * 1e12

    @property
    def bandwidth_bytes_s(self) -> float:
        return float(self.memory_bandwidth_gbs) * 1e9

    @property
    def link_bandwidth_bytes_s(self) -> float:
        """Bytes a second one GPU sends to the others of its node, one direction (0 where the spec gives none)."""
        return float(self.interconnect.get("bandwidth_gbs") or 0.0) * 1e9

    @property
    def link_latency_s(self) -> float | None:
        """Seconds a message takes per hop between two GPUs of a node (None where the spec gives none)."""
        latency = self.interconnect.get("latency_us")
        return None if latency is None else float(latency) * 1e-6

    @property
    def gpus_per_node(self) -> int:
        """GPUs one node holds, the most a collective over the node's links spans (0 where the spec gives none)."""
        return int(self.interconnect.get("gpus_per_node") or 0)

    @classmethod
    def from_dict(cls, d: dict) -> HardwareSpec:
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in d.items() if k in known}
        if d.get("kind") in NON_GPU_KINDS:
            # FPGAs and accelerators have no SMs, L2 or (often) a float32 rate: absent numbers are 0 / {} and
            # their own figures (resources, array size, SRAM) stay in ``extra``.
            for f in ("sm_count", "boost_clock_mhz", "memory_gb", "memory_bandwidth_gbs", "l2_cache_mb"):
                kwargs.setdefault(f, 0)
            kwargs.setdefault("peak_tflops", {})
        missing = [
            f
            for f in (
                "id",
                "name",
                "kind",
                "vendor",
                "sm_count",
                "boost_clock_mhz",
                "memory_gb",
                "memory_bandwidth_gbs",
                "l2_cache_mb",
                "peak_tflops",
            )
            if f not in kwargs
        ]
        if missing:
            raise ValueError(f"hardware spec {d.get('id', '?')!r} lacks {', '.join(missing)}")
        if "float32" not in kwargs["peak_tflops"] and d.get("kind") not in NON_GPU_KINDS:
            raise ValueError(f"hardware spec {d['id']!r}: peak_tflops needs a float32 entry")
        kwargs["peak_tflops"] = {str(k): float(v) for k, v in kwargs["peak_tflops"].items()}
        kwargs["interconnect"] = _interconnect(d.get("id", "?"), kwargs.get("interconnect"))
        kwargs["aliases"] = tuple(kwargs.get("aliases") or ())
        kwargs["sources"] = tuple(kwargs.get("sources") or ())
        kwargs["extra"] = {**(d.get("extra") or {}), **{k: v for k, v in d.items() if k not in known}}
        return cls(**kwargs)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["aliases"], d["sources"] = list(self.aliases), list(self.sources)
        return d


def _interconnect(spec_id: str, block) -> dict:
    """A spec's ``interconnect`` block, checked: a known kind, a positive bandwidth, a latency >= 0 (optional) and a
    whole number of GPUs per node; one error line naming the spec and the field."""
    if not block:
        return {}
    if not isinstance(block, dict):
        raise ValueError(f"hardware spec {spec_id!r}: interconnect must be a mapping, got {block!r}")
    out = dict(block)
    if out.get("kind") not in INTERCONNECT_KINDS:
        raise ValueError(
            f"hardware spec {spec_id!r}: interconnect kind must be one of {', '.join(INTERCONNECT_KINDS)}, "
            f"got {out.get('kind')!r}"
        )
    rules = {
        "bandwidth_gbs": ("a number > 0", lambda x: x > 0),
        "latency_us": ("a number >= 0", lambda x: x >= 0),
        "gpus_per_node": ("a whole number >= 1", lambda x: x >= 1 and x == int(x)),
    }
    for name, (what, ok) in rules.items():
        value = out.get(name)
        if value is None and name != "bandwidth_gbs":
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if not (number == number and ok(number)):
            raise ValueError(f"hardware spec {spec_id!r}: interconnect {name} must be {what}, got {value!r}")
        out[name] = int(number) if name == "gpus_per_node" else number
    return out


class HardwareRegistry:
    """Lookup by id or alias (case-insensitive); unknown names raise one clear error."""

    def __init__(self, specs: Iterable[HardwareSpec] = ()):
        self._specs: dict[str, HardwareSpec] = {}
        self._names: dict[str, str] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: HardwareSpec) -> None:
        self._specs[spec.id] = spec
        for name in (spec.id, *spec.aliases):
            self._names[name.lower()] = spec.id

    def get(self, name: str) -> HardwareSpec:
        key = self._names.get(str(name).lower())
        if key is None:
            raise UnknownHardwareError(f"unknown hardware {name!r}; known: {', '.join(sorted(self._specs))}")
        return self._specs[key]

    def resolve(self, name: str) -> str:
        return self.get(name).id

    def __contains__(self, name: str) -> bool:
        return str(name).lower() in self._names

    def __iter__(self):
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    @property
    def ids(self) -> list[str]:
        return sorted(self._specs)

    @classmethod
    def from_dir(cls, directory: str | Path = CONF_DIR) -> HardwareRegistry:
        files = sorted(Path(directory).glob("*.yaml"))
        if not files:
            raise FileNotFoundError(f"no hardware specs (*.yaml) in {directory}")
        specs = []
        for f in files:
            d = yaml.safe_load(f.read_text())
            if d.get("id") != f.stem:
                raise ValueError(f"{f}: id {d.get('id')!r} must equal the file name {f.stem!r}")
            specs.append(HardwareSpec.from_dict(d))
        return cls(specs)

    def to_json(self) -> str:
        return json.dumps([s.to_dict() for s in self._specs.values()], indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HardwareRegistry:
        return cls(HardwareSpec.from_dict(d) for d in json.loads(text))


# --------------------------------------------------------------------------- local CPU
def _cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cache_mb(level: int) -> float:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.exists() else []:
        try:
            if int((idx / "level").read_text()) == level and (idx / "type").read_text().strip() != "Instruction":
                size = (idx / "size").read_text().strip()
                num, unit = re.match(r"(\d+)([KMG]?)", size).groups()
                return int(num) * {"": 1 / 2**20, "K": 1 / 1024, "M": 1, "G": 1024}[unit]
        except (OSError, AttributeError, ValueError):
            continue
    return 0.0


def _cpu_mhz() -> float:
    for path in ("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",):
        try:
            return int(Path(path).read_text()) / 1000.0
        except (OSError, ValueError):
            pass
    try:
        mhz = [
            float(l.split(":")[1]) for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("cpu MHz")
        ]
        return max(mhz) if mhz else 0.0
    except OSError:
        return 0.0


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def _best_rate(fn, work: float, repeats: int = 5) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return work / best


def detect_cpu(num_threads: int) -> HardwareSpec:
    """Spec of this machine's CPU at ``num_threads`` threads.

    Names, clocks and caches come from /proc and /sys. A CPU has no spec sheet we can rely on here, so
    its two roofline numbers are *measured* with torch micro-benchmarks at detection time and say so:
    ``peak_tflops.float32`` = best throughput of a 1024^3 float32 matmul (2*1024^3 FLOPs per call),
    ``memory_bandwidth_gbs`` = best throughput of a 32 MiB float32 copy (read + write = 64 MiB moved).
    """
    import torch

    prev = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        a = torch.randn(1024, 1024)
        b = torch.randn(1024, 1024)
        flops = _best_rate(lambda: torch.mm(a, b), 2 * 1024**3)
        src = torch.randn(8 * 2**20)
        dst = torch.empty_like(src)
        bw = _best_rate(lambda: dst.copy_(src), 2 * src.numel() * 4)
    finally:
        torch.set_num_threads(prev)
    model = _cpu_model_name()
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    slug = re.sub(r"-(r|tm|cpu)-", "-", f"-{slug}-").strip("-")
    return HardwareSpec(
        id=f"cpu-{slug}-{num_threads}t",
        name=f"{model} ({num_threads} threads)",
        kind="cpu",
        vendor=platform.machine(),
        sm_count=num_threads,
        boost_clock_mhz=round(_cpu_mhz(), 1),
        memory_gb=round(_memory_gb(), 2),
        memory_bandwidth_gbs=round(bw / 1e9, 2),
        l2_cache_mb=round(_cache_mb(2), 3),
        peak_tflops={"float32": round(flops / 1e12, 4)},
        sources=("detected: /proc/cpuinfo, /sys/devices/system/cpu; measured: torch 1024^3 sgemm, 32 MiB copy",),
        extra={
            "l3_cache_mb": round(_cache_mb(3), 3),
            "logical_cpus": os.cpu_count(),
            "torch_version": torch.__version__,
            "measured": ["peak_tflops.float32", "memory_bandwidth_gbs"],
        },
    )
