"""The LLM serving check: ``costmodel llm`` against real serving measurements (``python -m pipelines.evaluate
experiment=llm_serving``; ``conf/dataset/llm_serving.yaml``, ``docs/llm.md``).

Rows: aiconfigurator's silicon measurements (``aiconfigurator/silicon_sample_h200.csv``: vLLM, SGLang and TensorRT-LLM
on H200 nodes at a fixed concurrency, ISL / OSL, TP, with measured ``silicon_ttft_ms`` and ``silicon_tpot_ms``),
aggregated mode, the dense models the dataset config maps to a Hugging Face config. Each row is costed by
:func:`models.llm.predict_llm` twice, on the same composition and serving law: with the kernel model (the physics
model fitted here on the shipped pack, or a registered model) and with the plain spec roofline (the baseline).
Metrics per scope (``all``, ``hardware:<id>``, ``model:<name>``, ``tp:<n>``, ``backend:<name>``,
``concurrency:<bucket>``):
``ttft_ms.mape``, ``tpot_ms.mape`` (and medians, the share of rows inside the interval, ``n``), logged under
``<split>/<scope>/<metric>``; the table is written to ``<out>/public_eval/<table>.md``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from models.llm import (
    LLMError,
    PredictCoster,
    RooflineCoster,
    compose_steps,
    finish,
    load_conf,
    load_config,
    prepare,
    price,
)

SPLIT = "llm_serving"
TARGETS = ("ttft_ms", "tpot_ms")
MEASURED = {"ttft_ms": "silicon_ttft_ms", "tpot_ms": "silicon_tpot_ms"}


def default_root() -> Path:
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def load_silicon(data_root=None, ds=None) -> pd.DataFrame:
    """The check's rows (module docstring): the silicon CSV's rows of ``ds.mode`` and the models of ``ds.models``,
    with ``config`` (the config file), ``dtype`` and ``kv_dtype`` (``ds.quant``, ``ds.kv_dtype``), ints for the
    request shape; ``ds.limit`` keeps the first rows."""
    from data.importers import DatasetError

    root = Path(data_root) if data_root else default_root()
    path = root / ds.file
    if not path.is_file():
        raise DatasetError(f"llm_serving: {path} not found (the aiconfigurator silicon rows)")
    raw = pd.read_csv(path)
    models = dict(ds.models)
    rows = raw[(raw["mode"] == ds.mode) & raw["model_path"].isin(list(models))].copy()
    rows["config"] = [str(root / ds.configs / models[m]) for m in rows["model_path"]]
    quant = dict(ds.quant)
    unknown = sorted(set(rows["gemm_quant_mode"]) - set(quant))
    if unknown:
        raise DatasetError(f"llm_serving: gemm_quant_mode {unknown} has no dtype in the dataset config's quant")
    rows["dtype"] = rows["gemm_quant_mode"].map(quant)
    rows["kv_dtype"] = rows["backend"].map(dict(ds.kv_dtype)).fillna("")
    rows["kv_reserve"] = rows["backend"].map(dict(ds.get("kv_reserve") or {})).fillna("")
    rows["hardware"] = rows["system"].map(dict(ds.get("systems") or {})).fillna(rows["system"])
    for c in ("batch_size", "tp_size", "isl", "osl"):
        rows[c] = rows[c].astype(int)
    rows = rows.sort_values(["model_path", "backend", "tp_size", "isl", "osl", "batch_size"]).reset_index(drop=True)
    return rows.head(int(ds.limit)) if ds.get("limit") else rows


def concurrency_bucket(c: np.ndarray, edges) -> np.ndarray:
    """``<=8``, ``9-32``, ... labels of concurrencies over the ascending ``edges``."""
    edges = [int(e) for e in edges]
    labels = [f"le{edges[0]}"] + [f"{a + 1}-{b}" for a, b in zip(edges, edges[1:])] + [f"gt{edges[-1]}"]
    return np.array([labels[int(np.searchsorted(edges, x))] for x in c], object)


def compose_rows(rows: pd.DataFrame, coster, registry=None, conf=None) -> list:
    """Each row's request prepared, its kernels costed with ``coster`` (all rows' together,
    ``models.llm.price``) and its steps composed: ``(Prepared, Composed)``, or the row's ``LLMError``."""
    conf = conf or load_conf()
    configs: dict[str, object] = {}
    out: list = []
    ready = []
    for r in rows.itertuples(index=False):
        if r.config not in configs:
            configs[r.config] = load_config(r.config, name=r.model_path.rsplit("/", 1)[-1])
        try:
            pr = prepare(
                configs[r.config],
                r.hardware,
                tp=int(r.tp_size),
                dtype=r.dtype,
                kv_dtype=r.kv_dtype or None,
                batch=int(r.batch_size),
                isl=int(r.isl),
                osl=int(r.osl),
                kv_reserve=r.kv_reserve or None,
                registry=registry,
                conf=conf,
            )
        except LLMError as exc:
            out.append(exc)
            continue
        ready.append((len(out), pr))
        out.append(None)
    for (i, pr), allk in zip(ready, price([pr for _, pr in ready], coster)):
        out[i] = (pr, compose_steps(pr, allk, registry, conf))
    return out


