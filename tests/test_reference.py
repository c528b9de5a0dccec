"""The shipped pack of real runtime measurements (reference/): the committed file loads as valid schema rows and
matches its checksum and README, a tampered or missing pack fails with one line, writing is deterministic, and
regenerating it from ../shared/data reproduces the committed checksum (slow)."""

import shutil

import pandas as pd
import pytest

from data.reference import (
    PACK_NAME,
    REFERENCE_DIR,
    SUMS_NAME,
    ReferenceError,
    describe_reference,
    load_reference,
    reference_summary,
    verify_reference,
    write_reference,
)
from data.schema import COLUMNS
from tests.conftest import SHARED, run_entry

needs_shared = pytest.mark.skipif(not (SHARED / "deepbench").exists(), reason="../shared/data not present")
SOURCES = {
    "neusight@6945927": 150977,
    "hopper-h200@2026-11-23": 563,
    "deepbench@da81ba7": 3198,
    "aiconfigurator-nccl@2.27.3": 1008,
    "aiconfigurator-nccl@2.29.2": 504,
    "aiconfigurator-vllm@0.14.0": 2076,
    "aiconfigurator-vllm@0.22.0": 5401,
    "aiconfigurator-vllm@0.24.0": 12840,
}


@pytest.fixture(scope="module")
def pack():
    return load_reference()


def _committed_sum() -> str:
    digest, name = (REFERENCE_DIR / SUMS_NAME).read_text().split()
    assert name == PACK_NAME
    return digest


def test_committed_pack_loads_validates_and_matches_its_checksum(pack, registry):
    assert verify_reference() == _committed_sum()
    assert list(pack.columns) == COLUMNS and len(pack) == sum(SOURCES.values())
    assert pack.groupby("source").size().to_dict() == SOURCES
    assert pack["status"].eq("ok").all() and pack["backend"].eq("import").all()
    assert (pack["runtime_ms"] > 0).all() and (pack["bytes"] > 0).all()
    assert all(hw in registry for hw in pack["hardware"].unique())  # every GPU has a spec sheet
    # small enough to ship; power / energy: the H200 set and aiconfigurator's vLLM tables with NVML power
    assert (REFERENCE_DIR / PACK_NAME).stat().st_size < 5e6
    powered = sorted(pack.loc[pack["power_w"].notna(), "source"].unique())
    assert powered == ["aiconfigurator-vllm@0.22.0", "hopper-h200@2026-11-23"]
    has_power = pack["power_w"].notna()
    assert (pack.loc[has_power, "energy_j"] > 0).all()
    # flops are stored, not recomputed: they agree with the counter on a sample of rows of every op and dtype,
    # optional shape parameters (kv_len, num_kv_heads, tp, ep) and fp8 KV caches included
    from data.workloads import OPS, count_cost

    sample = pack.groupby(["source", "op", "dtype", "kv_dtype"]).head(2)
    assert {"float8_e4m3fn"} <= set(sample["kv_dtype"]) and {"moe", "all_to_all", "sdpa"} <= set(sample["op"])
    for _, r in sample.iterrows():
        shape = {p: int(r[p]) for p in OPS[r["op"]].names if pd.notna(r[p])}
        assert count_cost(r["op"], shape, r["dtype"], r["kv_dtype"] or None) == (r["flops"], r["bytes"])
    licences = {p.name for p in (REFERENCE_DIR / "LICENSES").iterdir()}
    assert licences == {"NeuSight-MIT.txt", "DeepBench-Apache-2.0.txt", "aiconfigurator-Apache-2.0.txt"}


def test_pack_samples_aiconfigurator_per_gpu_op_and_dtype(pack):
    """The aiconfigurator sample: at most 600 rows per (source, GPU, op, dtype, KV dtype, prefill / decode), small-M
    GEMMs and every cache length among them, every collective row; decode rows' shape ids carry their cache length."""
    ai = pack[pack["source"].str.startswith("aiconfigurator")]
    sizes = ai.groupby(["source", "hardware", "op", "dtype", "kv_dtype", "causal"], dropna=False).size()
    assert sizes.max() == 600
    assert set(ai["hardware"]) == {"A100-SXM4-80GB", "H200-SXM", "L40S"}
    gemm = ai[ai["op"] == "linear"]
    assert gemm.groupby(["source", "hardware", "dtype"])["m"].min().max() <= 2  # decode-sized GEMMs in every group
    decode = ai[(ai["op"] == "sdpa") & (ai["causal"] == 0)]
    assert decode["kv_len"].min() == 2 and decode["kv_len"].max() >= 65536
    assert decode["shape_id"].nunique() > decode[["batch", "heads", "head_dim"]].drop_duplicates().shape[0]
    assert (ai["family"] == "collective").sum() == 1008 + 504 + 3 * 138
    assert set(ai["timing_method"]) == {"cuda_graph", "stream_loop"}


