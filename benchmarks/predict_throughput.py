"""Predictions per second of a registered cost model: Python API vs REST, at batch 1 and batch 1000.

    .venv/bin/python benchmarks/predict_throughput.py [--model models:/costmodel-runtime@champion]
        [--tracking-uri sqlite:///outputs/mlflow.db] [--repeats 5] [--batches 1 1000]

* Python API: ``models.api.load_cost_model(uri).predict(frame)`` in this process (same numbers as
  ``mlflow.pyfunc.load_model``);
* REST: ``mlflow models serve -m <uri> --env-manager local -w 1`` on 127.0.0.1, one client, one
  persistent HTTP connection, JSON body ``{"dataframe_split": ...}`` -> ``/invocations``.

Per repeat, a batch size is called until at least ``--min-time`` seconds have passed; the time per call
is that wall time over the number of calls. Printed: the median over repeats of the time per call and
predictions/s = batch / that median. Workloads are a seeded mix of all ops over several GPUs.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from models.api import load_cost_model  # noqa: E402
from tests.servers import serve_model  # noqa: E402
from timing import timed  # noqa: E402  (benchmarks/timing.py, beside this script)

HARDWARE = ["T4", "A100-PCIe-40GB", "H100-SXM", "L4", "V100-PCIe-32GB"]


def workloads(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p2 = lambda lo, hi: int(2 ** rng.integers(lo, hi))  # noqa: E731
    rows = []
    for i in range(n):
        op = ["matmul", "bmm", "linear", "conv2d", "layernorm", "softmax", "add", "gelu"][i % 8]
        row = {"op": op, "hardware": HARDWARE[rng.integers(len(HARDWARE))],
               "dtype": ["float32", "float16"][rng.integers(2)]}
        if op in ("matmul", "linear"):
            row |= {"m": p2(4, 13), "n": p2(4, 13), "k": p2(4, 13)}
        elif op == "bmm":
            row |= {"batch": p2(0, 6), "m": p2(4, 11), "n": p2(4, 11), "k": p2(4, 11)}
        elif op == "conv2d":
            row |= {"batch": p2(0, 5), "c_in": p2(3, 8), "c_out": p2(3, 8), "h": p2(3, 7), "w": p2(3, 7),
                    "kernel": 3, "stride": 1, "padding": 1}
        else:
            row |= {"m": p2(4, 13), "n": p2(4, 13)}
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models:/costmodel-runtime@champion")
    ap.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI")
                    or f"sqlite:///{(ROOT / 'outputs' / 'mlflow.db').resolve()}")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 1000])
    args = ap.parse_args()

    model = load_cost_model(args.model, tracking_uri=args.tracking_uri)
    frames = {b: workloads(b) for b in args.batches}
    results = []
    for b, frame in frames.items():
        s = timed(lambda: model.predict(frame), args.min_time, args.repeats)
        results.append(("python api", b, s))

    with serve_model(args.model, args.tracking_uri, Path(os.environ.get("TMPDIR", "/tmp")) / "predict_throughput_serve.log") as base:
        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        for b, frame in frames.items():
            body = json.dumps({"dataframe_split": json.loads(frame.to_json(orient="split", index=False))})

            def call():
                conn.request("POST", "/invocations", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                payload = r.read()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {payload[:300]!r}")

            results.append(("rest", b, timed(call, args.min_time, args.repeats)))
        conn.close()

    print(f"model {args.model} @ {args.tracking_uri}; median of {args.repeats} repeats (>= {args.min_time} s each)")
    print(f"{'path':<12}{'batch':>7}{'ms/call':>12}{'predictions/s':>16}")
    for path, b, s in results:
        print(f"{path:<12}{b:>7}{s * 1e3:>12.2f}{b / s:>16.0f}")


if __name__ == "__main__":
    main()
