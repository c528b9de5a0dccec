"""Held-out metrics and plots.

* MAPE and median APE in percent, on the target's own scale;
* R^2 on log10(target) (runtimes span orders of magnitude; R^2 on the raw scale would only score the
  largest kernels);
* Kendall tau between predicted and true values (rank agreement: what a search or scheduler uses).

Public-data evaluation (``pipelines/evaluate.py``) adds:

* SMAPE = mean(2 |p - y| / (|p| + |y|)) * 100, a term with p = y = 0 counting as 0 (defined for the zero-heavy
  FPGA targets where MAPE is not); bounded in [0, 200];
* Kendall tau *within groups* (e.g. each (op, GPU)): the unweighted mean of tau over groups with at least two
  rows and non-constant truth, so a model cannot score well by ranking only across groups (big vs small ops);
* top-k slowdown for configuration selection: min(true value among the k configs the model predicts fastest)
  / min(true value over all configs); 1.0 = the model's top-k contains the true best;
* the error left after an *oracle* per-group scale (each group's predictions divided by that group's median
  predicted / true ratio, read from the test labels): a diagnostic that splits an error into a per-group scale
  (e.g. one factor per unseen GPU) and what no single factor can fix. Never a model's score;
* its honest counterpart, few-shot calibration: each group's factor is the median true / predicted ratio of k rows
  of that group drawn at random (k measurements on a new GPU), scored on the group's other rows only.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import kendalltau  # noqa: E402
from sklearn.metrics import r2_score  # noqa: E402


def regression_metrics(y_true, y_pred) -> dict[str, float]:
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    ape = np.abs(y_pred - y_true) / y_true * 100
    out = {"n": float(len(y_true)), "mape": float(np.mean(ape)), "medape": float(np.median(ape))}
    if len(y_true) >= 2:
        out["r2_log"] = float(r2_score(np.log10(y_true), np.log10(np.maximum(y_pred, 1e-12))))
        out["kendall_tau"] = float(kendalltau(y_true, y_pred).statistic)
    return out


def smape(y_true, y_pred) -> float:
    """Symmetric MAPE in percent; rows with p = y = 0 contribute 0."""
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    denom = np.abs(y_true) + np.abs(y_pred)
    terms = np.divide(2 * np.abs(y_pred - y_true), denom, out=np.zeros_like(denom), where=denom > 0)
    return float(np.mean(terms) * 100)


def within_group_kendall(groups, y_true, y_pred) -> float:
    """Mean Kendall tau over groups (>= 2 rows, truth not constant); NaN if no group qualifies."""
    frame = pd.DataFrame({"g": np.asarray(groups), "y": np.asarray(y_true, float), "p": np.asarray(y_pred, float)})
    taus = []
    for _, g in frame.groupby("g", sort=False):
        if len(g) >= 2 and g["y"].nunique() > 1:
            tau = kendalltau(g["y"], g["p"]).statistic
            taus.append(0.0 if np.isnan(tau) else tau)  # constant predictions carry no ranking: tau 0
    return float(np.mean(taus)) if taus else float("nan")


def oracle_scaled_error(groups, y_true, y_pred) -> dict[str, float]:
    """MedAPE / MAPE (%) after dividing each group's predictions by the group's median pred / true ratio.

    Uses the test labels (an oracle): the error a perfect per-group scale correction would still leave.
    """
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    log_ratio = pd.Series(np.log(y_pred / y_true)).groupby(np.asarray(groups)).transform("median").to_numpy()
    ape = np.abs(y_pred * np.exp(-log_ratio) - y_true) / y_true * 100
    return {"medape": float(np.median(ape)), "mape": float(np.mean(ape))}


def few_shot_scaled_error(groups, y_true, y_pred, k: int, seed: int = 0, draws: int = 5) -> dict[str, float]:
    """MedAPE / MAPE (%) after scaling each group's predictions by the median true / pred ratio of ``k`` of its rows.

    The k calibration rows are drawn at random per group (``draws`` times, seeded) and never scored; groups with
    k rows or fewer are skipped. Returns the mean over draws of MedAPE and MAPE, and the rows scored per draw.
    """
    y_true, y_pred, groups = np.asarray(y_true, float), np.asarray(y_pred, float), np.asarray(groups)
    rng = np.random.default_rng(seed)
    medape, mape, n = [], [], 0
    for _ in range(draws):
        ape = []
        for g in np.unique(groups):
            rows = np.flatnonzero(groups == g)
            if len(rows) <= k:
                continue
            calib = rng.choice(rows, size=k, replace=False)
            rest = np.setdiff1d(rows, calib)
            factor = np.median(y_true[calib] / y_pred[calib])
            ape.append(np.abs(y_pred[rest] * factor - y_true[rest]) / y_true[rest] * 100)
        if not ape:
            return {"medape": float("nan"), "mape": float("nan"), "n": 0.0}
        ape = np.concatenate(ape)
        medape.append(np.median(ape))
        mape.append(np.mean(ape))
        n = len(ape)
    return {"medape": float(np.mean(medape)), "mape": float(np.mean(mape)), "n": float(n)}


def topk_slowdown(y_true, y_pred, k: int) -> float:
    """min(y_true over the k rows with the lowest y_pred) / min(y_true); ties in y_pred broken by row order."""
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    if len(y_true) == 0 or k < 1:
        raise ValueError("topk_slowdown needs at least one row and k >= 1")
    picks = np.argsort(y_pred, kind="stable")[:k]
    return float(np.min(y_true[picks]) / np.min(y_true))


def ranking_metrics(y_true, y_pred, ks=(1, 5, 10)) -> dict[str, float]:
    """Kendall tau and top-k slowdowns of one configuration space (one kernel on one GPU)."""
    out = {"kendall_tau": float(kendalltau(y_true, y_pred).statistic) if len(y_true) >= 2 else float("nan")}
    out.update({f"top{k}_slowdown": topk_slowdown(y_true, y_pred, k) for k in ks})
    return out


def resource_metrics(y_true, y_pred) -> dict[str, float]:
    """Metrics for non-negative, zero-heavy targets (FPGA resources): R^2 raw and on log1p, SMAPE, MAE, and MAPE
    over the rows with y > 0 only (``n_mape`` of them; a percentage of 0 is undefined)."""
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    out = {"n": float(len(y_true)), "smape": smape(y_true, y_pred), "mae": float(np.mean(np.abs(y_pred - y_true)))}
    pos = y_true > 0
    out["n_mape"] = float(pos.sum())
    if pos.any():
        out["mape"] = float(np.mean(np.abs(y_pred[pos] - y_true[pos]) / y_true[pos]) * 100)
    if len(y_true) >= 2:
        out["r2"] = float(r2_score(y_true, y_pred))
        out["r2_log1p"] = float(r2_score(np.log1p(y_true), np.log1p(np.maximum(y_pred, 0))))
    return out


def bar_plot(values: dict[str, float], ylabel: str, title: str, path) -> None:
    """One bar per key (hardware id, target, ...), e.g. per-hardware MAPE."""
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(values) + 2), 4))
    keys = list(values)
    ax.bar(range(len(keys)), [values[k] for k in keys])
    ax.set_xticks(range(len(keys)), keys, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel=ylabel, title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def evaluate(hardware: pd.Series, y_true, y_pred) -> dict[str, dict[str, float]]:
    """Metrics overall (key ``"all"``) and per hardware id."""
    hardware = np.asarray(hardware)
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    result = {"all": regression_metrics(y_true, y_pred)}
    for hw in sorted(set(hardware)):
        mask = hardware == hw
        result[hw] = regression_metrics(y_true[mask], y_pred[mask])
    return result


def parity_plot(
    hardware,
    y_true,
    y_pred,
    title: str,
    path,
    xlabel: str = "true runtime (ms): measured or simulated",
    ylabel: str = "predicted runtime (ms)",
) -> None:
    fig, ax = plt.subplots(figsize=(6, 6))
    hardware = np.asarray(hardware)
    for hw in sorted(set(hardware)):
        m = hardware == hw
        ax.scatter(np.asarray(y_true)[m], np.asarray(y_pred)[m], s=8, alpha=0.6, label=hw)
    lo = float(min(np.min(y_true), np.min(y_pred)))
    hi = float(max(np.max(y_true), np.max(y_pred)))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def error_cdf_plot(hardware, y_true, y_pred, title: str, path, symmetric: bool = False) -> None:
    """CDF of the absolute percentage error (``symmetric``: of the SMAPE term, for targets that can be 0)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    hardware = np.asarray(hardware)
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    if symmetric:
        denom = np.abs(y_true) + np.abs(y_pred)
        ape = np.divide(200 * np.abs(y_pred - y_true), denom, out=np.zeros_like(denom), where=denom > 0)
    else:
        ape = np.abs(y_pred - y_true) / y_true * 100
    for hw in ["all", *sorted(set(hardware))]:
        e = np.sort(ape if hw == "all" else ape[hardware == hw])
        ax.plot(e, np.arange(1, len(e) + 1) / len(e), lw=2 if hw == "all" else 1, label=hw)
    ax.set(xscale="symlog", xlabel="absolute percentage error (%)", ylabel="fraction of held-out rows", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- power and energy (pipelines/power.py) ---------------------------------------------------------------
POWER_COLUMNS = ("runtime_ms", "power_w", "energy_j")


def noise_floor(rows: pd.DataFrame, targets=POWER_COLUMNS, by=("op", "dtype")) -> pd.DataFrame:
    """Median over repeated configurations of |a - b| / mean(a, b) (in %), per group, for each target.

    A configuration is (op, shape, dtype, hardware); only those measured exactly twice count (the H200 file's two
    passes), so the floor is what a perfect model could not beat.
    """
    key = ["op", "shape_id", "dtype", "hardware"]
    g = rows.groupby(key, sort=False)
    pairs = rows[g[key[0]].transform("size").to_numpy() == 2]
    agg = pairs.groupby(key, sort=False)[list(targets)].agg(["min", "max"])
    rel = {t: 200 * (agg[(t, "max")] - agg[(t, "min")]) / (agg[(t, "max")] + agg[(t, "min")]) for t in targets}
    rel = pd.DataFrame(rel).reset_index()
    out = rel.groupby(list(by))[list(targets)].median() if by else rel[list(targets)].median().to_frame().T
    return out.rename(columns=lambda t: f"noise_{t}")


def metrics_table(rows: pd.DataFrame, pred: pd.DataFrame, by: list[str], targets=POWER_COLUMNS) -> pd.DataFrame:
    """MedAPE / MAPE (%) per group for each target."""
    recs = []
    groups = rows.groupby(by, sort=True).indices if by else {"all": np.arange(len(rows))}
    for key, idx in groups.items():
        rec = dict(zip(by, key if isinstance(key, tuple) else (key,))) if by else {"scope": "all"}
        rec["n"] = len(idx)
        for t in targets:
            m = regression_metrics(rows[t].to_numpy(float)[idx], pred[t].to_numpy(float)[idx])
            rec[f"{t}_medape"], rec[f"{t}_mape"] = m["medape"], m["mape"]
        recs.append(rec)
    return pd.DataFrame(recs)


def power_plots(rows: pd.DataFrame, pred: pd.DataFrame, name: str, directory) -> list:
    """Parity (power and energy), error CDF (runtime, power, energy), power vs arithmetic intensity per dtype."""
    files = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, t, unit in zip(axes, ("power_w", "energy_j"), ("W", "J per call")):
        for op in sorted(rows["op"].unique()):
            m = (rows["op"] == op).to_numpy()
            ax.scatter(rows[t][m], pred[t][m], s=9, alpha=0.7, label=op)
        lo, hi = float(min(rows[t].min(), pred[t].min())), float(max(rows[t].max(), pred[t].max()))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=f"measured {t} ({unit}), H200",
            ylabel=f"predicted {t}",
            title=f"{name}: unseen shapes (out of fold)",
        )
    axes[0].legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    files.append(directory / "oof_parity.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for t in POWER_COLUMNS:
        e = np.sort(np.abs(pred[t] - rows[t]) / rows[t] * 100)
        ax.plot(e, np.arange(1, len(e) + 1) / len(e), label=t)
    ax.set(
        xscale="symlog",
        xlabel="absolute percentage error (%)",
        ylabel="fraction of rows",
        title=f"{name}: error CDF, unseen shapes",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    files.append(directory / "oof_error_cdf.png")
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


def record(
    split: str,
    model: str,
    metrics: dict,
    rows: pd.DataFrame,
    y,
    pred,
    seconds: float,
    extra=None,
    kind: str = "runtime",
) -> dict:
    """One (split, model) result: ``metrics[scope][metric]``, the scored ``rows`` with truth ``y`` and ``pred``,
    ``kind`` (runtime | resource | classify: how it is plotted), ``extra`` tables to keep beside it."""
    return {
        "split": split,
        "model": model,
        "metrics": metrics,
        "rows": rows,
        "y": y,
        "pred": pred,
        "seconds": seconds,
        "extra": extra or {},
        "kind": kind,
    }
