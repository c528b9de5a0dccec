"""How long a tool waits for its first answer: one ``costmodel predict`` process, start to exit, beside throughput.

    .venv/bin/python benchmarks/first_prediction.py [--model models:/costmodel-runtime@champion]
        [--tracking-uri sqlite:///outputs/mlflow.db] [--repeats 5] [--batches 1 100000] [--no-rest]

First prediction (one workload row, a fresh process each time, wall time from exec to exit, median of ``--repeats``):

* ``before``: the CLI of the code before this change (``--baseline-root``: a checkout of it, e.g. ``git archive``
  of the parent commit), else, as a script, what it did: MLflow imported, ``models.api.load_pyfunc`` (the store
  queried, the model loaded by MLflow), one row predicted and written as CSV: the baseline, measured now on this
  machine;
* ``cli, uri resolved``: ``costmodel predict`` the first time after the alias moved (the lean loader resolves the URI
  through MLflow and caches the model's files: ``models/loader.py``);
* ``cli, cached``: ``costmodel predict`` again: the cached files read by the lean loader, MLflow never imported;
* ``cli --server``: ``costmodel predict --server URL`` against a running ``costmodel serve`` (pandas and a request).

Throughput (``benchmarks/predict_throughput.py``'s own paths, same workloads): ``python api`` in process and ``rest
costmodel`` at each batch size; with ``--baseline-root`` the same script of the baseline checkout is run first. Every
figure is printed with its ratio to the baseline measured here where there is one (``x vs before``) and to the
figures issue 47 reported (``--reported-*``: what the project answered before this change, on the team's 2-core
VM), as ``x faster``. The machine's load average is printed with them: on a shared VM it moves every figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from predict_throughput import machine, rest_figures, workloads  # noqa: E402
from timing import timed  # noqa: E402

ROW = "op,hardware,dtype,m,n,k\nmatmul,H100-SXM,bfloat16,4096,4096,4096\n"
BASELINE = """
import os, sys
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
import mlflow, pandas as pd
from models.api import load_pyfunc
uri, store, path = sys.argv[1:4]
mlflow.set_tracking_uri(store); mlflow.set_registry_uri(store)
frame = pd.read_csv(path)
frame.join(load_pyfunc(uri).predict(frame)).to_csv(sys.stdout, index=False)
"""


def wall(argv: list[str], env: dict, cwd: Path = ROOT) -> tuple[float, str]:
    """Seconds from exec to exit of one process, and its stdout (it must succeed)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=600)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}...: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds, proc.stdout


def forget(cache: Path) -> None:
    """Empty the lean loader's cache: the next call resolves the URI through MLflow, as after the alias moved."""
    for entry in cache.iterdir() if cache.is_dir() else []:
        if entry.name != "row.csv":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def first_prediction(args, env: dict, row_path: Path) -> dict[str, list[float]]:
    cli = [sys.executable, "-m", "pipelines.cli", "predict", "--model", args.model, "--tracking-uri", args.tracking_uri]
    cli += ["--input", str(row_path)]
    if args.baseline_root:
        before = cli
        before_env = {**env, "PYTHONPATH": str(args.baseline_root)}
    else:
        before = [sys.executable, "-c", BASELINE, args.model, args.tracking_uri, str(row_path)]
        before_env = env
    out: dict[str, list[float]] = {"before": [], "cli, uri resolved": [], "cli, cached": []}
    answers = set()
    for _ in range(args.repeats):
        s, text = wall(before, before_env, cwd=args.baseline_root or ROOT)
        out["before"].append(s)
        forget(row_path.parent)
        s, text = wall(cli, env)
        out["cli, uri resolved"].append(s)
        answers.add(text)
        s, text = wall(cli, env)
        out["cli, cached"].append(s)
        answers.add(text)
    if len(answers) != 1:
        raise RuntimeError("the CLI answered differently from one call to the next")
    return out


