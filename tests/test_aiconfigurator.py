"""aiconfigurator's LLM-kernel database (data/importers/aiconfigurator.py), read from small real tables: each table
kind maps onto its op with the right shapes, dtypes, harness and power; version folders, reuse declarations and
copied tables are chosen as documented; unknown GPUs and malformed tables are one clear line; what is skipped is
counted; FLOPs and bytes equal count_cost."""

import json

import numpy as np
import pandas as pd
import pytest

from data.importers import DatasetError
from data.importers.aiconfigurator import TABLES, import_aiconfigurator, pack_sample, read_all
from data.schema import COLUMNS
from data.workloads import OPS, count_cost
from tests.conftest import SHARED, run_entry

pytestmark = pytest.mark.shared_data
DB = SHARED / "aiconfigurator" / "data"
H200 = DB / "h200_sxm"


def _sample(path, n, seed=0, where=None):
    df = pd.read_parquet(path)
    if where is not None:
        df = df[where(df)]
    return df.sample(min(n, len(df)), random_state=seed).sort_index()


def _put(root, rel, df):
    path = root / "aiconfigurator" / "data" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(path, index=False)
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A copy of the database's layout holding small samples of real H200 tables (and one L40S table)."""
    root = tmp_path_factory.mktemp("aic")
    gemm = H200 / "gemm" / "vllm"
    _put(root, "h200_sxm/gemm/vllm/0.22.0/gemm_perf.parquet", _sample(gemm / "0.22.0" / "gemm_perf.parquet", 200))
    _put(root, "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", _sample(gemm / "0.24.0" / "gemm_perf.parquet", 300))
    attn = H200 / "attention" / "vllm" / "0.24.0"
    for stem in ("context_attention_perf", "generation_attention_perf"):
        _put(root, f"h200_sxm/attention/vllm/0.24.0/{stem}.parquet", _sample(attn / f"{stem}.parquet", 400))
    moe = H200 / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet"
    _put(root, "h200_sxm/moe/vllm/0.24.0/moe_perf.parquet", _sample(moe, 400))
    _put(
        root,
        "h200_sxm/comm/nccl/2.29.2/nccl_perf.parquet",
        pd.read_parquet(H200 / "comm/nccl/2.29.2/nccl_perf.parquet"),
    )
    ar = H200 / "comm" / "vllm" / "0.24.0" / "custom_allreduce_perf.parquet"
    _put(root, "h200_sxm/comm/vllm/0.24.0/custom_allreduce_perf.parquet", pd.read_parquet(ar))
    # an SGLang folder holding TensorRT-LLM's all-reduce table (as in the database): a copy, skipped
    trt = pd.read_parquet(H200 / "comm" / "trtllm" / "1.2.0rc5" / "custom_allreduce_perf.parquet")
    _put(root, "h200_sxm/comm/sglang/0.5.6.post2/custom_allreduce_perf.parquet", trt)
    # a version folder that only declares reuse of another's table: nothing to read
    reuse = root / "aiconfigurator/data/h200_sxm/moe/vllm/0.22.0"
    reuse.mkdir(parents=True)
    (reuse / "reuse.yaml").write_text((H200 / "moe/vllm/0.22.0/reuse.yaml").read_text())
    mla = sorted((H200 / "mla" / "vllm").glob("*/*.parquet"))[0]
    _put(root, "h200_sxm/mla/vllm/0.24.0/" + mla.name, _sample(mla, 50))
    return root


@pytest.fixture(scope="module")
def imported(small):
    return read_all(small, versions="all")


def _meta(df):
    return pd.DataFrame([json.loads(m) for m in df["meta"]], index=df.index)


