"""A network's runtime, power and energy from its kernels' predictions, by execution mode (a library, no MLflow).

    from models.compose import compose, load_execution
    res = compose(kernels, "cuda_graph", load_execution()["gpu"], static_power_w=132.0)
    res.total     # runtime_ms (+ _lo/_hi), and power_w / energy_j (+ ends) when the kernels carry power_w
    res.kernels   # per kernel: launched, fused_into, device_ms, step_ms (its share of the network runtime)

``kernels``: one row per kernel in call order with ``op`` and the per-kernel predictions of a kernel model:
``runtime_ms`` (+ ``runtime_ms_lo`` / ``_hi``) and, from a power-capable model, ``power_w`` (+ ends). A kernel
model in this project is trained on BACK-TO-BACK timings of one kernel (the cpu backend, the H200 set, NeuSight):
for a kernel shorter than the host's dispatch time that measures the dispatch rate, not the kernel. On a GPU the
host dispatches ahead of the device, so a back-to-back time is ``t = max(d, h)`` (``d`` = device time, ``h`` = the
per-call host floor of the kernel's op family, :class:`Execution` ``floor_ms``): well above the floor ``d = t``;
at the floor ``d`` is anywhere in [0, h], not identified, and composes as 0 (+ the mode's gap); between them
``d = t - h exp(-(t - h) / h)`` (monotone, 0 at ``t = h``, ``t`` far above it). On a CPU host and "device" are one
thread: ``t = h + d``.

The network, per mode (a kernel's ``step`` is its share of the runtime; ``runtime = launch + sum of steps``):

* ``eager`` (PyTorch's default): every kernel is dispatched by the host. GPU: ``step = max(d + gap, dispatch)``
  with ``dispatch = h``: the standard launch-bound model (the device idles while the host is slower than the
  kernel). CPU: ``step = t + gap`` (``gap``: the Python / module-call time between kernels the kernel timing
  does not see).
* ``cuda_graph``: one graph launch replays the kernels with no host work in between: ``step = d + gap``, ``gap``
  a small per-kernel device gap (it includes the shortest kernel's ramp). GPU only.
* ``compiled`` (TorchInductor-style): pointwise ops fuse into the kernel before them, costing only the traffic of
  their extra operands (a fraction ``(inputs - 1) / (inputs + 1)`` of their device time: 0 for a unary op, 1/3
  for a residual add), then the fused kernels run as ``cuda_graph`` (GPU) or as ``eager`` with
  ``dispatch_scale`` x the host floor (CPU: a generated wrapper calls the fused kernels).

Power (only when the kernels carry ``power_w``): a kernel measured back to back at average power ``p`` over ``t``
spent ``(p - P_static) t`` of dynamic energy on its work, in any mode; the network's energy is
``P_static x runtime + sum of the kernels' dynamic energies`` (a fused pointwise op: its fraction) and its power
is energy / runtime. ``P_static`` is the board's static power while a kernel stream runs (:func:`fit_static_power`;
the hardware spec's ``idle_power_w`` and its source otherwise). Without ``power_w`` no power or energy is given:
they are absent, not invented.

Interval ends compose like the point (runtime ends from the kernels' runtime ends, summed: conservative, they
assume the kernels' errors move together; power ends from the kernels' power ends at the point runtimes).

The constants (``floor_ms`` per op family, ``launch_ms`` / ``gap_ms`` / ``dispatch_scale`` per mode) live in
``conf/execution.yaml`` with their sources: learned from measured data where it exists (:func:`fit_floors` on
kernel rows, :func:`fit_overheads` on networks measured against their kernels), documented defaults elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

MODES = ("eager", "cuda_graph", "compiled")
CONF_PATH = Path(__file__).resolve().parent.parent / "conf" / "execution.yaml"
UNARY = {
    "relu",
    "gelu",
    "tanh",
    "silu",
    "sigmoid",
    "hardtanh",
    "add_scalar",
    "mul_scalar",
    "div_scalar",
    "pow_scalar",
    "batchnorm",
}  # batch norm in inference is a per-channel affine: pointwise
BINARY = {"add", "mul", "div", "pow"}


@dataclasses.dataclass(frozen=True)
class ModeConstants:
    """One execution mode on one kind of hardware (times in ms)."""

    launch_ms: float  # once per forward pass (Python entry, or the graph launch)
    gap_ms: float  # per launched kernel (device gap in a graph; Python time between kernels on a CPU)
    dispatch_scale: float  # host dispatch per kernel = dispatch_scale x the family's floor (0: none, a graph)
    fuse: bool = False  # pointwise ops fuse into the kernel before them
    free_op_ms: float = 0.0  # host time of one kernel-free op (a view, a reshape) between kernels (eager)
    source: str = ""


@dataclasses.dataclass(frozen=True)
class Execution:
    """How one kind of hardware (``gpu`` | ``cpu``) runs a network: its per-call host floors and its modes."""

    kind: str
    overlap: bool  # the host dispatches ahead of the device (GPU streams) or not (CPU)
    floor_ms: Mapping[str, float]  # per op family: the per-call floor inside a back-to-back kernel timing
    modes: Mapping[str, ModeConstants]
    floor_source: str = ""

    def mode(self, execution: str) -> ModeConstants:
        if execution not in MODES:
            raise ValueError(f"unknown execution {execution!r}; known: {', '.join(MODES)}")
        if execution not in self.modes:
            raise ValueError(
                f"execution {execution!r} does not exist on a {self.kind} (known there: {', '.join(self.modes)})"
            )
        return self.modes[execution]

    def floor(self, families) -> np.ndarray:
        default = float(np.median(list(self.floor_ms.values())))
        return np.array([self.floor_ms.get(f, default) for f in families], float)

    def with_modes(self, **changes: ModeConstants) -> Execution:
        return dataclasses.replace(self, modes={**self.modes, **changes})

    def to_dict(self) -> dict:
        return {
            "overlap": self.overlap,
            "floor_ms": dict(self.floor_ms),
            "floor_source": self.floor_source,
            "modes": {k: dataclasses.asdict(v) for k, v in self.modes.items()},
        }


def load_execution(path: str | Path = CONF_PATH) -> dict[str, Execution]:
    """``conf/execution.yaml`` -> {kind: Execution}."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text())
    out = {}
    for kind, spec in raw.items():
        if not isinstance(spec, dict) or "modes" not in spec:
            continue
        modes = {
            m: ModeConstants(**{k: v for k, v in c.items() if k in ModeConstants.__dataclass_fields__})
            for m, c in spec["modes"].items()
        }
        unknown = sorted(set(modes) - set(MODES))
        if unknown:
            raise ValueError(f"{path}: {kind}: unknown execution mode(s) {', '.join(unknown)}")
        out[kind] = Execution(
            kind,
            bool(spec["overlap"]),
            {k: float(v) for k, v in spec["floor_ms"].items()},
            modes,
            str(spec.get("floor_source", "")),
        )
    return out


