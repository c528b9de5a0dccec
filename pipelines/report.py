"""What the entry points print and the tables they keep: rich tables from an experiment's flat metrics
(``<split>/<scope>/<metric>``, ``pipelines.experiment``), the printed recipes to use a registered model, and the
files a job keeps beside its runs (``eval/`` artifacts, the public datasets' markdown summaries). Nothing here fits
or logs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True)  # logs and pipes get the full table


def _f(value, fmt: str = ".1f", scale: float = 1.0) -> str:
    return "nan" if value is None or not np.isfinite(value) else f"{value * scale:{fmt}}"


def registered(exp, cfg, wall: float | None = None) -> None:
    if exp.decision is None:
        return
    console.print(
        f"* registered {exp.best!r} as {cfg.register.name} version {exp.decision.version}; alias "
        f"@{cfg.register.alias}: {exp.decision.reason}" + (f"  (wall time {wall:.0f} s)" if wall else "") + "\n",
        soft_wrap=True,
    )


# --------------------------------------------------------------------------- main job
def collected(rows: pd.DataFrame, dataset_path: Path, note: str) -> None:
    n_ok = int((rows["status"] == "ok").sum())
    console.print(f"collected {len(rows)} rows ({len(rows) - n_ok} errors) -> {dataset_path}", soft_wrap=True)
    if note:
        console.print(note)


def main_job(exp, cfg, wall: float) -> None:
    """The registered fits on the champion split per hardware, every eval split, the registration, the recipes."""
    cov = f"coverage{round(float(cfg.interval.level) * 100)}"
    some = next(iter(exp.results.values()))
    test = some.fits.get("test")
    if test is not None:
        console.print(
            f"split {cfg.split.name}: {test.n_train} training rows ({test.calibrated.n_calibration} of them "
            f"calibrate the intervals), {len(test.index)} test rows"
        )
    table = Table(title=f"held-out rows ({cfg.split.name}): {exp.target.name}", show_lines=False)
    for col in ("model", "hardware", "n", "MAPE %", "MedAPE %", "R² (log)", "Kendall τ", f"cover {cov[8:]}%"):
        table.add_column(col, justify="left" if col in ("model", "hardware") else "right")
    for name, res in exp.results.items():
        scopes = [k.split("/")[1] for k in res.metrics if k.startswith("test/") and k.endswith("/mape")]
        for scope in scopes:
            m = {k.split("/")[2]: v for k, v in res.metrics.items() if k.startswith(f"test/{scope}/")}
            table.add_row(
                name + (" *" if name == exp.best else "") if scope == "all" else "",
                scope,
                f"{m['n']:.0f}",
                _f(m["mape"]),
                _f(m["medape"]),
                _f(m.get("r2_log"), ".3f"),
                _f(m.get("kendall_tau"), ".3f"),
                _f(m.get(cov), ".0f", 100),
                end_section=scope == scopes[-1],
            )
    console.print(table)
    if exp.eval_splits:
        trees = float(cfg.get("eval_trees") or 1)
        note = (f"; {exp.reused}: the registered fit" if exp.reused else "") + (
            ""
            if trees == 1
            else (f"; {'other splits' if exp.reused else 'every split'} refit with n_estimators x {trees:g}")
        )
        _split_table(exp, f"every split: pooled test rows of each split's folds{note}; τ within (op, hardware)", cov)
    registered(exp, cfg, wall)
    if exp.decision is not None:
        _recipes(exp, cfg)


def _split_table(exp, title: str, cov: str) -> None:
    table = Table(title=title, show_lines=False)
    for col in (
        "model",
        "split",
        "folds",
        "n",
        "MAPE %",
        "MedAPE %",
        "SMAPE %",
        "R² (log)",
        "τ within",
        f"cover {cov[8:]}%",
    ):
        table.add_column(col, justify="left" if col in ("model", "split") else "right")
    for name, res in exp.results.items():
        for s in exp.eval_splits:
            m = {k.split("/")[2]: v for k, v in res.metrics.items() if k.startswith(f"{s}/all/")}
            table.add_row(
                name if s == exp.eval_splits[0] else "",
                s + (" (champion split)" if s == exp.reused else ""),
                f"{m['folds']:.0f}",
                f"{m['n']:.0f}",
                _f(m["mape"]),
                _f(m["medape"]),
                _f(m["smape"]),
                _f(m.get("r2_log"), ".3f"),
                _f(m["group_kendall_tau"], ".3f"),
                _f(m.get(cov), ".0f", 100),
                end_section=s == exp.eval_splits[-1],
            )
    console.print(table)


def _recipes(exp, cfg) -> None:
    uri, name, alias = exp.tracking_uri, cfg.register.name, cfg.register.alias
    frame = exp.results[exp.best].test_frame
    hw, dt = (
        ("H100-SXM", "float16") if exp.target.name == "runtime_ms" else (frame["hardware"].iloc[0], "float32")
    )  # a hardware the target was measured on
    example = f"[dict(op='matmul', m=1024, n=1024, k=1024, dtype='{dt}', hardware='{hw}')]"
    print("Predict from the shell (workloads.csv: op, hardware, dtype and shape columns such as m,n,k):")
    print(f"  MLFLOW_TRACKING_URI={uri} costmodel predict --model models:/{name}@{alias} --input workloads.csv")
    print("Predict from Python:")
    print(
        f"  python -c \"import mlflow, pandas as pd; mlflow.set_tracking_uri('{uri}'); "
        f"m = mlflow.pyfunc.load_model('models:/{name}@{alias}'); print(m.predict(pd.DataFrame({example})))\""
    )
    print("List registered versions, aliases and held-out metrics:")
    print(f"  costmodel models --tracking-uri {uri}")
    print("Browse runs, metrics and plots:")
    print(f"  mlflow ui --backend-store-uri {uri} --port 5000   # Ctrl-C stops it and the server process it starts")


# --------------------------------------------------------------------------- power surrogate
def power_extras(rows: pd.DataFrame, floor_by: pd.DataFrame, floor_all: pd.Series):
    """The power job's own ``eval/`` files per model (noise floor metrics, tables per op / dtype and per held-out
    family, out-of-fold predictions and plots), for ``pipelines.experiment.run_experiment(extras=...)``."""
    from data.workloads import SHAPE_PARAMS
    from models.evaluate import POWER_COLUMNS, metrics_table, power_plots

    def extras(name, res, directory: Path):
        oof = in_row_order(res.fits["held_out_shapes_kfold"], rows)
        fam = in_row_order(res.fits["held_out_family"], rows)
        by_op_dtype = metrics_table(rows, oof, ["family", "op", "dtype"]).merge(
            floor_by.reset_index(), on=["op", "dtype"], how="left"
        )
        files = {
            "power_by_op_dtype.csv": by_op_dtype,
            "unseen_family.csv": metrics_table(rows, fam, ["family"]),
            "oof_predictions.csv": rows[["op", "hardware", "dtype", *SHAPE_PARAMS, *POWER_COLUMNS]].join(
                oof.add_prefix("pred_")
            ),
        }
        for fname, df in files.items():
            df.to_csv(directory / fname, index=False)
        res.tables = {"by_op_dtype": by_op_dtype, "oof": oof}
        metrics = {f"noise_floor/all/{t}.medape": float(floor_all[f"noise_{t}"]) for t in POWER_COLUMNS}
        return metrics, [*(directory / f for f in files), *power_plots(rows, oof, name, directory)]

    return extras


def in_row_order(fit, rows: pd.DataFrame, columns=("runtime_ms", "power_w", "energy_j")) -> pd.DataFrame:
    """A fit's pooled predictions placed on the rows they predict (NaN where a row was never tested)."""
    out = pd.DataFrame(np.nan, index=rows.index, columns=list(columns))
    out.iloc[fit.index] = fit.pred
    return out


