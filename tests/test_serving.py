"""The registered pyfunc as other tools use it: intervals, self-contained loading, CLI = Python API = REST."""

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from models.api import load_cost_model, load_pyfunc, requirement_mismatches
from tests.conftest import run_cli
from tests.servers import post_json, predict_isolated, serve_costmodel, serve_model

pytestmark = pytest.mark.slow
MODEL = "models:/costmodel-runtime@champion"
WORKLOADS = [
    {"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "T4"},
    {"op": "gelu", "m": 4096, "n": 4096, "dtype": "float32", "hardware": "A100-PCIe-40GB"},
    {
        "op": "conv2d",
        "batch": 8,
        "c_in": 64,
        "c_out": 128,
        "h": 56,
        "w": 56,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
        "dtype": "float16",
        "hardware": "a100-pcie-40gb",
    },
]
COLS = ["runtime_ms", "runtime_ms_lo", "runtime_ms_hi"]
DOMAIN = ["in_domain", "domain_distance", "domain_reason"]  # the champion (the physics model) has a domain


@pytest.fixture(scope="module")
def champion(tiny_run):
    client = MlflowClient(tracking_uri=tiny_run["uri"], registry_uri=tiny_run["uri"])
    mv = client.get_model_version_by_alias("costmodel-runtime", "champion")
    return {"uri": tiny_run["uri"], "version": mv, "run": client.get_run(mv.run_id), "client": client}


@pytest.fixture(scope="module")
def api_preds(champion):
    return load_cost_model(MODEL, tracking_uri=champion["uri"]).predict(WORKLOADS)


def test_signature_example_interval_and_test_coverage(champion, api_preds):
    from models.domain import widen
    from models.physics import families_of, physics_frame
    from models.sol import speed_of_light_ms

    mlflow.set_tracking_uri(champion["uri"])
    info = mlflow.models.get_model_info(MODEL)
    assert [c.name for c in info.signature.outputs.inputs] == COLS + DOMAIN
    assert info.signature.inputs is None  # a kernel model's inputs are checked by its encoder (models/pyfunc.py)
    assert info.saved_input_example_info is not None
    assert {"data", "features", "models"} <= {
        p.name for p in (Path(mlflow.artifacts.download_artifacts(MODEL)) / "code").iterdir()
    }

    # the conformal half-widths of the calibration fold are logged as before
    m = champion["run"].data.metrics
    cm = load_cost_model(MODEL, tracking_uri=champion["uri"])
    spec = cm.meta["intervals"]["runtime_ms"]
    assert cm.has_domain and spec["level"] == 0.9
    assert spec["log_halfwidth"] == pytest.approx(m["calibration/all/log_halfwidth"]) and m["calibration/all/n"] >= 9
    # the served interval is the physics model's widened rule: pred * exp(+-q), q = the row's family's q_seen | q_unseen
    # inside the domain, the distance curve outside (models.domain.widen)
    inner = cm.pyfunc.unwrap_python_model()
    widening = inner.model.widening_
    X = physics_frame(inner.encoder.transform(pd.DataFrame(WORKLOADS)))
    dom = inner.model.predict_domain(X)
    q = widen(widening, dom["domain_distance"], dom["hardware_seen"], families_of(X))
    assert set(widening["by_group"]) >= set(families_of(X)) and widening["knots"][0][0] == 0
    assert list(api_preds.columns) == COLS + DOMAIN and (api_preds["runtime_ms"] > 0).all()
    assert widening["q_seen"] > 0 and widening["q_unseen"] >= widening["q_seen"] and widening["slope"] >= 0
    # ... with the speed of light of the spec under the point and the low end (models.sol)
    raw, sol = dom["runtime_ms"].to_numpy(float), speed_of_light_ms(pd.DataFrame(WORKLOADS), inner.registry)
    assert np.isfinite(sol).all() and (sol >= 0).all() and (sol > 0).any()
    np.testing.assert_allclose(api_preds["runtime_ms"], np.maximum(raw, sol), rtol=1e-12)
    np.testing.assert_allclose(api_preds["runtime_ms_hi"], np.maximum(raw * np.exp(q), np.maximum(raw, sol)), rtol=1e-9)
    np.testing.assert_allclose(api_preds["runtime_ms_lo"], np.maximum(raw * np.exp(-q), sol), rtol=1e-9)
    np.testing.assert_allclose(api_preds["domain_distance"], dom["domain_distance"], rtol=1e-12)

    # the reported coverage is the fraction of held-out rows inside the interval the model serves for them
    held = pd.read_csv(
        mlflow.artifacts.download_artifacts(
            run_id=champion["run"].info.run_id, artifact_path="eval/heldout_predictions.csv"
        )
    )
    served = cm.predict(held.drop(columns=["runtime_ms", "pred_runtime_ms"]))
    inside = (held["runtime_ms"] >= served["runtime_ms_lo"]) & (held["runtime_ms"] <= served["runtime_ms_hi"])
    assert m["test/all/coverage90"] == pytest.approx(float(inside.mean()))
    assert float(champion["version"].tags["test_coverage90"]) == pytest.approx(m["test/all/coverage90"], rel=1e-5)


def test_requirement_mismatches_are_one_warning_and_the_model_still_loads(champion, tmp_path, caplog):
    """The load-time check of the model's pinned requirements (``models.api.requirement_mismatches``, in place of
    MLflow's slower one): the environment that logged the champion meets them; a copy whose requirements pin what
    is not installed loads with one warning naming each unmet one (a second where another Python logged it), and
    predicts the same."""
    import logging
    import platform
    import shutil

    mlflow.set_tracking_uri(champion["uri"])
    mlflow.set_registry_uri(champion["uri"])
    local = Path(mlflow.artifacts.download_artifacts(MODEL))
    assert (local / "requirements.txt").is_file() and requirement_mismatches(local) == []
    copy = tmp_path / "model"
    shutil.copytree(local, copy)
    reqs = (copy / "requirements.txt").read_text()
    (copy / "requirements.txt").write_text(
        reqs.rstrip("\n")
        + "\nnumpy==0.0.1\nno-such-package-here==1.0\npandas; python_version < '3'\n./local/wheel.whl\n"
    )
    assert requirement_mismatches(copy) == [
        f"numpy==0.0.1 (installed: {np.__version__})",
        "no-such-package-here==1.0 (installed: none)",
    ]
    with caplog.at_level(logging.WARNING, logger="costmodel"):
        load_pyfunc(str(copy))
    warned = [r.getMessage() for r in caplog.records if r.name == "costmodel"]
    assert len(warned) == 1 and "numpy==0.0.1" in warned[0] and "no-such-package-here" in warned[0]
    mlmodel = (copy / "MLmodel").read_text()  # and another Python than this one logged it: a second line
    assert f"python_version: {platform.python_version()}" in mlmodel
    (copy / "MLmodel").write_text(
        mlmodel.replace(f"python_version: {platform.python_version()}", "python_version: 3.9.1")
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="costmodel"):
        model = load_pyfunc(str(copy))
    warned = [r.getMessage() for r in caplog.records if r.name == "costmodel"]
    assert len(warned) == 2 and warned[1].endswith(
        f"was logged with Python 3.9.1, this is Python {platform.python_version()}"
    )
    pd.testing.assert_frame_equal(
        model.predict(pd.DataFrame(WORKLOADS)), load_pyfunc(str(local)).predict(pd.DataFrame(WORKLOADS))
    )


def test_model_loads_where_the_project_is_not_installed(champion, api_preds, tmp_path):
    preds, files = predict_isolated(champion["uri"], MODEL, WORKLOADS, ["models.pyfunc", "features.tabular"], tmp_path)
    root = str(Path(__file__).resolve().parent.parent)
    for f in files:
        assert not f.startswith(root) and f"{Path('code')}" in f, f
    pd.testing.assert_frame_equal(preds, api_preds, rtol=1e-9)


def test_model_loads_beside_the_callers_own_models_data_features(champion, api_preds, tmp_path):
    """A caller with packages of its own named models / data / features (first on sys.path): the served model still
    imports the code it was logged with (its code/ folder), never the caller's."""
    decoys = tmp_path / "decoys"
    for pkg in ("data", "features", "models"):
        (decoys / pkg).mkdir(parents=True)
        (decoys / pkg / "__init__.py").write_text(f"raise ImportError('the caller's own {pkg} package')\n")
    preds, files = predict_isolated(
        champion["uri"],
        MODEL,
        WORKLOADS,
        ["models.pyfunc", "features.tabular", "data.hardware"],
        tmp_path,
        decoys=decoys,
    )
    for f in files:
        assert not f.startswith(str(decoys)) and f"{Path('code')}" in f, f
    pd.testing.assert_frame_equal(preds, api_preds, rtol=1e-9)


def test_cli_json_outputs_equal_python_api(champion, api_preds, tmp_path):
    src = tmp_path / "w.json"
    src.write_text(json.dumps(WORKLOADS))
    proc = run_cli(
        "predict", "--model", MODEL, "--input", str(src), "--tracking-uri", champion["uri"], "--format", "json"
    )
    assert proc.returncode == 0, proc.stderr
    recs = json.loads(proc.stdout)
    assert len(recs) == 3 and recs[2]["hardware"] == "a100-pcie-40gb"
    np.testing.assert_allclose([[r[c] for c in COLS] for r in recs], api_preds[COLS].to_numpy(), rtol=1e-9)
    assert [r["in_domain"] for r in recs] == api_preds["in_domain"].tolist()

    # plain mlflow.pyfunc gives the same numbers; the API turns bad input into a ValueError with the message
    mlflow.set_tracking_uri(champion["uri"])
    pd.testing.assert_frame_equal(mlflow.pyfunc.load_model(MODEL).predict(pd.DataFrame(WORKLOADS)), api_preds)
    with pytest.raises(ValueError, match=r"^row 0: unknown hardware 'H1000'"):
        load_cost_model(MODEL, tracking_uri=champion["uri"]).predict({"op": "add", "m": 8, "n": 8, "hardware": "H1000"})


def test_rest_serving_matches_cli_and_rejects_bad_input(champion, api_preds, tmp_path):
    src = tmp_path / "w.csv"
    pd.DataFrame(WORKLOADS).to_csv(src, index=False)
    cli = run_cli("predict", "--model", MODEL, "--input", str(src), "--tracking-uri", champion["uri"])
    assert cli.returncode == 0, cli.stderr
    cli_preds = pd.read_csv(pd.io.common.StringIO(cli.stdout))[COLS]

    def records(rows):
        return json.dumps({"dataframe_records": rows}).encode()

    with serve_model(MODEL, champion["uri"], tmp_path / "serve.log") as base:
        url = base + "/invocations"
        status, body = post_json(url, records(WORKLOADS))
        assert status == 200, body
        assert [r["in_domain"] for r in body["predictions"]] == api_preds["in_domain"].tolist()  # REST carries the flag
        np.testing.assert_allclose([r["domain_distance"] for r in body["predictions"]], api_preds["domain_distance"])
        rest = pd.DataFrame(body["predictions"])[COLS]
        np.testing.assert_allclose(rest.to_numpy(), cli_preds.to_numpy(), rtol=1e-6)  # CSV prints ~16 digits
        np.testing.assert_allclose(rest.to_numpy(), api_preds[COLS].to_numpy(), rtol=1e-12)

        split = pd.DataFrame(WORKLOADS).to_json(orient="split", index=False)
        status, body = post_json(url, json.dumps({"dataframe_split": json.loads(split)}).encode())
        assert status == 200, body
        np.testing.assert_allclose(pd.DataFrame(body["predictions"])[COLS].to_numpy(), rest.to_numpy(), rtol=1e-12)

        bad = [
            ([{"hardware": "T4", "m": 8, "n": 8, "k": 8}], "op"),  # schema: no op
            ([{"op": "matmul", "hardware": "H1000", "m": 8, "n": 8, "k": 8}], "unknown hardware 'H1000'"),
            ([{"op": "matmul", "hardware": "T4", "m": 8, "n": 8}], "needs shape parameter 'k'"),
            ([{"op": "warp", "hardware": "T4", "m": 8, "n": 8}], "unknown op 'warp'"),
        ]
        for rows, msg in bad:
            status, body = post_json(url, records(rows))
            assert status == 400, (rows, status, body)
            assert body["error_code"] == "INVALID_PARAMETER_VALUE" and msg in body["message"], body
        status, body = post_json(url, b"{not json")
        assert 400 <= status < 500, body

        # still serving after the bad requests
        status, body = post_json(url, records(WORKLOADS[:1]))
        assert status == 200
        assert body["predictions"][0]["runtime_ms"] == pytest.approx(api_preds["runtime_ms"].iloc[0], rel=1e-12)


# --- costmodel serve: the same protocol, one-line error bodies --------------------------------------------------------
@pytest.fixture(scope="module")
def served(champion, tmp_path_factory):
    with serve_costmodel(MODEL, champion["uri"], tmp_path_factory.mktemp("serve") / "serve.log") as base:
        yield base + "/invocations"


def _records(rows):
    return json.dumps({"dataframe_records": rows}).encode()


def test_costmodel_serve_predicts_as_the_api(served, api_preds):
    status, body = post_json(served, _records(WORKLOADS))
    assert status == 200, body
    np.testing.assert_allclose(
        pd.DataFrame(body["predictions"])[COLS].to_numpy(), api_preds[COLS].to_numpy(), rtol=1e-12
    )
    split = json.loads(pd.DataFrame(WORKLOADS).to_json(orient="split", index=False))
    status, body = post_json(served, json.dumps({"dataframe_split": split}).encode())
    assert status == 200 and len(body["predictions"]) == 3, body
    csv = pd.DataFrame(WORKLOADS).to_csv(index=False).encode()
    status, body = post_json(served, csv, content_type="text/csv")
    assert status == 200, body
    np.testing.assert_allclose(
        pd.DataFrame(body["predictions"])[COLS].to_numpy(), api_preds[COLS].to_numpy(), rtol=1e-12
    )


@pytest.mark.parametrize(
    "payload,code,msg",
    [
        (
            _records([{"op": "matmul", "hardware": "H1000", "m": 8, "n": 8, "k": 8}]),
            400,
            "row 0: unknown hardware 'H1000'",
        ),
        (_records([{"op": "x" * 5_000_000, "hardware": "T4", "m": 8, "n": 8}]), 400, "unknown op 'xxxx"),
        (_records([{"op": "matmul", "hardware": None, "m": 8, "n": 8, "k": 8}]), 400, "hardware"),
        (_records([{"op": "matmul", "hardware": "", "m": 8, "n": 8, "k": 8}]), 400, "hardware"),
        (_records([{"op": "matmul", "hardware": "T4", "m": "abc", "n": 8, "k": 8}]), 400, "must be an integer"),
        (_records([{"mlir": "\x00\x01 not mlir", "hardware": "T4"}]), 400, "row 0: a NUL character at offset 0"),
        (_records([{"mlir": "\udcff" * 3, "hardware": "T4"}]), 400, "not a valid dataframe"),  # MLflow's parser refuses
        (b"{not json" + b"x" * 100_000, 400, ""),
        (json.dumps({"instances": 7}).encode(), 400, ""),
    ],
)
def test_costmodel_serve_error_bodies_are_one_line(served, payload, code, msg):
    status, body = post_json(served, payload)
    assert status == code, (status, str(body)[:500])
    assert isinstance(body, dict) and set(body) == {"error_code", "message"}, str(body)[:500]
    assert msg in body["message"] and "\n" not in body["message"] and len(body["message"]) <= 700, body
    assert "Traceback" not in body["message"] and "Input:" not in body["message"]


def test_any_records_get_predictions_or_a_4xx_line_over_rest(served):
    """The REST side of tests/test_boundary.py: random (mostly broken) workload records, never a 5xx."""
    from hypothesis import HealthCheck, given, settings

    from tests.test_boundary import workload_frames

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(frame=workload_frames())
    def check(frame):
        payload = frame.to_json(orient="split", index=False, default_handler=str)
        status, body = post_json(served, json.dumps({"dataframe_split": json.loads(payload)}).encode())
        assert status == 200 or 400 <= status < 500, (status, str(body)[:500])
        if status != 200:
            assert set(body) == {"error_code", "message"} and "\n" not in body["message"], str(body)[:500]
            assert len(body["message"]) <= 700

    check()
