"""A new GPU is one spec, not a retrained model (models/specs.py): --hardware-spec, the Python API's ``hardware``, a
``hardware_spec`` column over REST, and calibrate, with the domain flag saying how far the spec is from training."""

import io
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from data.hardware import CONF_DIR
from models.specs import column_specs, overlay, read_specs
from tests.conftest import cli_in_process, run_cli

MODEL = "models:/costmodel-runtime@champion"
B300 = {
    "id": "B300",
    "name": "NVIDIA B300 (spec sheet of a GPU the test model never saw)",
    "vendor": "nvidia",
    "kind": "gpu",
    "architecture": "blackwell",
    "sm_count": 148,
    "cores_per_sm": 128,
    "boost_clock_mhz": 1965,
    "memory_gb": 180,
    "memory_bandwidth_gbs": 8000,
    "l2_cache_mb": 126,
    "peak_tflops": {"float32": 75, "tf32": 1100, "float16": 2250, "bfloat16": 2250},
}
ROWS = "op,hardware,dtype,m,n,k\nmatmul,B300,bfloat16,4096,4096,4096\nmatmul,H100-SXM,bfloat16,4096,4096,4096\n"


def _clone(spec_id: str, new_id: str) -> dict:
    """A spec file with another GPU's numbers under a new id (and none of its aliases)."""
    d = yaml.safe_load((CONF_DIR / f"{spec_id}.yaml").read_text())
    return {**d, "id": new_id, "aliases": []}


def test_specs_are_read_checked_and_overlaid(tmp_path, registry):
    (tmp_path / "b300.yaml").write_text(yaml.safe_dump(B300))
    [spec] = read_specs([tmp_path / "b300.yaml"])
    assert spec.peak_flops("bfloat16") == 2250e12 and spec.bandwidth_bytes_s == 8000e9
    both = overlay(registry, [spec])
    assert "B300" in both and "B300" not in registry and len(both) == len(registry) + 1
    assert read_specs([tmp_path])[0] == spec  # a folder of spec files
    for change, message in (
        ({"memory_bandwidth_gbs": -1}, "memory_bandwidth_gbs must be a finite number > 0, got -1"),
        ({"peak_tflops": {"float32": "fast"}}, "could not convert string to float"),
        ({"id": ""}, "a hardware spec needs an id"),
    ):
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**B300, **change}))
        with pytest.raises(ValueError, match=message):
            read_specs([tmp_path / "bad.yaml"])
    with pytest.raises(ValueError, match="lacks memory_bandwidth_gbs"):
        read_specs([_write(tmp_path / "short.yaml", {k: v for k, v in B300.items() if k != "memory_bandwidth_gbs"})])
    with pytest.raises(ValueError, match="hardware spec file not found"):
        read_specs([tmp_path / "missing.yaml"])


def _write(path, doc):
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_spec_column_names_its_rows_hardware():
    df = pd.DataFrame(
        [
            {"op": "matmul", "hardware": "B300", "hardware_spec": json.dumps(B300)},
            {"op": "matmul", "hardware": None, "hardware_spec": B300},  # a mapping (a JSON body's object)
            {"op": "matmul", "hardware": "T4", "hardware_spec": None},
        ]
    )
    out, specs = column_specs(df)
    assert list(out["hardware"]) == ["B300", "B300", "T4"] and "hardware_spec" not in out and len(specs) == 1
    with pytest.raises(ValueError, match=r"row 0: hardware 'T4' is not the id or an alias of its hardware_spec"):
        column_specs(df.assign(hardware="T4"))
    with pytest.raises(ValueError, match="row 1: two different hardware_spec values name hardware 'B300'"):
        column_specs(df.assign(hardware_spec=[json.dumps(B300), json.dumps({**B300, "sm_count": 1}), None]))