def power(exp, cfg, rows: pd.DataFrame, floor_all: pd.Series, spec: pd.DataFrame, wall: float) -> None:
    from sklearn.metrics import r2_score

    from models.evaluate import POWER_COLUMNS

    fits = "one multi-target model per kind" if cfg.get("multi_target") else "one model per target"
    cv, cov = "held_out_shapes_kfold", f"coverage{round(float(cfg.interval.level) * 100)}"
    t = Table(
        title=f"H200, unseen shapes ({cfg.split.folds}-fold grouped by shape, out of fold; {fits}): MedAPE / MAPE %"
    )
    for c in ("model", "runtime", "power", "energy (derived)", "unseen family: power MedAPE", "held-out cover90 P/E"):
        t.add_column(c, justify="left" if c == "model" else "right")
    for k, r in exp.results.items():
        m = r.metrics
        fams = sorted({key.split("/")[1] for key in m if key.startswith("held_out_family/family:")})
        fam = ", ".join(f"{f.split(':', 1)[1]} {m[f'held_out_family/{f}/power_w.medape']:.0f}" for f in fams)
        t.add_row(
            k + (" *" if k == exp.best else ""),
            *(f"{m[f'{cv}/all/{x}.medape']:.1f} / {m[f'{cv}/all/{x}.mape']:.1f}" for x in POWER_COLUMNS),
            fam,
            f"{100 * m[f'test/all/power_w.{cov}']:.0f} / {100 * m[f'test/all/energy_j.{cov}']:.0f}",
        )
    t.add_row("noise floor", *(f"{floor_all[f'noise_{x}']:.1f} (median)" for x in POWER_COLUMNS), "", "")
    console.print(t)
    gemm = (rows["family"] == "gemm").to_numpy()
    for k, r in exp.results.items():  # beside the published reference: RF GEMM power model, RTX 4070, 5.42% / R^2 0.78
        y, p = rows["power_w"].to_numpy(float)[gemm], r.tables["oof"]["power_w"].to_numpy()[gemm]
        console.print(
            f"{k}: GEMM family (matmul, bmm, linear) power on unseen shapes: MedAPE "
            f"{np.median(np.abs(p - y) / y) * 100:.2f}%, R^2 {r2_score(y, p):.2f} (W, n={gemm.sum()})"
        )
    tb = Table(
        title=f"{exp.best}: power and energy per op family and dtype (unseen shapes) beside the noise floor "
        "(median |pass0-pass1|/mean)"
    )
    for c in (
        "family",
        "op",
        "dtype",
        "n",
        "power MedAPE",
        "power MAPE",
        "noise power",
        "energy MedAPE",
        "energy MAPE",
        "noise energy",
    ):
        tb.add_column(c, justify="left" if c in ("family", "op", "dtype") else "right")
    for r in exp.results[exp.best].tables["by_op_dtype"].to_dict("records"):
        tb.add_row(
            r["family"],
            r["op"],
            r["dtype"],
            str(r["n"]),
            f"{r['power_w_medape']:.1f}",
            f"{r['power_w_mape']:.1f}",
            f"{r['noise_power_w']:.1f}",
            f"{r['energy_j_medape']:.1f}",
            f"{r['energy_j_mape']:.1f}",
            f"{r['noise_energy_j']:.1f}",
        )
    console.print(tb)
    console.print("energy_j is derived: power_w x runtime_ms of the same prediction (never predicted on its own).")
    ts = Table(
        title="GPUs with a spec and NO measured rows: predicted from specs alone "
        "(one GPU measured: this transfer cannot be validated here)"
    )
    for c in ("hardware", "op", "dtype", "shape", "runtime_ms", "power_w [90% interval]", "energy_j", "idle/TDP W"):
        ts.add_column(c)
    for r in spec.to_dict("records"):
        ts.add_row(
            r["hardware"],
            r["op"],
            r["dtype"],
            r["shape"],
            f"{r['runtime_ms']:.4g}",
            f"{r['power_w']:.0f} [{r['power_w_lo']:.0f}, {r['power_w_hi']:.0f}]",
            f"{r['energy_j']:.3g}",
            f"{r['idle_w']:.0f}/{r['tdp_w']:.0f}",
        )
    console.print(ts)
    console.print(
        f"spec-only predictions changed by the [idle, {cfg.power_cap} x TDP] bound: "
        f"{int(spec['bounded'].iloc[0]) if len(spec) else 0} of {len(spec)}",
        markup=False,
    )
    registered(exp, cfg, wall)
    print(
        f"  MLFLOW_TRACKING_URI={exp.tracking_uri} costmodel predict --model models:/{cfg.register.name}@"
        f"{cfg.register.alias} --input workloads.csv"
        "   # add a 'network' column to cost a list of layers as one network"
    )


