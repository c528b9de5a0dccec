"""The CLI's lean loader (models/loader.py), its cache of resolved models:/ URIs, and the --server client: the same
numbers as MLflow's pyfunc, no MLflow import once the URI is cached, a fresh resolve when the alias moves."""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, cli_in_process, run_cli

pytestmark = pytest.mark.slow
MODEL = "models:/costmodel-runtime@champion"
CSV = (
    "op,hardware,dtype,m,n,k,batch,c_in,c_out,h,w,kernel,stride,padding\n"
    "matmul,H100-SXM,bfloat16,4096,4096,4096,,,,,,,,\n"
    "matmul,T4,float32,1024,1024,1024,,,,,,,,\n"
    "conv2d,A100-PCIe-40GB,float16,,,,8,64,128,56,56,3,1,1\n"
)


def _predict_in_fresh_process(cache, *args):
    """``costmodel predict <args>`` in a new interpreter with the model cache ``cache``: (exit status, stdout, whether
    MLflow was imported, stderr)."""
    code = (
        "import json, sys\n"
        "from pipelines.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "sys.stdout.flush()\n"
        "print('MLFLOW_IMPORTED' if 'mlflow' in sys.modules else 'MLFLOW_NOT_IMPORTED', file=sys.stderr)\n"
        "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'TORCH_NOT_IMPORTED', file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "predict", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "COSTMODEL_CACHE_DIR": str(cache)},
    )
    return proc.returncode, proc.stdout, "MLFLOW_IMPORTED" in proc.stderr, proc.stderr


def test_lean_predictions_equal_the_pyfunc_and_a_cached_uri_imports_no_mlflow(tiny_run, tmp_path):
    (tmp_path / "w.csv").write_text(CSV)
    args = ("--model", MODEL, "--tracking-uri", tiny_run["uri"], "--input", str(tmp_path / "w.csv"))
    rc, first, imported, err = _predict_in_fresh_process(tmp_path / "cache", *args)
    assert rc == 0 and imported, err  # the first call resolves the alias through MLflow and caches the files
    rc, second, imported, err = _predict_in_fresh_process(tmp_path / "cache", *args)
    assert rc == 0 and not imported, err  # the second reads the cache: the model's own artifacts, no MLflow
    assert "TORCH_NOT_IMPORTED" in err  # nor torch: costing rows is the registry's closed forms (data.ops)
    assert first == second
    lean = pd.read_csv(io.StringIO(second))
    mlflow.set_tracking_uri(tiny_run["uri"])
    reference = mlflow.pyfunc.load_model(MODEL).predict(pd.read_csv(tmp_path / "w.csv"))
    for col in reference.columns:
        if reference[col].dtype.kind == "f":
            np.testing.assert_allclose(lean[col], reference[col], rtol=1e-12, err_msg=col)
        else:
            assert list(lean[col].fillna("")) == list(reference[col].fillna("")), col


def test_the_cache_follows_the_alias_and_a_version_is_read_once(tiny_run, tmp_path, monkeypatch):
    from models import loader

    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(tmp_path / "cache"))
    shutil.copy(tiny_run["out"] / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = loader.resolve(MODEL, uri)
    again = loader.resolve(MODEL, uri)
    assert not first.cached and again.cached and again.path == first.path
    # a new version takes the alias: the store changed, so the URI is resolved again, to the new version's files
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    current = client.get_model_version_by_alias("costmodel-runtime", "champion")
    other = [
        mv
        for mv in client.search_model_versions("name='costmodel-runtime'")
        if mv.version != current.version and mv.source != current.source
    ]
    new = other[0] if other else client.create_model_version("costmodel-runtime", current.source, current.run_id)
    client.set_registered_model_alias("costmodel-runtime", "champion", new.version)
    moved = loader.resolve(MODEL, uri)
    assert not moved.cached and moved.path != first.path and not first.path.exists()  # the old copy is gone
    assert loader.resolve(MODEL, uri).cached


def test_serve_says_where_it_listens_and_predict_server_asks_it(tiny_run, tmp_path, capsys):
    """``costmodel serve --port 0`` prints the address the OS gave it; ``costmodel predict --server URL`` sends the
    table there (nothing to load) and writes what a local predict writes; errors are the server's one line."""
    (tmp_path / "w.csv").write_text(CSV)
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "serve", "--model", MODEL, "--tracking-uri", tiny_run["uri"]]
        + ["--port", "0"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PATH": path},
        start_new_session=True,
    )
    try:
        deadline, line = time.monotonic() + 240, ""
        while time.monotonic() < deadline and "serving" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "costmodel serve exited before listening"
        assert line.startswith(f"costmodel: serving {MODEL} on http://127.0.0.1:"), line
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        assert "Ctrl-C" in line and int(url.rsplit(":", 1)[1]) > 0

        rc, remote, err = cli_in_process(capsys, "predict", "--server", url, "--input", str(tmp_path / "w.csv"))
        assert rc == 0, err
        local = run_cli(
            "predict", "--model", MODEL, "--tracking-uri", tiny_run["uri"], "--input", str(tmp_path / "w.csv")
        )
        a, b = pd.read_csv(io.StringIO(remote)), pd.read_csv(io.StringIO(local.stdout))
        assert list(a.columns) == list(b.columns)
        for col in ("runtime_ms", "runtime_ms_lo", "runtime_ms_hi", "domain_distance"):
            np.testing.assert_allclose(a[col], b[col], rtol=1e-12)
        # stdin, JSON lines out, and $COSTMODEL_SERVER instead of --server
        rows = pd.read_csv(tmp_path / "w.csv").to_json(orient="records", lines=True)
        env_proc = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "predict", "--input", "-", "--input-format", "jsonl"]
            + ["--format", "jsonl"],
            input=rows,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "COSTMODEL_SERVER": url},
            timeout=120,
        )
        assert env_proc.returncode == 0, env_proc.stderr
        got = [json.loads(line) for line in env_proc.stdout.splitlines()]
        np.testing.assert_allclose([g["runtime_ms"] for g in got], b["runtime_ms"], rtol=1e-12)
        # the server's one line for a bad row, exit 2
        (tmp_path / "bad.csv").write_text("op,hardware,m,n,k\nmatmul,H1000,1,1,1\n")
        rc, out, err = cli_in_process(capsys, "predict", "--server", url, "--input", str(tmp_path / "bad.csv"))
        assert rc == 2 and not out and err.startswith("costmodel: error: row 0: unknown hardware 'H1000'; known:")
        assert len(err.strip().splitlines()) == 1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    # a server that is gone: one line naming it
    rc, out, err = cli_in_process(capsys, "predict", "--server", url, "--input", str(tmp_path / "w.csv"))
    assert rc == 2 and err.startswith(f"costmodel: error: cannot reach the cost model server at {url}")
    rc, out, err = cli_in_process(
        capsys, "predict", "--server", url, "--model", MODEL, "--input", str(tmp_path / "w.csv")
    )
    assert rc == 2 and "--server takes a workload table (--input) alone" in err
