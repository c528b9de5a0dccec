"""Several jobs at once on one store (real processes): every run logged, the store created once, the champion the
best of all, each promotion compared against the champion of its moment (``pipelines.tracking``: store lock, alias
compare-and-set), one Hydra run folder per job. On a sqlite file and on a real ``mlflow server``."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from models.api import load_cost_model
from pipelines import tracking
from tests.conftest import ROOT
from tests.servers import tracking_server

pytestmark = pytest.mark.slow
NAME = "costmodel-runtime"
# a job in seconds: simulated rows only (the same rows in every job), one model, no eval splits
JOB = [
    "debug=tiny",
    "collect.backends=[sim-roofline]",
    "features.mlir.enabled=false",
    "model=[xgb]",
    "eval_splits=[]",
    "progress=false",
]
TREES = [10, 40, 160]  # one job each: different held-out MAPEs


def start_together(out: Path, *extra: str, trees=TREES) -> list[tuple[int, str, str]]:
    """``python -m pipelines.run`` once per entry of ``trees``, all started before any is waited for; returns
    (exit status, stdout, stderr) of each."""
    env = {**os.environ, "COSTMODEL_OUTPUT_DIR": str(out), "OMP_NUM_THREADS": "1"}
    logs = out.parent / f"{out.name}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for n in trees:
        with open(logs / f"{n}.out", "w") as so, open(logs / f"{n}.err", "w") as se:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "pipelines.run",
                        *JOB,
                        f"model.xgb.n_estimators={n}",
                        f"paths.output_dir={out}",
                        *extra,
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=so,
                    stderr=se,
                )
            )
    codes = [p.wait(timeout=600) for p in procs]
    return [(rc, (logs / f"{n}.out").read_text(), (logs / f"{n}.err").read_text()) for rc, n in zip(codes, trees)]


def champion_chain(client: MlflowClient, name: str) -> list[int]:
    """Check the registry's decisions of ``name`` and return the versions that held ``@champion``, in order.

    One version was first; every other promotion names the champion it beat, and those form one chain from the
    first to the current champion: no version took the alias from one it was never compared with. The champion is
    the version with the lowest held-out MAPE of all."""
    versions = {int(mv.version): mv for mv in client.search_model_versions(f"name='{name}'")}
    decisions = {v: mv.tags.get("champion_decision", "") for v, mv in versions.items()}
    firsts = [v for v, d in decisions.items() if d.startswith("first version")]
    assert len(firsts) == 1, decisions
    compared = {v: int(re.search(r"vs champion v(\d+) ", d).group(1)) for v, d in decisions.items() if v not in firsts}
    promoted = {v for v, d in decisions.items() if v not in firsts and d.endswith(": promoted")}
    chain = [firsts[0]]
    while promoted:
        following = [v for v in promoted if compared[v] == chain[-1]]
        assert len(following) == 1, f"after v{chain[-1]}: {following} ({decisions})"
        chain.append(following[0])
        promoted.remove(following[0])
    assert int(client.get_registered_model(name).aliases["champion"]) == chain[-1]
    mape = {v: float(mv.tags["test_mape"]) for v, mv in versions.items()}
    assert mape[chain[-1]] == min(mape.values()), (mape, decisions)
    for v in set(versions) - set(chain):  # a version kept out lost against the champion it was compared with
        assert mape[v] >= mape[compared[v]], (v, mape, decisions)
    return chain


def check_jobs(results, client: MlflowClient, trees=TREES) -> None:
    for rc, stdout, stderr in results:
        assert rc == 0 and "Traceback" not in stderr, stdout[-2000:] + stderr[-3000:]
    runs = client.search_runs([client.get_experiment_by_name("costmodel").experiment_id])
    assert sorted(int(r.data.params["xgb.n_estimators"]) for r in runs) == sorted(trees)  # every run logged
    assert all("test/all/mape" in r.data.metrics for r in runs)
    assert len(client.search_model_versions(f"name='{NAME}'")) == len(trees)
    champion_chain(client, NAME)
    assert [m.name for m in client.search_registered_models()] == [NAME]  # no lock left behind


@pytest.fixture(scope="module")
def sqlite_jobs(tmp_path_factory):
    out = tmp_path_factory.mktemp("jobs")
    results = start_together(out)
    return out, results


def test_jobs_started_together_share_a_fresh_sqlite_store(sqlite_jobs):
    out, results = sqlite_jobs
    uri = f"sqlite:///{out / 'mlflow.db'}"
    check_jobs(results, MlflowClient(tracking_uri=uri, registry_uri=uri))
    folders = [p.parent.parent for p in (out / "hydra").rglob(".hydra/config.yaml")]
    assert len(set(folders)) == len(TREES), folders  # one Hydra run folder per job


def test_jobs_started_together_on_a_tracking_server(tmp_path):
    """Real ``mlflow server`` (sqlite backend, proxied artifacts) used by two main jobs at once (three race on
    sqlite above); then the champion is listed and predicted from it (in process: the CLI paths are covered on
    sqlite)."""
    trees = TREES[::2]
    with tracking_server(tmp_path, workers=2) as base:
        results = start_together(tmp_path / "out", f"mlflow.tracking_uri={base}", trees=trees)
        check_jobs(results, MlflowClient(tracking_uri=base, registry_uri=base), trees)
        assert any((tmp_path / "art").rglob("MLmodel"))  # the models' files went through the server

        mlflow.set_tracking_uri(base)
        mlflow.set_registry_uri(base)
        versions = tracking.list_versions(NAME)
        assert sorted(versions["aliases"].tolist()) == ["-", "champion"]
        assert all(s.startswith("held_out_shapes/") for s in versions["split"])
        workloads = pd.DataFrame(
            [{"op": "matmul", "hardware": "T4", "dtype": "float16", "m": 1024, "n": 1024, "k": 1024}]
        )
        api = load_cost_model(f"models:/{NAME}@champion", tracking_uri=base).predict(workloads)
        plain = mlflow.pyfunc.load_model(f"models:/{NAME}@champion").predict(workloads)
        pd.testing.assert_frame_equal(api, plain)
        assert api.loc[0, "runtime_ms_lo"] < api.loc[0, "runtime_ms"] < api.loc[0, "runtime_ms_hi"]
    assert not (tmp_path / "out" / "mlflow.db").exists()  # nothing went to the embedded store


# --- promotions racing: several processes register at the same instant ------------------------------------------
RACE = "race-test"


def _register_at_once(uri: str, model_uri: str, mape: float, split: dict, barrier) -> str:
    """In a fresh process: wait for the others, then register ``model_uri`` with held-out MAPE ``mape``."""
    import pandas as pd

    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    barrier.wait(timeout=120)
    decision = tracking.register(
        model_uri,
        RACE,
        "champion",
        {"mape": mape},
        split=split,
        heldout=pd.DataFrame(),
        target="runtime_ms",
        select_metric="mape",
        model_name="xgb",
    )
    return decision.reason


def test_promotions_racing_each_compare_against_the_champion_of_their_moment(sqlite_jobs, tmp_path):
    """A champion v1 (MAPE 0.5), then four registrations released at once by a barrier (MAPE 0.4, 0.3, 0.2, 0.1;
    same split, so stored tags compare). Without the compare-and-set, each reads v1 as the champion and the last
    writer wins; with it, the promotions chain and the 0.1 version is the champion."""
    out, _ = sqlite_jobs
    shutil.copy(out / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.search_runs([client.get_experiment_by_name("costmodel").experiment_id])[0]
    split = {k: run.data.tags[k] for k in tracking.SPLIT_TAGS}
    model_uri = run.data.tags["model_uri"]
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    first = tracking.register(
        model_uri, RACE, "champion", {"mape": 0.5}, split=split, heldout=None, target="runtime_ms", select_metric="mape"
    )
    assert first.promoted and int(first.version) == 1
    ctx = multiprocessing.get_context("spawn")
    mapes = [0.4, 0.3, 0.2, 0.1]
    barrier = ctx.Manager().Barrier(len(mapes))
    with ctx.Pool(len(mapes)) as pool:
        reasons = pool.starmap(_register_at_once, [(uri, model_uri, m, split, barrier) for m in mapes])
    assert len(reasons) == 4
    chain = champion_chain(client, RACE)
    best = client.get_model_version(RACE, str(chain[-1]))
    assert float(best.tags["test_mape"]) == 0.1
    assert sum("vs champion v1 " in r for r in reasons) == 1, reasons  # only one challenger met v1 as the champion


def test_registry_lock_waits_breaks_a_dead_jobs_lock_and_times_out(tmp_path):
    """The server-side lock (``tracking.registry_lock``) on a real store: held -> a second holder times out; a lock
    left by a dead job (unchanged for ``stale_s``) is broken; released -> nothing left."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.setup(__import__("omegaconf").OmegaConf.create({"tracking_uri": uri, "experiment": "x"}), tmp_path)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    with tracking.registry_lock(client, "m"):
        assert client.get_registered_model("m.lock").tags["owner"].split(":")[1] == str(os.getpid())
        with pytest.raises(tracking.RegistryBusy, match=r"registry lock 'm.lock' held by .* for more than 1 s"):
            with tracking.registry_lock(client, "m", timeout_s=1, stale_s=60, poll_s=0.05):
                pass
    assert client.search_registered_models() == []
    client.create_registered_model("m.lock", tags={"owner": "a dead job"})
    with tracking.registry_lock(client, "m", timeout_s=30, stale_s=0.5, poll_s=0.05):
        assert client.get_registered_model("m.lock").tags["owner"] != "a dead job"
    assert client.search_registered_models() == []
