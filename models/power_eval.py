"""Power-surrogate evaluation protocol on the measured H200 kernels (``pipelines/power.py`` is its Hydra entry point).

Per model kind (``analytical``, ``xgb``, ``residual``, ``hybrid`` = residual runtime + xgb power; each predicts
runtime_ms and power_w, energy_j is DERIVED = power x runtime of the same prediction; with
``multi_target: true`` the learned kinds fit ONE multi-target model of runtime_ms and power_w,
``models.power.make_joint_model``, instead of one model per target):

* unseen shapes: out-of-fold predictions from a grouped k-fold over ``shape_id`` (the two passes and every dtype
  of one shape stay together);
* unseen op family: leave one family out;
* the registered variant: fit on the held-out-shapes train rows, conformal intervals per target (cross-conformal
  over grouped folds of the training shapes, or split conformal), coverage scored on the held-out shapes.

Also the noise floor of the repeated configurations (median |pass0 - pass1| / mean), the plots and the tables
the entry point prints, and predictions for GPUs that have a spec but no rows.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from data.hardware import HardwareRegistry
from features.tabular import PowerFeaturizer
from models.conformal import calibrate, calibrate_by_group, coverage, halfwidths, interval
from models.evaluate import regression_metrics
from models.power import PowerSurrogate, make_joint_model, make_model
from models.splits import grouped_kfold, held_out_shapes, leave_one_family_out

TARGETS = ("runtime_ms", "power_w", "energy_j")
console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True)


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


def make_surrogate(kind: str, cfg) -> PowerSurrogate:
    """A fresh surrogate of ``kind`` from ``cfg`` (``xgb`` hyper-parameters, ``seed``, ``power_cap``, ``multi_target``)."""
    rt_kind, pw_kind = HYBRID.get(kind, (kind, kind))
    xgb = dict(cfg.xgb, random_state=int(cfg.seed))
    if cfg.get("multi_target") and kind != "analytical":
        return PowerSurrogate(kind, power_cap=float(cfg.power_cap), joint=make_joint_model(kind, **xgb))
    return PowerSurrogate(kind, make_model(rt_kind, "runtime_ms", **({} if rt_kind == "analytical" else xgb)),
                          make_model(pw_kind, "power_w", **({} if pw_kind == "analytical" else xgb)),
                          power_cap=float(cfg.power_cap))


def out_of_fold(kind: str, cfg: object, X: pd.DataFrame, rows: pd.DataFrame, splits) -> pd.DataFrame:
    """Predictions of every test row of ``splits`` (``(train, test)`` pairs) from a model fitted on its train rows."""
    pred = pd.DataFrame(np.nan, index=rows.index, columns=list(TARGETS))
    for train, test in splits:
        model = make_surrogate(kind, cfg).fit(X.iloc[train], rows.iloc[train])
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


def plots(rows: pd.DataFrame, pred: pd.DataFrame, name: str, directory: Path) -> list[Path]:
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


def fit_registered(kind: str, cfg: object, X: pd.DataFrame, rows: pd.DataFrame, train, test) -> dict:
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
        model = make_surrogate(kind, cfg).fit(X.iloc[train[fit_pos]], tr.iloc[fit_pos])
        y_cal, p_cal = tr.iloc[cal_pos], model.predict(X.iloc[train[cal_pos]])
    elif cfg.interval.method == "cross":
        y_cal, p_cal = tr, out_of_fold(kind, cfg, X.iloc[train].reset_index(drop=True), tr,
                                       grouped_kfold(tr, int(cfg.cv.folds), seed))
        model = make_surrogate(kind, cfg).fit(X.iloc[train], tr)
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


def evaluate_kind(kind: str, cfg, X: pd.DataFrame, rows: pd.DataFrame, train, test, floor_by: pd.DataFrame) -> dict:
    """Every protocol for one model kind: out-of-fold (unseen shapes), unseen family, the registered variant."""
    oof = out_of_fold(kind, cfg, X, rows, grouped_kfold(rows, int(cfg.cv.folds), int(cfg.seed)))
    fam_pred = pd.DataFrame(np.nan, index=rows.index, columns=list(TARGETS))
    for _, tr, te in leave_one_family_out(rows):
        fam_pred.iloc[te] = make_surrogate(kind, cfg).fit(X.iloc[tr], rows.iloc[tr]).predict(X.iloc[te]).to_numpy()
    reg = fit_registered(kind, cfg, X, rows, train, test)
    by_op_dtype = metrics_table(rows, oof, ["family", "op", "dtype"]).merge(floor_by.reset_index(), on=["op", "dtype"], how="left")
    heldout = {t: regression_metrics(rows[t].iloc[test], reg["test_pred"][t]) | {"coverage90": reg["coverage"][t]}
               for t in TARGETS}
    return {"oof": oof, "oof_rows_family": rows["family"].to_numpy(), "oof_rows_power": rows["power_w"].to_numpy(float),
            "overall": {t: regression_metrics(rows[t], oof[t]) for t in TARGETS}, "by_op_dtype": by_op_dtype,
            "by_family": metrics_table(rows, fam_pred, ["family"]), "heldout": heldout, **reg}


def select_best(results: dict, key: str) -> str:
    """Lowest cross-validated power error; ties (e.g. hybrid and xgb share the power model) go to the lower energy error."""
    return min(results, key=lambda k: (results[k]["overall"]["power_w"][key], results[k]["overall"]["energy_j"][key]))


def print_summary(results, best, floor_all, spec, cfg, uri, decision, wall) -> None:
    fits = "one multi-target model per kind" if cfg.get("multi_target") else "one model per target"
    t = Table(title=f"H200, unseen shapes ({cfg.cv.folds}-fold grouped by shape, out of fold; {fits}): MedAPE / MAPE %")
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
