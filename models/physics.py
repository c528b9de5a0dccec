"""Physics-first runtime model: analytical time over a bounded, learned efficiency, plus a launch floor.

    runtime_ms = floor[family] + physics_ms / efficiency(x),    efficiency = e_max * sigmoid(f(x) - log e_max)

``physics_ms`` is the tile/wave-quantised roofline of ``features.physics`` (the math mode's peak from the spec
registry, tensor cores included, DRAM bandwidth, SMs); ``f`` reads only the DIMENSIONLESS columns
``features.physics.FEATURES`` (waves, tail occupancy, tile fill, the large tile's waste, K depth, aspect, alignment,
compute / memory time, bytes / L2, dtype class, op family), so a faster GPU or a bigger shape moves the prediction
through the physics and the efficiency saturates at its bound instead of a tree's last leaf capping the runtime. The
model is fitted on all training hardware jointly (NeuSight's form, ASPLOS'25, learns a bounded per-tile utilisation
the same way).
The bound is per family: ``e_max`` > 1 for convolutions and memory-bound ops because the physics counts the direct
convolution's FLOPs and DRAM bytes (cuDNN's Winograd kernels do up to ~4x fewer multiplications; small inputs are
served from L2), ``e_max_gemm`` (1.25) for GEMMs and attention, whose FLOPs are the FLOPs done: only a clock above
the spec's boost clock beats the peak (1.07 seen on a GTX 1080 Ti), so no tree leaf can claim 2-4x the peak for a
GEMM outside the training data.

``floor`` is the launch / dispatch floor per op family and regime: the intercept of runtime against physics time
over each training hardware's fastest 30% of kernels, the median over hardware, where a kernel shows it. It belongs
to the software stack and the timing harness rather than the GPU (NeuSight's per-call timing: 30-50 us for a GEMM,
~120 us for a cuDNN conv; a PyTorch stream, the H200 set: 10 us per GEMM, 28 us per SDPA; DeepBench's C++ loop:
3-25 us), so the regime (:data:`FLOOR_REGIMES`) is the harness of a GPU row (``features.physics.HARNESSES``: from
the row's ``harness`` or ``source``; a prediction's default is back to back) or ``cpu`` (a CPU's eager dispatch);
``harness_floors=False`` pools them (one floor per family, what the first version did). It is re-scaled by
:meth:`PhysicsModel.calibrate`.

One efficiency learner per device class (``device_learners``): where the training rows hold CPUs and GPUs, the
CPU rows get a learner of their own, so the GPU learner never sees them (floors and per-hardware corrections stay
joint: they are per regime and per hardware already). A CPU and a GPU run no kernel alike (a CPU's gelu is bound by
its transcendental math at 0.1-0.3 of its bandwidth, a GPU's by DRAM or L2), and no dimensionless input tells them
apart: with the main job's CPU rows in one learner, the float32 gelu of an H100 (never trained on) came out 2-10x
slow; a CPU flag among the inputs still leaked (trees split on it late). Measured on 2 160 H100 kernels
(benchmarks/gpu_holdout.py, the main job's training rows): MAPE 43.8% joint, 37.6 with the flag, 34.1 split
(elementwise 87 / 47 / 27%).

Learners (``learner``), both fitted on the loss that matters, (log runtime - log y)^2, through the floor:

* ``xgb``: XGBoost with a custom objective on the margin f (gradient through the sigmoid and the floor) and
  monotone constraints where physics orders the efficiency (:data:`MONOTONE`: a fuller tail wave, fuller tiles, a
  longer main loop per CTA and wider-aligned operands never make a kernel less efficient);
* ``mlp``: a small Lightning MLP with the same sigmoid head and loss (no monotone constraints).

Each prediction has a domain of validity and an interval (:meth:`PhysicsModel.predict_domain`, ``models.domain``),
calibrated at fit time on held-out folds of the training rows (shapes, hardware, the largest shapes). A new GPU
is learned from a few of its measurements by :meth:`PhysicsModel.calibrate` (a boosted correction or a refit on the
kept training rows, kept only where it beats the model's own answer out of fold).
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import xgboost as xgb

from features.physics import (
    ARCHITECTURE,
    FAMILIES,
    FEATURES,
    HARDWARE,
    HARDWARE_IDENTITY,
    HARNESSES,
    LAYOUT,
    MODES,
    PHYSICS_VERSION,
    SIZE,
    SPLIT_KV_ROWS,
    PhysicsFeaturizer,
    derived_inputs,
)
from models.base import CostModel, check_targets
from models.domain import Domain, calibrate_widening, conformal, distinct_rows, widen

LEARNERS = ("xgb", "mlp")
# efficiency bound e_max_gemm: the physics counts the FLOPs they do, the bytes a decode reads, the bytes a collective
# sends over its link
BOUNDED_FAMILIES = ("gemm", "attention", "moe", "collective")
# a fuller tail wave, fuller tiles, wider-aligned operands and a longer main loop per CTA (K per split-K slice: the
# prologue / epilogue amortised over more steps) never make a kernel less efficient; more work wasted on the large tile
# (features.physics.BIG_TILE) never makes it more
MONOTONE = {"tail_occupancy": 1, "tile_fill": 1, "log2_align_bytes": 1, "log2_k_per_split": 1, "log2_big_tile": -1}
# Bytes over L2 is not a learner input of GEMM rows (``gemm_bytes_over_l2=False``): a GEMM's operands are re-read in
# tiles, so whether all of them fit in L2 says little of its rate, while across training GPUs the ratio names the GPU
# (L2 of 2-6 MB on the P4, T4, P100 and V100, 40-50 MB on the A100 and H200): the trees learned the levels of the
# GPUs that have each ratio (the 70 W cards run long GEMMs at 0.2-0.4 of their peak), and a held-out V100's long
# linears (0.86 of its peak) came out 1.6x slow, the L2 column the largest negative contribution to their margin
# (-0.33). Memory-bound ops and convolutions (an input re-read k x k times) keep it. Zeroed, and only where the model
# learned GEMMs: one that never saw a GEMM predicts them as the convolutions it knows, which read the ratio (zeroed
# there too, a GEMM family held out of training came out at 100-120% MAPE against 73-77%; missing (NaN) instead of 0,
# or a constant of 8, cost check (c) 7.0 -> 11.3 / 12.9% over 3 seeds). Measured (by-family sample, each NeuSight GPU
# held out, trained on the rest with DeepBench and the H200, physics model alone, 3 seeds): MAPE over the held-out
# GPU's rows 17.4 / 17.4 / 17.6 -> 16.3 / 16.4 / 17.1; the checks: docs/extrapolation.md.
L2_INPUT = "log2_bytes_over_l2"
MODE_ONE_HOT = tuple(f"mode_{m}" for m in MODES)
# the learner inputs of a model saved before the operand layout (features.physics.LAYOUT) was one: it reads those,
# with the math mode as a one-hot of the four modes where ``tensor_cores`` and three flags are now, and
# ``family_gemm`` where ``gemm_like`` is (stop 36)
INPUTS_BEFORE_STOP_36 = {"tensor_cores": MODE_ONE_HOT, "gemm_like": ("family_gemm",)}
FEATURES_BEFORE_LAYOUT = tuple(
    g for f in FEATURES if f not in LAYOUT and f not in MODE_ONE_HOT for g in INPUTS_BEFORE_STOP_36.get(f, (f,))
)
MIN_CALIBRATION_ROWS = 5
MIN_GROUP_SCALE_ROWS = 10  # rows of a floor group for a scale of its own in a measured GPU's correction
CALIBRATION_METHODS = ("auto", "refit", "correction")
MARGIN_CLIP = 10.0  # efficiency >= e_max * sigmoid(-10) = 1.8e-4 e_max: finite even far outside the training range
CORRECTION_ROUNDS = (0, 25, 50, 100)  # boosted-correction sizes tried by cross-validation on the new GPU's rows
# calibrate's refit: the model refitted on the rows it was trained on plus the new GPU's rows, those repeated
# NEW_ROW_REPEATS times (check f on 6 GPUs, k = 10 / 30 / 100 rows, 2 draws: once leaves the H200 at 19.2% at k = 100,
# 3 times gives 17.1, 10 times 17.0 there but 110% at k = 10, where the new GPU's own correction then learns its 10
# rows; as a weight of 3 in the loss alone instead, 6 GPUs at k = 30 averaged 16.9% against 15.7 repeated: the
# floors and the GPU's own correction count its rows); from MIN_REFIT_ROWS new rows, the new rows' out-of-fold
# predictions by REFIT_FOLDS-fold refits (the interval and the reported error)
NEW_ROW_REPEATS = 3
MIN_REFIT_ROWS = 10
REFIT_FOLDS = 3
ROWS_Y = "_runtime_ms"  # the kept rows' target column in training_rows.parquet
# A training GPU's own correction (``hardware_corrections``): from this many rows, one boosted round per
# CORRECTION_ROWS_PER_ROUND rows, at most MAX_FIT_CORRECTION_ROUNDS (depth-3 trees, eta 0.1) and at most the shared
# learner's trees (``n_estimators``: 300 by default, so the same; the main job's eval-split refits, with a fifth of the
# trees (``eval_trees``), spent more time in the corrections than in the shared learner)
MIN_FIT_CORRECTION_ROWS = 30
CORRECTION_ROWS_PER_ROUND = 10
MAX_FIT_CORRECTION_ROUNDS = 300
FLOOR_QUANTILE = 0.3  # the fastest 30% of a hardware's kernels of a family fix its floor
# A GPU outside training borrows a measured sibling's correction (same architecture and math mode) only when their
# spec positions (features.physics.HARDWARE_IDENTITY, log2 units) are closer than this (sum of squares), weighted by
# 1 - distance / BORROW_MAX_DISTANCE (no step in the prediction as a spec moves): the variants of one chip (V100 PCIe
# / SXM2 0.03, TITAN Xp / GTX 1080 Ti 0.07, A100 40 / 80 GB 0.1, H100 / H200 0.27), not two chips of one generation
# (P4 / GTX 1080 Ti 3.3, P100 / TITAN Xp 4): leave-one-GPU-out, V100 PCIe 26.4 -> 8.7% MAPE, while P4 7.7 -> 18.2%
# when it borrowed from GP102 (no limit). Limits 0.5, 1 and 2 give the same mean over 11 GPUs (20.4-20.5%).
BORROW_MAX_DISTANCE = 1.0
MIN_FIT_FLOOR_ROWS = 10  # rows of a family on one hardware for the intercept fit
MIN_FEW_FLOOR_ROWS = 3  # fewer than MIN_FIT_FLOOR_ROWS: floor = fastest kernel - its physics time, where its physics
FLOOR_BOUND_SHARE = 0.1  # time is at most this share of its runtime (H200 attention in check d: 6 small rows, fastest
# 30.4 us of which 0.5 us physics, where the median of the other families' floors said 8.7 us)
MIN_FLOOR_MS = 1e-3
# a line's intercept says the floor only where the fastest kernel's physics time is at most this share of its runtime
# and the intercept is above MIN_FLOOR_MS (the H200 set's float32 elementwise and norm kernels are all bandwidth-bound
# or run at half the bandwidth, 7-25 us of which 6-20 us physics: their intercepts, clipped, said a 1 us floor)
FLOOR_FIT_SHARE = 0.75
# a harness's floor / the per-call floor, for a harness no training row was timed with: launch throughput (or host
# dispatch) against launch latency + event timing. Measured on the real sets (estimate_floors): DeepBench's library
# loop against NeuSight's per-call timing on the same GPU generations, GEMM 8.6 / 31.2 us = 0.28, conv 24.5 / 70.7 =
# 0.35; the H200 set's PyTorch stream against NeuSight, GEMM 10.2 / 33.1 us = 0.31, conv 21.2 / 120.6 = 0.18, softmax
# 8.7 / 19.8 = 0.44. A CUDA graph's replay (features.physics.HARNESSES ``cuda_graph``: no host between kernels)
# against the PyTorch stream, measured with the cuda backend on an H200 (2 160 random kernels,
# benchmarks/gpu_holdout.py; the 1 324 timed from a graph): GEMM 2.2 / 10.2 us = 0.22, conv 4.4 / 21.2 = 0.21, SDPA
# 5.9 / 27.8 = 0.21, elementwise 1.2 / 4.9 = 0.24, norm 3.0 / 12.0 = 0.25, softmax 1.7 / 3.0 = 0.55; median 0.23,
# times the stream's 0.3: 0.07.
OVER_PER_CALL = {"back_to_back": 0.3, "per_call": 1.0, "library_loop": 0.3, "cuda_graph": 0.07}
# A CUDA graph's replay has no host in its floor, so its floor is the GPU's own launch gap and shortest run, not a
# share of a host-bound harness's floor: where no training row was timed so (or too few for a line), the graph floors
# are these, measured (estimate_floors) on the H200 with the cuda backend (the 1 324 graph-timed of 2 160 random
# kernels); the H100, which none came from, shows GEMM 2.5, conv 5.0, elementwise 1.2, softmax 1.7-2.0 us. A ratio to
# the stream's floor instead (the H200 set's) made them as fragile as that floor: the stream's softmax floor is 3.0 or
# 8.7 us by which rows a fit samples (6 H200 softmax rows), and the H100's tiny softmaxes came out 0.4x or 2.5x.
GRAPH_FLOORS_MS = {"gemm": 2.2e-3, "conv": 4.4e-3, "attention": 5.9e-3, "elementwise": 1.2e-3, "norm": 3.0e-3}
GRAPH_FLOORS_MS |= {"softmax": 1.7e-3, "reduction": 2.6e-3, "pool": 2.6e-3, "data_movement": 2.6e-3}
# assumption: a fused MoE launches like a GEMM, a collective like a convolution (a few kernels with a barrier); only
# their ratios to the families a harness did time are read (:func:`unseen_family_floor`)
GRAPH_FLOORS_MS |= {"moe": GRAPH_FLOORS_MS["gemm"], "collective": GRAPH_FLOORS_MS["conv"]}
# Ops whose host path is longer than their family's get a floor of their own (their floor group is the op, its family
# the value): PyTorch's ``linear`` (``addmm`` with the bias, through cuBLASLt, whose algorithm query runs on the host
# at every call). Measured (fastest linear / fastest bmm, NeuSight's per-call timing): A100 53 / 31 us, V100 69 / 40,
# P100 94 / 52, T4 65 / 33, P4 56 / 29 (1.7-2.0x); the H200 set's PyTorch stream: its float32 linears of 1-2 us of
# physics take 22-47 us where its matmuls of as little take 10-20. A harness that timed none of the op takes its
# family's floor times FLOOR_OP_PRIOR (the per-call ratio's median where the host path is timed; a CUDA graph replays
# no host code and DeepBench's loop calls cuBLAS directly: 1).
# Launch paths of their own inside a family, each its own floor group (the group -> its family): a GEMM on the fp8 /
# int8 tensor cores runs a quantisation kernel of its activations before the GEMM (vLLM's per-tensor and per-token
# fp8 linears), and a decode-like attention that splits its keys (features.physics.SPLIT_KV_ROWS) a reduction kernel
# after it: two kernels where their family launches one. A harness that timed none of them takes its family's floor.
FLOOR_OPS = {"linear": "gemm", "gemm_tensor8": "gemm", "attention_split_kv": "attention"}
FLOOR_OP_PRIOR = {"back_to_back": 1.8, "per_call": 1.8, "library_loop": 1.0, "cuda_graph": 1.0}  # of ``linear``
FLOOR_GROUPS = (*FAMILIES, *FLOOR_OPS)
GRAPH_FLOORS_MS |= {op: GRAPH_FLOORS_MS[fam] for op, fam in FLOOR_OPS.items()}
# Graph-timed training rows of a family (a new GPU's, in calibrate's refit) pull its graph floor from the measured one
# toward their own line's intercept, weight n / (n + GRAPH_PRIOR_ROWS) in log space: ~17 rows of a family (100 random
# rows of the H100) fitted its softmax floor at 4.6 us (measured 1.7) and its conv floor at 9.5 (measured ~5), and
# calibrating with them made the H100's softmax 25 -> 75% MAPE; shrunk, 44%. The H200's 1 324 graph rows weigh 0.96.
GRAPH_PRIOR_ROWS = 50
# the columns of one (op, dtype, shape), whatever the hardware: the grouping key of the held-out-shape folds
SHAPE_KEY = (
    "flops",
    "bytes",
    "dtype_bytes",
    "log2_k",
    "log2_m_over_n",
    "log2_batch",
    "log2_row",
    "conv_kernel",
    "conv_stride",
    "causal",
    "log2_m",
    "log2_kv_group",
    "kv_narrow",
    "log2_weight_bytes",
    "log2_gpus",
)


def physics_frame(X: pd.DataFrame, registry=None) -> pd.DataFrame:
    """``X`` if it is already a physics frame, else the physics frame of a workload description frame."""
    if not isinstance(X, pd.DataFrame):
        raise TypeError(f"X must be a DataFrame, got {type(X).__name__}")
    if "physics_ms" in X.columns:
        missing = [c for c in (*FEATURES, *HARDWARE, *SIZE, "physics_ms") if c not in X.columns]
        if missing:
            raise ValueError(
                f"physics frame lacks column(s) {', '.join(missing[:5])} (build it with "
                "features.physics.PhysicsFeaturizer)"
            )
        return X.reset_index(drop=True)
    if {"op", "hardware"} <= set(X.columns):
        from data.hardware import HardwareRegistry

        return PhysicsFeaturizer(registry or HardwareRegistry.from_dir()).transform(X)
    raise ValueError(
        "X must be a physics frame (features.physics.PhysicsFeaturizer) or workload descriptions "
        "(op, hardware, dtype and shape columns)"
    )


def _columns(X: pd.DataFrame, names) -> np.ndarray:
    """``X[names]`` as a float matrix, column by column (a list selection copies through pandas' indexer: 2x slower
    on the physics frame, and the fits call this thousands of times)."""
    return np.column_stack([X[c].to_numpy(float) for c in names]) if len(X) else np.empty((0, len(names)))


def families_of(X: pd.DataFrame) -> np.ndarray:
    onehot = _columns(X, [f"family_{f}" for f in FAMILIES])
    return np.asarray(FAMILIES, dtype=object)[onehot.argmax(axis=1)]


def architectures(X: pd.DataFrame) -> np.ndarray:
    """Per row ``vendor:architecture`` ('' where unknown or the frame predates the column)."""
    if ARCHITECTURE not in X.columns:
        return np.full(len(X), "", dtype=object)
    return X[ARCHITECTURE].fillna("").astype(str).to_numpy(object)


def hardware_keys(X: pd.DataFrame) -> np.ndarray:
    """One string per row naming its hardware's spec position (rows of one GPU share it; no name needed)."""
    H = np.round(_columns(X, HARDWARE_IDENTITY), 6)
    if len(H) == 0:
        return np.array([], dtype=object)
    distinct, inverse = distinct_rows(H)  # a few GPUs: format each once, not every row
    names = np.array([",".join(f"{v:.6f}" for v in row) for row in distinct], dtype=object)
    return names[inverse]


