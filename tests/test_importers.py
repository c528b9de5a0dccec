"""Importers read the real shared files: row counts, unit conversions on known rows, shape conventions
(FLOPs recomputed from our mapped shape vs the source's own), and no device-observed column outside meta."""

import json

import numpy as np
import pandas as pd
import pytest

from data.importers import DatasetError
from data.schema import COLUMNS
from tests.conftest import SHARED, run_entry

pytestmark = pytest.mark.shared_data

NEUSIGHT_OBSERVED = [
    "Kernel Name",
    "Warps per SM",
    "Blocks per SM",
    "Grid x",
    "Grid y",
    "Grid z",
    "Block x",
    "Block y",
    "Block z",
    "Kernels",
]


def _meta(df):
    return [json.loads(m) if isinstance(m, str) else {} for m in df["meta"]]


def _no_leak(df, names):
    """Device-observed names appear only as keys of the meta JSON, never as columns or in config/env."""
    assert list(df.columns) == COLUMNS
    for col in ("config", "env"):
        text = " ".join(df[col].dropna().astype(str).unique())
        for name in names:
            assert name not in text, (col, name)


@pytest.fixture(scope="module")
def hopper():
    from data.importers.hopper import import_hopper

    return import_hopper(SHARED)


def test_hopper_counts_units_and_conventions(hopper):
    src = pd.read_csv(SHARED / "hopper" / "h200_kernels.csv")
    assert len(hopper) == len(src) == 563
    assert set(hopper["hardware"]) == {"H200-SXM"} and (hopper["status"] == "ok").all()
    assert set(hopper["dtype"]) == {"float32", "tf32", "bfloat16", "float16"}
    # units: energy_mj_per_call / 1000 = energy_j, on every row and on a known one
    np.testing.assert_allclose(hopper["energy_j"], src["energy_mj_per_call"] / 1000)
    first = hopper.iloc[0]
    assert (first["op"], first["m"], first["n"], first["energy_j"], first["power_w"]) == (
        "add",
        6852,
        1024,
        0.014551,
        565.924,
    )
    assert first["timestamp"] == pd.Timestamp(1795409583, unit="s", tz="UTC")
    assert hopper["power_method"].eq("nvml_energy_counter_tick_aligned").all()
    assert hopper["timing_method"].eq("cuda_events").all()
    assert hopper["throttled"].sum() == src["throttled"].sum() == 69
    # conventions: FLOPs recomputed from OUR mapped shape equal the file's flops column (causal SDPA: file = half)
    meta = _meta(hopper)
    source_flops = np.array([m["source_flops"] for m in meta], dtype=float)
    gemm_like = hopper["op"].isin(["matmul", "bmm", "linear", "conv2d"]).to_numpy()
    np.testing.assert_array_equal(hopper["flops"].to_numpy()[gemm_like], source_flops[gemm_like])
    sdpa = (hopper["op"] == "sdpa").to_numpy()
    causal = hopper["causal"].fillna(0).to_numpy(int) == 1
    np.testing.assert_array_equal(hopper["flops"].to_numpy()[sdpa & ~causal], source_flops[sdpa & ~causal])
    np.testing.assert_array_equal(hopper["flops"].to_numpy()[sdpa & causal] / 2, source_flops[sdpa & causal])
    # bmm / matmul bytes (A, B, C once) also agree with the file
    mm = hopper["op"].isin(["matmul", "bmm"]).to_numpy()
    np.testing.assert_array_equal(hopper["bytes"].to_numpy()[mm], [m["source_bytes"] for m, f in zip(meta, mm) if f])
    # linear: m = B * M tokens, k = in-features, n = out-features
    lin = hopper[hopper["op"] == "linear"]
    lsrc = src[src["op"] == "linear"]
    assert (lin["m"].to_numpy() == (lsrc["B"] * lsrc["M"]).to_numpy()).all()
    assert (lin["k"].to_numpy() == lsrc["K"].to_numpy()).all() and (lin["n"].to_numpy() == lsrc["N"].to_numpy()).all()
    assert {m["pass"] for m in meta} == {0, 1}
    _no_leak(hopper, ["sm_mhz_end", "window_s", "pass"])


