"""Held-out metrics and plots.

* MAPE and median APE in percent, on the target's own scale;
* R^2 on log10(target) (runtimes span orders of magnitude; R^2 on the raw scale would only score the
  largest kernels);
* Kendall tau between predicted and true values (rank agreement: what a search or scheduler uses).
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


def evaluate(hardware: pd.Series, y_true, y_pred) -> dict[str, dict[str, float]]:
    """Metrics overall (key ``"all"``) and per hardware id."""
    hardware = np.asarray(hardware)
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    result = {"all": regression_metrics(y_true, y_pred)}
    for hw in sorted(set(hardware)):
        mask = hardware == hw
        result[hw] = regression_metrics(y_true[mask], y_pred[mask])
    return result


def parity_plot(hardware, y_true, y_pred, title: str, path) -> None:
    fig, ax = plt.subplots(figsize=(6, 6))
    hardware = np.asarray(hardware)
    for hw in sorted(set(hardware)):
        m = hardware == hw
        ax.scatter(np.asarray(y_true)[m], np.asarray(y_pred)[m], s=8, alpha=0.6, label=hw)
    lo = float(min(np.min(y_true), np.min(y_pred)))
    hi = float(max(np.max(y_true), np.max(y_pred)))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="true runtime (ms): measured or simulated", ylabel="predicted runtime (ms)", title=title)
    ax.legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def error_cdf_plot(hardware, y_true, y_pred, title: str, path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    hardware = np.asarray(hardware)
    ape = np.abs(np.asarray(y_pred) - np.asarray(y_true)) / np.asarray(y_true) * 100
    for hw in ["all", *sorted(set(hardware))]:
        e = np.sort(ape if hw == "all" else ape[hardware == hw])
        ax.plot(e, np.arange(1, len(e) + 1) / len(e), lw=2 if hw == "all" else 1, label=hw)
    ax.set(xscale="symlog", xlabel="absolute percentage error (%)", ylabel="fraction of held-out rows", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
