"""benchmarks/cuda_power_check.py without a GPU: the column mapping (FLOPs agree with the file) and the
one-line refusal."""

import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, SHARED

H200 = SHARED / "hopper" / "h200_kernels.csv"
SCRIPT = ROOT / "benchmarks" / "cuda_power_check.py"
needs_file = pytest.mark.shared_data


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


@needs_file
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would measure")
def test_without_a_gpu_it_fails_with_one_clear_line():
    proc = run("--limit", "3")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "cuda_power_check: error: no CUDA device (torch.cuda.is_available() is False)"


@needs_file
@pytest.mark.slow
def test_every_reference_row_maps_onto_a_workload_with_the_same_flops():
    proc = run("--dry-run")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "287 configurations mapped; 0 GEMM/conv/attention FLOP counts differ" in proc.stdout


def test_summary_reports_median_ratios_per_op_and_dtype():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import pandas as pd
    from cuda_power_check import summarise

    res = pd.DataFrame(
        {
            "op": ["add", "add", "matmul"],
            "dtype": ["fp32", "fp32", "bf16"],
            "status": ["ok"] * 3,
            "runtime_ms": [0.010, 0.100, 1.0],
            "runtime_ms_ours": [0.008, 0.102, 0.99],
            "power_w": [300.0, 600.0, 650.0],
            "power_w_ours": [330.0, 594.0, 650.0],
        }
    )
    s = summarise(res).set_index("op")
    assert s.loc["add", "n"] == 2 and s.loc["add", "runtime_ratio"] == pytest.approx((0.8 + 1.02) / 2)
    assert s.loc["add", "n_ge30us"] == 1 and s.loc["add", "power_ratio_ge30us"] == pytest.approx(0.99)
    assert s.loc["ALL", "n"] == 3 and s.loc["matmul", "runtime_ratio"] == pytest.approx(0.99)