def test_summary_and_readme_say_what_the_pack_holds(pack):
    from data.reference import _counts_markdown

    summary = reference_summary(pack)
    assert summary["rows"].sum() == len(pack)
    assert set(summary.loc[summary["source"] == "deepbench@da81ba7", "hardware"]) >= {"M40", "MI25", "TITAN-Xp"}
    text = describe_reference(pack)
    assert "reference/runtime_public.parquet" in text and all(s in text for s in SOURCES)
    # the README's counts block is the one write_reference generates from this pack (it cannot drift)
    assert _counts_markdown(pack) in (REFERENCE_DIR / "README.md").read_text()


def _copy(tmp_path):
    dest = tmp_path / "reference"
    shutil.copytree(REFERENCE_DIR, dest)
    return dest / PACK_NAME


def test_tampered_or_missing_pack_fails_with_one_line(tmp_path):
    path = _copy(tmp_path)
    load_reference(path)  # an intact copy loads
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    for call in (lambda: load_reference(path), lambda: verify_reference(path)):
        with pytest.raises(ReferenceError) as err:
            call()
        msg = str(err.value)
        assert "does not match" in msg and "regenerate" in msg and "\n" not in msg
    with pytest.raises(ReferenceError, match="is missing") as err:
        load_reference(tmp_path / "nowhere" / PACK_NAME)
    assert "\n" not in str(err.value)
    (path.parent / SUMS_NAME).unlink()
    with pytest.raises(ReferenceError, match="checksum file .* is missing"):
        load_reference(path)
    path.write_bytes(b"not parquet")  # unchecked: still one clear line, not a pyarrow traceback
    with pytest.raises(ReferenceError, match="not a readable parquet file"):
        load_reference(path, verify=False)


@needs_shared
def test_writing_the_loaded_pack_gives_the_same_bytes(pack, tmp_path):
    """Writing is deterministic: the committed rows written again give the committed checksum."""
    (tmp_path / "README.md").write_text(
        "x\n<!-- counts: generated by write_reference, do not edit -->\n<!-- counts: end -->\n"
    )
    path = write_reference(pack.sample(frac=1.0, random_state=0), tmp_path, SHARED)  # any row order in
    assert verify_reference(path) == _committed_sum()
    assert (tmp_path / SUMS_NAME).read_text() == (REFERENCE_DIR / SUMS_NAME).read_text()
    assert "176,567 rows" in (tmp_path / "README.md").read_text()
    pd.testing.assert_frame_equal(load_reference(path), pack)


@needs_shared
@pytest.mark.slow
def test_regenerating_from_shared_data_reproduces_the_committed_checksum(tmp_path):
    out = tmp_path / "ref"
    proc = run_entry(
        "pipelines.import_data",
        "source=reference",
        f"data_root={SHARED}",
        f"paths.reference_dir={out}",
        out=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"sha256 {_committed_sum()}" in proc.stdout
    assert (out / SUMS_NAME).read_text() == (REFERENCE_DIR / SUMS_NAME).read_text()
    assert (out / "LICENSES" / "DeepBench-Apache-2.0.txt").read_text() == (SHARED / "deepbench" / "LICENSE").read_text()
    bad = run_entry(
        "pipelines.import_data",
        "source=reference",
        f"data_root={tmp_path / 'none'}",
        f"paths.reference_dir={tmp_path / 'bad'}",
        out=tmp_path,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("import_data: error: shared data")


def test_main_job_trains_on_every_llm_kernel_of_the_pack(pack):
    """The main job's reference settings (conf/collect/default.yaml) take the pack's aiconfigurator sample whole:
    GEMMs in every format, prefill and decode attention, MoE and collectives; the other sources' rows as sampled."""
    from hydra import compose, initialize_config_dir

    from data.backends.reference import select

    with initialize_config_dir(config_dir=str(REFERENCE_DIR.parent / "conf"), version_base="1.3"):
        ref = compose("run").collect.backend.reference
    rows = select(pack, cap=dict(ref.cap), seed=0, exclude_dtypes=list(ref.exclude_dtypes or []))
    ai, packed = (f[f["source"].str.startswith("aiconfigurator")] for f in (rows, pack))
    assert len(ai) == len(packed) and {"moe", "all_reduce", "linear", "sdpa"} <= set(ai["op"])
    assert {"float8_e4m3fn", "fp8_block", "int4_wo", "bfloat16"} <= set(ai["dtype"])
    others = ~pack["source"].str.startswith(("aiconfigurator", "neusight"))
    assert (~rows["source"].str.startswith(("aiconfigurator", "neusight"))).sum() == others.sum()
