"""Predictions per second of a registered cost model: Python API vs REST, beside featurizing and the model alone.

    .venv/bin/python benchmarks/predict_throughput.py [--model models:/costmodel-runtime@champion]
        [--tracking-uri sqlite:///outputs/mlflow.db] [--repeats 5] [--batches 1 1000 100000] [--no-rest]
        [--servers costmodel mlflow]

Per batch size (workloads: a seeded mix of all ops over several GPUs and dtypes), these figures:

* ``model only``: the fitted model's ``predict`` on a feature frame built beforehand (for xgb: the booster,
  in its own thread setting);
* ``featurize``: the served model's featurizer, workload frame -> feature frame (``TabularFeaturizer.transform``);
* ``python api``: ``models.api.load_cost_model(uri).predict(frame)`` in this process, end to end (same numbers as
  ``mlflow.pyfunc.load_model``): featurize + predict + intervals;
* ``rest costmodel``: ``costmodel serve --model <uri>`` (``pipelines/serve.py``: MLflow's scoring app, one-line
  error bodies, pandas' JSON writer) and ``rest mlflow``: ``mlflow models serve -m <uri> --env-manager local -w 1``;
  each on 127.0.0.1, one client, one persistent HTTP connection, JSON body ``{"dataframe_split": ...}`` ->
  ``/invocations``, the answer read whole (``--servers`` picks them; ``--no-rest`` skips both).

The logged model carries its own copy of the project code: the python-api and rest figures use the featurizer of
the commit the model was registered from (the in-process figures use the bundled copy when this script imported no
project package before loading it; it imports none).

Per repeat, a call is repeated until at least ``--min-time`` seconds have passed; the time per call is that wall
time over the number of calls. Printed: the median over repeats of the time per call, predictions/s = batch /
that median, and the machine (CPU model, cores, load average) the figures were taken on.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import timed  # noqa: E402  (benchmarks/timing.py, beside this script)

HARDWARE = ["T4", "A100-PCIe-40GB", "H100-SXM", "L4", "V100-PCIe-32GB"]
OPS = ["matmul", "bmm", "linear", "conv2d", "layernorm", "softmax", "add", "gelu"]


def workloads(n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` workload rows cycling over the ops of the tiny training run, random power-of-two shapes."""
    rng = np.random.default_rng(seed)
    p2 = lambda lo, hi: int(2 ** rng.integers(lo, hi))  # noqa: E731
    rows = []
    for i in range(n):
        op = OPS[i % len(OPS)]
        row = {
            "op": op,
            "hardware": HARDWARE[rng.integers(len(HARDWARE))],
            "dtype": ["float32", "float16"][rng.integers(2)],
        }
        if op in ("matmul", "linear"):
            row |= {"m": p2(4, 13), "n": p2(4, 13), "k": p2(4, 13)}
        elif op == "bmm":
            row |= {"batch": p2(0, 6), "m": p2(4, 11), "n": p2(4, 11), "k": p2(4, 11)}
        elif op == "conv2d":
            row |= {
                "batch": p2(0, 5),
                "c_in": p2(3, 8),
                "c_out": p2(3, 8),
                "h": p2(3, 7),
                "w": p2(3, 7),
                "kernel": 3,
                "stride": 1,
                "padding": 1,
            }
        else:
            row |= {"m": p2(4, 13), "n": p2(4, 13)}
        rows.append(row)
    return pd.DataFrame(rows)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, load average {load}; Python {platform.python_version()}"


def rest_figures(base: str, frames: dict, path: str, args) -> list:
    """Per batch: time per ``POST /invocations`` (JSON ``dataframe_split``) over one persistent connection."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    results = []
    for b, frame in frames.items():
        body = json.dumps({"dataframe_split": json.loads(frame.to_json(orient="split", index=False))})

        def call():
            conn.request("POST", "/invocations", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            payload = r.read()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {payload[:300]!r}")

        results.append((path, b, timed(call, args.min_time, args.repeats)))
    conn.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models:/costmodel-runtime@champion")
    ap.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(ROOT / 'outputs' / 'mlflow.db').resolve()}",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 1000, 100000])
    ap.add_argument("--no-rest", action="store_true", help="skip the REST figures (no server started)")
    ap.add_argument(
        "--servers",
        nargs="+",
        choices=["costmodel", "mlflow"],
        default=["costmodel", "mlflow"],
        help="REST servers to measure (default: both)",
    )
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from models.api import load_cost_model

    client = load_cost_model(args.model, tracking_uri=args.tracking_uri)
    inner = client.pyfunc.unwrap_python_model()  # the CostModelPyfunc: its featurizer and fitted model
    frames = {b: workloads(b) for b in args.batches}
    results = []
    for b, frame in frames.items():
        X = inner.encoder.transform(frame)
        results.append(("model only", b, timed(lambda: inner.model.predict(X), args.min_time, args.repeats)))
        results.append(("featurize", b, timed(lambda: inner.encoder.transform(frame), args.min_time, args.repeats)))
        results.append(("python api", b, timed(lambda: client.predict(frame), args.min_time, args.repeats)))

    if not args.no_rest:
        from tests.servers import serve_costmodel, serve_model

        for server in args.servers:
            serve = serve_costmodel if server == "costmodel" else serve_model
            log = Path(os.environ.get("TMPDIR", "/tmp")) / f"predict_throughput_{server}.log"
            with serve(args.model, args.tracking_uri, log) as base:
                results += rest_figures(base, frames, f"rest {server}", args)

    print(f"model {args.model} @ {args.tracking_uri}; median of {args.repeats} repeats (>= {args.min_time} s each)")
    print(f"machine {machine()}")
    print(f"{'path':<16}{'batch':>8}{'ms/call':>12}{'predictions/s':>16}")
    order = ["model only", "featurize", "python api", "rest costmodel", "rest mlflow"]
    for path, b, s in sorted(results, key=lambda r: (r[1], order.index(r[0]))):
        print(f"{path:<16}{b:>8}{s * 1e3:>12.3f}{b / s:>16.0f}")


if __name__ == "__main__":
    main()