def test_every_kind_maps_onto_its_op_with_shapes_dtypes_harness_and_power(imported):
    rows, report = imported
    assert list(rows.columns) == COLUMNS and (rows["hardware"] == "H200-SXM").all()
    meta = _meta(rows)
    table = meta["table"].str.rsplit("/", n=1).str[-1].str.replace(".parquet", "")
    gemm = rows[table == "gemm_perf"]
    src = pd.concat(
        [pd.read_parquet(H200 / "gemm/vllm" / v / "gemm_perf.parquet") for v in ("0.22.0", "0.24.0")]
    ).drop_duplicates(["version", "gemm_dtype", "m", "n", "k", "kernel_source"])
    key = ["m", "n", "k"]
    assert set(gemm["op"]) == {"linear"} and set(gemm["dtype"]) == {"bfloat16", "float8_e4m3fn", "fp8_block"}
    assert dict(zip(meta.loc[gemm.index, "source_dtype"], gemm["dtype"])) == {
        "bfloat16": "bfloat16",
        "fp8": "float8_e4m3fn",
        "fp8_block": "fp8_block",
    }
    # timing: fp8_block GEMMs ran without a graph (a stream of calls: back_to_back), the others from a CUDA graph
    from features.physics import HARNESSES, harness_of

    harness = pd.Series(np.array(HARNESSES)[harness_of(gemm).astype(int)], index=gemm.index)
    assert (harness[gemm["dtype"] == "fp8_block"] == "back_to_back").all()
    assert (harness[gemm["dtype"] != "fp8_block"] == "cuda_graph").all()
    # power where the table has it (0.22.0): power_w as measured, energy = power x runtime, the limit in meta
    powered = gemm[gemm["source"] == "aiconfigurator-vllm@0.22.0"]
    assert powered["power_w"].notna().all() and gemm.loc[gemm["source"].str.endswith("0.24.0"), "power_w"].isna().all()
    np.testing.assert_allclose(powered["energy_j"], powered["power_w"] * powered["runtime_ms"] / 1e3)
    assert set(meta.loc[powered.index, "power_limit_w"]) == {700.0}
    assert (powered["power_method"] == "nvml_power").all()
    one = powered.iloc[0]
    hit = src[(src["version"] == "0.22.0") & (src[key] == one[key].astype(int).to_numpy()).all(axis=1)]
    assert one["runtime_ms"] in hit["latency"].to_numpy() and one["power_w"] in hit["power"].to_numpy()

    prefill = rows[table == "context_attention_perf"]
    decode = rows[table == "generation_attention_perf"]
    for part in (prefill, decode):
        assert set(part["op"]) == {"sdpa"} and (part["dtype"] == "bfloat16").all()
        m = _meta(part)
        assert ((part["kv_dtype"] == "float8_e4m3fn") == (m["source_kv_dtype"] == "fp8")).all()
        assert ((part["kv_dtype"] == "") == (m["source_kv_dtype"] == "bfloat16")).all()
        kv_len = part["kv_len"].fillna(part["seq_len"])  # a default kv_len (= seq_len) is dropped
        assert (kv_len == m["isl"] + m["step"]).all()
        assert (part["num_kv_heads"].fillna(part["heads"]) <= part["heads"]).all()
        assert (m["window_size"].eq(0) | (m["window_size"] >= kv_len)).all()  # a shorter window is skipped
    assert (prefill["causal"] == 1).all() and (prefill["seq_len"] == _meta(prefill)["isl"]).all()
    assert (decode["causal"] == 0).all() and (decode["seq_len"] == 1).all()
    assert {"cuda_graph"} == set(prefill["timing_method"]) | set(decode["timing_method"])

    moe = rows[rows["op"] == "moe"]
    assert (_meta(moe)["distribution"] == "balanced").all()
    assert set(moe["dtype"]) <= {"bfloat16", "float8_e4m3fn", "fp8_block", "int4_wo"}
    assert moe["ep"].dropna().gt(1).any() and moe["tp"].dropna().gt(1).any()

    nccl = rows[rows["source"] == "aiconfigurator-nccl@2.29.2"]
    assert set(nccl["op"]) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    assert set(nccl["dtype"]) == {"float16", "int8"} and set(nccl["gpus"]) == {2, 4, 8}
    src = pd.read_parquet(H200 / "comm/nccl/2.29.2/nccl_perf.parquet")
    assert sorted(nccl["n"]) == sorted(src["message_size"]) and (_meta(nccl)["source_op"] == "alltoall").sum() == 126
    assert nccl["n"].min() == 256 and nccl["n"].max() == 2**29 and set(nccl["timing_method"]) == {"stream_loop"}
    ar = rows[rows["source"] == "aiconfigurator-vllm@0.24.0"]
    ar = ar[ar["op"] == "all_reduce"]
    backend = _meta(ar)["backend"]
    assert len(ar) == 138 and set(ar["dtype"]) == {"bfloat16"}
    assert (ar["timing_method"] == np.where(backend == "vllm_eager", "stream_loop", "cuda_graph")).all()
    # env: the software that measured, as the table names it
    env = json.loads(gemm["env"].iloc[0])
    assert env["collector"] == "aiconfigurator" and env["device"] == "NVIDIA H200" and env["kernel_source"]
    assert sum(report.imported.values()) == len(rows)