def families(ops) -> np.ndarray:
    from data.workloads import family

    return np.array([family(op) for op in ops], dtype=object)


def fused_fraction(op: str, inputs: float | None = None) -> float | None:
    """The share of a pointwise op's device time left when it is fused into its producer (its extra operands'
    traffic); None for an op that is not pointwise."""
    if op in UNARY:
        return 0.0
    if op in BINARY:
        return 1.0 / 3.0
    if op == "ewise":
        n = 1.0 if inputs is None or not np.isfinite(inputs) else float(inputs)
        return max(n - 1.0, 0.0) / (n + 1.0)
    return None


def device_ms(t: np.ndarray, h: np.ndarray, overlap: bool) -> np.ndarray:
    """The device time inside a back-to-back per-call time ``t`` with host floor ``h`` (module docstring)."""
    t, h = np.asarray(t, float), np.asarray(h, float)
    if overlap:
        above = np.maximum(t - h, 0.0)
        return np.where(t > h, t - h * np.exp(-above / np.maximum(h, 1e-12)), 0.0)
    return np.maximum(t - h, 0.0)


@dataclasses.dataclass
class Composition:
    total: dict  # the network's figures (module docstring) + execution, kernels, launched, static power
    kernels: pd.DataFrame  # the input rows + launched, fused_into, device_ms, step_ms