def test_neusight_sample_conventions_and_meta():
    from data.importers.neusight import OBSERVED, import_neusight

    df = import_neusight(SHARED, max_rows_per_file=40)
    n_files = 5 + 5 + 4 + 3  # bmm, linear, conv per GPU + elem, ln, softmax
    assert len(df) == 40 * n_files
    assert set(df["hardware"]) == {"P4", "P100-PCIe-16GB", "T4", "V100-PCIe-32GB", "A100-PCIe-40GB"}
    assert df["source"].eq("neusight@6945927").all() and df["backend"].eq("import").all()
    assert df["timing_method"].eq("cuda_events").all() and df["dtype"].eq("float32").all()
    meta = _meta(df)
    # bmm: NeuSight (B,M,N)@(B,N,K) -> ours batch=B, m=M, k=N, n=K: check against the raw file
    raw = pd.read_csv(SHARED / "neusight/train/bmm/Tesla_T4.csv", nrows=40)
    ours = df[(df["op"] == "bmm") & (df["hardware"] == "T4")]
    assert (ours["k"].to_numpy() == raw["N"].to_numpy()).all() and (ours["n"].to_numpy() == raw["K"].to_numpy()).all()
    np.testing.assert_array_equal(ours["flops"], 2.0 * raw["B"] * raw["M"] * raw["N"] * raw["K"])
    np.testing.assert_allclose(ours["runtime_ms"], raw["Latency"])
    # bytes follow our convention: A[b,m,k] + B[b,k,n] + C[b,m,n] in float32
    np.testing.assert_array_equal(
        ours["bytes"], 4.0 * raw["B"] * (raw["M"] * raw["N"] + raw["N"] * raw["K"] + raw["M"] * raw["K"])
    )
    # linear: input (B,M,N), Linear(N,K) -> m = B*M, k = N, n = K
    raw = pd.read_csv(SHARED / "neusight/train/linear/Tesla_P4.csv", nrows=40)
    ours = df[(df["op"] == "linear") & (df["hardware"] == "P4")]
    assert (ours["m"].to_numpy() == (raw["B"] * raw["M"]).to_numpy()).all()
    assert (ours["k"].to_numpy() == raw["N"].to_numpy()).all() and (ours["n"].to_numpy() == raw["K"].to_numpy()).all()
    # conv: square Input_Size, Kernel_Szie [sic]
    raw = pd.read_csv(SHARED / "neusight/train/conv/Tesla_V100-PCIE-32GB.csv", nrows=1)
    conv = df[(df["op"] == "conv2d") & (df["hardware"] == "V100-PCIe-32GB")].iloc[0]
    assert (conv["c_in"], conv["c_out"], conv["h"], conv["w"], conv["kernel"]) == tuple(
        int(raw[c].iat[0]) for c in ("Input_Channel", "Output_Channel", "Input_Size", "Input_Size", "Kernel_Szie")
    )
    # GPU-observed columns live in meta and nowhere else
    assert all(set(OBSERVED) <= set(m) for m in meta if m["source_op"] in ("bmm", "linear", "conv", "ln"))
    assert all(m["Kernel Name"] for m in meta)
    _no_leak(df, NEUSIGHT_OBSERVED + ["sgemm"])


def test_neusight_elementwise_ops_map_to_real_ops():
    from data.importers.neusight import ELEM_OPS, import_neusight

    df = import_neusight(SHARED, kinds=("elem",))
    assert len(df) == 8250 and df["family"].eq("elementwise").all()
    assert set(df["op"]) == set(ELEM_OPS.values())
    assert df.groupby("op").size().eq(750).all()