@pytest.mark.slow
def test_cli_python_and_rest_predict_a_gpu_from_its_spec(tiny_run, tmp_path, capsys):
    from models.api import load_cost_model
    from tests.servers import post_json, serve_costmodel

    uri = tiny_run["uri"]
    (tmp_path / "w.csv").write_text(ROWS)
    spec = _write(tmp_path / "b300.yaml", B300)
    rc, out, err = cli_in_process(
        capsys, "predict", "--model", MODEL, "--tracking-uri", uri, "--input", str(tmp_path / "w.csv")
    )
    assert rc == 2 and err.startswith("costmodel: error: row 0: unknown hardware 'B300'") and not out
    proc = run_cli(
        "predict",
        "--model",
        MODEL,
        "--tracking-uri",
        uri,
        "--input",
        str(tmp_path / "w.csv"),
        "--hardware-spec",
        str(spec),
    )
    assert proc.returncode == 0, proc.stderr
    cli = pd.read_csv(io.StringIO(proc.stdout))
    b300, h100 = cli.iloc[0], cli.iloc[1]
    # the new spec lies outside the trained hardware's span (more bandwidth, L2, peak): flagged, and said how far
    assert not b300["in_domain"] and b300["domain_distance"] > 0 and b300["domain_reason"]
    assert "1 of 2 rows are outside the training domain" in proc.stderr
    assert b300["runtime_ms_lo"] >= 2 * 4096**3 / 2250e12 * 1e3 * (1 - 1e-12)  # never under its speed of light
    # the H100 row is what it was without the spec
    alone = load_cost_model(MODEL, tracking_uri=uri).predict(pd.read_csv(tmp_path / "w.csv").iloc[[1]])
    assert h100["runtime_ms"] == pytest.approx(alone["runtime_ms"].iloc[0], rel=1e-12)

    # the model sees hardware only through its numbers: the H100's spec under a new id is the H100
    clone = _write(tmp_path / "clone.yaml", _clone("H100-SXM", "H100-clone"))
    cm = load_cost_model(MODEL, tracking_uri=uri, hardware=[spec, clone])
    rows = pd.read_csv(tmp_path / "w.csv")
    api = cm.predict(pd.concat([rows, rows.iloc[[1]].assign(hardware="H100-clone")], ignore_index=True))
    np.testing.assert_allclose(api["runtime_ms"].iloc[:2], cli["runtime_ms"], rtol=1e-12)
    assert api["runtime_ms"].iloc[2] == pytest.approx(api["runtime_ms"].iloc[1], rel=1e-12) and api["in_domain"].iloc[2]

    # a hardware_spec column: the Python API and REST (costmodel serve), the spec as a JSON object per row
    records = [{**r, "hardware_spec": B300 if r["hardware"] == "B300" else None} for r in rows.to_dict("records")]
    plain = load_cost_model(MODEL, tracking_uri=uri)
    np.testing.assert_allclose(plain.predict(records)["runtime_ms"], cli["runtime_ms"], rtol=1e-12)
    with serve_costmodel(MODEL, uri, tmp_path / "serve.log") as base:
        status, body = post_json(base + "/invocations", json.dumps({"dataframe_records": records}).encode())
        assert status == 200, body
        np.testing.assert_allclose([p["runtime_ms"] for p in body["predictions"]], cli["runtime_ms"], rtol=1e-9)
        bad = [{**records[0], "hardware_spec": {**B300, "memory_bandwidth_gbs": 0}}]
        status, body = post_json(base + "/invocations", json.dumps({"dataframe_records": bad}).encode())
        assert status == 400 and body["message"] == (
            "invalid workload: row 0: hardware_spec: memory_bandwidth_gbs must be a finite number > 0, got 0"
        )

    # a bad spec file: one line, exit 2
    rc, out, err = cli_in_process(
        capsys, "predict", "--model", MODEL, "--tracking-uri", uri, "--input", str(tmp_path / "w.csv"),
        "--hardware-spec", str(tmp_path / "nope.yaml"),
    )  # fmt: skip
    assert rc == 2 and err == f"costmodel: error: hardware spec file not found: {tmp_path / 'nope.yaml'}\n"


@pytest.mark.slow
def test_calibrate_learns_a_gpu_given_by_its_spec_and_keeps_the_spec(tiny_run, tmp_path, capsys):
    """``costmodel calibrate --hardware-spec b300.yaml``: the new version knows B300 (its registry carries the spec),
    so it predicts B300 without the spec file, near what was measured."""
    from models.api import load_cost_model

    shutil.copy(tiny_run["out"] / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = _write(tmp_path / "b300.yaml", B300)
    sizes = [256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288]
    rows = pd.DataFrame(
        [{"op": "matmul", "hardware": "B300", "dtype": "bfloat16", "m": s, "n": s, "k": s} for s in sizes]
    )
    before = load_cost_model(MODEL, tracking_uri=uri, hardware=[spec]).predict(rows)
    rows["runtime_ms"] = before["runtime_ms"].to_numpy() * 1.3  # a card 1.3x slower than the specs say
    rows.to_csv(tmp_path / "b300.csv", index=False)
    rc, out, err = cli_in_process(
        capsys, "calibrate", "--model", MODEL, "--measurements", str(tmp_path / "b300.csv"), "--tracking-uri", uri,
        "--hardware-spec", str(spec), "--method", "correction",
    )  # fmt: skip
    assert rc == 0, err
    version = out.strip()
    assert version.startswith("models:/costmodel-runtime/")
    after = load_cost_model(version, tracking_uri=uri).predict(rows.drop(columns="runtime_ms"))  # no spec given
    assert np.median(np.abs(after["runtime_ms"] / rows["runtime_ms"] - 1)) < 0.1
    assert "B300" in load_cost_model(version, tracking_uri=uri).pyfunc.unwrap_python_model().registry
