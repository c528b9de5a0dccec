"""``costmodel predict`` against the model the tiny main job registered."""
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow
MODEL = "models:/costmodel-runtime@champion"


def test_console_script_is_installed():
    assert shutil.which("costmodel", path=str(Path(sys.executable).parent)), "pip install -e . provides costmodel"


def test_predict_csv_to_stdout_and_jsonl_file(tiny_run, tmp_path):
    src = tmp_path / "w.csv"
    pd.DataFrame([{"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "T4"},
                  {"op": "gelu", "m": 4096, "n": 4096, "dtype": "float32", "hardware": "A100-PCIe-40GB"}]).to_csv(src, index=False)
    proc = run_cli("predict", "--model", MODEL, "--input", str(src), "--tracking-uri", tiny_run["uri"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == ("op,m,n,k,dtype,hardware,runtime_ms,runtime_ms_lo,runtime_ms_hi,in_domain,domain_distance,"
                        "domain_reason") and len(lines) == 3
    csv_rows = [[float(v) for v in l.split(",")[6:9]] for l in lines[1:]]
    assert all(0 < lo < p < hi for p, lo, hi in csv_rows)
    csv_preds = [r[0] for r in csv_rows]

    out = tmp_path / "p.jsonl"
    proc = run_cli("predict", "--model", MODEL, "--input", str(src), "--output", str(out),
                   env={"MLFLOW_TRACKING_URI": tiny_run["uri"]})
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(l) for l in out.read_text().splitlines()]
    assert [r["runtime_ms"] for r in recs] == pytest.approx(csv_preds)


@pytest.mark.parametrize("content,msg", [
    ("op,hardware,m,n,k\nmatmul,H1000,8,8,8\n", "unknown hardware 'H1000'"),
    ("op,hardware,m,n\nmatmul,T4,8,8\n", "needs shape parameter 'k'"),
    ("op,hardware,m,n,k\nmatmul,T4,abc,8,8\n", "must be an integer"),
    ("hardware,m,n,k\nT4,8,8,8\n", "op"),
    ("op,hardware,m,n,k\n", "holds no workloads"),
])
def test_bad_input_gives_one_error_line(tiny_run, tmp_path, content, msg):
    src = tmp_path / "bad.csv"
    src.write_text(content)
    proc = run_cli("predict", "--model", MODEL, "--input", str(src), "--tracking-uri", tiny_run["uri"])
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("costmodel: error:") and msg in err[0], proc.stderr
    assert proc.stdout == ""


def test_missing_file_and_unknown_model(tiny_run, tmp_path):
    proc = run_cli("predict", "--model", MODEL, "--input", str(tmp_path / "nope.csv"), "--tracking-uri", tiny_run["uri"])
    assert proc.returncode == 2 and proc.stderr.strip() == f"costmodel: error: input file not found: {tmp_path / 'nope.csv'}"
    src = tmp_path / "w.csv"
    src.write_text("op,hardware,m,n,k\nmatmul,T4,8,8,8\n")
    proc = run_cli("predict", "--model", "models:/no-such-model@champion", "--input", str(src),
                   "--tracking-uri", tiny_run["uri"])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "cannot load model 'models:/no-such-model@champion'" in proc.stderr
