"""Adding a backend, a model, an encoder or a target is one file + one config: a toy of each lives in
tests/extensions/ (``toy_backend.py`` + ``conf/collect/backend/toy.yaml``, ``toy_model.py`` +
``conf/model/toy_scaled_baseline.yaml``, ``toy_encoder.py`` + ``conf/encoder/toy.yaml``, ``conf/target/energy_j.yaml``
for a column the schema has), composed into the real main job through Hydra's search path; nothing else is edited."""

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from data.backends import Backend
from data.schema import register_backend
from data.store import read_dataset
from features.encoders import Encoder, build_encoder
from models.base import CostModel
from tests.conftest import ROOT, run_entry

EXT = ROOT / "tests" / "extensions"


def test_toys_satisfy_the_protocols(registry):
    from tests.extensions.toy_backend import ToyBackend
    from tests.extensions.toy_model import ScaledBaseline

    backend = ToyBackend()
    assert isinstance(backend, Backend) and backend.hardware.id not in registry
    row = backend.measure({"op": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "dtype": "float32"})
    assert row["backend"] == "toy" and row["energy_j"] > 0
    assert isinstance(build_encoder({"_target_": "tests.extensions.toy_encoder.ToyEncoder"}, registry), Encoder)
    assert isinstance(ScaledBaseline(), CostModel)


@pytest.mark.slow
def test_main_job_takes_a_new_backend_model_encoder_and_target(tmp_path):
    proc = run_entry(
        "pipelines.run",
        f"hydra.searchpath=[file://{EXT / 'conf'}]",
        "debug=tiny",
        "collect.backends=[toy]",
        "target=energy_j",
        "encoder=toy",
        "model=[toy_scaled_baseline,xgb]",
        "features.mlir.enabled=false",
        "eval_splits=[held_out_shapes,held_out_family]",
        out=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [dataset] = list((tmp_path / "datasets").glob("*.parquet"))
    register_backend("toy")  # this process reads toy rows: it knows the backend (the job registered it as it ran)
    rows = read_dataset(dataset)
    assert set(rows["backend"]) == {"toy"} and set(rows["hardware"]) == {"toy-accel"} and rows["energy_j"].notna().all()

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("costmodel").experiment_id])
    assert sorted(r.data.tags["model"] for r in runs) == ["toy_scaled_baseline", "xgb"]
    for r in runs:
        assert r.data.tags["target"] == "energy_j"
        assert {"test/all/mape", "test/toy-accel/coverage90", "held_out_family/all/mape"} <= set(r.data.metrics)
    toy = next(r for r in runs if r.data.tags["model"] == "toy_scaled_baseline")
    assert toy.data.params["toy_scaled_baseline.column"] == "toy_energy_j"  # the target's baseline, from the encoder
    champion = client.get_model_version_by_alias("costmodel-toy-energy", "champion")

    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model(f"models:/costmodel-toy-energy/{champion.version}")
    work = pd.DataFrame(
        [
            {"op": "matmul", "m": 256, "n": 256, "k": 256, "dtype": "float32", "hardware": "toy-accel"},
            {"op": "gelu", "m": 512, "n": 1024, "dtype": "float32", "hardware": "toy-accel"},
        ]
    )
    pred = model.predict(work)
    assert list(pred.columns) == ["energy_j", "energy_j_lo", "energy_j_hi"] and (pred["energy_j"] > 0).all()
    assert ((pred["energy_j_lo"] < pred["energy_j"]) & (pred["energy_j"] < pred["energy_j_hi"])).all()
    # an energy of a two-kernel module is the sum of its kernels (the target's combine rule)
    from features.mlir.export import export_workload

    text = export_workload("linear", {"m": 128, "n": 256, "k": 64}, "float32")
    module = model.predict(pd.DataFrame([{"mlir": text, "hardware": "toy-accel"}]))
    from features.mlir.workloads import workloads_from_mlir

    kernels = workloads_from_mlir(text).drop(columns=["mlir_op", "node"]).assign(hardware="toy-accel")
    assert module["energy_j"].iloc[0] == pytest.approx(model.predict(kernels)["energy_j"].sum())
    assert np.isfinite(module.to_numpy()).all()


@pytest.mark.slow
def test_unknown_backend_is_one_error_line(tmp_path):
    proc = run_entry("pipelines.run", "debug=tiny", "collect.backends=[nope]", out=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    [line] = [l for l in proc.stderr.splitlines() if l.strip()]
    assert line.startswith("run: error: no config collect/backend/nope.yaml")