def test_decode_rows_cache_length_grows_with_step(tmp_path):
    """One decode series (batch 16, 8 heads, 4 KV heads, head_dim 128, bfloat16 cache, no window) over every step:
    kv_len = isl + step grows with step, and so does the runtime where the cache read dominates."""
    decode = pd.read_parquet(H200 / "attention/vllm/0.24.0/generation_attention_perf.parquet")
    one = decode[
        (decode["batch_size"] == 16)
        & (decode["num_heads"] == 8)
        & (decode["num_key_value_heads"] == 4)
        & (decode["head_dim"] == 128)
        & (decode["kv_cache_dtype"] == "bfloat16")
        & (decode["window_size"] == 0)
    ]
    _put(tmp_path, "h200_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet", one)
    rows = import_aiconfigurator(tmp_path, verbose=False)
    assert len(rows) == len(one) and (rows["num_kv_heads"] == 4).all() and (rows["seq_len"] == 1).all()
    meta = _meta(rows)
    order = np.argsort(meta["step"].to_numpy(), kind="stable")
    kv_len = rows["kv_len"].to_numpy(dtype=float)[order]
    steps = meta["step"].to_numpy()[order]
    assert len(np.unique(steps)) == 17
    assert (np.diff(kv_len)[np.diff(steps) > 0] > 0).all() and (kv_len == steps + 1).all()  # isl 1 + step
    big = (rows["kv_len"] >= 8192).to_numpy()
    assert np.corrcoef(np.log(rows["kv_len"][big].astype(float)), np.log(rows["runtime_ms"][big]))[0, 1] > 0.9


def test_skipped_rows_are_counted_with_their_reason(imported):
    _, report = imported
    reasons = report.skipped_by_reason()
    assert any("multi-head latent attention" in r for r in reasons)
    assert any(r.startswith("routing 'power_law") for r in reasons)
    assert any("TRTLLM 1.2.0rc5" in r for r in reasons)  # the copied table
    assert any("sliding window" in r for r in reasons)
    lines = "\n".join(report.lines())
    assert "h200_sxm/mla" in lines and "imported" in lines
    assert not any("0.22.0/moe" in t for t in report.tables)  # the reuse-only folder holds no table


def test_version_policies_pick_newest_power_all_or_named(small):
    def sources(**kw):
        return set(import_aiconfigurator(small, kinds=["gemm"], verbose=False, **kw)["source"])

    assert sources() == {"aiconfigurator-vllm@0.24.0"}
    assert sources(versions="newest+power") == {"aiconfigurator-vllm@0.22.0", "aiconfigurator-vllm@0.24.0"}
    assert sources(versions=["0.22.0"]) == {"aiconfigurator-vllm@0.22.0"}
    both = import_aiconfigurator(small, kinds=["comm"], verbose=False)
    assert set(both["source"]) == {"aiconfigurator-nccl@2.29.2", "aiconfigurator-vllm@0.24.0"}
    assert set(import_aiconfigurator(small, frameworks=["nccl"], verbose=False)["family"]) == {"collective"}
    with pytest.raises(DatasetError, match="unknown aiconfigurator table kind 'mla'"):
        import_aiconfigurator(small, kinds=["mla"], verbose=False)
    with pytest.raises(DatasetError, match="versions must be one of"):
        import_aiconfigurator(small, versions="latest", verbose=False)


