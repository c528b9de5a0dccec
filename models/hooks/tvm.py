"""A registered cost model behind TVM's meta-schedule: a ``PyCostModel`` that TVM updates with measured candidates
and asks to score new ones.

    from models.hooks.tvm import CostModelTVM

    cost_model = CostModelTVM("models:/costmodel-runtime@champion", hardware="H100-SXM")
    ms.tune_tir(mod, target, work_dir, max_trials_global=64, cost_model=cost_model)

TVM calls ``update(context, candidates, results)`` with the candidates it measured and ``predict(context,
candidates)`` for a normalised score per candidate (higher = faster). A candidate is a schedule of the task's
workload; what tells two candidates apart is the trace's sampling decisions (tile factors of each
``SamplePerfectTile``, the index of each ``SampleCategorical``), the candidate's features here (log2 of the tile
factors, the indices).

The registered model gives the scale: the runtime a tuned library reaches for the task's workload on ``hardware``
(:meth:`CostModelTVM.estimate_ms`; a GEMM read from the PrimFunc's buffers, or ``workload=fn(mod)`` for any other).
The adapter learns ``log(measured / estimate)`` from the decisions, pooled over every task whose traces share one
structure (the same sampling instructions: matmuls of any size), with an XGBoost regressor on log runtime
(``models.tuning.default_model_factory``) refitted when measurements arrive. So tasks of different sizes teach one
learner, and a new task is ranked from its first call by what the others taught. The score is ``estimate /
predicted``: 1 where a schedule is predicted to reach the library's time. Before any measurement of a structure
every candidate of it scores 1 (the cost model knows the workload, not the schedule); a workload the registered
model cannot cost has no scale (estimate 1 s). ``save`` / ``load`` keep the measurements (JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from models.hooks.common import RuntimeCache, load, registry_of

DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def decisions(candidate) -> tuple[str, list[float]]:
    """``(structure, features)`` of a candidate: the trace's sampling instructions in order (its structure) and their
    decisions (log2 of each tile factor, each categorical index)."""
    kinds, values = [], []
    for inst, decision in candidate.sch.trace.decisions.items():
        name = str(inst.kind.name)
        kinds.append(name)
        if name == "SamplePerfectTile":
            factors = [int(x) for x in decision]
            kinds[-1] += f"[{len(factors)}]"
            values.extend(math.log2(max(f, 1)) for f in factors)
        else:
            try:
                values.append(float(int(decision)))
            except (TypeError, ValueError):
                values.append(0.0)
    return "|".join(kinds), values


def gemm_of(mod) -> dict | None:
    """A GEMM ``{"op": "matmul" | "bmm", m, n, k[, batch], dtype}`` from a PrimFunc of three buffers shaped like one
    (``[m, k] x [k, n] -> [m, n]``, or with a leading batch); None otherwise."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    try:
        infos = ArgInfo.from_prim_func(mod["main"])
        shapes = [[int(d) for d in info.shape] for info in infos]
        dtype = str(infos[0].dtype)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None
    if len(shapes) != 3 or dtype not in DTYPES:
        return None
    a, b, c = shapes
    if len(a) == 2 and len(b) == 2 and len(c) == 2 and a[1] == b[0] and c == [a[0], b[1]]:
        return {"op": "matmul", "m": a[0], "n": b[1], "k": a[1], "dtype": DTYPES[dtype]}
    if len(a) == 3 and len(b) == 3 and len(c) == 3 and a[0] == b[0] == c[0] and a[2] == b[1] and c[1:] == [a[1], b[2]]:
        return {"op": "bmm", "batch": a[0], "m": a[1], "n": b[2], "k": a[2], "dtype": DTYPES[dtype]}
    return None


@derived_object
class CostModelTVM(PyCostModel):
    """The meta-schedule cost model (module docstring)."""

    def __init__(
        self,
        model,
        hardware: str,
        *,
        tracking_uri: str | None = None,
        hardware_specs=None,
        workload: Callable | None = None,
        min_fit: int = 4,
        seed: int = 0,
    ):
        self.model = load(model, tracking_uri, hardware_specs)
        self.hardware = registry_of(self.model).get(hardware).id
        self.workload = workload or gemm_of
        self.runtime = RuntimeCache(self.model)
        self.min_fit, self.seed = int(min_fit), int(seed)
        self.data: dict[str, dict[str, list]] = {}  # structure -> {"x": features, "y": log(measured / estimate)}
        self.fitted: dict[str, object] = {}
        self.calls = {"update": 0, "predict": 0}

    # ------------------------------------------------------------------ the scale
    def estimate_ms(self, context) -> float | None:
        """The registered model's runtime (ms) of the task's workload on ``hardware``; None where it has none."""
        row = self.workload(context.mod)
        if row is None:
            return None
        try:
            return self.runtime({**row, "hardware": self.hardware})
        except ValueError:  # a workload the model refuses (its one line): no scale
            return None

    def _scale_s(self, context) -> float:
        ms = self.estimate_ms(context)
        return 1.0 if ms is None or not ms > 0 else ms / 1e3

    # ------------------------------------------------------------------ PyCostModel
    def update(self, context, candidates, results) -> None:
        self.calls["update"] += 1
        scale = self._scale_s(context)
        for cand, result in zip(candidates, results):
            secs = [float(s) for s in (result.run_secs or [])]
            if not secs or result.error_msg:
                continue  # a failed build or run teaches nothing about speed
            structure, x = decisions(cand)
            d = self.data.setdefault(structure, {"x": [], "y": []})
            d["x"].append(x)
            d["y"].append(math.log(float(np.median(secs)) / scale))
            self.fitted.pop(structure, None)

    def predict(self, context, candidates) -> np.ndarray:
        self.calls["predict"] += 1
        out = np.ones(len(candidates))
        groups: dict[str, list[int]] = {}
        feats = []
        for i, cand in enumerate(candidates):
            structure, x = decisions(cand)
            groups.setdefault(structure, []).append(i)
            feats.append(x)
        for structure, idx in groups.items():
            learner = self._learner(structure)
            if learner is None:
                continue
            ratio = np.asarray(learner.predict(_frame([feats[i] for i in idx])), float)  # predicted / estimate
            out[idx] = 1.0 / np.maximum(ratio, 1e-12)
        return out.astype("float64")

    def _learner(self, structure: str):
        if structure in self.fitted:
            return self.fitted[structure]
        d = self.data.get(structure)
        if d is None or len(d["y"]) < self.min_fit:
            return None
        from models.tuning import default_model_factory

        # the learner fits a positive target in log space and predicts it back: the ratio measured / estimate
        model = default_model_factory(self.seed).fit(_frame(d["x"]), np.exp(np.asarray(d["y"], float)))
        self.fitted[structure] = model
        return model

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"hardware": self.hardware, "data": self.data}, f)

    def load(self, path: str) -> None:
        with open(path) as f:
            doc = json.load(f)
        self.data = {k: {"x": v["x"], "y": v["y"]} for k, v in doc["data"].items()}
        self.fitted = {}


def _frame(rows: list[list[float]]):
    import pandas as pd

    width = max((len(r) for r in rows), default=0)
    return pd.DataFrame([r + [0.0] * (width - len(r)) for r in rows], columns=[f"d{j}" for j in range(width)])
