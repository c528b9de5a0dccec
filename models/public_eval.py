"""Evaluation protocols on the public datasets (NeuSight, Kernel Tuner, wa-hls4ml), independent of Hydra and MLflow.

``pipelines/evaluate.py`` loads the rows, builds the model factories (``pipelines.experiment.build``) and calls one
protocol; each protocol fits fresh models (``models[name](**overrides)`` returns an unfitted
:class:`~models.base.CostModel`) on its splits and returns one record per (split, model) (:func:`record`: its
metrics per scope, the rows it scored with their truth and predictions), which the entry point logs under the
one metric-key scheme ``<split>/<scope>/<metric>`` (a multi-target record names its targets' metrics
``<target>.<metric>``).

* **neusight**: features = workload shape + hardware spec sheet only (``features.tabular``; never the ``meta``
  columns observed by running). Splits: leave-one-GPU-out over the measured GPUs (train on 4, test on the 5th,
  rotate) and held-out shapes (grouped by ``shape_id``). Metrics: MAPE, MedAPE, SMAPE, R^2(log10), Kendall tau
  within each (op, GPU) group, for all rows, per GPU and per op family (gemm / conv / norm / softmax /
  elementwise); leave-one-GPU-out adds the error left after an oracle scale factor per GPU and per (op, GPU)
  (``oracle_*_scale_*``, a diagnostic read from the test labels, never a score) and the honest counterpart, a
  factor per GPU fitted on 10 or 100 of its rows and scored on the others (``few_shot_*``). Then a model fitted on
  every measured GPU predicts the spec-only GPUs
  (``ds.spec_only``): written to ``<out_dir>/public_eval/neusight_spec_only_predictions.csv``; no labels exist,
  so no error is reported.
* **kerneltuner**: features = the tunables of ``config`` (JSON, expanded to numeric columns) + the GPU's spec
  features. Splits: ``per_gpu``: for each GPU a model on 80% of its configs, scored on the other 20%;
  ``transfer10_with_others`` / ``transfer10_alone``: a target GPU gives 10% of its configs; train on them plus
  every config of the other GPUs running the same kernel, or on the 10% alone; test on the other 90%.
  Ranking metrics per GPU: Kendall tau, top-k slowdown (k = 1, 5, 10), with MAPE. Noise floor from the 32
  repeats: median ``meta.runtime_cv`` and ``runtime_iqr_ms / runtime_ms`` per GPU.
* **wa_hls4ml**: ONE multi-target model per (split, model) for lut, ff, dsp, bram_18k, latency_cycles
  (``models.tree``: per-target transform, ``ds.transforms``: log for positive targets, log1p for zero-heavy ones;
  predictions clipped to [0, the part's totals]); split-conformal 90% intervals per target calibrated on a
  grouped fold of the training layer shapes (``models.conformal.fit_calibrated``), coverage reported per target;
  a feasibility classifier on every row (ok vs failed synthesis). Splits: held-out layer shapes (groups
  (d_in, d_out)) and held-out precision (train <= 10 bits, test 12-14). Roofline does not apply (no FPGA
  analytical model here).
* **extrapolation**: the checks (a)-(f) of ``models.extrapolation`` (``ds.check``) on the shipped pack of real
  runtime rows (``data.reference``: NeuSight, the H200 set, DeepBench), sampled like the main job
  (``ds.sources``, ``ds.cap``); models named ``physics*`` read ``features.physics``, the baselines
  ``features.tabular`` (``spec_features``), all on the same rows and folds. One record per (check, model, k);
  scopes ``hardware:<id>``, ``family:<f>``, ``dtype:<d>``, ``runtime:ge0.1ms``; the physics model adds
  ``in_domain`` and ``covered`` (90% interval). The check's table is written to
  ``<out_dir>/public_eval/<ds.table or extrapolation_<check>>.md`` and the goal's verdict printed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, balanced_accuracy_score

from data.hardware import HardwareRegistry
from data.workloads import SHAPE_PARAMS
from data.workloads import family as op_family
from features.fpga import hls4ml_features
from features.public_data import config_frame, fpga_features, spec_features
from models.classify import FeasibilityClassifier
from models.conformal import fit_calibrated
from models.evaluate import (
    few_shot_scaled_error,
    oracle_scaled_error,
    ranking_metrics,
    record,
    regression_metrics,
    resource_metrics,
    smape,
    within_group_kendall,
)
from models.splits import (
    few_shot_transfer,
    held_out_groups,
    held_out_layer_shapes,
    held_out_precision,
    held_out_shapes,
    leave_one_group_out,
)

FPGA_TARGETS = ("lut", "ff", "dsp", "bram_18k", "latency_cycles")


# --- NeuSight ---------------------------------------------------------------------------------------------

FEW_SHOTS = (10, 100)  # calibration rows per new GPU (few_shot_scaled_error)


def _neusight_metrics(ok: pd.DataFrame, y, pred, oracle: bool = False) -> dict:
    """Metrics over all rows, per GPU and per op family (``data.workloads.family``); ``oracle`` adds, for all rows and
    per family, the error left after one oracle scale factor per GPU and per (op, GPU)
    (``models.evaluate.oracle_scaled_error``) and after a factor per GPU fitted on k of its rows
    (``few_shot_scaled_error``, k in :data:`FEW_SHOTS`)."""
    hardware = ok["hardware"].to_numpy()
    groups = ok["op"].to_numpy() + "@" + hardware
    family = np.array([op_family(op) for op in ok["op"]])
    scopes = (
        [("all", np.ones(len(ok), bool))]
        + [(h, hardware == h) for h in sorted(set(hardware))]
        + [(f"family:{f}", family == f) for f in sorted(set(family))]
    )
    out = {}
    for scope, mask in scopes:
        m = regression_metrics(y[mask], pred[mask])
        m["smape"] = smape(y[mask], pred[mask])
        m["group_kendall_tau"] = within_group_kendall(groups[mask], y[mask], pred[mask])
        if oracle and (scope == "all" or scope.startswith("family:")):
            for key, g in [("gpu", hardware), ("op_gpu", groups)]:
                m.update(
                    {f"oracle_{key}_scale_{k}": v for k, v in oracle_scaled_error(g[mask], y[mask], pred[mask]).items()}
                )
            for shots in FEW_SHOTS:  # k measured rows of the new GPU fix its factor; scored on its other rows
                m.update(
                    {
                        f"few_shot_{shots}_{k}": v
                        for k, v in few_shot_scaled_error(hardware[mask], y[mask], pred[mask], shots).items()
                    }
                )
        out[scope] = m
    return out


def evaluate_neusight(ds, seed: int, rows, registry, models: dict, out_dir) -> list[dict]:
    """NeuSight protocol: leave-one-GPU-out, held-out shapes, then spec-only GPUs (predictions, no labels)."""
    ok = rows[rows["status"] == "ok"]
    n_all = len(ok)
    if ds.sample_rows and len(ok) > ds.sample_rows:
        ok = ok.sample(n=int(ds.sample_rows), random_state=seed)
    ok = ok.reset_index(drop=True)
    print(
        f"neusight: {len(ok)} of {n_all} ok rows (sample_rows={ds.sample_rows}), GPUs {sorted(ok['hardware'].unique())}"
    )
    X = spec_features(ok, registry)
    y = ok["runtime_ms"].to_numpy(float)
    results = []
    tr_s, te_s = held_out_shapes(ok, test_size=ds.test_size, seed=seed)
    for name, make in models.items():
        # leave-one-GPU-out: each GPU's predictions come from the model that never saw that GPU
        pred = np.full(len(ok), np.nan)
        t0 = time.perf_counter()
        for _, tr, te in leave_one_group_out(ok, "hardware"):
            pred[te] = make().fit(X.iloc[tr], y[tr]).predict(X.iloc[te])
        # oracle=True: the anatomy of the unseen-GPU error (what one perfect factor per GPU would leave)
        results.append(
            record(
                "leave_one_gpu_out",
                name,
                _neusight_metrics(ok, y, pred, oracle=True),
                ok,
                y,
                pred,
                time.perf_counter() - t0,
            )
        )
        # held-out shapes: whole (op, shape) configurations held out on every GPU at once
        t0 = time.perf_counter()
        p = make().fit(X.iloc[tr_s], y[tr_s]).predict(X.iloc[te_s])
        sub = ok.iloc[te_s].reset_index(drop=True)
        results.append(
            record(
                "held_out_shapes", name, _neusight_metrics(sub, y[te_s], p), sub, y[te_s], p, time.perf_counter() - t0
            )
        )
    # spec-only GPUs: no rows exist, so these are predictions without labels
    spec_only = [registry.resolve(h) for h in ds.spec_only]
    shapes = ok.drop_duplicates("shape_id")[["op", "dtype", *SHAPE_PARAMS, "shape_id"]]
    if ds.spec_only_max_shapes and len(shapes) > ds.spec_only_max_shapes:
        shapes = shapes.sample(n=int(ds.spec_only_max_shapes), random_state=seed)
    ref = registry.resolve(ds.spec_only_reference)
    grid = pd.concat([shapes.assign(hardware=h) for h in [ref, *spec_only]], ignore_index=True)
    Xg = spec_features(grid, registry)
    for name, make in models.items():
        model = make().fit(X, y)
        grid[f"pred_runtime_ms_{name}"] = model.predict(Xg)
    out_csv = Path(out_dir).resolve() / "public_eval" / "neusight_spec_only_predictions.csv"
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    keep = [c for c in ["op", "dtype", *SHAPE_PARAMS, "hardware"] if grid[c].notna().any()]
    grid[keep + [c for c in grid.columns if c.startswith("pred_")]].to_csv(out_csv, index=False)
    ratio = {}
    base = grid[grid["hardware"] == ref].set_index("shape_id")
    for h in spec_only:
        g = grid[grid["hardware"] == h].set_index("shape_id")
        for name in models:
            ratio[f"{h}/{name}"] = float(
                np.median(g[f"pred_runtime_ms_{name}"] / base.loc[g.index, f"pred_runtime_ms_{name}"])
            )
    print(f"spec-only GPUs {spec_only}: {len(grid)} predictions (no labels exist) -> {out_csv}")
    print("  median predicted runtime relative to " + ref + ": " + ", ".join(f"{k} {v:.2f}" for k, v in ratio.items()))
    results.append(
        {"dataset": "neusight", "split": "spec_only", "model": "*", "spec_only_ratio": ratio, "path": str(out_csv)}
    )
    return results


def evaluate_kerneltuner(ds, seed: int, rows, registry, models: dict, out_dir=None) -> list[dict]:
    """Kernel Tuner protocol: per-GPU 80/20 and 10% few-shot transfer (with / without the other GPUs); ranking."""
    ok = rows[rows["status"] == "ok"]
    print(f"kerneltuner: {len(ok)} ok configs, {int((rows['status'] == 'error').sum())} failed (dropped)")
    if ds.sample_per_hardware:
        keep = [
            g.sample(n=min(len(g), int(ds.sample_per_hardware)), random_state=seed).index
            for _, g in ok.groupby("hardware")
        ]
        ok = ok.loc[np.sort(np.concatenate(keep))]
    ok = ok.reset_index(drop=True)
    meta = pd.DataFrame([json.loads(m) for m in ok["meta"]])
    noise = (
        pd.DataFrame(
            {
                "hardware": ok["hardware"],
                "op": ok["op"],
                "cv": meta["runtime_cv"].astype(float),
                "iqr_rel": ok["runtime_iqr_ms"] / ok["runtime_ms"],
            }
        )
        .groupby(["op", "hardware"])
        .agg(configs=("cv", "size"), median_cv=("cv", "median"), median_iqr_rel=("iqr_rel", "median"))
        .reset_index()
    )
    print("noise floor from the 32 repeats (median over configs):")
    print(noise.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    hw_cols = [c for c in spec_features(ok.head(1), registry).columns if c.startswith("hw_") or c.startswith("op_")]
    F = spec_features(ok, registry)
    y = ok["runtime_ms"].to_numpy(float)
    results = []
    if "roofline" in models:
        print(
            "roofline: not applicable to ranking configs (every config of a kernel has the same FLOPs and bytes, "
            "so it predicts one runtime per GPU): skipped"
        )
    gpus = sorted(ok["hardware"].unique())
    kernel_of = ok.groupby("hardware")["op"].first().to_dict()

    def per_kernel_X(mask):  # one kernel's tunables (the other kernel's are absent) + the GPU spec features
        return pd.concat([config_frame(ok[mask]).set_index(np.flatnonzero(mask)), F.loc[mask, hw_cols]], axis=1)

    for name, make in models.items():
        if name == "roofline":
            continue
        for split in ("per_gpu", "transfer10_with_others", "transfer10_alone"):
            pred = np.full(len(ok), np.nan)
            t0 = time.perf_counter()
            for h in gpus:
                kmask = (ok["op"] == kernel_of[h]).to_numpy()
                Xk = per_kernel_X(kmask)
                sub = ok[kmask]
                local = np.flatnonzero(kmask)
                if split == "per_gpu":
                    hmask = (sub["hardware"] == h).to_numpy()
                    idx = local[hmask]
                    tr, te = held_out_groups(ok.loc[idx, "meta"].to_numpy(), ds.test_size, seed)
                    train, test = idx[tr], idx[te]
                else:
                    support, other, test = few_shot_transfer(ok, h, ds.transfer_fraction, seed, within="op")
                    train = np.concatenate([support, other]) if split == "transfer10_with_others" else support
                pred[test] = make().fit(Xk.loc[train], y[train]).predict(Xk.loc[test])
            done = ~np.isnan(pred)
            metrics = {}
            for h in ["all", *gpus]:
                m = done & ((ok["hardware"] == h).to_numpy() if h != "all" else True)
                metrics[h] = regression_metrics(y[m], pred[m])
                if h != "all":
                    metrics[h].update(ranking_metrics(y[m], pred[m], tuple(ds.topk)))
            per = [metrics[h] for h in gpus]
            for key in ["kendall_tau", *(f"top{k}_slowdown" for k in ds.topk)]:
                metrics["all"][f"mean_gpu_{key}"] = float(np.mean([m[key] for m in per]))
            sub = ok[done].reset_index(drop=True)
            results.append(
                record(
                    split,
                    name,
                    metrics,
                    sub,
                    y[done],
                    pred[done],
                    time.perf_counter() - t0,
                    extra={"noise_floor.csv": noise},
                )
            )
    return results


# --- wa-hls4ml --------------------------------------------------------------------------------------------


def fpga_bounds(registry: HardwareRegistry, part: str, targets=FPGA_TARGETS) -> tuple[list[float], list[float]]:
    """Per-target [lower, upper]: [0, the part's total] for a resource it lists (LUT, FF, DSP, BRAM_18K), [0, inf)
    otherwise (latency)."""
    totals = registry.get(part).extra["resources"]
    return [0.0] * len(targets), [float(totals[t]) if t in totals else float("inf") for t in targets]


def layer_shape_groups(rows: pd.DataFrame) -> np.ndarray:
    """The (d_in, d_out) = (k, n) key of each row: the unit held out and carved for calibration."""
    return (rows["k"].astype(int).astype(str) + "x" + rows["n"].astype(int).astype(str)).to_numpy()


def evaluate_wa_hls4ml(ds, seed: int, rows, registry, models: dict, out_dir=None) -> list[dict]:
    """wa-hls4ml protocol: feasibility classifier, then one multi-target model per (split, model) with intervals."""
    rows = rows.reset_index(drop=True)
    rows = rows.assign(precision_bits=[json.loads(c)["precision_bits"] for c in rows["config"]])
    targets = list(FPGA_TARGETS)
    transforms = [ds.transforms[t] for t in targets]
    lower, upper = fpga_bounds(registry, ds.part, targets)
    level = float(ds.interval.level)
    X_all = fpga_features(rows)
    # per model, the features it is built for (``model_features`` in conf/dataset/wa_hls4ml.yaml; default fpga)
    feature_sets = {"fpga": X_all, "hls4ml": hls4ml_features(rows)}
    model_features = dict(ds.get("model_features") or {})
    unknown = sorted({v for v in model_features.values()} - set(feature_sets))
    if unknown:
        raise ValueError(f"model_features: unknown feature set(s) {', '.join(unknown)} (known: fpga, hls4ml)")
    ok_mask = (rows["status"] == "ok").to_numpy()
    groups = layer_shape_groups(rows)
    print(
        f"wa_hls4ml: {len(rows)} rows, {ok_mask.sum()} synthesised; one multi-target model for {targets} "
        f"({dict(zip(targets, transforms))}), bounded to [0, {ds.part} totals {dict(zip(targets, upper))}]; "
        f"{level:.0%} intervals calibrated on {ds.interval.calibration_size:.0%} of the training layer shapes"
    )
    splits = {
        "held_out_layer_shapes": held_out_layer_shapes(rows, ds.test_size, seed),
        "held_out_precision": held_out_precision(rows, ds.train_max_bits, tuple(ds.test_bits)),
    }
    Y = rows[targets].to_numpy(float)
    results = []
    for split, (tr, te) in splits.items():
        # feasibility on every row (failed syntheses included)
        clf = FeasibilityClassifier(n_estimators=int(ds.feasibility_trees), random_state=seed).fit(
            X_all.iloc[tr], ok_mask[tr]
        )
        p_ok = clf.predict(X_all.iloc[te])
        fm = {
            "all": {
                "n": float(len(te)),
                "accuracy": float(accuracy_score(ok_mask[te], p_ok)),
                "balanced_accuracy": float(balanced_accuracy_score(ok_mask[te], p_ok)),
                "test_ok_fraction": float(ok_mask[te].mean()),
            }
        }
        results.append(
            record(
                split,
                "feasibility_rf",
                fm,
                rows.iloc[te].reset_index(drop=True),
                ok_mask[te].astype(float),
                p_ok.astype(float),
                0.0,
                kind="classify",
            )
        )
        tr_ok, te_ok = tr[ok_mask[tr]], te[ok_mask[te]]
        for name, make in models.items():
            if name == "roofline":
                print("roofline: not applicable to FPGA resources (no analytical model): skipped")
                continue
            t0 = time.perf_counter()
            X = feature_sets[model_features.get(name, "fpga")]
            model = make(targets=targets, transform=transforms, lower=lower, upper=upper)
            cal = fit_calibrated(
                model, X.iloc[tr_ok], Y[tr_ok], groups[tr_ok], float(ds.interval.calibration_size), level, seed
            )
            P, lo, hi = cal.predict_interval(X.iloc[te_ok])
            cover = cal.coverage(X.iloc[te_ok], Y[te_ok])
            per_target, frames = {}, []
            for j, t in enumerate(targets):
                y, nz = Y[te_ok, j], Y[te_ok, j] > 0
                per_target[t] = resource_metrics(y, P[:, j]) | {
                    "coverage90": float(cover[j]),
                    "halfwidth": float(cal.q[j]),
                }
                if t in ("dsp", "bram_18k"):  # zero-heavy: SMAPE without the zero-truth rows, zero / non-zero accuracy
                    per_target[t] |= {
                        "smape_nonzero": smape(y[nz], P[nz, j]) if nz.any() else None,
                        "zero_accuracy": float(np.mean(nz == (P[:, j] > 0.5))),
                    }
                frames.append(
                    pd.DataFrame({"target": t, "y": Y[te_ok, j], "pred": P[:, j], "lo": lo[:, j], "hi": hi[:, j]})
                )
            frame = pd.concat(frames, ignore_index=True)
            metrics = {
                "all": {
                    "n": float(len(te_ok)),
                    "n_calibration": float(cal.n_calibration),
                    "mean_smape": float(np.mean([per_target[t]["smape"] for t in targets])),
                    "mean_coverage90": float(np.mean(cover)),
                    **{f"{t}.{k}": v for t, m in per_target.items() for k, v in m.items()},
                }
            }
            results.append(
                record(
                    split,
                    name,
                    metrics,
                    frame.rename(columns={"target": "group"}),
                    None,
                    None,
                    time.perf_counter() - t0,
                    kind="resource",
                )
            )
    return results


# --- extrapolation checks (a)-(f) on the shipped pack ------------------------------------------------------


PHYSICS_FRAME_MODELS = ("physics", "sol")  # model entries that read the physics frame (the others: tabular)


def extrapolation_rows(ds, rows, seed: int):
    """The rows an extrapolation check runs on: the pack's measured rows of its sources, sampled by its cap."""
    from data.backends.reference import select

    ok = rows[rows["status"] == "ok"].reset_index(drop=True)
    return select(ok, sources=list(ds.sources), cap=dict(ds.get("cap") or {}), seed=seed)


def evaluate_extrapolation(ds, seed: int, rows, registry, models: dict, out_dir) -> list[dict]:
    """One extrapolation check (module docstring) for every model on the same rows and folds."""
    from features.physics import PhysicsFeaturizer
    from models.extrapolation import CHECKS, GOALS, NAMES, Candidate, llm_markdown, markdown, run_check, verdict

    check = str(ds.check)
    if check not in CHECKS:
        raise ValueError(f"unknown extrapolation check {check!r} (one of {', '.join(CHECKS)})")
    ok = extrapolation_rows(ds, rows, seed)
    frames = {
        "physics": PhysicsFeaturizer(registry).transform(ok).reset_index(drop=True),
        "tabular": spec_features(ok, registry).reset_index(drop=True),
    }
    print(
        f"extrapolation ({check}) {NAMES[check]}: {len(ok)} rows ("
        + ", ".join(f"{h} {n}" for h, n in ok["hardware"].value_counts().sort_index().items())
        + f"); sources {', '.join(ds.sources)}; cap {dict(ds.get('cap') or {})}; goal {GOALS[check]}"
    )
    candidates = [
        Candidate(name, make, "physics" if name.startswith(PHYSICS_FRAME_MODELS) else "tabular")
        for name, make in models.items()
    ]
    fold_kwargs = dict(ds.get("fold_kwargs") or {})
    results = run_check(
        check,
        ok,
        frames,
        candidates,
        registry,
        draws=int(ds.get("draws", 3)),
        seed=seed,
        fold_kwargs=fold_kwargs,
        keep_predictions=True,
    )
    y = ok["runtime_ms"].to_numpy(float)
    records = []
    for r in results:
        v = verdict(r)
        if v is not None:
            print(f"  {r['model']:14s} {v[1]}: {'met' if v[0] else 'NOT met'}")
        metrics = {scope.replace(">=", "ge"): m for scope, m in r["metrics"].items()}
        if v is not None:
            metrics["all"] = {**metrics["all"], "goal_met": float(v[0])}
        sub = ok.iloc[r["index"]].reset_index(drop=True)
        name = r["model"] + (f"_k{r['k']}" if r["k"] is not None else "")
        records.append(record(f"{check}_{NAMES[check]}", name, metrics, sub, y[r["index"]], r["pred"], r["seconds"]))
    table = Path(out_dir).resolve() / "public_eval" / f"{ds.get('table') or f'extrapolation_{check}'}.md"
    table.parent.mkdir(parents=True, exist_ok=True)
    text = llm_markdown(results) if check == "llm" else markdown(results)
    table.write_text(text + "\n")
    print(text)
    print(f"table -> {table}")
    return records


def evaluate_llm_serving(ds, seed: int, rows, registry, models: dict, out_dir) -> list[dict]:
    """The LLM serving check (``models.llm_eval``)."""
    from models.llm_eval import evaluate_llm_serving as check

    return check(ds, seed, rows, registry, models, out_dir)


PROTOCOLS = {
    "neusight": evaluate_neusight,
    "llm_serving": evaluate_llm_serving,
    "extrapolation": evaluate_extrapolation,
    "kerneltuner": evaluate_kerneltuner,
    "wa_hls4ml": evaluate_wa_hls4ml,
}
