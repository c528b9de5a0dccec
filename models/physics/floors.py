"""Launch floors: the time under which no kernel runs, per timing harness and floor group, fitted from the training
rows at fit time.

The floor belongs to the software stack and the timing harness rather than the GPU (a call timed alone between two
CUDA events pays launch latency and dispatch; a stream of PyTorch calls the host's dispatch; a C++ loop calling
cuBLAS / cuDNN little of either; a CUDA graph's replay only the device's own launch gap), so it is estimated per
regime (:data:`FLOOR_REGIMES`: the harness of a GPU row, ``features.physics.HARNESSES``, or ``cpu``) and per floor
group (:data:`FLOOR_GROUPS`: an op family, or an op whose launch path differs from its family's, :data:`FLOOR_OPS`).

A floor is the intercept of runtime against physics time over a hardware's fastest kernels of the group (the median
over hardware), where a kernel shows it. What no training row shows comes from priors in ``conf/physics.yaml``
(``floors``): the launch ratios between families (:data:`GRAPH_FLOORS_MS`), between harnesses
(:data:`OVER_PER_CALL`) and of ``linear``'s host path over a GEMM's (:data:`FLOOR_OP_PRIOR`).
docs/decisions/0008-launch-floors-per-harness.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.physics import FAMILIES, HARNESSES, SPLIT_KV_ROWS, laws
from models.physics.frame import families_of, hardware_keys

FLOOR_REGIMES = (*HARNESSES, "cpu")  # a GPU timed with each harness; a CPU (its own dispatch floor)
CPU_REGIME = len(HARNESSES)
# Launch paths of their own inside a family, each its own floor group (the group -> its family): PyTorch's ``linear``
# (``addmm`` with the bias, through cuBLASLt, whose algorithm query runs on the host at every call); a GEMM on the fp8
# / int8 tensor cores, which runs a quantisation kernel of its activations before the GEMM (vLLM's per-tensor and
# per-token fp8 linears); a decode-like attention that splits its keys (features.physics.SPLIT_KV_ROWS), which runs a
# reduction kernel after it. A harness that timed none of them takes its family's floor (``linear``: times
# :data:`FLOOR_OP_PRIOR`).
FLOOR_OPS = {"linear": "gemm", "gemm_tensor8": "gemm", "attention_split_kv": "attention"}
FLOOR_GROUPS = (*FAMILIES, *FLOOR_OPS)

# Settings of the intercept fit (definitions of the estimator, not fitted numbers):
FLOOR_QUANTILE = 0.3  # the fastest 30% of a hardware's kernels of a group fix its floor
MIN_FIT_FLOOR_ROWS = 10  # rows of a group on one hardware for the intercept fit
MIN_FEW_FLOOR_ROWS = 3  # fewer than MIN_FIT_FLOOR_ROWS: floor = fastest kernel - its physics time, where its physics
FLOOR_BOUND_SHARE = 0.1  # time is at most this share of its runtime (a floor-bound kernel)
MIN_FLOOR_MS = 1e-3
# a line's intercept says the floor only where the fastest kernel's physics time is at most this share of its runtime
# (else every kernel is bandwidth- or compute-bound, and a clipped intercept says nothing) and the intercept is above
# MIN_FLOOR_MS
FLOOR_FIT_SHARE = 0.75

_FLOORS = laws()["floors"]
# A CUDA graph's floors (ms per family) where no training row was timed so (conf/physics.yaml ``floors.graph_ms``):
# a graph's replay has no host in its floor, so its floor is the GPU's own launch gap and shortest run, not a share of
# a host-bound harness's floor. Their ratios are also the launch ratios between families (:func:`unseen_family_floor`).
GRAPH_FLOORS_MS = {f: float(v) for f, v in _FLOORS["graph_ms"].items()}
GRAPH_FLOORS_MS |= {op: GRAPH_FLOORS_MS[fam] for op, fam in FLOOR_OPS.items()}
# Graph-timed training rows of a group pull its graph floor from GRAPH_FLOORS_MS toward their own line's intercept,
# weight n / (n + GRAPH_PRIOR_ROWS) in log space (conf/physics.yaml): a few rows of a new GPU do not set it alone.
GRAPH_PRIOR_ROWS = int(_FLOORS["graph_prior_rows"])
# A harness's floors over the per-call floors, for a harness no training row was timed with (conf/physics.yaml):
# launch throughput (or host dispatch) against launch latency + event timing.
OVER_PER_CALL = {h: float(v) for h, v in _FLOORS["over_per_call"].items()}
# ``linear``'s floor over its family's where a harness timed none (conf/physics.yaml): its host path where the harness
# times the host, 1 where it does not (a CUDA graph replays no host code; DeepBench's loop calls cuBLAS directly).
FLOOR_OP_PRIOR = {h: float(v) for h, v in _FLOORS["linear_over_gemm"].items()}


def regime_index(X: pd.DataFrame) -> np.ndarray:
    """Per row its launch-floor regime (index into :data:`FLOOR_REGIMES`): a CPU row ``cpu``, a GPU row its timing
    harness (``features.physics.HARNESSES``, column ``harness_index``)."""
    harness = X["harness_index"].to_numpy(float).astype(int)
    return np.where(X["hw_is_gpu"].to_numpy(float) > 0, harness, CPU_REGIME)


def floor_groups_of(X: pd.DataFrame) -> np.ndarray:
    """Per row its launch-floor group (:data:`FLOOR_GROUPS`): ``linear`` (its own host path), a GEMM on the 8-bit
    tensor cores or a split-KV attention (a second kernel, :data:`FLOOR_OPS`), else its family."""
    groups = families_of(X)
    groups = np.where(X["op_linear"].to_numpy(float) > 0, "linear", groups)
    groups = np.where(
        (groups == "gemm") | (groups == "linear"),
        np.where(X["mode_tensor8"].to_numpy(float) > 0, "gemm_tensor8", groups),
        groups,
    )
    split = (groups == "attention") & (X["log2_m"].to_numpy(float) <= np.log2(SPLIT_KV_ROWS))
    return np.where(split, "attention_split_kv", groups)


def floor_parts(X: pd.DataFrame, by_op: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row the family (``by_op``: the floor group), a hardware code (rows of one spec position share it) and the
    physics time."""
    groups = floor_groups_of(X) if by_op else families_of(X)
    return groups, np.unique(hardware_keys(X), return_inverse=True)[1], X["physics_ms"].to_numpy(float)