def mode_keys(X: pd.DataFrame, hw: np.ndarray | None = None) -> np.ndarray:
    """``hardware_keys`` (``hw`` where already computed) and the row's math mode: a GPU's tensor cores are not learned
    from its fp32 rows."""
    modes = np.asarray(MODES, dtype=object)[_columns(X, [f"mode_{m}" for m in MODES]).argmax(axis=1)]
    return (hardware_keys(X) if hw is None else hw) + "|" + modes


def shape_keys(X: pd.DataFrame) -> np.ndarray:
    return pd.util.hash_pandas_object(X[list(SHAPE_KEY)].round(9), index=False).to_numpy()


FLOOR_REGIMES = (*HARNESSES, "cpu")  # a GPU timed with each harness; a CPU (its own dispatch floor)
CPU_REGIME = len(HARNESSES)


def regime_index(X: pd.DataFrame) -> np.ndarray:
    """Per row its launch-floor regime (:data:`FLOOR_REGIMES`): a CPU row ``cpu``, a GPU row its timing harness
    (``features.physics.HARNESSES``, column ``harness_index``; a frame without it: back to back)."""
    harness = X["harness_index"].to_numpy(float).astype(int) if "harness_index" in X.columns else np.zeros(len(X), int)
    return np.where(X["hw_is_gpu"].to_numpy(float) > 0, harness, CPU_REGIME)