def law_rows(composed: list, coster, conf) -> pd.DataFrame:
    """The serving law over composed rows (:func:`compose_rows`): one row of figures each, ``error`` where the
    request could not be costed."""
    return pd.DataFrame(
        [
            {"error": str(c)} if isinstance(c, LLMError) else {**finish(*c, coster, conf).summary, "error": ""}
            for c in composed
        ]
    )


def predict_rows(rows: pd.DataFrame, coster, registry=None, conf=None) -> pd.DataFrame:
    """Each row served by ``costmodel llm`` with ``coster``: its figures (``ttft_ms``, ``tpot_ms`` + ends,
    ``in_domain``, ``regime``, ``max_concurrency``, ...), or ``error`` where it cannot be costed."""
    conf = conf or load_conf()
    return law_rows(compose_rows(rows, coster, registry, conf), coster, conf)


def with_law(conf: dict, ds) -> dict:
    """conf/llm.yaml with the dataset's ``law`` (the benchmark's protocol constants) over it."""
    return {**conf, **dict(ds.get("law") or {})}


GRID = {"requests_per_client": (0, 3, 5, 8, 10, 20), "host_ms_per_request": (0.0, 0.01, 0.02, 0.03, 0.04, 0.06)}


def fit_law(rows: pd.DataFrame, coster, registry=None, conf=None, grid=None) -> pd.DataFrame:
    """The serving law's protocol and engine constants over a grid: per point the rows' median TTFT and TPOT APE
    and their mean (``score``), best first. The kernels are costed and the steps composed once."""
    conf = conf or load_conf()
    grid = grid or GRID
    composed = compose_rows(rows, coster, registry, conf)
    out = []
    for k in grid["requests_per_client"]:
        for h in grid["host_ms_per_request"]:
            c = {**conf, "requests_per_client": k, "host_ms_per_request": h}
            pred = law_rows(composed, coster, c)
            m = metrics(rows, pred, [])["all"]
            out.append(
                {
                    "requests_per_client": k,
                    "host_ms_per_request": h,
                    "ttft_medape": m["ttft_ms.medape"],
                    "tpot_medape": m["tpot_ms.medape"],
                    "ttft_mape": m["ttft_ms.mape"],
                    "tpot_mape": m["tpot_ms.mape"],
                }
            )
    table = pd.DataFrame(out)
    table["score"] = (table["ttft_medape"] + table["tpot_medape"]) / 2
    return table.sort_values("score").reset_index(drop=True)


def _scopes(rows: pd.DataFrame, buckets) -> list[tuple[str, np.ndarray]]:
    out = [("all", np.ones(len(rows), bool))]
    short = rows["model_path"].str.rsplit("/", n=1).str[-1]  # a scope name holds no "/" (the metric key's separator)
    scoped = ((rows["hardware"], "hardware"), (short, "model"), (rows["tp_size"], "tp"), (rows["backend"], "backend"))
    for values, name in scoped:
        for v in sorted(set(values)):
            out.append((f"{name}:{v}", (values == v).to_numpy()))
    if len(buckets):
        b = concurrency_bucket(rows["batch_size"].to_numpy(int), buckets)
        for v in dict.fromkeys(concurrency_bucket(np.array(sorted(set(rows["batch_size"]))), buckets)):
            out.append((f"concurrency:{v}", b == v))
    return out


def metrics(rows: pd.DataFrame, pred: pd.DataFrame, buckets) -> dict[str, dict[str, float]]:
    """Per scope: ``n``, and per target ``<t>.mape``, ``<t>.medape`` (%), ``<t>.covered`` (the measurement inside
    the interval), over the rows costed (``n_failed``: rows that could not be)."""
    ok = (pred["error"] == "").to_numpy() if "error" in pred else np.ones(len(rows), bool)
    out = {}
    for scope, mask in _scopes(rows, buckets):
        m = mask & ok
        if not mask.any():
            continue
        vals = {"n": float(m.sum()), "n_failed": float((mask & ~ok).sum())}
        for t in TARGETS:
            if not m.any():
                continue
            y = rows.loc[m, MEASURED[t]].to_numpy(float)
            p = pred.loc[m, t].to_numpy(float)
            ape = np.abs(p - y) / y * 100
            vals[f"{t}.mape"] = float(ape.mean())
            vals[f"{t}.medape"] = float(np.median(ape))
            lo, hi = pred.loc[m, f"{t}_lo"].to_numpy(float), pred.loc[m, f"{t}_hi"].to_numpy(float)
            vals[f"{t}.covered"] = float(((y >= lo) & (y <= hi)).mean())
        out[scope] = vals
    return out