def family_floors(
    X: pd.DataFrame, y: np.ndarray, rows: np.ndarray, fitted: list | None = None, parts: tuple | None = None
) -> dict[str, float]:
    """Launch floor (ms) per op family from ``rows``: the median over hardware of each one's intercept (where its
    fastest kernel shows a floor, :data:`FLOOR_FIT_SHARE`); a family that no hardware has
    :data:`MIN_FIT_FLOOR_ROWS` rows of, from the hardware with :data:`MIN_FEW_FLOOR_ROWS` or more: its fastest
    kernel's time less its physics time, if that kernel is floor-bound (:data:`FLOOR_BOUND_SHARE`). ``fitted``, a
    list, receives the families whose floor is a fitted intercept; ``parts``: :func:`floor_parts` of ``X`` where the
    caller has it (several calls on one frame; taken by op, as :func:`estimate_floors` does, an op of
    :data:`FLOOR_OPS` is a group of its own, out of its family)."""
    fam, hw, phys = floor_parts(X) if parts is None else parts
    floors = {}
    for f in FLOOR_GROUPS:  # an op group has rows only where ``parts`` were taken by op
        intercepts, few = [], []
        of_family = np.flatnonzero(rows & (fam == f))
        for h in np.unique(hw[of_family]):
            idx = of_family[hw[of_family] == h]
            if len(idx) < MIN_FEW_FLOOR_ROWS:
                continue
            fastest = idx[np.argmin(y[idx])]
            if len(idx) < MIN_FIT_FLOOR_ROWS:  # too few for a line: the fastest kernel, if it is floor-bound
                if phys[fastest] <= FLOOR_BOUND_SHARE * y[fastest]:
                    few.append(float(np.clip(y[fastest] - phys[fastest], MIN_FLOOR_MS, y[fastest])))
                continue
            if phys[fastest] > FLOOR_FIT_SHARE * y[fastest]:  # no kernel shows the floor
                continue
            low = idx[phys[idx] <= np.quantile(phys[idx], FLOOR_QUANTILE)]
            A = np.column_stack([np.ones(len(low)), phys[low]]) / y[low, None]  # relative least squares
            a, _ = np.linalg.lstsq(A, np.ones(len(low)), rcond=None)[0]
            if a > MIN_FLOOR_MS:  # else the line says nothing of the floor
                intercepts.append(float(min(a, y[fastest])))
        if intercepts or few:  # the fitted intercepts where any hardware has enough rows, else the few-row ones
            floors[f] = float(np.median(intercepts or few))
        if intercepts and fitted is not None:
            fitted.append(f)
    return floors


def unseen_family_floor(floors: dict[str, float], family: str) -> float:
    """The floor (ms) of a family no training row has, in a harness whose ``floors`` of other families are known: the
    median over those of ``floors[g] * GRAPH_FLOORS_MS[family] / GRAPH_FLOORS_MS[g]``. A family's launch path costs
    much the same relative to another's in each harness, so the graph table carries the ratios."""
    families = {g: v for g, v in floors.items() if g in FAMILIES}  # an op's own host path says nothing of another's
    if not families:  # only a family's own launch paths were timed (FLOOR_OPS): they stand in for their family
        families = {FLOOR_OPS[g]: v for g, v in floors.items() if g in FLOOR_OPS}
    return float(np.median([v * GRAPH_FLOORS_MS[family] / GRAPH_FLOORS_MS[g] for g, v in families.items()]))


