"""Whole-network models served: the pyfunc with a network encoder, registration with the champion rule, CLI, API,
REST.

Real parts throughout: tiny mlps measured on this CPU and exported by torch-mlir (``data.collect.collect_networks``),
real GNN / token-transformer training (a few epochs) through the library path, a real MLflow sqlite store, real
subprocesses.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.tabular import FeatureError
from models.conformal import calibrate, loo_coverage
from models.splits import stratified_fold as calibration_fold
from tests.conftest import ROOT, run_cli
from tests.servers import post_json, predict_isolated, serve_model

NAME = "costmodel-network-runtime"
MODEL = f"models:/{NAME}@champion"
COLS = ["runtime_ms", "runtime_ms_lo", "runtime_ms_hi"]
TINY_MLPS = [{"op": "mlp", "params": dict(batch=4, width=w, depth=d)} for w in (16, 32) for d in (1, 2, 3)]


@pytest.fixture(scope="module")
def mlp_mlir():
    from features.mlir.export import export_workload

    return export_workload("mlp", dict(batch=4, width=16, depth=4))  # deeper than any training network


def test_calibration_fold_is_per_family_and_seeded():
    fams = ["mlp"] * 6 + ["cnn"] * 3 + ["transformer"]
    mask = calibration_fold(fams, 0.3, seed=0)
    assert mask[:6].sum() == 2 and mask[6:9].sum() == 1 and mask[9]  # round(0.3 n), at least one
    assert (calibration_fold(fams, 0.3, seed=0) == mask).all()
    assert calibration_fold(["cnn", "cnn"], 0.9, seed=1).sum() == 1  # one left to fit on


def test_loo_coverage_scores_each_point_against_the_others():
    y = np.ones(10)
    pred = np.exp(np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 5.0]))  # log errors 0.1 .. 0.9, 5
    # with 9 others the 90% q is the 9th smallest of them = their max: every point but the outlier is covered
    assert calibrate(y[:9], pred[:9], 0.9) == pytest.approx(0.9)
    assert loo_coverage(y, pred, 0.9) == pytest.approx(0.9)
    assert loo_coverage(y, y, 0.9) == 1.0 and np.isnan(loo_coverage(y[:1], y[:1], 0.9))


def test_encode_networks_one_path_and_one_line_errors(registry, mlp_mlir):
    from features.encoders import GraphEncoder, TokenEncoder, network_rows

    def encode_networks(rows, registry, encoding, trained_hardware=None):  # the path training and serving take
        _, hw = network_rows(rows, registry, trained_hardware)
        return (GraphEncoder(registry) if encoding == "graph" else TokenEncoder()).transform(rows), hw

    row = {"mlir": mlp_mlir, "hardware": "t4"}
    (g,), hw = encode_networks([row], registry, "graph")
    ref = GraphEncoder(registry).encode(mlp_mlir, hardware="T4", dtype="float32")
    assert hw == ["T4"] and (g.x == ref.x).all() and (g.u == ref.u).all() and (g.edge_index == ref.edge_index).all()
    (t,), _ = encode_networks([{**row, "dtype": "float16"}], registry, "tokens")
    assert (t["ids"] == TokenEncoder().encode(mlp_mlir)["ids"]).all()

    bad = [
        ([{"mlir": mlp_mlir}], "networks lack column(s) hardware"),
        ([row, {"mlir": "  ", "hardware": "T4"}], "row 1: empty mlir"),
        ([{"mlir": "module { func.func @f( }", "hardware": "T4"}], "row 0:1:"),
        ([{"mlir": mlp_mlir, "hardware": "H1000"}], "row 0: unknown hardware 'H1000'"),
        ([{"mlir": mlp_mlir, "hardware": "T4", "dtype": "float8"}], "row 0: unknown dtype 'float8'"),
    ]
    for rows, msg in bad:
        with pytest.raises(FeatureError) as exc:
            encode_networks(rows, registry, "graph")
        assert str(exc.value).startswith(msg) and "\n" not in str(exc.value), (msg, str(exc.value))
    with pytest.raises(
        FeatureError,
        match=r"^row 0: hardware 'T4' is not among the hardware this network model "
        r"was trained on \(H100-SXM\)$",
    ):
        encode_networks([row], registry, "tokens", trained_hardware=["H100-SXM"])


# --------------------------------------------------------------------------- registered models (slow)
@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """Tiny mlps measured on this CPU; a GNN then a token transformer registered into a temp sqlite store."""
    from hydra import compose, initialize_config_dir

    from data.backends.cpu import CpuBackend
    from data.collect import collect_networks
    from data.hardware import CONF_DIR, HardwareRegistry
    from pipelines import experiment
    from pipelines.networks import with_mlir

    out = tmp_path_factory.mktemp("netserve")
    backend = CpuBackend(num_threads=1, min_run_time=0.01, warmup=1, measure_memory=False, energy=False)
    nets, layers = collect_networks(TINY_MLPS, backend, annotate=with_mlir)
    reg = HardwareRegistry.from_dir(CONF_DIR)
    reg.add(backend.hardware)
    decisions = {}
    for model in ("gnn", "token_transformer"):  # the library path, registration only (no eval splits)
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose(
                "networks",
                overrides=[
                    "debug=tiny_networks",
                    f"model=[{model}]",
                    f"register.models=[{model}]",
                    f"paths.output_dir={out}",
                ],
            )
        exp = experiment.run_experiment(
            cfg, nets, reg, experiment.Target.from_config(cfg.target), folds={}, context={"layers": layers}
        )
        decisions[model] = exp.decision
    return {"uri": f"sqlite:///{out / 'mlflow.db'}", "nets": nets, "cpu": backend.hardware.id, "decisions": decisions}


@pytest.fixture(scope="module")
def api(registered):
    from models.api import load_cost_model

    return load_cost_model(MODEL, tracking_uri=registered["uri"])


@pytest.mark.slow
def test_registration_follows_the_champion_rule(registered, api):
    import mlflow
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=registered["uri"], registry_uri=registered["uri"])
    gnn, tf = registered["decisions"]["gnn"], registered["decisions"]["token_transformer"]
    assert gnn.promoted and gnn.previous is None and tf.previous == gnn.version
    v1, v2 = (client.get_model_version(NAME, v) for v in (gnn.version, tf.version))
    # same networks: both models' predictions of them, compared by the paired rule (models/compare.py): the alias
    # moves only to a version better beyond the spread of the held-out networks
    assert "paired bootstrap over" in v2.tags["champion_decision"] and "champion_mape_difference" in v2.tags
    assert float(v2.tags["champion_mape"]) == pytest.approx(float(v1.tags["test_mape"]), rel=1e-5)
    champion = client.get_model_version_by_alias(NAME, "champion").version
    assert champion == (v2.version if tf.promoted else v1.version)
    assert not tf.promoted or float(v2.tags["test_mape"]) < float(v1.tags["test_mape"])
    # the held-out metrics are those of the calibration networks (2 of 6), never seen in fit
    run = client.get_run(v1.run_id)
    held = pd.read_csv(
        mlflow.artifacts.download_artifacts(
            run_id=v1.run_id, artifact_path="eval/heldout_predictions.csv", tracking_uri=registered["uri"]
        )
    )
    assert len(held) == 2 and run.data.metrics["test/all/n_train"] == 4
    ape = np.abs(held["pred_runtime_ms"] - held["runtime_ms"]) / held["runtime_ms"] * 100
    assert run.data.metrics["test/all/mape"] == pytest.approx(ape.mean())
    assert run.data.metrics["calibration/all/log_halfwidth"] == pytest.approx(
        calibrate(held["runtime_ms"], held["pred_runtime_ms"], 0.9)
    )
    assert api.interval_level == 0.9 and api.meta["unit"] == "network"
    assert api.meta["encoder"]["_target_"] in ("features.encoders.GraphEncoder", "features.encoders.TokenEncoder")
    mlflow.set_tracking_uri(registered["uri"])
    info = mlflow.models.get_model_info(MODEL)
    assert [c.name for c in info.signature.inputs.inputs] == ["mlir", "hardware", "dtype"]
    assert [c.name for c in info.signature.outputs.inputs] == COLS and info.saved_input_example_info is not None
    code = Path(mlflow.artifacts.download_artifacts(MODEL)) / "code"
    assert {"data", "features", "models"} <= {p.name for p in code.iterdir()}
    assert (code / "features" / "mlir_vocab.json").exists()  # the token vocabulary travels with the model
    assert api.meta["trained_hardware"] == [registered["cpu"]]

    proc = run_cli("models", "--tracking-uri", registered["uri"])
    assert proc.returncode == 0, proc.stderr
    lines = [l for l in proc.stdout.splitlines() if NAME in l]
    assert len(lines) == 2 and [l.split()[2] for l in lines].count("champion") == 1  # name, version, aliases


@pytest.mark.slow
def test_champion_predicts_in_a_process_without_the_project(registered, api, mlp_mlir, tmp_path):
    rows = [
        {"mlir": mlp_mlir, "hardware": registered["cpu"]},
        {"mlir": registered["nets"]["mlir"].iloc[0], "hardware": registered["cpu"], "dtype": "float32"},
    ]
    preds, files = predict_isolated(registered["uri"], MODEL, rows, ["models.pyfunc", "features.encoders"], tmp_path)
    for f in files:
        assert not f.startswith(str(ROOT)) and f"{Path('code')}" in f, f
    assert list(preds.columns) == COLS and (preds["runtime_ms"] > 0).all()
    assert ((preds["runtime_ms_lo"] < preds["runtime_ms"]) & (preds["runtime_ms"] < preds["runtime_ms_hi"])).all()
    spec = api.meta["intervals"]["runtime_ms"]
    q = spec["by_hardware"].get(registered["cpu"], spec["log_halfwidth"])
    np.testing.assert_allclose(preds["runtime_ms_hi"] / preds["runtime_ms"], np.exp(q), rtol=1e-9)
    pd.testing.assert_frame_equal(preds, api.predict(rows), rtol=1e-6)


@pytest.mark.slow
def test_cli_mlir_file_equals_api_and_bad_input_is_one_line(registered, api, mlp_mlir, tmp_path, capsys):
    src = tmp_path / "net.mlir"
    src.write_text(mlp_mlir)
    proc = run_cli(
        "predict",
        "--model",
        MODEL,
        "--input",
        str(src),
        "--hardware",
        registered["cpu"],
        "--tracking-uri",
        registered["uri"],
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    (rec,) = json.loads(proc.stdout)
    assert rec["input"] == str(src) and rec["hardware"] == registered["cpu"] and "mlir" not in rec
    expected = api.predict({"mlir": mlp_mlir, "hardware": registered["cpu"]})
    np.testing.assert_allclose([rec[c] for c in COLS], expected[COLS].to_numpy()[0], rtol=1e-9)

    bad = tmp_path / "bad.mlir"
    bad.write_text(mlp_mlir.replace("func.func", "func.func(", 1))
    from pipelines.cli import main  # the same entry point in this process (a subprocess costs ~10 s here)

    for path, hw, msg in [
        (bad, registered["cpu"], "costmodel: error: row 0:"),
        (src, "T4", "costmodel: error: row 0: hardware 'T4' is not among the hardware"),
    ]:
        code = main(
            ["predict", "--model", MODEL, "--input", str(path), "--hardware", hw, "--tracking-uri", registered["uri"]]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith(msg), err
    with pytest.raises(ValueError, match=r"^row 0: unknown hardware 'H1000'"):
        api.predict({"mlir": mlp_mlir, "hardware": "H1000"})


@pytest.mark.slow
def test_rest_serving_and_http_400(registered, api, mlp_mlir, tmp_path):
    rows = [{"mlir": mlp_mlir, "hardware": registered["cpu"]}]
    with serve_model(MODEL, registered["uri"], tmp_path / "serve.log") as base:
        url = base + "/invocations"
        status, body = post_json(url, json.dumps({"dataframe_records": rows}).encode())
        assert status == 200, body
        np.testing.assert_allclose(
            pd.DataFrame(body["predictions"])[COLS].to_numpy(), api.predict(rows)[COLS].to_numpy(), rtol=1e-9
        )
        for bad, msg in [
            ({"mlir": "module {", "hardware": registered["cpu"]}, "row 0:"),
            ({"mlir": mlp_mlir, "hardware": "H1000"}, "unknown hardware 'H1000'"),
        ]:
            status, body = post_json(url, json.dumps({"dataframe_records": [bad]}).encode())
            assert status == 400 and body["error_code"] == "INVALID_PARAMETER_VALUE" and msg in body["message"], body
        status, body = post_json(url, json.dumps({"dataframe_records": rows}).encode())
        assert status == 200  # still serving


@pytest.mark.slow
def test_residual_gnn_registered_and_served(registered, mlp_mlir, tmp_path):
    """The residual GNN over the composition (its kernel model fitted on a kernel sweep measured on this CPU) goes
    through the same library path, registry and pyfunc as the other network models."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from data.backends.cpu import CpuBackend
    from data.hardware import CONF_DIR, HardwareRegistry
    from models.api import load_cost_model
    from pipelines import experiment
    from pipelines.networks import kernel_model

    backend = CpuBackend(num_threads=1, min_run_time=0.01, warmup=1, measure_memory=False, energy=False)
    reg = HardwareRegistry.from_dir(CONF_DIR)
    reg.add(backend.hardware)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "networks",
            overrides=[
                "debug=tiny_networks",
                "model=[gnn_residual]",
                "register.models=[gnn_residual]",
                f"paths.output_dir={tmp_path}",
            ],
        )
    with open_dict(cfg):
        cfg.kernel_model_path = kernel_model(cfg, backend, reg, tmp_path)
    exp = experiment.run_experiment(cfg, registered["nets"], reg, experiment.Target.from_config(cfg.target), folds={})
    assert exp.decision is not None
    api = load_cost_model(MODEL, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert api.meta["model"] == "gnn_residual"
    preds = api.predict([{"mlir": mlp_mlir, "hardware": registered["cpu"]}])
    assert list(preds.columns) == COLS and (preds["runtime_ms"] > 0).all()
    assert (preds["runtime_ms_lo"] < preds["runtime_ms"]).all() and (preds["runtime_ms"] < preds["runtime_ms_hi"]).all()