@pytest.mark.slow
def test_neusight_full_import_counts():
    from data.importers.neusight import import_neusight

    df = import_neusight(SHARED)
    raw = sum(len(pd.read_csv(f, usecols=["Latency"])) for f in (SHARED / "neusight" / "train").rglob("*.csv"))
    assert len(df) == raw == 150977
    assert df["status"].eq("ok").all()


def test_kerneltuner_sample_and_errors():
    from data.importers.kerneltuner import import_kerneltuner

    df = import_kerneltuner(SHARED, max_configs_per_file=300)
    assert len(df) == 300 * 7
    gemm = df[df["op"] == "matmul"]
    assert set(gemm["hardware"]) == {"RTX-2080-Ti", "TITAN-RTX", "RTX-3060-Laptop"}
    assert (gemm[["m", "n", "k"]] == 4096).all().all()
    conv = df[df["op"] == "conv2d"]
    assert set(conv["hardware"]) == {"A100-PCIe-40GB", "RTX-A4000", "MI250X", "W6600"}
    # the cache's GFLOP/s fixes the problem: our FLOPs / time must reproduce it (conv exactly; Kernel Tuner
    # counts the GEMM as 2*4096^3 + 2*4096^2, the alpha/beta epilogue: a 1/4096 difference)
    for op, rtol in (("conv2d", 1e-9), ("matmul", 2.5e-4)):
        ok = df[(df["status"] == "ok") & (df["op"] == op)]
        gflops = np.array([m["GFLOP/s"] for m in _meta(ok)])
        np.testing.assert_allclose(ok["flops"] / (ok["runtime_ms"] * 1e-3) / 1e9, gflops, rtol=rtol)
    # a known config: mean of its 32 times, IQR and cv of them
    first = gemm.iloc[0]
    assert first["runtime_ms"] == pytest.approx(60.880553) and first["runtime_repeats"] == 32
    assert json.loads(first["config"])["MWG"] == 16 and "time" not in json.loads(first["config"])
    assert 0 < json.loads(first["meta"])["runtime_cv"] < 0.05 and first["runtime_iqr_ms"] > 0
    _no_leak(df, ["GFLOP/s", "compile_time", "framework_time"])


@pytest.mark.slow
def test_kerneltuner_full_failed_configs_become_error_rows():
    from data.importers.kerneltuner import import_kerneltuner

    df = import_kerneltuner(SHARED)
    assert len(df) == 4 * 4362 + 2 * 17956 + 10000
    err = df[df["status"] == "error"]
    assert len(err) == 2 * 161 and err["runtime_ms"].isna().all()
    assert set(err["error"]) == {"kernel tuner: RuntimeFailedConfig", "kernel tuner: CompilationFailedConfig"}


def test_wa_hls4ml_targets_feasibility_and_part():
    from data.importers.wa_hls4ml import import_wa_hls4ml

    df = import_wa_hls4ml(SHARED)
    assert len(df) == 2 * 1071 and (df["status"] == "ok").sum() == 724 + 60
    assert df["hardware"].eq("xcvu13p").all() and df["op"].eq("dense").all() and df["dtype"].eq("fixed").all()
    err = df[df["status"] == "error"]
    assert err[["lut", "ff", "dsp", "latency_cycles"]].isna().all().all()
    # a known row: dense_32_32_2b, rf 512, resource strategy
    src = pd.read_csv(SHARED / "wa_hls4ml" / "results_resource.csv")
    j = src.index[(src["model_name"] == "dense_32_32_2b") & (src["rf"] == 512)][0]
    row = df.iloc[j]
    assert (row["k"], row["n"], row["m"]) == (32, 32, 1)
    assert (row["lut"], row["ff"], row["bram_18k"], row["latency_cycles"], row["interval_cycles"]) == (
        6750,
        641,
        2,
        514,
        512,
    )
    assert json.loads(row["config"]) == {"precision_bits": 2, "reuse_factor": 512, "strategy": "resource"}
    assert json.loads(row["meta"])["BestLatency_hls"] == 513