def floor_groups_of(X: pd.DataFrame) -> np.ndarray:
    """Per row its launch-floor group (:data:`FLOOR_GROUPS`): ``linear`` (its own host path), a GEMM on the 8-bit
    tensor cores or a split-KV attention (a second kernel, :data:`FLOOR_OPS`), else its family."""
    groups = families_of(X)
    if "op_linear" in X.columns:
        groups = np.where(X["op_linear"].to_numpy(float) > 0, "linear", groups)
    if "mode_tensor8" in X.columns:
        groups = np.where(
            (groups == "gemm") | (groups == "linear"),
            np.where(X["mode_tensor8"].to_numpy(float) > 0, "gemm_tensor8", groups),
            groups,
        )
    if "log2_m" in X.columns:
        split = (groups == "attention") & (X["log2_m"].to_numpy(float) <= np.log2(SPLIT_KV_ROWS))
        groups = np.where(split, "attention_split_kv", groups)
    return groups


def _floor_parts(X: pd.DataFrame, by_op: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row the family (``by_op``: the floor group), a hardware code (rows of one spec position share it) and the
    physics time."""
    groups = floor_groups_of(X) if by_op else families_of(X)
    return groups, np.unique(hardware_keys(X), return_inverse=True)[1], X["physics_ms"].to_numpy(float)


def family_floors(
    X: pd.DataFrame, y: np.ndarray, rows: np.ndarray, fitted: list | None = None, parts: tuple | None = None
) -> dict[str, float]:
    """Launch floor (ms) per op family from ``rows``: the median over hardware of each one's intercept (where its
    fastest kernel shows a floor, :data:`FLOOR_FIT_SHARE`); a family that no hardware has 10 rows of, from the
    hardware with 3 to 9: its fastest kernel's time less its physics time, if that kernel is floor-bound (physics under
    a tenth of its time). ``fitted``, a list, receives the families whose floor is a fitted intercept; ``parts``:
    :func:`_floor_parts` of ``X`` where the caller has it (several calls on one frame; taken by op, as
    :func:`estimate_floors` does, an op of :data:`FLOOR_OPS` is a group of its own, out of its family)."""
    fam, hw, phys = _floor_parts(X) if parts is None else parts
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
    much the same relative to another's in each harness (the fitted floors of :data:`OVER_PER_CALL`'s note: SDPA /
    GEMM 2.7 replayed from a CUDA graph and 2.7 in the H200 set's PyTorch stream, conv / GEMM 2.0 and 2.1; NeuSight's
    per-call conv / GEMM 3.6), so the measured graph table carries the ratios. The median of the others' floors
    instead (the first version) gave the H200 set's SDPAs, in check (e) where no SDPA is trained, a 12.8 us floor where
    they show 28-30: (e) attention 41.9 -> 19.4% MAPE, (a_all_dtypes) attention 44.2 -> 20.7; the main job's held-out
    family split (each family's floor so) 52.6 -> 44.4%."""
    families = {g: v for g, v in floors.items() if g in FAMILIES}  # an op's own host path says nothing of another's
    if not families:  # only a family's own launch paths were timed (FLOOR_OPS): they stand in for their family
        families = {FLOOR_OPS[g]: v for g, v in floors.items() if g in FLOOR_OPS}
    return float(np.median([v * GRAPH_FLOORS_MS[family] / GRAPH_FLOORS_MS[g] for g, v in families.items()]))


def _every_family(floors: dict[str, float], harness: str = "per_call") -> dict[str, float]:
    """``floors`` with every group of :data:`FLOOR_GROUPS`: a family it lacks by the others' launch ratios
    (:func:`unseen_family_floor`), an op of :data:`FLOOR_OPS` by its family's floor (:data:`FLOOR_OP_PRIOR` of
    ``harness``)."""
    out = {f: float(floors[f]) if f in floors else unseen_family_floor(floors, f) for f in FAMILIES}
    for op, fam in FLOOR_OPS.items():
        prior = FLOOR_OP_PRIOR[harness] if op == "linear" else 1.0
        out[op] = float(floors[op]) if op in floors else out[fam] * prior
    return out


def estimate_floors(X: pd.DataFrame, y: np.ndarray, by_harness: bool = True) -> dict[str, dict[str, float]]:
    """Launch floor (ms) per regime (:data:`FLOOR_REGIMES`) and op family (module docstring): ``{regime: {family:
    ms}}``.

    ``by_harness``: each GPU harness (``features.physics.HARNESSES``) from its own rows; a family the harness has no
    floor of (no row, or none floor-bound), from the harness's other families by their measured launch ratios
    (:func:`unseen_family_floor`), whether or not another harness has it; a harness with no row at all (or none that
    a line's intercept was fitted on) takes the whole table of the first harness with rows times their priors' ratio
    (:data:`OVER_PER_CALL`; the CUDA graph: the measured :data:`GRAPH_FLOORS_MS`). Another harness's floor of the
    family times the two harnesses' median ratio (the rule before) carries that harness's own family ratios over:
    NeuSight's per-call conv / GEMM is 3.6 where the H200 set's stream, DeepBench's loop and a CUDA graph show 2.0-2.8.
    Each fitted (harness, family) floor of the pack left out and guessed: the launch ratios miss by 0.20 in log on
    average, the other harness by 0.36 (the stream's conv 21 us: 20.7 against 31); check (e), whose stream has no
    floor-bound convolution, took NeuSight's conv floor (47 us where the H200's 16-bit convs show 21-28): conv 48.5 ->
    29.9% MAPE, all 20.8 -> 19.1. A CPU's floor comes from CPU rows (else the back-to-back GPU floor). The CUDA
    graph's floors, where rows were so timed, are shrunk toward the measured ones by the number of rows of each
    family (:data:`GRAPH_PRIOR_ROWS`). Without ``by_harness`` every regime gets the floors of all rows (one floor per
    family, whatever measured it)."""
    regime, parts = regime_index(X), _floor_parts(X, by_op=True)
    pooled = family_floors(X, y, np.ones(len(X), bool), parts=parts)
    if not set(pooled) & set(FAMILIES):
        pooled["gemm"] = float(max(np.min(y) * 0.5, MIN_FLOOR_MS))
    if not by_harness:
        table = _every_family(pooled)
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
    out = {HARNESSES[i]: _every_family(own[i], HARNESSES[i]) for i in gpu if own[i]}
    source = next(HARNESSES[j] for j in gpu if own[j])  # a harness with no row: the first one with rows, by priors
    for i in (i for i in gpu if not own[i]):
        h = HARNESSES[i]
        if h == "cuda_graph":
            out[h] = dict(GRAPH_FLOORS_MS)
        else:
            out[h] = {f: v * OVER_PER_CALL[h] / OVER_PER_CALL[source] for f, v in out[source].items()}
    graph = HARNESSES.index("cuda_graph")
    if own[graph]:  # graph rows of a family pull its floor from the measured one as they grow in number
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


def _objective(phys, floor, logy, e_max, weight=1.0):
    """Squared log error of ``floor + phys / (e_max sigmoid(f))``, each row times its ``weight``, as an XGBoost
    objective on the margin f."""

    def obj(margin, _dtrain):
        s = 1.0 / (1.0 + np.exp(-margin))
        kernel = phys / (e_max * s)
        pred = floor + kernel
        slope = -(kernel / pred) * (1.0 - s)  # d log(pred) / d margin
        resid = np.log(pred) - logy
        return weight * resid * slope, weight * slope * slope + 1e-6

    return obj


def _correction_objective(kernel, floor, logy):
    """Squared log error of ``floor + kernel * exp(g)`` on the margin g (the few-shot correction)."""

    def obj(g, _dtrain):
        k = kernel * np.exp(g)
        pred = floor + k
        w = k / pred
        resid = np.log(pred) - logy
        return resid * w, w * w + 1e-6

    return obj