def every_group(floors: dict[str, float], harness: str = "per_call") -> dict[str, float]:
    """``floors`` with every group of :data:`FLOOR_GROUPS`: a family it lacks by the others' launch ratios
    (:func:`unseen_family_floor`), an op of :data:`FLOOR_OPS` by its family's floor (:data:`FLOOR_OP_PRIOR` of
    ``harness`` for ``linear``)."""
    out = {f: float(floors[f]) if f in floors else unseen_family_floor(floors, f) for f in FAMILIES}
    for op, fam in FLOOR_OPS.items():
        prior = FLOOR_OP_PRIOR[harness] if op == "linear" else 1.0
        out[op] = float(floors[op]) if op in floors else out[fam] * prior
    return out


def estimate_floors(X: pd.DataFrame, y: np.ndarray, by_harness: bool = True) -> dict[str, dict[str, float]]:
    """Launch floor (ms) per regime (:data:`FLOOR_REGIMES`) and floor group: ``{regime: {group: ms}}``.

    ``by_harness``: each GPU harness (``features.physics.HARNESSES``) from its own rows; a family the harness has no
    floor of (no row, or none floor-bound), from the harness's other families by their launch ratios
    (:func:`unseen_family_floor`), whether or not another harness has it (another harness's family ratios are its
    own); a harness with no row at all (or none that a line's intercept was fitted on) takes the whole table of the
    first harness with rows times their priors' ratio (:data:`OVER_PER_CALL`; the CUDA graph: :data:`GRAPH_FLOORS_MS`).
    A CPU's floor comes from CPU rows (else the back-to-back GPU floor). The CUDA graph's floors, where rows were so
    timed, are shrunk toward :data:`GRAPH_FLOORS_MS` by the number of rows of each group (:data:`GRAPH_PRIOR_ROWS`).
    Without ``by_harness`` every regime gets the floors of all rows (one floor per group, whatever measured it)."""
    regime, parts = regime_index(X), floor_parts(X, by_op=True)
    pooled = family_floors(X, y, np.ones(len(X), bool), parts=parts)
    if not set(pooled) & set(FAMILIES):
        pooled["gemm"] = float(max(np.min(y) * 0.5, MIN_FLOOR_MS))
    if not by_harness:
        table = every_group(pooled)
        return {r: dict(table) for r in FLOOR_REGIMES}
    own = []
    for i in range(len(FLOOR_REGIMES)):
        fitted: list = []
        floors = family_floors(X, y, regime == i, fitted, parts)
        # a harness no family's intercept was fitted for (a few rows of a new GPU: its fastest small GEMM is slow,
        # not floor-bound) says too little: it takes the priors, as a harness with no row
        own.append(floors if fitted else {})
    gpu = range(CPU_REGIME)
    if not any(own[i] for i in gpu):  # no GPU row: every GPU harness from all rows
        for i in gpu:
            own[i] = dict(pooled)
    out = {HARNESSES[i]: every_group(own[i], HARNESSES[i]) for i in gpu if own[i]}
    source = next(HARNESSES[j] for j in gpu if own[j])  # a harness with no row: the first one with rows, by priors
    for i in (i for i in gpu if not own[i]):
        h = HARNESSES[i]
        if h == "cuda_graph":
            out[h] = dict(GRAPH_FLOORS_MS)
        else:
            out[h] = {f: v * OVER_PER_CALL[h] / OVER_PER_CALL[source] for f, v in out[source].items()}
    graph = HARNESSES.index("cuda_graph")
    if own[graph]:  # graph rows of a group pull its floor from the prior as they grow in number
        n = pd.Series(parts[0][regime == graph]).value_counts()
        for f in FLOOR_GROUPS:
            w = n.get(f, 0) / (n.get(f, 0) + GRAPH_PRIOR_ROWS)
            fitted, prior = np.log(out["cuda_graph"][f]), np.log(GRAPH_FLOORS_MS[f])
            out["cuda_graph"][f] = float(np.exp(w * fitted + (1 - w) * prior))
    out = {h: out[h] for h in HARNESSES}
    cpu = own[CPU_REGIME]
    if cpu and set(cpu) & set(FAMILIES):  # a CPU's own floors; an op it has none of: its family's (no prior)
        cpu = cpu | {op: cpu[fam] for op, fam in FLOOR_OPS.items() if op not in cpu and fam in cpu}
    out["cpu"] = {f: float(cpu.get(f, out[HARNESSES[0]][f])) for f in FLOOR_GROUPS}
    return out


def floor_ms(floors: dict[str, dict[str, float]], X: pd.DataFrame) -> np.ndarray:
    """Per row of ``X`` its launch floor (ms) from a table of :func:`estimate_floors`."""
    table = np.array([[floors[r][g] for g in FLOOR_GROUPS] for r in FLOOR_REGIMES])
    groups = pd.Categorical(floor_groups_of(X), categories=FLOOR_GROUPS).codes
    return table[regime_index(X), groups].astype(float)