# --------------------------------------------------------------------------- whole networks
def networks(exp, title: str) -> None:
    table = Table(title=title)
    for col in ("split", "model", "n_train", "n_test", "MAPE %", "MedAPE %", "fit s"):
        table.add_column(col, justify="left" if col in ("split", "model") else "right")
    for s in exp.eval_splits:
        for name, res in exp.results.items():
            m = {k.split("/")[2]: v for k, v in res.metrics.items() if k.startswith(f"{s}/all/")}
            table.add_row(
                s, name, f"{m['n_train']:.0f}", f"{m['n']:.0f}", _f(m["mape"]), _f(m["medape"]), _f(m["fit_seconds"])
            )
    console.print(table)


# --------------------------------------------------------------------------- public datasets
def public_eval_files(r: dict, dataset: str):
    """The ``eval/`` files of one public-dataset record (``models.evaluate.record``): predictions, parity plot,
    error CDF, a bar per hardware (runtime) or per target (FPGA resources), the record's extra tables."""
    from features.public_data import DESCRIBE
    from models.evaluate import bar_plot, error_cdf_plot, parity_plot
    from models.public_eval import FPGA_TARGETS

    kind, rows, y, pred, metrics = r["kind"], r["rows"], r["y"], r["pred"], r["metrics"]
    if kind == "resource":
        frame = rows
    elif kind == "classify":  # labels: no parity plot
        frame = rows[["k", "n", "precision_bits"]].assign(group="all", y=y, pred_ok=pred)
    else:
        frame = rows[[c for c in DESCRIBE + ["config"] if c in rows and rows[c].notna().any()]]
        frame = frame.assign(group=rows["hardware"].to_numpy(), y=y, pred=pred)

    def write(directory: Path):
        title, sym = f"{dataset} {r['split']} {r['model']}", kind != "runtime"
        files = []
        if kind != "classify" and len(frame):
            yy, p, g = frame["y"].to_numpy(float), frame["pred"].to_numpy(float), frame["group"].to_numpy()
            shift = float(sym)
            unit = "value + 1" if sym else "runtime (ms)"  # zero-heavy targets: y + 1 on log axes
            parity_plot(
                g,
                yy + shift,
                np.maximum(p + shift, 1e-12),
                title,
                directory / "parity.png",
                f"true {unit}",
                f"predicted {unit}",
            )
            error_cdf_plot(g, yy, p, f"{title}: error CDF", directory / "error_cdf.png", symmetric=sym)
            bars = (
                {t: metrics["all"][f"{t}.smape"] for t in FPGA_TARGETS}
                if sym
                # per hardware, not per family
                else {h: m["mape"] for h, m in metrics.items() if h != "all" and not h.startswith("family:")}
            )
            bar_plot(bars, "SMAPE (%)" if sym else "MAPE (%)", title, directory / "per_group.png")
            files += [directory / f for f in ("parity.png", "error_cdf.png", "per_group.png")]
        for fname, df in {"predictions.csv": frame, **r["extra"]}.items():
            df.to_csv(directory / fname, index=False)
            files.append(directory / fname)
        return {}, files

    return write