def _fusion(ops, inputs, launchable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: the fraction of its device time that remains (1, or the fused share) and the kernel it fused
    into (-1 when launched itself)."""
    keep, into = np.ones(len(ops)), np.full(len(ops), -1)
    anchor = -1
    for i, op in enumerate(ops):
        frac = fused_fraction(op, inputs[i])
        if frac is not None and anchor >= 0 and launchable[i]:
            keep[i], into[i] = frac, anchor
        else:
            anchor = i
    return keep, into


def _steps(
    t, h, keep, launched, mc: ModeConstants, ex: Execution, free_ops: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel: device time and its step (share of the network runtime) for per-call times ``t``; the host time
    of ``free_ops`` kernel-free ops is spread evenly over the launched kernels' dispatch."""
    d = device_ms(t, h, ex.overlap) * keep
    free = mc.free_op_ms * free_ops / max(int(launched.sum()), 1)
    if ex.overlap:  # the host runs ahead: the device waits only when dispatching is slower than the kernel
        step = np.maximum(d + mc.gap_ms, mc.dispatch_scale * h + free)
    else:  # one thread: the dispatch (the measured floor, t itself below it), then the work
        step = d + mc.dispatch_scale * np.minimum(t, h) + mc.gap_ms + free
    return d, np.where(launched, step, d)


def compose(
    kernels: pd.DataFrame,
    execution: str,
    ex: Execution,
    static_power_w: float | None = None,
    static_power_source: str = "",
    free_ops: int = 0,
) -> Composition:
    """The network's runtime (and power / energy) from its kernels' predictions (module docstring). ``free_ops``:
    the forward pass's kernel-free ops (views, reshapes: ``features.torch_capture`` ``attrs["free_ops"]``), each
    ``free_op_ms`` of host time in a mode that dispatches from the host."""
    if "runtime_ms" not in kernels.columns or "op" not in kernels.columns:
        raise ValueError("compose: kernels need op and runtime_ms (per-kernel predictions) columns")
    if kernels.empty:
        raise ValueError("compose: no kernel to compose")
    mc = ex.mode(execution)
    k = kernels.reset_index(drop=True)
    ops = k["op"].astype(str).to_numpy()
    h = ex.floor(families(ops))
    inputs = pd.to_numeric(k["inputs"], errors="coerce").to_numpy(float) if "inputs" in k else np.full(len(k), np.nan)
    t = pd.to_numeric(k["runtime_ms"], errors="coerce").to_numpy(float)
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError("compose: every kernel needs a finite runtime_ms >= 0")
    keep, into = _fusion(ops, inputs, np.ones(len(k), bool)) if mc.fuse else (np.ones(len(k)), np.full(len(k), -1))
    launched = into < 0
    d, step = _steps(t, h, keep, launched, mc, ex, free_ops)
    runtime = mc.launch_ms + float(step.sum())
    total = {"runtime_ms": runtime}
    for end in ("lo", "hi"):
        col = f"runtime_ms_{end}"
        if col in k.columns:
            te = pd.to_numeric(k[col], errors="coerce").to_numpy(float)
            total[col] = mc.launch_ms + float(_steps(te, h, keep, launched, mc, ex, free_ops)[1].sum())
    out = k.assign(launched=launched, fused_into=into, device_ms=d, step_ms=step)
    if "power_w" in k.columns and pd.to_numeric(k["power_w"], errors="coerce").notna().all():
        if static_power_w is None:
            raise ValueError("compose: kernels carry power_w but no static power was given")
        ps = float(static_power_w)
        p = pd.to_numeric(k["power_w"], errors="coerce").to_numpy(float)
        dyn = np.maximum(p - ps, 0.0) * t / 1e3 * keep  # J per call of each kernel's work
        energy = ps * runtime / 1e3 + float(dyn.sum())
        total.update(energy_j=energy, power_w=energy / (runtime / 1e3))
        for end in ("lo", "hi"):
            if f"power_w_{end}" in k.columns and f"runtime_ms_{end}" in total:
                pe = pd.to_numeric(k[f"power_w_{end}"], errors="coerce").to_numpy(float)
                dyn_e = np.maximum(pe - ps, 0.0) * t / 1e3 * keep
                total[f"power_w_{end}"] = (ps * runtime / 1e3 + float(dyn_e.sum())) / (runtime / 1e3)
                te = total[f"runtime_ms_{end}"]
                total[f"energy_j_{end}"] = total[f"power_w_{end}"] * te / 1e3
        out = out.assign(dynamic_energy_j=dyn)
        total.update(static_power_w=ps, static_power_source=static_power_source)
    total.update(execution=execution, kernels=int(len(k)), launched=int(launched.sum()), free_ops=int(free_ops))
    return Composition(total, out)


# --------------------------------------------------------------------------- networks through a kernel model
def fit_kernel_model(model, rows: pd.DataFrame, registry, directory: str | Path):
    """The kernel model of record of the residual network models (``NetworkComposer``): ``model`` (an unfitted
    ``CostModel``) fitted on measured kernel ``rows`` (``runtime_ms``) with the features the composed encoders give
    each kernel (``features.tabular.TabularFeaturizer``, as ``features.composed``), saved to ``directory`` (what the
    models' ``kernel_model`` names, ``models.gnn.load_kernel_model``). Returns the fitted model."""
    from features.tabular import TabularFeaturizer

    model.fit(TabularFeaturizer(registry).transform(rows), rows["runtime_ms"].to_numpy(float))
    model.save(directory)
    return model


class NetworkComposer:
    """A kernel model of record + the composition, over networks encoded with their kernels
    (``features.composed``: per network ``kernels``, ``kernel_features``, ``hw_kind``): the anchor of the residual
    network models (``models.gnn`` readout ``residual``, ``models.transformer`` ``residual=True``).

    ``fit(items, y)`` learns, per hardware kind, the mode's ``launch_ms`` and ``gap_ms`` from the training networks
    (:func:`fit_overheads`; the kernel model is not refitted); ``compose(items)`` gives each network's composed
    runtime and its per-kernel steps (graph node of each kernel included)."""

    def __init__(self, kernel_model, execution: str = "eager", table: Mapping[str, Execution] | None = None):
        if execution not in MODES:
            raise ValueError(f"unknown execution {execution!r}; known: {', '.join(MODES)}")
        self.kernel_model = kernel_model
        self.execution = execution
        self.table = dict(table or load_execution())
        self.overheads: dict[str, tuple[float, float]] = {}

    def _bare(self, kind: str) -> Execution:
        if kind not in self.table:
            raise ValueError(f"no execution constants for a {kind} (conf/execution.yaml has {', '.join(self.table)})")
        ex = self.table[kind]
        mc = ex.mode(self.execution)
        return ex.with_modes(**{self.execution: dataclasses.replace(mc, launch_ms=0.0, gap_ms=0.0, free_op_ms=0.0)})

    def _predict_kernels(self, items) -> list[np.ndarray]:
        frames = [it["kernel_features"] for it in items if len(it["kernels"])]
        preds = np.asarray(self.kernel_model.predict(pd.concat(frames, ignore_index=True)), float) if frames else []
        out, at = [], 0
        for it in items:
            n = len(it["kernels"])
            out.append(np.asarray(preds[at : at + n], float) if n else np.zeros(0))
            at += n
        return out

    def bare(self, items) -> list[tuple[float, int, pd.DataFrame]]:
        """Per network: the composed kernel steps' sum with zero launch and gap, the launched kernel count and the
        kernels with their ``runtime_ms`` prediction and ``step_ms``."""
        out = []
        for it, t in zip(items, self._predict_kernels(items)):
            k = it["kernels"]
            if not len(k):
                out.append((0.0, 0, k.assign(runtime_ms=[], step_ms=[], launched=[])))
                continue
            res = compose(k.assign(runtime_ms=t), self.execution, self._bare(it["hw_kind"]))
            out.append((res.total["runtime_ms"], res.total["launched"], res.kernels))
        return out

    def fit(self, items, y) -> NetworkComposer:
        parts, y = self.bare(items), np.asarray(y, float)
        kinds = np.array([it["hw_kind"] for it in items])
        for kind in np.unique(kinds):
            m = kinds == kind
            mc = self.table[kind].mode(self.execution)
            if m.sum() >= 2:
                self.overheads[kind] = fit_overheads(
                    [p[0] for p, k in zip(parts, m) if k], [p[1] for p, k in zip(parts, m) if k], y[m]
                )[:2]
            else:
                self.overheads[kind] = (mc.launch_ms, mc.gap_ms)
        return self

    def compose(self, items) -> list[tuple[float, pd.DataFrame]]:
        """Per network: its composed runtime (ms) and its kernels with ``step_ms`` (the gap included)."""
        out = []
        for it, (s, n, k) in zip(items, self.bare(items)):
            mc = self.table[it["hw_kind"]].mode(self.execution) if it["hw_kind"] in self.table else None
            launch, gap = self.overheads.get(it["hw_kind"], (mc.launch_ms, mc.gap_ms) if mc else (0.0, 0.0))
            if len(k):
                k = k.assign(step_ms=k["step_ms"] + gap * k["launched"])
            out.append((max(s + launch + gap * n, 1e-6), k))
        return out

    def state(self) -> dict:
        return {
            "execution": self.execution,
            "overheads": {k: list(v) for k, v in self.overheads.items()},
            "table": {k: v.to_dict() for k, v in self.table.items()},
        }

    @classmethod
    def from_state(cls, state: dict, kernel_model) -> NetworkComposer:
        table = {}
        for kind, spec in state["table"].items():
            modes = {m: ModeConstants(**c) for m, c in spec["modes"].items()}
            table[kind] = Execution(kind, spec["overlap"], spec["floor_ms"], modes, spec.get("floor_source", ""))
        c = cls(kernel_model, state["execution"], table)
        c.overheads = {k: tuple(v) for k, v in state["overheads"].items()}
        return c


# --------------------------------------------------------------------------- learning the constants
def fit_floors(rows: pd.DataFrame, registry=None) -> dict[str, float]:
    """Per op family, the per-call floor (ms) of back-to-back kernel timings ``rows`` (op, hardware, dtype, shapes,
    runtime_ms): ``models.physics.family_floors`` (the intercept of runtime against physics time over each
    hardware's fastest 30 % of a family's kernels). A family whose intercept is not identified by the rows (its
    fastest kernels are still bandwidth-bound: no kernel shows the floor) or that has no rows gets the
    smallest identified floor, capped by the family's fastest measured call (a back-to-back call is never faster
    than its floor)."""
    from data.workloads import family
    from features.physics import FAMILIES, PhysicsFeaturizer
    from models.physics import MIN_FLOOR_MS, family_floors

    ok = rows[rows["op"].map(lambda o: family(o) in FAMILIES)].reset_index(drop=True)
    if ok.empty:
        raise ValueError("fit_floors: no kernel rows of a physics op family")
    X = PhysicsFeaturizer(registry).transform(ok) if registry is not None else PhysicsFeaturizer().transform(ok)
    y = ok["runtime_ms"].to_numpy(float)
    raw = family_floors(X, y, np.ones(len(X), bool))  # the families whose rows identify a floor
    fam = families(ok["op"])
    seen = {f for f in FAMILIES if (fam == f).sum() >= 10}
    identified = {f: v for f, v in raw.items() if f in seen and v > MIN_FLOOR_MS * 1.0001}
    if not identified:
        raise ValueError("fit_floors: no op family has launch-bound rows to fix its floor")
    low = min(identified.values())
    out = {}
    for f in dict.fromkeys((*FAMILIES, "pool", "data_movement")):
        if f in identified:
            out[f] = identified[f]
        else:
            fastest = y[fam == f].min() if (fam == f).any() else np.inf
            out[f] = float(min(low, fastest))
    return {f: round(v, 6) for f, v in out.items()}


def fit_overheads(
    step_sums: np.ndarray, n_launched: np.ndarray, measured_ms: np.ndarray, n_free: np.ndarray | None = None
) -> tuple[float, float, float]:
    """``(launch_ms, gap_ms, free_op_ms)`` >= 0 of ``measured = step_sum + launch + gap x n_launched + free_op x
    n_free`` by non-negative relative least squares over networks (``step_sums``: each network's composed kernel
    steps with zero launch, gap and free-op time; ``n_free``: its kernel-free ops, None = not fitted, 0). All stay
    >= 0, so a deeper network never composes to less than its kernels."""
    from scipy.optimize import nnls

    s, n, y = (np.asarray(v, float) for v in (step_sums, n_launched, measured_ms))
    if len(y) < 2:
        raise ValueError("fit_overheads: needs at least two measured networks")
    cols = [np.ones_like(y), n] + ([np.asarray(n_free, float)] if n_free is not None else [])
    coef, _ = nnls(np.column_stack(cols) / y[:, None], (y - s) / y)
    return float(coef[0]), float(coef[1]), float(coef[2]) if n_free is not None else 0.0


STATIC_QUANTILE = 0.2  # the lowest-utilisation 20 % of the rows fix the static power


def fit_static_power(rows: pd.DataFrame, registry=None, quantile: float = STATIC_QUANTILE) -> dict[str, float]:
    """Static board power (W) of each GPU in ``rows`` (measured kernels with runtime_ms and power_w), from
    ``power = static + dynamic x utilisation`` fitted by median (L1) regression on the lowest-utilisation
    ``quantile`` of the GPU's rows; utilisation = physics time / measured runtime (the roofline share the kernel
    reached). Power rises steeply, not linearly, from zero utilisation, so only the low end fixes the intercept.
    Returns ``{hardware: static_w, ...}`` plus ``{hardware + ':dynamic_w_per_util': slope, ':rows': n}``."""
    from sklearn.linear_model import QuantileRegressor

    from features.physics import PhysicsFeaturizer

    need = rows.dropna(subset=["power_w", "runtime_ms"]).reset_index(drop=True)
    if need.empty:
        raise ValueError("fit_static_power: no rows with power_w and runtime_ms")
    X = PhysicsFeaturizer(registry).transform(need) if registry is not None else PhysicsFeaturizer().transform(need)
    u = np.clip(X["physics_ms"].to_numpy(float) / need["runtime_ms"].to_numpy(float), 0.0, 1.0)
    p = need["power_w"].to_numpy(float)
    out: dict[str, float] = {}
    for hw in sorted(need["hardware"].unique()):
        m = (need["hardware"] == hw).to_numpy()
        low = m & (u <= np.quantile(u[m], quantile))
        if low.sum() < 10:
            raise ValueError(f"fit_static_power: {hw} has {low.sum()} low-utilisation rows (need 10)")
        fit = QuantileRegressor(quantile=0.5, alpha=0.0, solver="highs").fit(u[low, None], p[low])
        out[hw] = round(float(fit.intercept_), 1)
        out[f"{hw}:dynamic_w_per_util"] = round(float(fit.coef_[0]), 1)
        out[f"{hw}:rows"] = int(low.sum())
    return out


MEASURED = ("fitted", "measured")  # idle_power_source prefixes of a value that comes from measurements


def _measured(spec) -> bool:
    return str(spec.idle_power_source or "").lstrip().lower().startswith(MEASURED)


def static_power(spec, registry=None) -> tuple[float, str]:
    """The static power (W) composed over a network's runtime on ``spec``, and where it comes from.

    The spec's ``idle_power_w`` when it is fitted or measured; else, when the registry holds a GPU of the same
    architecture and board power limit with a fitted or measured value (the H200 for an H100 SXM: the same GH100
    die, clocks and 700 W limit), that value, said so; else the spec's own value with its source (an assumption
    labelled as one)."""
    if spec.idle_power_w is None:
        raise ValueError(f"hardware {spec.id!r} has no idle_power_w: no network power without a static power")
    if _measured(spec) or registry is None:
        return float(spec.idle_power_w), f"{spec.id}: " + _first_sentence(spec.idle_power_source)
    twins = [
        s
        for s in registry
        if s.id != spec.id
        and s.kind == spec.kind
        and s.architecture == spec.architecture
        and s.architecture
        and s.tdp_w == spec.tdp_w
        and s.idle_power_w is not None
        and _measured(s)
    ]
    if twins:
        twin = sorted(twins, key=lambda s: s.id)[0]
        return float(twin.idle_power_w), (
            f"transferred from {twin.id} (same architecture {spec.architecture} and "
            f"{spec.tdp_w:g} W limit): " + _first_sentence(twin.idle_power_source)
        )
    return float(spec.idle_power_w), f"{spec.id}: " + _first_sentence(spec.idle_power_source)


def _first_sentence(text) -> str:
    import re

    return re.split(r"\. | \(", " ".join(str(text or "unknown").split()))[0][:160]


def main(argv: list[str] | None = None) -> int:
    """``python -m models.compose gpu-constants``: the GPU floors and the H200 static power from ../shared/data
    (the numbers conf/execution.yaml and conf/hardware/H200-SXM.yaml hold, with their sources)."""
    import argparse
    import json
    import sys
    import warnings

    from data.hardware import HardwareRegistry
    from data.importers import DatasetError
    from data.importers.hopper import import_hopper

    parser = argparse.ArgumentParser(prog="python -m models.compose")
    parser.add_argument("what", choices=["gpu-constants"])
    parser.add_argument("--data-root", default=None, help="default: <repo>/../shared/data")
    args = parser.parse_args(argv)
    registry = HardwareRegistry.from_dir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rows = import_hopper(args.data_root, registry)
        except DatasetError as e:  # one line naming the missing or bad file, not a traceback
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(
            json.dumps(
                {"floor_ms": fit_floors(rows, registry), "static_power_w": fit_static_power(rows, registry)}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