class PhysicsModel(CostModel):
    name = "physics"

    def __init__(
        self,
        learner: str = "xgb",
        e_max: float = 4.0,
        e_max_gemm: float = 1.25,
        n_estimators: int = 300,
        learning_rate: float = 0.05,
        max_depth: int = 6,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        min_child_weight: float = 5.0,
        monotone: bool = True,
        hidden: int = 64,
        epochs: int = 30,
        batch_size: int = 2048,
        mlp_learning_rate: float = 3e-3,
        level: float = 0.9,
        interval_folds: bool = True,
        interval_max_rows: int = 40000,
        interval_hardware_folds: int = 8,
        harness_floors: bool = True,
        device_learners: bool = True,
        hardware_corrections: bool = True,
        borrow_corrections: bool = True,
        keep_rows: int = 50000,
        gemm_bytes_over_l2: bool = False,
        group_rows: int = 1500,
        random_state: int = 0,
        n_jobs: int = 1,
    ):
        self.learner = learner
        self.e_max = e_max
        self.e_max_gemm = e_max_gemm
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.min_child_weight = min_child_weight
        self.monotone = monotone
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.mlp_learning_rate = mlp_learning_rate
        self.level = level
        self.interval_folds = interval_folds
        self.interval_max_rows = interval_max_rows
        self.interval_hardware_folds = interval_hardware_folds
        self.harness_floors = harness_floors
        self.device_learners = device_learners
        self.hardware_corrections = hardware_corrections
        self.borrow_corrections = borrow_corrections
        self.keep_rows = keep_rows
        self.gemm_bytes_over_l2 = gemm_bytes_over_l2
        self.group_rows = group_rows
        self.random_state = random_state
        self.n_jobs = n_jobs

    # --- fitting ------------------------------------------------------------------------------------------
    def fit(self, X: pd.DataFrame, y) -> PhysicsModel:
        if self.learner not in LEARNERS:
            raise ValueError(f"PhysicsModel: unknown learner {self.learner!r} ({', '.join(LEARNERS)})")
        if not (self.e_max > 0 and self.e_max_gemm > 0):
            raise ValueError(f"PhysicsModel: e_max and e_max_gemm must be > 0, got {self.e_max}, {self.e_max_gemm}")
        X = physics_frame(X)
        y = check_targets(y, len(X))
        self.physics_version_ = PHYSICS_VERSION  # the time laws it learns against (saved; a load by other laws warns)
        self._fit_core(X, y)
        self.domain_ = Domain(FEATURES, HARDWARE, HARDWARE_IDENTITY, SIZE).fit(X)
        self.corrections_: list[dict] = self._fit_hardware_corrections(X, y) if self.hardware_corrections else []
        self.widening_ = self._calibrate_intervals(X, y) if self.interval_folds else None
        self._keep(X, y)
        return self

    def _keep(self, X: pd.DataFrame, y: np.ndarray) -> None:
        """The rows ``calibrate`` refits on (at most ``keep_rows``, a seeded sample; saved with the model)."""
        self.rows_ = None
        if self.keep_rows <= 0:
            return
        idx = np.arange(len(X))
        if len(X) > self.keep_rows:
            idx = np.sort(np.random.default_rng(self.random_state).choice(len(X), self.keep_rows, replace=False))
        self.rows_ = {"X": X.iloc[idx].reset_index(drop=True), "y": y[idx]}

    def _fit_core(self, X: pd.DataFrame, y: np.ndarray) -> None:
        # masked only where GEMMs were learned: a model that never saw one predicts them as the implicit GEMMs it knows
        # (convolutions), which read the ratio
        self.gemm_l2_masked_ = not self.gemm_bytes_over_l2 and bool((X["family_gemm"].to_numpy(float) > 0).any())
        self.inputs_ = FEATURES
        # a repeated row (calibrate's refit weights a new GPU's rows so) is one kernel to the floors, not several
        row_keys = pd.util.hash_pandas_object(X, index=False).to_numpy() ^ pd.util.hash_array(y)
        once = ~pd.Series(row_keys).duplicated().to_numpy()
        self.floors_ = estimate_floors(X[once].reset_index(drop=True), y[once], self.harness_floors)
        self.margin_shift_ = self.learner == "xgb"
        # CPU rows get an efficiency learner of their own where the rows hold both device classes (module docstring)
        self.cpu_learner_ = None
        cpu = X["hw_is_gpu"].to_numpy(float) <= 0
        if self.device_learners and cpu.any() and not cpu.all():
            self.cpu_learner_ = copy.copy(self)
            self.cpu_learner_._fit_learner(X[cpu].reset_index(drop=True), y[cpu])
            X, y = X[~cpu].reset_index(drop=True), y[~cpu]
        self._fit_learner(X, y)

    def _fit_learner(self, X: pd.DataFrame, y: np.ndarray) -> None:
        """The efficiency learner (and its base margin) on ``X, y`` through the fitted floors."""
        floor = self._floor(X)
        phys = X["physics_ms"].to_numpy(float)
        e_max = self._e_max(X)
        eff0 = np.clip(phys / np.maximum(y - floor, 1e-9) / e_max, 1e-4, 1 - 1e-4)
        shift, weight = self._shift(X), self._group_weights(X)
        self.base_margin_ = _weighted_median(np.log(eff0 / (1 - eff0)) - shift, weight)
        F = self._inputs(X)
        if self.learner == "xgb":
            self._fit_xgb(F, phys, floor, y, e_max, self.base_margin_ + shift, weight)
        else:
            self._fit_mlp(F, phys, floor, y, e_max, weight)

    def _group_weights(self, X: pd.DataFrame) -> np.ndarray:
        """Per row its weight in the shared learner's loss: a (hardware, op family) group of n rows counts as at most
        ``group_rows`` rows (``min(1, group_rows / n)``; 0: every row 1). The efficiency shared by every GPU and
        family should not be the one of the most-sampled group: the main job trains on 3 000 NeuSight rows of each
        GEMM op per GPU against 40 of each elementwise op, and unweighted, a family held out of training came out
        worse the more GEMM rows there were. Measured (``benchmarks/reference_sample.py --sizes 300:300,3000:300``:
        each family held out once, scored on its rows of the 300-row sample; norm / softmax / conv MAPE): 300 GEMM rows
        per op 14.0 / 10.8 / 34.7%, 3 000 unweighted 20.4 / 16.8 / 38.9, weighted at 1 500 17.0 / 13.7 / 36.2; at 600
        14.6 / 11.5 / 36.4, but the GEMMs of a NeuSight GPU held out 22.1 -> 22.8% (mean of 5; the V100 20.4 -> 24.7:
        DeepBench's ten GPUs then weigh as much as NeuSight's five), 22.1 at 1 500. The checks' samples (100 rows per
        NeuSight op) have no group over 1 500. The per-GPU corrections see every row at weight 1."""
        if not self.group_rows:
            return np.ones(len(X))
        group = pd.Series(hardware_keys(X)).astype(str) + "|" + pd.Series(families_of(X)).astype(str)
        return np.minimum(1.0, self.group_rows / group.map(group.value_counts()).to_numpy(float))

    def _inputs(self, X: pd.DataFrame) -> np.ndarray:
        """The learners' input matrix (the columns ``inputs_``: :data:`FEATURES` since the operand layout is one):
        bytes over L2 zeroed on GEMM rows where the model masks it (:data:`L2_INPUT`: ``gemm_bytes_over_l2`` false
        and GEMM rows in training)."""
        names = list(getattr(self, "inputs_", FEATURES))  # an unfitted model: today's inputs
        F = np.array(X[names], dtype=np.float32)  # a copy: the frame's own values stay as they are
        if getattr(self, "gemm_l2_masked_", not self.gemm_bytes_over_l2):
            F[X["family_gemm"].to_numpy(float) > 0, names.index(L2_INPUT)] = 0.0
        return F

    def _e_max(self, X: pd.DataFrame) -> np.ndarray:
        """Per row the efficiency bound: ``e_max_gemm`` for GEMMs and attention on GPUs (the physics counts the
        FLOPs they do: only a clock above the spec's boost clock beats it), ``e_max`` for convolutions (Winograd does
        fewer FLOPs than counted), memory-bound ops (inputs served from L2) and CPUs (their peak is a measured rate,
        which a BLAS kernel can beat: median 1.03, up to 3x on this VM's GEMMs)."""
        gpu = X["hw_is_gpu"].to_numpy(float) > 0
        return np.where(np.isin(families_of(X), BOUNDED_FAMILIES) & gpu, self.e_max_gemm, self.e_max)

    def _shift(self, X: pd.DataFrame) -> np.ndarray:
        """Per row the offset of the learned margin, ``-log(e_max)``: ``e_max sigmoid(f - log e_max)`` is ``exp(f)``
        below the bound whatever the family's bound, so one margin means one efficiency for every family (a family
        held out of training takes its efficiency from the others', not a third or four times it: conv's bound is 4,
        GEMM's 1.25). 0 for a model saved before the offset, and for the MLP learner."""
        return -np.log(self._e_max(X)) if self.margin_shift_ else np.zeros(len(X))

    def _fit_xgb(self, F, phys, floor, y, e_max, base_margin, weight) -> None:
        params = {
            "eta": self.learning_rate,
            "max_depth": self.max_depth,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "min_child_weight": self.min_child_weight,
            "seed": self.random_state,
            "nthread": self.n_jobs,
            "tree_method": "hist",
        }
        if self.monotone:
            params["monotone_constraints"] = "(" + ",".join(str(MONOTONE.get(f, 0)) for f in self.inputs_) + ")"
        obj = _objective(phys, floor, np.log(y), e_max, weight)
        self.booster_ = _train(params, F, base_margin, self.n_estimators, obj)
        self.booster_.feature_names = list(self.inputs_)

    def _fit_mlp(self, F, phys, floor, y, e_max, weight) -> None:
        import torch

        from models.gnn import trainer

        torch.set_num_threads(max(1, self.n_jobs))
        self.mean_, self.std_ = F.mean(axis=0), np.maximum(F.std(axis=0), 1e-6)
        net = _mlp(len(self.inputs_), self.hidden, self.base_margin_)
        data = torch.utils.data.TensorDataset(
            *(
                torch.as_tensor(np.asarray(a, np.float32))
                for a in ((F - self.mean_) / self.std_, phys, floor, np.log(y), e_max, weight)
            )
        )
        batches = torch.utils.data.BatchSampler(  # whole batches by one fancy index each (not row by row)
            torch.utils.data.RandomSampler(data, generator=torch.Generator().manual_seed(self.random_state)),
            self.batch_size,
            drop_last=False,
        )
        loader = torch.utils.data.DataLoader(data, sampler=batches, batch_size=None)
        steps = self.epochs * len(loader)
        trainer(self.epochs, self.random_state).fit(_mlp_module(net, self.mlp_learning_rate, steps), loader)
        self.net_ = net.eval()

    def _fit_hardware_corrections(self, X: pd.DataFrame, y: np.ndarray) -> list[dict]:
        """Each training GPU (spec position) and math mode with :data:`MIN_FIT_CORRECTION_ROWS` rows gets its own
        correction of the shared efficiency, the few-shot correction's form (floor scale, log-bias, boosted trees on
        the dimensionless features; rounds grow with its rows): what a spec sheet cannot say about a GPU that was
        measured (its library's tile choices, its sustained clock) is learned for that GPU only. A GPU outside
        training gets the shared model, which never saw a GPU's identity."""
        keys = mode_keys(X)
        floor, kernel = self._floor(X), X["physics_ms"].to_numpy(float) / self.efficiency(X)
        logy = np.log(y)
        out = []
        for key in np.unique(keys):
            idx = np.flatnonzero(keys == key)
            if len(idx) < MIN_FIT_CORRECTION_ROWS:
                continue
            rounds = min(MAX_FIT_CORRECTION_ROUNDS, self.n_estimators, len(idx) // CORRECTION_ROWS_PER_ROUND)
            Xi = X.iloc[idx].reset_index(drop=True)
            corr = _fit_correction(
                self._inputs(Xi),
                floor[idx],
                kernel[idx],
                logy[idx],
                rounds,
                self.random_state,
                self.inputs_,
                groups=floor_groups_of(Xi),
            )
            corr.update(
                key=str(key),
                hardware="",
                rows=len(idx),
                origin="fit",
                architecture=str(architectures(Xi)[0]),
                position=[float(v) for v in Xi[list(HARDWARE_IDENTITY)].iloc[0]],
                harness=int(np.bincount(regime_index(Xi)).argmax()),
            )
            out.append(corr)
        return out

    # --- prediction ---------------------------------------------------------------------------------------
    def _floor(self, X: pd.DataFrame) -> np.ndarray:
        # a model fitted before an op had a floor of its own: its family's (FLOOR_OPS)
        table = np.array(
            [
                [self.floors_[r].get(g, self.floors_[r][FLOOR_OPS.get(g, g)]) for g in FLOOR_GROUPS]
                for r in FLOOR_REGIMES
            ]
        )
        groups = pd.Categorical(floor_groups_of(X), categories=FLOOR_GROUPS).codes
        return table[regime_index(X), groups].astype(float)

    def _margin(self, X: pd.DataFrame) -> np.ndarray:
        """The efficiency's logit, clipped to +-MARGIN_CLIP (the MLP extrapolates linearly far outside); CPU rows from
        the CPU learner where the model has one."""
        cpu_learner = getattr(self, "cpu_learner_", None)
        cpu = X["hw_is_gpu"].to_numpy(float) <= 0
        if cpu_learner is None or not cpu.any():
            return self._learner_margin(X)
        margin = np.empty(len(X))
        margin[cpu] = cpu_learner._learner_margin(X[cpu])
        if not cpu.all():
            margin[~cpu] = self._learner_margin(X[~cpu])
        return margin

    def _learner_margin(self, X: pd.DataFrame) -> np.ndarray:
        F = self._inputs(X)
        if self.learner == "xgb":
            d = xgb.DMatrix(F, feature_names=list(self.inputs_))
            d.set_base_margin(self.base_margin_ + self._shift(X))
            margin = self.booster_.predict(d, output_margin=True)
        else:
            import torch

            with torch.no_grad():
                margin = self.net_(torch.as_tensor((F - self.mean_) / self.std_, dtype=torch.float32)).numpy()
        return np.clip(margin.astype(float), -MARGIN_CLIP, MARGIN_CLIP)

    def efficiency(self, X: pd.DataFrame) -> np.ndarray:
        """The learned efficiency physics_ms / kernel_ms in (0, e_max] (before any few-shot correction)."""
        return self._efficiency(physics_frame(X))

    def _efficiency(self, X: pd.DataFrame) -> np.ndarray:
        return self._e_max(X) / (1.0 + np.exp(-self._margin(X)))

    def _parts(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(floor_ms, kernel_ms, correction index or -1)`` per row, the per-GPU corrections (fit-time per GPU and
        math mode, few-shot per GPU) applied."""
        floor = self._floor(X)
        kernel = X["physics_ms"].to_numpy(float) / self._efficiency(X)
        which = np.full(len(X), -1)
        if self.corrections_:
            keys = hardware_keys(X)
            modes = mode_keys(X, keys)
            # a measured GPU's own fit-time correction (per math mode); else a measured sibling's (borrowed); then a
            # calibrated GPU's correction on top (calibrate fitted it on that same base)
            for fit in (True, False):
                for i, c in enumerate(self.corrections_):
                    if (c.get("origin") == "fit") != fit:
                        continue
                    m = (modes if fit else keys) == c["key"]
                    if "families" in c:  # a calibration kept for these op families only
                        m &= np.isin(families_of(X), c["families"])
                    if m.any() and c.get("model") is not None:  # calibrated by a refit: that model's answer
                        floor[m], kernel[m], _ = c["model"]._parts(X[m])
                        which[m] = i
                    elif m.any():
                        Xm = X[m]
                        floor[m] = floor[m] * _floor_scale(c, Xm, other=c["floor_scale"])
                        kernel[m] = kernel[m] * np.exp(_correction_margin(c, self._inputs(Xm), self.inputs_))
                        which[m] = i
                if fit and self.borrow_corrections:
                    self._borrow(X, floor, kernel, which, modes)
        if "latency_ms" in X.columns:  # a row-wise kernel is never faster than one row's serial walk
            kernel = np.maximum(kernel, X["latency_ms"].to_numpy(float))
        return floor, kernel, which

    def _borrow(self, X: pd.DataFrame, floor, kernel, which, modes) -> None:
        """Rows of a GPU outside training take the fit-time correction of the nearest measured GPU (spec position)
        of the same architecture and math mode (in place): same SM design and library kernels, another clock,
        bandwidth or SM count, which the physics already moves with. Kept out of ``which`` (not a calibration)."""
        donors = [(i, c) for i, c in enumerate(self.corrections_) if c.get("origin") == "fit" and c.get("architecture")]
        free = which < 0
        if not donors or not free.any():
            return
        arch, H = architectures(X), X[list(HARDWARE_IDENTITY)].to_numpy(float)
        for key in np.unique(modes[free]):
            m = free & (modes == key)
            first = np.flatnonzero(m)[0]
            mode = key.rsplit("|", 1)[1]
            near = [
                (float(np.sum((np.asarray(c["position"]) - H[first]) ** 2)), i)
                for i, c in donors
                if c["architecture"] == arch[first] and c["key"].rsplit("|", 1)[1] == mode
            ]
            if near and min(near)[0] < BORROW_MAX_DISTANCE:
                distance, i = min(near)
                c, w = self.corrections_[i], 1.0 - distance / BORROW_MAX_DISTANCE  # fades out with the distance
                Xm = X[m]
                floor[m] = floor[m] * _floor_scale(c, Xm, other=1.0) ** w  # a floor scale is the donor harness's
                kernel[m] = kernel[m] * np.exp(w * _correction_margin(c, self._inputs(Xm), self.inputs_))

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        X = physics_frame(X)
        floor, kernel, _ = self._parts(X)
        return floor + kernel

    def predict_domain(self, X: pd.DataFrame) -> pd.DataFrame:
        """Per row: ``runtime_ms``, the interval ``lo_ms`` / ``hi_ms`` (level ``self.level``), ``in_domain``,
        ``domain_distance``, ``domain_reason``, ``hardware_seen``, ``calibrated_on`` (few-shot hardware or '')."""
        X = physics_frame(X)
        floor, kernel, which = self._parts(X)
        pred = floor + kernel
        out = self.domain_.frame(X)
        if self.widening_ is not None:
            q = widen(self.widening_, out["domain_distance"], out["hardware_seen"], families_of(X))
        else:
            q = np.full(len(X), np.nan)
        for i, c in enumerate(self.corrections_):  # calibrated hardware: its own out-of-fold half-width
            if c.get("origin") == "fit":
                continue
            m = which == i
            d = out.loc[m, "domain_distance"].to_numpy(float)
            q[m] = widen(self.widening_, d, np.ones(len(d), bool), base=c["q"]) if self.widening_ else c["q"]
        out.insert(0, "runtime_ms", pred)
        out.insert(1, "lo_ms", pred * np.exp(-q))
        out.insert(2, "hi_ms", pred * np.exp(q))
        out["calibrated_on"] = [self.corrections_[i]["hardware"] if i >= 0 else "" for i in which]  # fit-time: ""
        return out

    # --- intervals ----------------------------------------------------------------------------------------
    def _calibrate_intervals(self, X: pd.DataFrame, y: np.ndarray) -> dict | None:
        """Out-of-fold scores and domain distances from sub-models (module ``models.domain``), then the widening.

        Folds: 20% of the shapes held out; each hardware held out (if there are several; with more hardware than
        ``interval_hardware_folds``, several at a time, a harder test); each math mode held out (if there are
        several); the 10% largest shapes (FLOPs + bytes) held out. Sub-models see at most ``interval_max_rows``
        rows."""
        rng = np.random.default_rng(self.random_state)
        shapes, hw = shape_keys(X), hardware_keys(X)
        folds = []
        distinct = np.unique(shapes)
        if len(distinct) >= 5:
            held = rng.choice(distinct, max(1, len(distinct) // 5), replace=False)
            folds.append(np.isin(shapes, held))
        distinct_hw = np.unique(hw)
        if len(distinct_hw) >= 2:  # each hardware held out once, in at most interval_hardware_folds groups
            groups = np.array_split(rng.permutation(distinct_hw), min(len(distinct_hw), self.interval_hardware_folds))
            folds += [np.isin(hw, g) for g in groups]
        modes = X[[f"mode_{m}" for m in MODES]].to_numpy().argmax(axis=1)
        if len(np.unique(modes)) >= 2:  # a math mode never seen (e.g. tensor cores after fp32-only rows)
            folds += [modes == m for m in np.unique(modes)]
        work = X["flops"].to_numpy(float) + X["bytes"].to_numpy(float)
        folds.append(work > np.quantile(work, 0.9))
        # sub-models without the per-GPU corrections (each would cost as much again): the widening is sized on the
        # shared model, wider than a measured GPU's corrected predictions need
        params = {**self.get_params(), "interval_folds": False, "hardware_corrections": False, "keep_rows": 0}
        jobs = []
        for test in folds:
            train = np.flatnonzero(~test)
            if len(train) < 20 or test.sum() == 0:
                continue
            if len(train) > self.interval_max_rows:
                train = np.sort(rng.choice(train, self.interval_max_rows, replace=False))
            jobs.append((train, np.flatnonzero(test)))
        if not jobs:
            return None
        # the folds in n_jobs processes (one XGBoost thread each): their fits are most of a fit's time
        workers = min(joblib.effective_n_jobs(self.n_jobs), len(jobs))
        params["n_jobs"] = 1 if workers > 1 else self.n_jobs
        out = joblib.Parallel(n_jobs=workers)(
            joblib.delayed(_fold_scores)(params, X.iloc[tr].reset_index(drop=True), y[tr], X.iloc[te], y[te])
            for tr, te in jobs
        )
        scores, dist, seen, family = (np.concatenate(part) for part in zip(*out, strict=True))
        return calibrate_widening(scores, dist, seen, self.level, groups=family)

    # --- few-shot calibration -----------------------------------------------------------------------------
    def calibrate(self, X_new: pd.DataFrame, y_new, hardware: str | None = None, method: str = "auto") -> PhysicsModel:
        """A new model that also knows one new GPU from a few of its measured rows (``self`` is unchanged).

        ``method`` ``auto`` keeps whichever of ``none`` (the model's own answer), ``correction`` and ``refit`` does
        best out of fold on the new rows, a more complex one only where it beats a simpler one by more than a
        standard error of their paired percentage errors (:func:`_beats`; on random rows of the H100, every choice
        of the refit or a correction by the smallest gain did worse on the other rows than the model's own answer);
        ``refit`` or ``correction`` asks for one (``method`` in the record the new model appends to
        ``corrections_``):

        * ``refit`` (a model that kept its training rows, ``keep_rows``, and :data:`MIN_REFIT_ROWS` new rows or more):
          a model fitted on the kept rows plus the new ones, those :data:`NEW_ROW_REPEATS` times, answers for the new
          GPU, so that GPU takes part in everything a fit learns (its harness's floors, the shared efficiency, its own
          per-mode correction from :data:`MIN_FIT_CORRECTION_ROWS` rows). A family the model never saw (the H200's
          attention in check f) is learned this way, not by correcting a guess. Out of fold: :data:`REFIT_FOLDS`
          refits, each without a fold of the new rows. The calibrated model keeps the new rows too (a later
          calibration of another GPU refits with them).
        * ``correction`` (fewer rows, or a model saved without its rows): a scale of the launch floors and a log-bias
          of the kernel time (grid search), then a boosted correction g(x) of log kernel time on the dimensionless
          features (depth-3 trees; the number of rounds in :data:`CORRECTION_ROUNDS` chosen by 5-fold
          cross-validation on the new rows, leave-one-out under 20 rows; with ``auto``, none at all when none beats
          the model's own answer out of fold). Rows of that hardware (same spec position) are then predicted as
          ``floor_scale * floor + kernel * exp(g(x))`` (floor and kernel: the model's answer without that GPU's own
          corrections, i.e. shared or borrowed from a measured sibling).

        Other hardware is predicted exactly as before. The new GPU's interval comes from the out-of-fold errors.
        Raises ValueError (one line) for too few or bad rows, or a refit asked of a model that cannot refit.
        """
        if not hasattr(self, "floors_"):
            raise ValueError("calibrate: fit the model first")
        if method not in CALIBRATION_METHODS:
            raise ValueError(f"calibrate: method must be one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
        try:
            X_new = physics_frame(X_new)
        except TypeError as exc:
            raise ValueError(f"calibrate: {exc}") from None
        y_new = np.asarray(y_new, float)
        if y_new.shape != (len(X_new),):
            raise ValueError(f"calibrate: y has shape {y_new.shape}, expected ({len(X_new)},)")
        if len(X_new) < MIN_CALIBRATION_ROWS:
            raise ValueError(
                f"calibrate: needs at least {MIN_CALIBRATION_ROWS} measured rows of the new hardware, got {len(X_new)}"
            )
        if not np.all(np.isfinite(y_new)) or np.any(y_new <= 0):
            raise ValueError("calibrate: measured runtimes must be finite and > 0")
        keys = np.unique(hardware_keys(X_new))
        if len(keys) != 1:
            raise ValueError(f"calibrate: rows must come from one hardware, got {len(keys)} different spec positions")
        key = str(keys[0])
        new = copy.deepcopy(self)
        # the calibrated correction replaces what the model had for that GPU (its fit-time ones included) and starts
        # from what the model says without them: the shared model, or a measured sibling's borrowed correction
        new.corrections_ = [c for c in self.corrections_ if c["key"].split("|")[0] != key]
        base_floor, base_kernel, _ = new._parts(X_new)
        logy = np.log(y_new)
        can_refit = self.rows_ is not None and len(X_new) >= MIN_REFIT_ROWS
        if method == "refit" and not can_refit:
            raise ValueError(
                f"calibrate: a refit needs the model's training rows (keep_rows) and {MIN_REFIT_ROWS} new rows or more"
            )
        rounds, oof = -1, np.log(base_floor + base_kernel)
        if method != "refit":
            rounds, oof = self._choose_rounds(X_new, base_floor, base_kernel, logy, none=method == "auto")
        oof_refit = None
        if can_refit and method != "correction":
            oof_refit = self._refit_out_of_fold(X_new, y_new)
            X_all, y_all = self._with_new_rows(X_new, y_new)
            new.rows_ = {"X": X_all, "y": y_all}  # a later calibration's refit knows this GPU too
        if oof_refit is not None and (method == "refit" or _beats(oof_refit, oof, logy)):
            oof, sub = oof_refit, self._refit(X_all, y_all)
            corr = {"floor_scale": 1.0, "bias": 0.0, "rounds": 0, "booster": None, "method": "refit", "model": sub}
        else:  # too few rows or no kept rows for a refit, or the correction (or none) is better out of fold
            if rounds < 0:  # the model's own answer is better out of fold than any correction of it from these rows
                corr = {"floor_scale": 1.0, "bias": 0.0, "rounds": 0, "booster": None}
            else:
                corr = _fit_correction(
                    self._inputs(X_new),
                    base_floor,
                    base_kernel,
                    logy,
                    rounds,
                    self.random_state,
                    self.inputs_,
                    bounded=True,
                )
            corr["method"] = "correction" if rounds >= 0 else "none"
        base_log = np.log(base_floor + base_kernel)
        # never worse than the model's own answer: the new GPU's rows of an op family keep the correction only where
        # it beats that answer out of fold on them; families of fewer than MIN_CALIBRATION_ROWS rows are judged
        # together (and with all the rows where even together they are fewer)
        families = families_of(X_new)
        names, counts = np.unique(families, return_counts=True)
        small = np.isin(families, names[counts < MIN_CALIBRATION_ROWS])
        groups = [families == f for f in names[counts >= MIN_CALIBRATION_ROWS]]
        groups.append(small if small.sum() >= MIN_CALIBRATION_ROWS else np.ones(len(families), bool) & small)
        kept = []
        for g in groups:
            judged = g if g.sum() >= MIN_CALIBRATION_ROWS else np.ones(len(families), bool)
            if g.any() and _mape(oof[judged], logy[judged]) < _mape(base_log[judged], logy[judged]):
                kept += [str(f) for f in np.unique(families[g])]
        if corr["method"] != "none":
            corr["families"] = kept
            oof = np.where(np.isin(families, kept), oof, base_log)
        new.calibration_oof_ = pd.DataFrame({"family": families, "before": base_log, "after": oof, "measured": logy})
        corr.update(
            key=key,
            hardware=hardware or key,
            rows=len(X_new),
            q=conformal(np.abs(oof - logy), self.level),
            # honest numbers on the new rows: the model before, and the kept way out of fold
            mape_before=_mape(base_log, logy),
            mape_out_of_fold=_mape(oof, logy),
        )
        if oof_refit is not None:  # what the refit would have given, kept or not
            corr["mape_refit_out_of_fold"] = _mape(oof_refit, logy)
        new.corrections_.append(corr)
        new.domain_ = copy.deepcopy(self.domain_).add_hardware(X_new)
        return new

    def _with_new_rows(self, X_new: pd.DataFrame, y_new: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
        """The kept rows plus the new GPU's, those :data:`NEW_ROW_REPEATS` times."""
        X = pd.concat([self.rows_["X"], *[X_new[self.rows_["X"].columns]] * NEW_ROW_REPEATS], ignore_index=True)
        return X, np.concatenate([self.rows_["y"], *[y_new] * NEW_ROW_REPEATS])

    def _refit(self, X: pd.DataFrame, y: np.ndarray) -> PhysicsModel:
        """A model of the same parameters fitted on ``X, y`` (no interval folds: the parent's widening serves; no rows
        kept: the parent keeps them)."""
        return PhysicsModel(**{**self.get_params(), "interval_folds": False, "keep_rows": 0}).fit(X, y)

    def _refit_out_of_fold(self, X_new: pd.DataFrame, y_new: np.ndarray) -> np.ndarray:
        """log predictions of the new rows by refits without them (:data:`REFIT_FOLDS` folds)."""
        folds = np.random.default_rng(self.random_state).permutation(len(X_new)) % REFIT_FOLDS
        oof = np.zeros(len(X_new))
        for k in range(REFIT_FOLDS):
            tr, te = folds != k, folds == k
            sub = self._refit(*self._with_new_rows(X_new[tr].reset_index(drop=True), y_new[tr]))
            oof[te] = np.log(sub.predict(X_new[te].reset_index(drop=True)))
        return oof

    def _choose_rounds(self, X, floor, kernel, logy, none: bool = True) -> tuple[int, np.ndarray]:
        """The correction's rounds (:data:`CORRECTION_ROUNDS`) and its out-of-fold log predictions; with ``none``,
        -1 (no correction) unless one beats the model's own answer (:func:`_beats`)."""
        n, F = len(X), self._inputs(X)
        n_folds = n if n < 20 else 5  # few rows: leave one out
        folds = np.random.default_rng(self.random_state).permutation(n) % n_folds
        best, best_oof = -1, np.log(floor + kernel)  # no correction at all
        for rounds in CORRECTION_ROUNDS:
            if rounds and n < 20:  # too few rows for trees: the floor scale and the bias only
                continue
            oof = np.zeros(n)
            for k in np.unique(folds):
                tr, te = folds != k, folds == k
                c = _fit_correction(
                    F[tr], floor[tr], kernel[tr], logy[tr], rounds, self.random_state, self.inputs_, bounded=True
                )
                g = _correction_margin(c, F[te], self.inputs_)
                oof[te] = np.log(floor[te] * c["floor_scale"] + kernel[te] * np.exp(g))
            if (best < 0 and not none) or _beats(oof, best_oof, logy):
                best, best_oof = rounds, oof
        return best, best_oof

    # --- persistence --------------------------------------------------------------------------------------
    def _save_payload(self, path: Path) -> None:
        state = {
            # the laws it was fitted against (a calibrated old model keeps the old version)
            "physics_version": getattr(self, "physics_version_", PHYSICS_VERSION),
            "floors": self.floors_,
            "margin_shift": self.margin_shift_,
            "gemm_bytes_over_l2": self.gemm_bytes_over_l2,
            "gemm_l2_masked": self.gemm_l2_masked_,
            "inputs": list(self.inputs_),
            "bounds": {"e_max": self.e_max, "e_max_gemm": self.e_max_gemm},
            "domain": self.domain_.to_dict(),
            "widening": self.widening_,
            "corrections": [{k: v for k, v in c.items() if k not in ("booster", "model")} for c in self.corrections_],
        }
        for i, c in enumerate(self.corrections_):
            if c.get("booster") is not None:
                c["booster"].save_model(path / f"correction_{i}.ubj")
            if c.get("model") is not None:  # a refit calibration's model, saved as a model of its own
                c["model"].save(path / f"calibrated_{i}")
        self._save_learner(path, "efficiency", state)
        if self.cpu_learner_ is not None:
            state["cpu_learner"] = {}
            self.cpu_learner_._save_learner(path, "efficiency_cpu", state["cpu_learner"])
        if self.rows_ is not None:  # calibrate's refit reads them (zstd parquet: ~50 bytes a row)
            frame = self.rows_["X"].assign(**{ROWS_Y: self.rows_["y"]})
            frame.to_parquet(path / "training_rows.parquet", compression="zstd", index=False)
        (path / "physics.json").write_text(json.dumps(state, indent=1))

    def _load_payload(self, path: Path) -> None:
        state = json.loads((path / "physics.json").read_text())
        self.physics_version_ = int(state.get("physics_version", 0))
        if self.physics_version_ != PHYSICS_VERSION:  # its efficiencies were learned against other times
            warnings.warn(
                f"model {path} was fitted with physics laws v{self.physics_version_}, this code has "
                f"v{PHYSICS_VERSION} (features.physics.PHYSICS_VERSION): its predictions moved; refit it (make run)",
                stacklevel=2,
            )
        floors = state["floors"]
        if not all(isinstance(v, dict) for v in floors.values()):  # saved before floors were per regime
            floors = {r: dict(floors) for r in FLOOR_REGIMES}
        # saved before the library loop was a harness of its own: it had the back-to-back floor; before the CUDA graph
        # was one: the measured graph floors, as a model fitted without graph rows has them
        self.floors_ = {
            r: dict(floors[r] if r in floors else GRAPH_FLOORS_MS if r == "cuda_graph" else floors["back_to_back"])
            for r in FLOOR_REGIMES
        }
        self.margin_shift_ = state.get("margin_shift", False)  # saved before the offset: margins without it
        # saved before GEMM rows stopped reading bytes over L2: they read it, as the model was trained
        self.gemm_bytes_over_l2 = state.get("gemm_bytes_over_l2", True)
        self.gemm_l2_masked_ = state.get("gemm_l2_masked", False)
        self.inputs_ = tuple(state.get("inputs", FEATURES_BEFORE_LAYOUT))  # saved before the layout: without it
        if "bounds" not in state:  # saved before the per-family bound: one bound for every family, as it was trained
            self.e_max_gemm = self.e_max
        self.domain_ = Domain.from_dict(state["domain"])
        self.widening_ = state["widening"]
        self.rows_ = None  # saved before the model kept its rows: calibrate corrects, it cannot refit
        if (path / "training_rows.parquet").exists():
            frame = pd.read_parquet(path / "training_rows.parquet")
            rows = frame.drop(columns=[ROWS_Y])
            if "transpose_a" not in rows.columns:  # kept before the layout was a column: linear's weight is [n, k]
                rows = rows.assign(transpose_a=0.0, transpose_b=rows["op_linear"].to_numpy(float))
            # kept before stop 36: the learner columns of today read off the one-hots
            rows = rows.assign(**{k: v for k, v in derived_inputs(rows).items() if k not in rows.columns})
            self.rows_ = {"X": rows, "y": frame[ROWS_Y].to_numpy(float)}
        self.corrections_ = []
        for i, c in enumerate(state["corrections"]):
            file = path / f"correction_{i}.ubj"
            c["booster"] = xgb.Booster(model_file=str(file)) if file.exists() else None
            if (path / f"calibrated_{i}").exists():
                c["model"] = PhysicsModel.load(path / f"calibrated_{i}")
            self.corrections_.append(c)
        self._load_learner(path, "efficiency", state)
        self.cpu_learner_ = None  # saved before the CPU learner, or fitted on one device class: one learner
        if "cpu_learner" in state:
            self.cpu_learner_ = copy.copy(self)
            self.cpu_learner_._load_learner(path, "efficiency_cpu", state["cpu_learner"])

    def _save_learner(self, path: Path, name: str, state: dict) -> None:
        """The efficiency learner into ``path / name.*``, its base margin (and MLP scaling) into ``state``."""
        state["base_margin"] = self.base_margin_
        if self.learner == "xgb":
            self.booster_.save_model(path / f"{name}.ubj")
        else:
            import torch

            torch.save(self.net_.state_dict(), path / f"{name}.pt")
            state["mean"], state["std"] = self.mean_.tolist(), self.std_.tolist()

    def _load_learner(self, path: Path, name: str, state: dict) -> None:
        self.base_margin_ = state["base_margin"]
        if self.learner == "xgb":
            self.booster_ = xgb.Booster(model_file=str(path / f"{name}.ubj"))
        else:
            import torch

            self.mean_, self.std_ = np.asarray(state["mean"], np.float32), np.asarray(state["std"], np.float32)
            self.net_ = _mlp(len(self.inputs_), self.hidden, self.base_margin_)
            self.net_.load_state_dict(torch.load(path / f"{name}.pt"))
            self.net_.eval()


def _fold_scores(params: dict, X_train, y_train, X_test, y_test) -> tuple[np.ndarray, ...]:
    """One interval fold: a sub-model fitted on the fold's training rows, its absolute log errors on the held-out
    rows and their domain distances, hardware-seen flags and op families."""
    X_test = X_test.reset_index(drop=True)
    sub = PhysicsModel(**params).fit(X_train, y_train)
    dom = sub.domain_.frame(X_test)
    score = np.abs(np.log(sub.predict(X_test)) - np.log(y_test))
    return score, dom["domain_distance"].to_numpy(), dom["hardware_seen"].to_numpy(), families_of(X_test)


def _weighted_median(values: np.ndarray, weight: np.ndarray) -> float:
    """The value where the cumulative weight of the sorted values first reaches half the total (with equal weights,
    the lower median)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weight[order])
    return float(values[order][np.searchsorted(cum, 0.5 * cum[-1])])


# --- few-shot correction ------------------------------------------------------------------------------------
def _ape(log_pred: np.ndarray, logy: np.ndarray) -> np.ndarray:
    """Absolute percentage error (a fraction) per row of log predictions."""
    return np.abs(np.expm1(log_pred - logy))


def _mape(log_pred: np.ndarray, logy: np.ndarray) -> float:
    return float(np.mean(_ape(log_pred, logy)) * 100)


def _beats(log_pred: np.ndarray, incumbent: np.ndarray, logy: np.ndarray) -> bool:
    """Whether out-of-fold predictions beat the incumbent's on the same rows by more than one standard error of their
    paired absolute percentage errors (a one-standard-error rule: calibrate keeps the simpler answer unless the rows
    say otherwise). Judged in percent: the fits minimise squared log error, and chosen by it a correction that
    lowered it on the H100's rows raised their MAPE (k = 100: log MSE 0.187 -> 0.165, MAPE 27.4 -> 32.2%). Without
    the standard error, the smallest gain chose: with 10 H100 rows a floor scale of 2 that was 28.8 against 30.2%
    on them out of fold and 38.8 against 27.4% on the other 2 150."""
    gain = _ape(incumbent, logy) - _ape(log_pred, logy)
    return bool(gain.mean() > gain.std(ddof=1) / np.sqrt(len(gain)))


def _fit_correction(
    F: np.ndarray, floor, kernel, logy, rounds: int, seed: int, names=FEATURES, bounded: bool = False, groups=None
) -> dict:
    """Floor scale and kernel log-bias by grid search, then ``rounds`` boosted trees of the log-correction on the
    learner inputs ``F`` (``PhysicsModel._inputs``, columns ``names``).

    ``bounded`` (a new GPU's correction, :meth:`PhysicsModel.calibrate`): the scaled floor stays under every row's
    measured runtime. The trees correct the kernel time only, so a launch floor above a measured call stays wrong, and
    a new GPU's floors come from other GPUs' hosts. Measured (``benchmarks/gemm_calibration.py``, the A100 held out,
    its correction from 100 GEMM rows): the floor of its NeuSight bmm calls (36.6 us shared, its fastest call 30.8)
    was scaled 1.12 without the bound; with it, those rows under 0.05 ms went 29.6 -> 12.5% MAPE. Not for a measured
    GPU's own correction: one scale serves every family's floor, so the family of the lowest runtime / floor binds the
    others, and the kernel time then takes up what their floors cannot; learned on small shapes, it went on to the
    large ones (check (d) at seed 0 40.8 -> 45.3%, its convolutions 61 -> 78).

    ``groups`` (a measured GPU's own correction, :data:`FLOOR_GROUPS` per row): after the GPU's scale and bias, each
    group of :data:`MIN_GROUP_SCALE_ROWS` rows or more gets a floor scale of its own (grid search on its rows, the bias
    fixed), so the trees see each family's time less its own floor: the launch cost of a family's host path is not the
    same multiple of the shared floor on every host. Applied to rows of the harness the GPU was measured with (another
    harness's floors take the GPU's one scale). Measured: check (d) at seed 0 40.8 -> 38.5% (A100 19.0 -> 13.9, H200
    38.6 -> 33.8, V100 33.4 -> 35.2); the H200's device rows of stop 38 (main job's fit): NeuSight workloads 26.5 ->
    25.7, a shape pool 24.3 -> 23.3, TF32 convs 41.1 -> 38.8, the probe set 19.6 -> 20.3. A new GPU's few rows keep one
    scale: per group, a linear scale of 2.24 came from 8 rows that were all large (A100 at k = 30, linears 41 -> 65%).
    """
    grid, biases = np.geomspace(0.25, 4.0, 25), np.linspace(-2.0, 2.0, 81)
    scales = grid
    if bounded:  # docstring; the grid's bottom where even that is over
        cap = np.min(np.exp(logy) / floor)
        scales = grid[grid <= cap] if (grid <= cap).any() else grid[:1]
    scaled_kernel = kernel[None, :] * np.exp(biases)[:, None]  # [bias, row]
    loss = np.array([np.sum((np.log(s * floor[None, :] + scaled_kernel) - logy) ** 2, axis=1) for s in scales])
    i, j = np.unravel_index(np.argmin(loss), loss.shape)  # the first of equal losses, scale-major as a loop finds it
    scale, bias = float(scales[i]), float(biases[j])
    corr = {"floor_scale": scale, "bias": bias, "rounds": int(rounds), "booster": None}
    row_scale = np.full(len(logy), scale)
    if groups is not None:  # docstring: each floor group's own scale, the kernel's bias fixed
        corr["floor_scales"] = {}
        for g in np.unique(groups):
            rows = groups == g
            if rows.sum() < MIN_GROUP_SCALE_ROWS:
                continue
            err = [np.sum((np.log(c * floor[rows] + kernel[rows] * np.exp(bias)) - logy[rows]) ** 2) for c in grid]
            corr["floor_scales"][str(g)] = float(grid[int(np.argmin(err))])
            row_scale[rows] = corr["floor_scales"][str(g)]
    if rounds:
        params = {"eta": 0.1, "max_depth": 3, "min_child_weight": 2, "reg_lambda": 1.0, "seed": seed, "nthread": 1}
        obj = _correction_objective(kernel, row_scale * floor, logy)
        corr["booster"] = _train(params, F, np.full(len(F), bias), rounds, obj)
        corr["booster"].feature_names = list(names)
    return corr


def _train(params: dict, F: np.ndarray, base_margin: np.ndarray, rounds: int, obj) -> xgb.Booster:
    """``xgb.train`` with a custom objective on a matrix without feature names (the caller names the booster after):
    each round predicts on the training matrix, and with names XGBoost checks them every round, which cost more than
    the trees on the main job's small folds (65 of its 150 s in debug=tiny)."""
    d = xgb.DMatrix(F)
    d.set_base_margin(base_margin)
    return xgb.train(params, d, rounds, obj=obj)


def _group_scale(corr: dict, groups: np.ndarray) -> np.ndarray:
    """Per floor group a correction's scale of the launch floor: the group's where the correction has one (a measured
    GPU's own, :func:`_fit_correction`'s ``groups``), else the GPU's."""
    own = corr.get("floor_scales") or {}
    return np.array([own.get(str(g), corr["floor_scale"]) for g in groups], float)


def _floor_scale(corr: dict, X: pd.DataFrame, other: float) -> np.ndarray:
    """Per row of ``X`` a correction's floor scale on rows of the harness its GPU was measured with
    (:func:`_group_scale`), ``other`` on rows of another harness (and on every row of a calibrated GPU's correction,
    which records no harness)."""
    same = regime_index(X) == corr.get("harness", -1)
    return np.where(same, _group_scale(corr, floor_groups_of(X)), other)


def _correction_margin(corr: dict, F: np.ndarray, names=FEATURES) -> np.ndarray:
    if corr.get("booster") is None:
        return np.full(len(F), corr["bias"])
    d = xgb.DMatrix(F, feature_names=list(names))
    d.set_base_margin(np.full(len(F), corr["bias"]))
    return corr["booster"].predict(d, output_margin=True).astype(float)


# --- the MLP learner ------------------------------------------------------------------------------------------
def _mlp(n_in: int, hidden: int, base_margin: float):
    import torch

    net = torch.nn.Sequential(
        torch.nn.Linear(n_in, hidden),
        torch.nn.SiLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.SiLU(),
        torch.nn.Linear(hidden, 1),
        torch.nn.Flatten(0),
    )
    with torch.no_grad():
        net[4].bias.fill_(base_margin)
    return net


def _mlp_module(net, lr: float, steps: int):
    import lightning as L
    import torch

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net

        def training_step(self, batch, _idx):
            F, phys, floor, logy, e_max, weight = batch
            eff = e_max * torch.sigmoid(self.net(F))
            loss = torch.sum(weight * (torch.log(floor + phys / eff) - logy) ** 2) / torch.sum(weight)
            self.log("train_loss", loss, prog_bar=False)
            return loss

        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=lr)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return Module()
