from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from data.hardware import HardwareRegistry

ROOT = Path(__file__).resolve().parent.parent
# the public datasets, read in place (../shared/data; COSTMODEL_SHARED_DATA points the tests elsewhere)
SHARED = Path(os.environ.get("COSTMODEL_SHARED_DATA") or ROOT.parent / "shared" / "data")


def pytest_collection_modifyitems(config, items):
    """The test files that read the tiny main job (fixture ``tiny_run``) go last: the job starts in the background
    as the session does (``_tiny_run_in_background``) and is done by then, where the first worker to need it ran it
    while the other waited (~90 s of one worker idle). Tests marked ``shared_data`` read ``SHARED``: where that
    folder is missing they are all skipped with one reason (``-ra`` prints it once, with their count), never errored
    and never passed silently."""
    late = {item.path for item in items if "tiny_run" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: item.path in late)  # stable: files stay whole and in their order
    if SHARED.is_dir():
        return
    skip = pytest.mark.skip(
        reason=f"shared_data: {SHARED} is missing (the public datasets these tests read in "
        "place; set COSTMODEL_SHARED_DATA to their folder)"
    )
    for item in items:
        if item.get_closest_marker("shared_data") is not None:
            item.add_marker(skip)


def _mlflow_uris():
    from mlflow.tracking._model_registry import utils as registry_utils
    from mlflow.tracking._tracking_service import utils as tracking_utils

    return (
        tracking_utils._tracking_uri,
        registry_utils._registry_uri,
        {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")},
    )


_BASELINE_URIS = _mlflow_uris()  # as the session starts, before any test or fixture sets one


@pytest.fixture(autouse=True)
def restore_mlflow_uris():
    """After every test, put MLflow's process-wide tracking / registry URIs (and the env vars that
    ``mlflow.set_tracking_uri`` sets) back to what they were when the session started. Tests and in-process
    pipeline calls (``tracking.setup``, module-scoped fixtures) set them; without this a later test reads
    another test's store or a server that is gone."""
    yield
    from mlflow.tracking._model_registry import utils as registry_utils
    from mlflow.tracking._tracking_service import utils as tracking_utils

    tracking, registry_uri, env = _BASELINE_URIS
    tracking_utils.set_tracking_uri(tracking)
    registry_utils._registry_uri = registry_uri
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session", autouse=True)
def _model_cache(tmp_path_factory):
    """The lean loader's cache of resolved models (``models.loader.cache_dir``) in the session's temp folder, for
    the tests and the processes they start, never the user's ``~/.cache``."""
    previous = os.environ.get("COSTMODEL_CACHE_DIR")
    os.environ["COSTMODEL_CACHE_DIR"] = str(tmp_path_factory.mktemp("model-cache"))
    yield
    if previous is None:
        os.environ.pop("COSTMODEL_CACHE_DIR", None)
    else:
        os.environ["COSTMODEL_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def registry() -> HardwareRegistry:
    return HardwareRegistry.from_dir()


def run_entry(module: str, *overrides: str, out: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m <module> <overrides> paths.output_dir=<out>`` from the repo root, everything generated under
    ``out``."""
    return subprocess.run(
        [sys.executable, "-m", module, *overrides, f"paths.output_dir={out}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, "COSTMODEL_OUTPUT_DIR": str(out)},
    )


def two_trial_sweep(module: str, *overrides: str, out: Path, experiment: str, run_prefix: str):
    """A 2-trial Optuna multirun of an entry point; checks it logged one MLflow run of model ``run_prefix`` per
    trial, named ``<run_prefix>-trial<i>``, and returns ``(client, runs)`` of its sqlite store (those runs)."""
    from mlflow import MlflowClient

    proc = run_entry(module, "-m", "hydra.sweeper.n_trials=2", *overrides, out=out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    uri = f"sqlite:///{out / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    runs = client.search_runs(
        [client.get_experiment_by_name(experiment).experiment_id], filter_string=f"tags.model = '{run_prefix}'"
    )
    assert sorted(r.data.tags["sweep_trial"] for r in runs) == ["0", "1"]
    assert sorted(r.info.run_name for r in runs) == [f"{run_prefix}-trial0", f"{run_prefix}-trial1"]
    return client, runs


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def cli_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """``costmodel <args>`` through ``pipelines.cli.main`` in this process: ``(exit status, stdout, stderr)``. For the
    many error-line cases (each a process of ~10 s of imports and model loading otherwise); :func:`run_cli` keeps
    the process itself tested (exit status, stdin, stdout)."""
    from pipelines.cli import main

    rc = main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


TINY_RUN_TIMEOUT_S = 900  # the tiny main job's limit (it shares the cores with the workers while it runs)


def _tiny_run_dir(tmp_path_factory, worker_id) -> Path:
    """One folder for the whole session, the pytest-xdist workers' included (their base temp's parent)."""
    base = tmp_path_factory.getbasetemp()
    return (base if worker_id == "master" else base.parent) / "tiny_run"


@pytest.fixture(scope="session", autouse=True)
def _tiny_run_in_background(request, tmp_path_factory, worker_id):
    """Start the tiny main job (``tiny_run``) as the session starts, where a collected test needs it: the first
    worker to get here starts it (a file lock), it runs beside the tests, and its exit status lands in
    ``returncode`` when it ends. At the session's end the worker that started it waits for it (the others may still
    read it)."""
    if not any("tiny_run" in getattr(item, "fixturenames", ()) for item in request.session.items):
        yield
        return
    out = _tiny_run_dir(tmp_path_factory, worker_id)
    proc = None
    with FileLock(f"{out}.lock"):
        if not out.exists():
            out.mkdir()
            cmd = [sys.executable, "-m", "pipelines.run", "debug=tiny", f"paths.output_dir={out}"]
            # the exit status is written (then renamed into place) only when the job has ended
            script = 'timeout "$0" "$@" > "$OUT/stdout" 2> "$OUT/stderr"; echo $? > "$OUT/rc.part"; '
            script += 'mv "$OUT/rc.part" "$OUT/returncode"'
            env = {**os.environ, "COSTMODEL_OUTPUT_DIR": str(out), "OUT": str(out)}
            proc = subprocess.Popen(["sh", "-c", script, str(TINY_RUN_TIMEOUT_S), *cmd], cwd=ROOT, env=env)
    yield
    if proc is not None:
        proc.wait()


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, worker_id, _tiny_run_in_background) -> dict:
    """The real entry point (``python -m pipelines.run``) at a tiny size against a temp sqlite store: run once for
    the whole session, the pytest-xdist workers' included, in the background from the session's start
    (``_tiny_run_in_background``); this waits for it to end. The tests only read its store, or copy its database
    before they write."""
    out = _tiny_run_dir(tmp_path_factory, worker_id)
    rc, deadline = out / "returncode", time.monotonic() + TINY_RUN_TIMEOUT_S + 60
    while not rc.exists():
        assert time.monotonic() < deadline, f"the tiny main job in {out} did not end"
        time.sleep(0.5)
    result = {"returncode": int(rc.read_text()), **{k: (out / k).read_text() for k in ("stdout", "stderr")}}
    assert result["returncode"] == 0, result["stdout"][-3000:] + result["stderr"][-3000:]
    return {"out": out, "uri": f"sqlite:///{out / 'mlflow.db'}", "stdout": result["stdout"], "stderr": result["stderr"]}
