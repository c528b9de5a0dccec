"""Power surrogate on the measured H200 kernels: import -> featurize -> evaluate -> track -> register.

    python -m pipelines.power                    # see conf/power.yaml

1. import ``../shared/data/hopper/h200_kernels.csv`` (``data.importers.hopper``: 287 configs x 2 passes);
2. featurize with ``features.tabular.PowerFeaturizer`` (tabular + spec-driven analytical power terms);
3. per model (``analytical``, ``xgb``, ``residual``, ``hybrid`` = residual runtime + xgb power; each
   predicts runtime_ms and power_w, energy_j is DERIVED = power x runtime of the same prediction):
   * unseen shapes: out-of-fold predictions from a grouped k-fold over ``shape_id`` (the two passes and
     every dtype of one shape stay together);
   * unseen op family: leave one family out;
   * the registered variant: fit on the held-out-shapes train rows, conformal intervals per target
     (cross-conformal over grouped folds of the training shapes, or split conformal), coverage scored on
     the held-out shapes;
4. one MLflow run per model (metrics, parity plot, error CDF, power vs arithmetic intensity per dtype,
   the per-op/dtype table, a PowerPyfunc); the best by cross-validated power MedAPE is registered as
   ``costmodel-power`` (``pipelines.tracking.register``: the alias moves only if it beats the champion);
5. prints MedAPE/MAPE of power and energy per op family and dtype beside the noise floor of the repeated
   configurations (median |pass0 - pass1| / mean), and predictions for GPUs that have a spec but no rows.

Unseen GPU: only one GPU is measured, so transfer to another GPU cannot be validated here; the spec-only
predictions show that the models produce them from specs alone, nothing more.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from data.hardware import CONF_DIR, HardwareRegistry
from data.importers.hopper import import_hopper
from data.schema import dataset_hash
from data.workloads import SHAPE_PARAMS
from features.tabular import PowerFeaturizer
from models.conformal import calibrate, calibrate_by_group, coverage, halfwidths, interval
from models.evaluate import regression_metrics
from models.power import PowerSurrogate, derive_energy_j, make_model
from models.splits import grouped_kfold, held_out_shapes, leave_one_family_out

log = logging.getLogger(__name__)
console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True)
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow\.")
logging.getLogger("mlflow").setLevel(logging.ERROR)

TARGETS = ("runtime_ms", "power_w", "energy_j")
DESCRIBE = ["op", "hardware", "dtype", *SHAPE_PARAMS]


def noise_floor(rows: pd.DataFrame, by=("op", "dtype")) -> pd.DataFrame:
    """Median over repeated configurations of |a - b| / mean(a, b) (in %), per group, for each target.

    A configuration is (op, shape, dtype, hardware); only those measured exactly twice count.
    """
    key = ["op", "shape_id", "dtype", "hardware"]
    g = rows.groupby(key, sort=False)
    pairs = rows[g[key[0]].transform("size").to_numpy() == 2]
    agg = pairs.groupby(key, sort=False)[list(TARGETS)].agg(["min", "max"])
    rel = {t: 200 * (agg[(t, "max")] - agg[(t, "min")]) / (agg[(t, "max")] + agg[(t, "min")]) for t in TARGETS}
    rel = pd.DataFrame(rel).reset_index()
    out = rel.groupby(list(by))[list(TARGETS)].median() if by else rel[list(TARGETS)].median().to_frame().T
    return out.rename(columns=lambda t: f"noise_{t}")


HYBRID = {"hybrid": ("residual", "xgb")}  # kind -> (runtime model kind, power model kind)


def _surrogate(kind: str, cfg: DictConfig) -> PowerSurrogate:
    rt_kind, pw_kind = HYBRID.get(kind, (kind, kind))
    xgb = dict(OmegaConf.to_container(cfg.xgb), random_state=int(cfg.seed))
    return PowerSurrogate(kind, make_model(rt_kind, "runtime_ms", **({} if rt_kind == "analytical" else xgb)),
                          make_model(pw_kind, "power_w", **({} if pw_kind == "analytical" else xgb)),
                          power_cap=float(cfg.power_cap))


def out_of_fold(kind: str, cfg: DictConfig, X: pd.DataFrame, rows: pd.DataFrame, splits) -> pd.DataFrame:
    """Predictions of every test row of ``splits`` (``(train, test)`` pairs) from a model fitted on its train rows."""
    pred = pd.DataFrame(np.nan, index=rows.index, columns=list(TARGETS))
    for train, test in splits:
        model = _surrogate(kind, cfg).fit(X.iloc[train], rows.iloc[train])
        pred.iloc[test] = model.predict(X.iloc[test]).to_numpy()
    return pred


def metrics_table(rows: pd.DataFrame, pred: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """MedAPE / MAPE (%) per group for each target."""
    recs = []
    groups = rows.groupby(by, sort=True).indices if by else {"all": np.arange(len(rows))}
    for key, idx in groups.items():
        rec = dict(zip(by, key if isinstance(key, tuple) else (key,))) if by else {"scope": "all"}
        rec["n"] = len(idx)
        for t in TARGETS:
            m = regression_metrics(rows[t].to_numpy(float)[idx], pred[t].to_numpy(float)[idx])
            rec[f"{t}_medape"], rec[f"{t}_mape"] = m["medape"], m["mape"]
        recs.append(rec)
    return pd.DataFrame(recs)


def _plots(rows: pd.DataFrame, pred: pd.DataFrame, name: str, directory: Path) -> list[Path]:
    """Parity (power and energy), error CDF (runtime, power, energy), power vs arithmetic intensity per dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, t, unit in zip(axes, ("power_w", "energy_j"), ("W", "J per call")):
        for op in sorted(rows["op"].unique()):
            m = (rows["op"] == op).to_numpy()
            ax.scatter(rows[t][m], pred[t][m], s=9, alpha=0.7, label=op)
        lo, hi = float(min(rows[t].min(), pred[t].min())), float(max(rows[t].max(), pred[t].max()))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set(xscale="log", yscale="log", xlabel=f"measured {t} ({unit}), H200", ylabel=f"predicted {t}",
               title=f"{name}: unseen shapes (out of fold)")
    axes[0].legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    files.append(directory / "parity.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for t in TARGETS:
        e = np.sort(np.abs(pred[t] - rows[t]) / rows[t] * 100)
        ax.plot(e, np.arange(1, len(e) + 1) / len(e), label=t)
    ax.set(xscale="symlog", xlabel="absolute percentage error (%)", ylabel="fraction of rows",
           title=f"{name}: error CDF, unseen shapes")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    files.append(directory / "error_cdf.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    intensity = rows["flops"] / rows["bytes"]
    dtypes = sorted(rows["dtype"].unique())
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4 * len(dtypes), 4), sharey=True, squeeze=False)
    for ax, dt in zip(axes[0], dtypes):
        m = (rows["dtype"] == dt).to_numpy()
        ax.scatter(intensity[m] + 1e-3, rows["power_w"][m], s=10, alpha=0.7, label="measured")
        ax.scatter(intensity[m] + 1e-3, pred["power_w"][m], s=10, alpha=0.7, marker="x", label=f"{name}")
        ax.set(xscale="log", xlabel="arithmetic intensity (FLOP/byte)", title=dt)
    axes[0][0].set_ylabel("average board power (W), H200")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    files.append(directory / "power_vs_intensity.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    return files


def fit_registered(kind: str, cfg: DictConfig, X: pd.DataFrame, rows: pd.DataFrame, train, test) -> dict:
    """The registered variant: conformal half-widths per target from the training shapes, coverage on ``test``.

    ``interval.method: split``: fit on the training rows less a calibration fold of whole shapes
    (``interval.calibration_size``), calibrate on that fold (split conformal, ``models/conformal.py``).
    ``interval.method: cross``: scores are the out-of-fold errors of a grouped k-fold over the training
    shapes and the model is fitted on all training rows (cross-conformal, Vovk 2015; Barber et al., "Predictive
    inference with the jackknife+", Ann. Stat. 2021: worst-case coverage 1 - 2 alpha, in practice near nominal;
    the held-out coverage printed is the honest check). It wastes no shapes on calibration.
    """
    level, seed = float(cfg.interval.level), int(cfg.seed)
    tr = rows.iloc[train].reset_index(drop=True)
    if cfg.interval.method == "split":
        fit_pos, cal_pos = held_out_shapes(tr, float(cfg.interval.calibration_size), seed)
        model = _surrogate(kind, cfg).fit(X.iloc[train[fit_pos]], tr.iloc[fit_pos])
        y_cal, p_cal = tr.iloc[cal_pos], model.predict(X.iloc[train[cal_pos]])
    elif cfg.interval.method == "cross":
        y_cal, p_cal = tr, out_of_fold(kind, cfg, X.iloc[train].reset_index(drop=True), tr,
                                       grouped_kfold(tr, int(cfg.cv.folds), seed))
        model = _surrogate(kind, cfg).fit(X.iloc[train], tr)
    else:
        raise ValueError(f"interval.method must be split or cross, got {cfg.interval.method!r}")
    pt = model.predict(X.iloc[test])
    intervals, cover = {}, {}
    for t in TARGETS:
        q = calibrate(y_cal[t], p_cal[t], level)
        q_hw = calibrate_by_group(y_cal["hardware"], y_cal[t], p_cal[t], level)
        intervals[t] = {"log_halfwidth": q, "by_hardware": q_hw}
        lo, hi = interval(pt[t], halfwidths(rows["hardware"].iloc[test], q, q_hw))
        cover[t] = coverage(rows[t].iloc[test], lo, hi)
    return {"model": model, "intervals": intervals, "coverage": cover, "test_pred": pt}


def spec_only(model: PowerSurrogate, registry: HardwareRegistry, hardware: list[str], intervals: dict) -> pd.DataFrame:
    """Predictions on GPUs with a spec sheet and no measured rows (from specs alone), with the global intervals."""
    shapes = [dict(op="matmul", m=4096, n=4096, k=4096, dtype="float16"),
              dict(op="matmul", m=1024, n=1024, k=1024, dtype="float32"),
              dict(op="add", m=8192, n=8192, dtype="float16"),
              dict(op="layernorm", m=4096, n=4096, dtype="bfloat16")]
    frame = pd.DataFrame([{**s, "hardware": h} for h in hardware for s in shapes])
    pred = model.predict(PowerFeaturizer(registry).transform(frame))
    pred["bounded"] = model.last_bounded  # predictions the [idle, cap x TDP] bound changed (whole table)
    for t in TARGETS:
        pred[f"{t}_lo"], pred[f"{t}_hi"] = interval(pred[t], intervals[t]["log_halfwidth"])
    specs = [registry.get(h) for h in frame["hardware"]]
    return pd.concat([frame[["hardware", "op", "dtype"]].assign(shape=[_shape(s) for s in shapes] * len(hardware)),
                      pred], axis=1).assign(idle_w=[s.idle_power_w for s in specs], tdp_w=[s.tdp_w for s in specs])


def _shape(s: dict) -> str:
    return "x".join(str(s[k]) for k in ("m", "n", "k") if k in s)


def run(cfg: DictConfig) -> dict:
    """Run the power job for a composed config; returns tables, metrics, the registered version."""
    import mlflow

    from models.pyfunc import PowerPyfunc, code_paths, power_signature, save_power_artifacts
    from pipelines import tracking

    t_start = time.perf_counter()
    out = Path(cfg.paths.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    registry = HardwareRegistry.from_dir(cfg.paths.hardware_dir or CONF_DIR)

    rows = import_hopper(cfg.data_root, registry)
    rows = rows[(rows["status"] == "ok") & rows["power_w"].notna() & rows["energy_j"].notna()].reset_index(drop=True)
    digest = dataset_hash(rows)
    X = PowerFeaturizer(registry).transform(rows)
    console.print(f"imported {len(rows)} H200 rows ({rows['shape_id'].nunique()} shapes, "
                  f"{rows['family'].nunique()} op families) from {cfg.data_root or 'shared/data'}/hopper")
    floor_by = noise_floor(rows)
    floor_all = noise_floor(rows, by=None).iloc[0]

    # the registered variant's split: held-out shapes, then a calibration fold of whole shapes out of train
    train, test = held_out_shapes(rows, float(cfg.split.test_size), int(cfg.seed))
    split_id = tracking.split_identity("held_out_shapes", cfg.seed, cfg.split.test_size, digest, rows.loc[test, "shape_id"])

    uri = tracking.setup(cfg.mlflow, out)
    results: dict[str, dict] = {}
    for kind in cfg.models:
        t0 = time.perf_counter()
        oof = out_of_fold(kind, cfg, X, rows, grouped_kfold(rows, int(cfg.cv.folds), int(cfg.seed)))
        fam_pred = pd.DataFrame(np.nan, index=rows.index, columns=list(TARGETS))
        for _, tr, te in leave_one_family_out(rows):
            fam_pred.iloc[te] = _surrogate(kind, cfg).fit(X.iloc[tr], rows.iloc[tr]).predict(X.iloc[te]).to_numpy()
        reg = fit_registered(kind, cfg, X, rows, train, test)
        by_op_dtype = metrics_table(rows, oof, ["family", "op", "dtype"]).merge(
            floor_by.reset_index(), on=["op", "dtype"], how="left")
        overall = {t: regression_metrics(rows[t], oof[t]) for t in TARGETS}
        by_family = metrics_table(rows, fam_pred, ["family"])
        heldout = {t: regression_metrics(rows[t].iloc[test], reg["test_pred"][t]) | {"coverage90": reg["coverage"][t]}
                   for t in TARGETS}
        results[kind] = {"oof": oof, "oof_rows_family": rows["family"].to_numpy(),
                         "oof_rows_power": rows["power_w"].to_numpy(float), "overall": overall, "by_op_dtype": by_op_dtype, "by_family": by_family,
                         "heldout": heldout, **reg}
        with mlflow.start_run(run_name=f"power-{kind}") as run, tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            mlflow.set_tags({"model": kind, "target": "power_w,runtime_ms (energy_j derived)",
                             "dataset_sha256": digest, "dataset": "hopper/h200_kernels.csv", **split_id})
            mlflow.log_params({"model.name": kind, "cv.folds": cfg.cv.folds, "seed": cfg.seed,
                               **tracking.flat_params(cfg, ["xgb", "split", "interval"])})
            for t in TARGETS:
                mlflow.log_metrics({f"cv_unseen_shapes/{t}/{k}": v for k, v in overall[t].items()})
                mlflow.log_metrics({f"test/{t}/{k}": v for k, v in heldout[t].items()})
                mlflow.log_metric(f"noise_floor/{t}/medape", float(floor_all[f"noise_{t}"]))
            for rec in by_family.to_dict("records"):
                mlflow.log_metrics({f"unseen_family/{rec['family']}/{t}_medape": rec[f"{t}_medape"] for t in TARGETS})
            for f in _plots(rows, oof, kind, tmp):
                mlflow.log_artifact(str(f), artifact_path="eval")
            by_op_dtype.to_csv(tmp / "power_by_op_dtype.csv", index=False)
            by_family.to_csv(tmp / "unseen_family.csv", index=False)
            rows[DESCRIBE + list(TARGETS)].join(oof.add_prefix("pred_")).to_csv(tmp / "oof_predictions.csv", index=False)
            for f in ("power_by_op_dtype.csv", "unseen_family.csv", "oof_predictions.csv"):
                mlflow.log_artifact(str(tmp / f), artifact_path="eval")
            artifacts = save_power_artifacts(reg["model"], registry, tmp / "pyfunc", reg["intervals"],
                                             float(cfg.interval.level))
            info = mlflow.pyfunc.log_model(name="model", python_model=PowerPyfunc(), artifacts=artifacts,
                                           code_paths=code_paths(tmp / "code"), signature=power_signature(),
                                           input_example=rows.loc[test[:3], DESCRIBE].astype({p: float for p in SHAPE_PARAMS}),
                                           pip_requirements=tracking.pip_requirements())
            results[kind]["model_uri"] = info.model_uri or f"runs:/{run.info.run_id}/model"
        log.info("%s: %.1f s", kind, time.perf_counter() - t0)

    key = cfg.select_metric
    # lowest power error; ties (e.g. hybrid and xgb share the power model) go to the lower energy error
    best = min(results, key=lambda k: (results[k]["overall"]["power_w"][key], results[k]["overall"]["energy_j"][key]))
    heldout_frame = rows.loc[test, DESCRIBE + ["power_w"]].assign(pred_power_w=results[best]["test_pred"]["power_w"].to_numpy())
    decision = tracking.register(results[best]["model_uri"], cfg.register.name, cfg.register.alias,
                                 results[best]["heldout"]["power_w"], split=split_id, heldout=heldout_frame,
                                 target="power_w", select_metric=key, model_name=best)
    spec = spec_only(results[best]["model"], registry, list(cfg.spec_only_hardware), results[best]["intervals"])
    wall = time.perf_counter() - t_start
    _summary(results, best, floor_all, spec, cfg, uri, decision, wall)
    return {"results": results, "best": best, "version": decision.version, "decision": decision.reason,
            "noise_floor": floor_by, "spec_only": spec, "tracking_uri": uri, "rows": rows, "wall_seconds": wall}


def _summary(results, best, floor_all, spec, cfg, uri, decision, wall) -> None:
    t = Table(title="H200, unseen shapes (5-fold grouped by shape, out of fold): MedAPE / MAPE %")
    for c in ("model", "runtime", "power", "energy (derived)", "unseen family: power MedAPE", "held-out cover90 P/E"):
        t.add_column(c, justify="left" if c == "model" else "right")
    for k, r in results.items():
        o = r["overall"]
        fam = ", ".join(f"{f} {v:.0f}" for f, v in zip(r["by_family"]["family"], r["by_family"]["power_w_medape"]))
        t.add_row(k + (" *" if k == best else ""), *(f"{o[x]['medape']:.1f} / {o[x]['mape']:.1f}" for x in TARGETS), fam,
                  f"{100 * r['coverage']['power_w']:.0f} / {100 * r['coverage']['energy_j']:.0f}")
    t.add_row("noise floor", *(f"{floor_all[f'noise_{x}']:.1f} (median)" for x in TARGETS), "", "")
    console.print(t)
    from sklearn.metrics import r2_score

    for k, r in results.items():  # beside the published reference: RF GEMM power model, RTX 4070, 5.42% / R^2 0.78
        gemm = (r["oof_rows_family"] == "gemm")
        y, p = r["oof_rows_power"][gemm], r["oof"]["power_w"].to_numpy()[gemm]
        console.print(f"{k}: GEMM family (matmul, bmm, linear) power on unseen shapes: MedAPE "
                      f"{np.median(np.abs(p - y) / y) * 100:.2f}%, R^2 {r2_score(y, p):.2f} (W, n={gemm.sum()})")

    tb = Table(title=f"{best}: power and energy per op family and dtype (unseen shapes) beside the noise floor "
                     "(median |pass0-pass1|/mean)")
    for c in ("family", "op", "dtype", "n", "power MedAPE", "power MAPE", "noise power", "energy MedAPE",
              "energy MAPE", "noise energy"):
        tb.add_column(c, justify="left" if c in ("family", "op", "dtype") else "right")
    for r in results[best]["by_op_dtype"].to_dict("records"):
        tb.add_row(r["family"], r["op"], r["dtype"], str(r["n"]), f"{r['power_w_medape']:.1f}", f"{r['power_w_mape']:.1f}",
                   f"{r['noise_power_w']:.1f}", f"{r['energy_j_medape']:.1f}", f"{r['energy_j_mape']:.1f}",
                   f"{r['noise_energy_j']:.1f}")
    console.print(tb)
    console.print("energy_j is derived: power_w x runtime_ms of the same prediction (never predicted on its own).")
    ts = Table(title="GPUs with a spec and NO measured rows: predicted from specs alone "
                     "(one GPU measured: this transfer cannot be validated here)")
    for c in ("hardware", "op", "dtype", "shape", "runtime_ms", "power_w [90% interval]", "energy_j", "idle/TDP W"):
        ts.add_column(c)
    for r in spec.to_dict("records"):
        ts.add_row(r["hardware"], r["op"], r["dtype"], r["shape"], f"{r['runtime_ms']:.4g}",
                   f"{r['power_w']:.0f} [{r['power_w_lo']:.0f}, {r['power_w_hi']:.0f}]", f"{r['energy_j']:.3g}",
                   f"{r['idle_w']:.0f}/{r['tdp_w']:.0f}")
    console.print(ts)
    console.print(f"spec-only predictions changed by the [idle, {cfg.power_cap} x TDP] bound: "
                  f"{int(spec['bounded'].iloc[0]) if len(spec) else 0} of {len(spec)}", markup=False)
    console.print(f"* registered {best!r} as {cfg.register.name} version {decision.version}; "
                  f"@{cfg.register.alias}: {decision.reason}  (wall time {wall:.0f} s)")
    print(f"  MLFLOW_TRACKING_URI={uri} costmodel predict --model models:/{cfg.register.name}@{cfg.register.alias} "
          "--input workloads.csv   # add a 'network' column to cost a list of layers as one network")


@hydra.main(version_base="1.3", config_path="../conf", config_name="power")
def main(cfg: DictConfig) -> float:
    summary = run(cfg)
    return summary["results"][summary["best"]]["overall"]["power_w"][cfg.select_metric]


if __name__ == "__main__":
    main()