def markdown(records: list[dict]) -> str:
    """The check's table: one line per scope, TTFT and TPOT MAPE of each model side by side."""
    scopes = list(dict.fromkeys(s for r in records for s in r["metrics"]))
    names = [r["model"] for r in records]
    head = "| scope | n | " + " | ".join(f"{n} TTFT MAPE % | {n} TPOT MAPE %" for n in names) + " |"
    lines = [head, "|---|---:|" + "---:|---:|" * len(names)]
    for s in scopes:
        cells = []
        n = next(int(r["metrics"][s]["n"]) for r in records if s in r["metrics"])
        for r in records:
            m = r["metrics"].get(s, {})
            cells += [f"{m[k]:.1f}" if k in m else "-" for k in ("ttft_ms.mape", "tpot_ms.mape")]
        lines.append(f"| {s} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def physics_coster(make, ds, seed: int, registry) -> PredictCoster:
    """The physics kernel model fitted on the shipped pack (``ds.sources``, ``ds.cap``, as the extrapolation checks
    sample it), costing kernels through ``features.physics``; the roofline costs what it cannot."""
    from data.backends.reference import select
    from data.reference import load_reference
    from features.physics import PhysicsFeaturizer

    pack = load_reference()
    rows = select(pack[pack["status"] == "ok"], sources=list(ds.sources), cap=dict(ds.get("cap") or {}), seed=seed)
    featurizer = PhysicsFeaturizer(registry)
    model = make().fit(featurizer.transform(rows), rows["runtime_ms"].to_numpy(float))

    def predict(frame: pd.DataFrame) -> pd.DataFrame:
        got = model.predict_domain(featurizer.transform(frame))
        return got.rename(columns={"lo_ms": "runtime_ms_lo", "hi_ms": "runtime_ms_hi"})

    print(f"llm_serving: physics kernel model fitted on {len(rows)} pack rows ({', '.join(ds.sources)})")
    return PredictCoster(predict, "physics", fallback=RooflineCoster(registry), harness="cuda_graph")


def registered_coster(uri: str, tracking_uri: str | None, registry) -> PredictCoster:
    from models.llm_api import kernel_coster

    return kernel_coster(uri, tracking_uri=tracking_uri, registry=registry)


def evaluate_llm_serving(ds, seed: int, rows, registry, models: dict, out_dir) -> list[dict]:
    """The check (module docstring): one record per kernel model (the kernel model, the roofline)."""
    from models.evaluate import record

    conf = with_law(load_conf(), ds)
    kernel = str(ds.get("kernel_model") or "physics")
    if kernel in models:
        coster = physics_coster(models[kernel], ds, seed, registry)
    else:
        coster = registered_coster(kernel, ds.get("tracking_uri"), registry)
    print(f"llm_serving: {len(rows)} silicon rows ({', '.join(sorted(set(rows['model_path'])))})")
    out = Path(out_dir).resolve() / "public_eval"
    out.mkdir(parents=True, exist_ok=True)
    if ds.get("fit_law"):  # the law's constants over a grid (docs/decisions/0004-llm-serving-law.md)
        grid = fit_law(rows, coster, registry, load_conf())
        (out / f"{ds.get('table') or SPLIT}_fit.txt").write_text(grid.head(10).to_string(index=False) + "\n")
        print(grid.head(10).to_string(index=False))
    records = []
    for c in (coster, RooflineCoster(registry, conf)):
        t0 = time.perf_counter()
        pred = predict_rows(rows, c, registry, conf)
        m = metrics(rows, pred, ds.buckets)
        both = rows.reset_index(drop=True).join(pred.add_prefix("pred_"))
        y, p = rows["silicon_tpot_ms"].to_numpy(float), pred["tpot_ms"].to_numpy(float)
        r = record(SPLIT, c.name, m, rows, y, p, time.perf_counter() - t0, kind="llm")
        r["files"] = _files(both)
        records.append(r)
    table = out / f"{ds.get('table') or SPLIT}.md"
    text = markdown(records)
    table.write_text(text + "\n")
    print(text)
    print(f"table -> {table}")
    return records


def _files(frame: pd.DataFrame):
    def write(directory: Path):
        path = directory / "predictions.csv"
        frame.to_csv(path, index=False)
        return {}, [path]

    return write
