"""Real MLflow servers on 127.0.0.1 for the serving and tracking-server tests: start, wait, stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

MLFLOW = str(Path(sys.executable).parent / "mlflow")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    """Poll ``url`` until it answers 200; fail with the server's log if it exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready after {timeout_s} s:\n{log.read_text()[-3000:]}")


@contextmanager
def running(args: list[str], ready_path: str, port: int, log: Path, env: dict | None = None, cwd: Path | None = None):
    """Run ``args`` (a server listening on ``port``) in its own process group; yields its base URL."""
    # the venv's bin first: MLflow execs ``uvicorn`` / ``gunicorn`` by name
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    with open(log, "w") as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": path, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base + ready_path, proc, log)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and the workers it started, nothing else
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def tracking_server(folder: Path, workers: int = 1):
    """A real ``mlflow server`` on a free 127.0.0.1 port: a sqlite database backend and proxied artifacts in
    ``folder``; a context manager yielding its base URL."""
    port = free_port()
    args = [
        MLFLOW,
        "server",
        "--backend-store-uri",
        f"sqlite:///{folder / 'srv.db'}",
        "--artifacts-destination",
        str(folder / "art"),
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "--workers",
        str(workers),
    ]
    return running(args, "/health", port, folder / "server.log", cwd=folder)


def serve_model(model_uri: str, tracking_uri: str, log: Path):
    """``mlflow models serve`` in the local environment (the featurizer ships inside the model)."""
    port = free_port()
    return running(
        [
            MLFLOW,
            "models",
            "serve",
            "-m",
            model_uri,
            "--env-manager",
            "local",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-w",
            "1",
        ],
        "/ping",
        port,
        log,
        env={"MLFLOW_TRACKING_URI": tracking_uri},
    )


def serve_costmodel(model_uri: str, tracking_uri: str, log: Path):
    """``costmodel serve`` (MLflow's scoring app with one-line error bodies, ``pipelines/serve.py``)."""
    port = free_port()
    root = Path(__file__).resolve().parent.parent
    return running(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "serve",
            "--model",
            model_uri,
            "--tracking-uri",
            tracking_uri,
            "--port",
            str(port),
        ],
        "/ping",
        port,
        log,
        cwd=root,
    )


def post_json(url: str, payload: bytes, content_type: str = "application/json") -> tuple[int, dict | str]:

    req = urllib.request.Request(url, data=payload, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, body = r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


# Loads a registered model with no access to this project: -I ignores PYTHONPATH, the user site and the cwd; -S
# skips site.py, so the venv's .pth files (among them the editable install's import hook) never run. Only the
# venv's site-packages directory is appended by hand. The script proves the project is not importable before
# loading, then reports where the pyfunc's modules were imported from (the model's own code/ folder).
ISOLATED = r"""
import importlib, importlib.util, json, sys
sys.path.append(sys.argv[1])
if sys.argv[6]:  # decoys: packages of the caller's own named like the project's, first on sys.path
    sys.path.insert(0, sys.argv[6])
    found = {m: importlib.util.find_spec(m).origin for m in ("data", "features", "models")}
    assert all(f.startswith(sys.argv[6]) for f in found.values()), found
else:
    importable = [m for m in ("data", "features", "models", "pipelines") if importlib.util.find_spec(m)]
    assert importable == [], f"project importable: {importable}"
import mlflow, pandas as pd
mlflow.set_tracking_uri(sys.argv[2])
model = mlflow.pyfunc.load_model(sys.argv[3])
preds = model.predict(pd.DataFrame(json.loads(sys.argv[4])))
files = [importlib.import_module(m).__file__ for m in json.loads(sys.argv[5])]
print(json.dumps({"preds": preds.to_dict(orient="list"), "files": files}))
"""


def predict_isolated(
    tracking_uri: str, model_uri: str, rows: list[dict], modules: list[str], cwd, decoys: Path | None = None
) -> tuple:
    """Predict ``rows`` with ``model_uri`` in a fresh ``python -I -S`` process without the project (or, with
    ``decoys``, with that folder's own ``data`` / ``features`` / ``models`` packages first on ``sys.path``); returns
    (predictions as a DataFrame, the files ``modules`` were imported from in that process)."""
    import sysconfig

    import pandas as pd

    site = sysconfig.get_paths()["purelib"]
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            ISOLATED,
            site,
            tracking_uri,
            model_uri,
            json.dumps(rows),
            json.dumps(modules),
            str(decoys or ""),
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return pd.DataFrame(out["preds"]), out["files"]