SUMMARY = {
    "neusight": [
        "n",
        "mape",
        "medape",
        "smape",
        "r2_log",
        "group_kendall_tau",
        "oracle_gpu_scale_medape",
        "oracle_op_gpu_scale_medape",
        "few_shot_10_medape",
        "few_shot_100_medape",
    ],
    "kerneltuner": ["n", "mape", "kendall_tau", "top1_slowdown", "top5_slowdown", "top10_slowdown"],
    "kerneltuner_all": [
        "n",
        "mape",
        "mean_gpu_kendall_tau",
        "mean_gpu_top1_slowdown",
        "mean_gpu_top5_slowdown",
        "mean_gpu_top10_slowdown",
    ],
    "resource": ["n", "r2", "r2_log1p", "smape", "mape", "coverage90"],
    "classify": ["n", "accuracy", "balanced_accuracy", "test_ok_fraction"],
    "llm_serving": ["n", "ttft_ms.mape", "ttft_ms.medape", "tpot_ms.mape", "tpot_ms.medape", "n_failed"],
}


def summary_table(records: list[dict], dataset: str) -> str:
    """Markdown: one line per (split, model, scope); a multi-target record (FPGA resources) one line per target."""
    from models.public_eval import FPGA_TARGETS

    lines = []
    for r in records:
        if "metrics" not in r:
            continue
        for scope, m in r["metrics"].items():
            rows = [(scope, m, SUMMARY["neusight"])]
            if dataset == "wa_hls4ml":
                rows = (
                    [(scope, m, SUMMARY["classify"])]
                    if r["model"].startswith("feasibility")
                    else [
                        (t, {k.split(".", 1)[1]: v for k, v in m.items() if k.startswith(f"{t}.")}, SUMMARY["resource"])
                        for t in FPGA_TARGETS
                    ]
                )
            elif dataset == "llm_serving":
                rows = [(scope, m, SUMMARY["llm_serving"])]
            elif dataset == "kerneltuner":
                rows = [(scope, m, SUMMARY["kerneltuner" if scope != "all" else "kerneltuner_all"])]
            for name, values, cols in rows:
                vals = ", ".join(f"{c}={values[c]:.4g}" for c in cols if c in values)
                lines.append(f"| {r['split']} | {r['model']} | {name} | {vals} |")
    return "| split | model | scope | metrics |\n|---|---|---|---|\n" + "\n".join(lines)


def public_eval(records: list[dict], dataset: str, out: Path, uri: str, experiment_name: str, wall: float) -> None:
    """One line per logged record, the markdown summary (also written to ``<out>/public_eval/<dataset>_summary.md``)."""
    for r in records:
        if "run_id" in r:
            print(f"{dataset} / {r['split']} / {r['model']}: {r['seconds']:.1f} s, run {r['run_id']}")
    table, path = summary_table(records, dataset), out / "public_eval" / f"{dataset}_summary.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table + "\n")
    print(table)
    print(f"summary -> {path}; MLflow store {uri} (experiment {experiment_name}); wall {wall:.0f} s")