def test_missing_folder_is_one_clear_error(tmp_path):
    from data.importers.hopper import import_hopper

    with pytest.raises(DatasetError, match="does not exist"):
        import_hopper(tmp_path / "nope")
    (tmp_path / "hopper").mkdir()
    with pytest.raises(DatasetError, match="h200_kernels.csv is missing"):
        import_hopper(tmp_path)
    (tmp_path / "hopper" / "h200_kernels.csv").write_text("gpu,op\nX,matmul\n")
    with pytest.raises(DatasetError, match="missing column"):
        import_hopper(tmp_path)


@pytest.mark.slow
def test_entry_point_writes_parquet(tmp_path):
    from data.store import read_dataset

    proc = run_entry("pipelines.import_data", "source=[hopper,wa_hls4ml]", f"data_root={SHARED}", out=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(read_dataset(tmp_path / "datasets" / "import" / "hopper.parquet")) == 563
    assert len(read_dataset(tmp_path / "datasets" / "import" / "wa_hls4ml.parquet")) == 2142
    bad = run_entry("pipelines.import_data", "source=nope", out=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("import_data: error: unknown source")


def test_neusight_folder_with_some_tables_imports_them(tmp_path):
    """A folder in NeuSight's layout holding only GEMM tables of GPUs that the shared set has specs for but no rows
    (L4, H100): those tables are imported under the registry's ids, the missing ones named in a warning; a folder
    with no table at all is one clear error."""
    from data.importers.neusight import import_neusight

    src = pd.read_csv(SHARED / "neusight" / "train" / "linear" / "NVIDIA_A100-PCIE-40GB.csv", nrows=12)
    (tmp_path / "neusight" / "train" / "linear").mkdir(parents=True)
    for file, device in (("NVIDIA_L4", "NVIDIA L4"), ("NVIDIA_H100_80GB_HBM3", "NVIDIA H100 80GB HBM3")):
        src.assign(Device=device).to_csv(tmp_path / "neusight" / "train" / "linear" / f"{file}.csv", index=False)
    with pytest.warns(UserWarning, match="no bmm, conv, elem, ln, softmax table"):
        rows = import_neusight(tmp_path)
    assert rows.groupby("hardware").size().to_dict() == {"H100-SXM": 12, "L4": 12}
    assert set(rows["op"]) == {"linear"} and rows["source"].str.startswith("neusight").all()
    with pytest.raises(DatasetError, match="no NeuSight tables"):
        import_neusight(tmp_path / "neusight" / "train" / "linear")


def test_neusight_tables_of_two_software_stacks_keep_each_rows_versions(tmp_path):
    """A GPU measured later under another PyTorch / CUDA (a table added beside NeuSight's own) imports with the
    others; each row's ``env`` names the software that timed it."""
    from data.importers.neusight import import_neusight

    base = tmp_path / "neusight" / "train" / "bmm"
    base.mkdir(parents=True)
    src = pd.read_csv(SHARED / "neusight" / "train" / "bmm" / "Tesla_T4.csv", nrows=5)
    src.to_csv(base / "Tesla_T4.csv", index=False)
    newer = {"Device": "NVIDIA H100 80GB HBM3", "Torch Version": "p2.4.1", "CUDA Version": "cu124"}
    src.assign(**newer).to_csv(base / "NVIDIA_H100_80GB_HBM3.csv", index=False)
    with pytest.warns(UserWarning, match="no linear, conv"):
        rows = import_neusight(tmp_path)
    env = rows.set_index("hardware")["env"].map(json.loads)
    assert {(e["torch"], e["cuda"]) for e in env["T4"]} == {("2.1.0", "cu121")}
    assert {(e["torch"], e["cuda"]) for e in env["H100-SXM"]} == {("2.4.1", "cu124")}
    assert rows.groupby("hardware").size().to_dict() == {"H100-SXM": 5, "T4": 5}