def test_flops_and_bytes_equal_count_cost(imported):
    rows, _ = imported
    sample = rows.groupby(["op", "dtype", "kv_dtype"], dropna=False).head(3)
    assert {"float8_e4m3fn"} <= set(sample["kv_dtype"].dropna())
    assert {"fp8_block", "float8_e4m3fn", "int4_wo"} & set(sample["dtype"])
    assert {"moe", "sdpa", "linear", "all_to_all"} <= set(sample["op"])
    for _, r in sample.iterrows():
        shape = {p: int(r[p]) for p in OPS[r["op"]].names if pd.notna(r[p])}
        kv = r["kv_dtype"] if isinstance(r["kv_dtype"], str) and r["kv_dtype"] else None
        assert count_cost(r["op"], shape, r["dtype"], kv) == (r["flops"], r["bytes"]), dict(r)
    # an fp8 KV cache is half the bytes of a bfloat16 one of the same shape
    attn = rows[rows["op"] == "sdpa"]
    fp8 = attn[attn["kv_dtype"] == "float8_e4m3fn"].iloc[0]
    same = {p: int(fp8[p]) for p in OPS["sdpa"].names if pd.notna(fp8[p])}
    assert count_cost("sdpa", same, "bfloat16")[1] > fp8["bytes"]


def test_unknown_gpu_folder_is_one_line_and_a_known_device_resolves_it(small, tmp_path):
    table = pd.read_parquet(H200 / "comm/nccl/2.29.2/nccl_perf.parquet").head(8)
    _put(tmp_path, "gx999/comm/nccl/2.29.2/nccl_perf.parquet", table.assign(device="NVIDIA GX999"))
    with pytest.raises(DatasetError) as err:
        import_aiconfigurator(tmp_path, verbose=False)
    msg = str(err.value)
    assert "'gx999'" in msg and "NVIDIA GX999" in msg and "aliases" in msg and "\n" not in msg
    other = tmp_path / "renamed"
    _put(other, "h200_renamed/comm/nccl/2.29.2/nccl_perf.parquet", table)  # device "NVIDIA H200": an alias
    rows = import_aiconfigurator(other, verbose=False)
    assert set(rows["hardware"]) == {"H200-SXM"} and len(rows) == 8


def test_malformed_table_is_one_line(tmp_path):
    gemm = pd.read_parquet(H200 / "gemm/vllm/0.24.0/gemm_perf.parquet").head(20)
    path = _put(tmp_path, "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", gemm.drop(columns=["m"]))
    with pytest.raises(DatasetError, match=r"gemm_perf.parquet: missing column\(s\) m ") as err:
        import_aiconfigurator(tmp_path, verbose=False)
    assert "\n" not in str(err.value)
    path.write_bytes(b"not parquet")
    with pytest.raises(DatasetError, match="not a readable parquet file") as err:
        import_aiconfigurator(tmp_path, verbose=False)
    assert "\n" not in str(err.value)
    (tmp_path / "other").mkdir()  # a data root without the database
    with pytest.raises(DatasetError, match="aiconfigurator/data is missing"):
        import_aiconfigurator(tmp_path / "other", verbose=False)


def test_pack_sample_keeps_every_octave_and_every_collective(imported):
    rows, _ = imported
    sample = pack_sample(rows, per_group=20, seed=0)
    assert sample.equals(pack_sample(rows, per_group=20, seed=0))  # seeded
    groups = sample[sample["family"] != "collective"].groupby(
        ["source", "op", "dtype", "kv_dtype", "causal"], dropna=False
    )
    assert groups.size().max() <= 20
    assert (sample["family"] == "collective").sum() == (rows["family"] == "collective").sum()
    gemm = rows[(rows["op"] == "linear") & (rows["source"] == "aiconfigurator-vllm@0.24.0")]
    picked = sample[(sample["op"] == "linear") & (sample["source"] == "aiconfigurator-vllm@0.24.0")]
    for dtype, part in picked.groupby("dtype"):  # as many octaves of m as the draw allows, the smallest among them
        assert part["m"].min() == gemm.loc[gemm["dtype"] == dtype, "m"].min()


@pytest.mark.slow
def test_entry_point_writes_parquet_and_reports(small, tmp_path):
    from data.store import read_dataset

    proc = run_entry("pipelines.import_data", "source=aiconfigurator", f"data_root={small}", out=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_dataset(tmp_path / "datasets" / "import" / "aiconfigurator.parquet")
    assert set(rows["hardware"]) == {"H200-SXM"} and set(rows["op"]) >= {"linear", "sdpa", "moe", "all_reduce"}
    assert "skipped" in proc.stdout and "aiconfigurator:" in proc.stdout


def test_tables_name_their_kind():
    assert {kind for kind, _ in TABLES.values()} == {"gemm", "attention", "encoder_attention", "moe", "comm"}