def baseline_throughput(args, env: dict) -> dict[tuple[str, int], float]:
    """``(path, batch) -> seconds per call`` of the baseline checkout's own ``predict_throughput.py``."""
    argv = [sys.executable, str(args.baseline_root / "benchmarks" / "predict_throughput.py"), "--model", args.model]
    argv += ["--tracking-uri", args.tracking_uri, "--repeats", str(args.repeats), "--min-time", str(args.min_time)]
    argv += ["--batches", *map(str, args.batches)]
    argv += ["--no-rest"] if args.no_rest else ["--servers", "costmodel"]
    _, text = wall(argv, {**env, "PYTHONPATH": str(args.baseline_root)}, cwd=args.baseline_root)
    out = {}
    for line in text.splitlines():
        for path in ("python api", "rest costmodel"):
            if line.startswith(path):
                batch, ms = line[len(path) :].split()[:2]
                out[(path, int(batch))] = float(ms) / 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models:/costmodel-runtime@champion")
    ap.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(ROOT / 'outputs' / 'mlflow.db').resolve()}",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 100000])
    ap.add_argument("--no-rest", action="store_true", help="skip the server figures (first prediction and REST)")
    ap.add_argument("--baseline-root", type=Path, help="a checkout of the code before (its CLI and throughput)")
    ap.add_argument("--reported-first-s", type=float, default=5.5, help="issue 47: every CLI call cost 5-6 s")
    ap.add_argument("--reported-batch1-ms", type=float, default=10.0, help="issue 47: 10 ms at batch 1 in process")
    ap.add_argument(
        "--reported-inprocess", type=float, default=31000.0, help="issue 47: rows/s in process at batch 100k"
    )
    ap.add_argument("--reported-rest", type=float, default=22000.0, help="issue 47: rows/s over REST at batch 100k")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))

    cache = tempfile.mkdtemp(prefix="first-prediction-cache-")
    env = {**os.environ, "COSTMODEL_CACHE_DIR": cache}
    row_path = Path(cache) / "row.csv"
    row_path.write_text(ROW)
    latency = first_prediction(args, env, row_path)
    before = baseline_throughput(args, env) if args.baseline_root else {}

    from tests.servers import serve_costmodel

    frames = {b: workloads(b) for b in args.batches}
    throughput = []
    from models.api import load_cost_model

    client = load_cost_model(args.model, tracking_uri=args.tracking_uri)
    for b, frame in frames.items():
        throughput.append(("python api", b, timed(lambda: client.predict(frame), args.min_time, args.repeats)))
    if not args.no_rest:
        log = Path(cache) / "serve.log"
        with serve_costmodel(args.model, args.tracking_uri, log) as base:
            server_cli = [sys.executable, "-m", "pipelines.cli", "predict", "--server", base, "--input", str(row_path)]
            latency["cli --server"] = [wall(server_cli, env)[0] for _ in range(args.repeats)]
            throughput += rest_figures(base, frames, "rest costmodel", args)

    base = statistics.median(latency["before"])
    print(f"model {args.model} @ {args.tracking_uri}; median of {args.repeats} repeats")
    print(f"machine {machine()}")
    print("first prediction: one row, a fresh process, exec to exit")
    print(f"{'path':<22}{'median s':>10}{'min s':>8}{'x vs baseline':>15}{'x vs reported':>15}")
    for path, values in latency.items():
        med = statistics.median(values)
        print(f"{path:<22}{med:>10.2f}{min(values):>8.2f}{base / med:>15.2f}{args.reported_first_s / med:>15.2f}")
    how = f"the CLI of {args.baseline_root}" if args.baseline_root else "the mlflow pyfunc path"
    print(f"(reported: {args.reported_first_s} s a CLI call; before: {how}, measured above)")
    print("throughput")
    print(f"{'path':<16}{'batch':>8}{'ms/call':>12}{'predictions/s':>16}{'x vs before':>13}{'x vs reported':>15}")
    for path, b, s in throughput:
        vs_before = before[(path, b)] / s if (path, b) in before else float("nan")
        reported = (
            args.reported_batch1_ms / (s * 1e3)
            if b == 1 and path == "python api"
            else (b / s) / args.reported_inprocess
            if b == 100000 and path == "python api"
            else (b / s) / args.reported_rest
            if b == 100000 and path == "rest costmodel"
            else float("nan")
        )
        print(f"{path:<16}{b:>8}{s * 1e3:>12.3f}{b / s:>16.0f}{vs_before:>13.2f}{reported:>15.2f}")
    print(
        f"(reported: {args.reported_batch1_ms} ms at batch 1 and {args.reported_inprocess:.0f} rows/s at 100k in "
        f"process, {args.reported_rest:.0f} rows/s over REST at 100k)"
    )


if __name__ == "__main__":
    main()
