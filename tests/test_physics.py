"""The physics-first runtime model (features/physics.py, models/physics/), fitted on small real slices of the
NeuSight and H200 datasets: it moves with the specs and the shape, stays in its bounds, round-trips, and gives one
clear error for bad input."""

from __future__ import annotations

import copy
import dataclasses
import functools

import numpy as np
import pandas as pd
import pytest

from data.hardware import HardwareRegistry
from features.physics import FEATURES, PhysicsFeaturizer, effective_peak
from features.tabular import FeatureError
from models.base import load_model
from models.physics import MIN_CALIBRATION_ROWS, PhysicsModel
from tests.conftest import SHARED

pytestmark = pytest.mark.skipif(not (SHARED / "neusight").is_dir(), reason="shared NeuSight data not present")

FAST = {"n_estimators": 60, "interval_folds": False}  # small models: the tests check behaviour, not accuracy


@functools.lru_cache(maxsize=1)
def small_rows() -> pd.DataFrame:
    """40 rows per NeuSight file (5 GPUs, every op) + every H200 row: ~1500 real measurements."""
    from data.importers.hopper import import_hopper
    from data.importers.neusight import import_neusight

    rows = pd.concat([import_neusight(max_rows_per_file=40), import_hopper()], ignore_index=True)
    return rows[rows["status"] == "ok"].reset_index(drop=True)


@functools.lru_cache(maxsize=1)
def small_frame() -> pd.DataFrame:
    return PhysicsFeaturizer(HardwareRegistry.from_dir()).transform(small_rows())


def neusight_mask() -> np.ndarray:
    return small_rows()["source"].str.startswith("neusight").to_numpy()


@functools.lru_cache(maxsize=2)
def fitted(interval_folds: bool = False) -> PhysicsModel:
    """Fitted on the NeuSight slice and the H200's float32 rows; other H200 dtypes stay unseen."""
    rows, X = small_rows(), small_frame()
    train = neusight_mask() | (rows["dtype"] == "float32").to_numpy()
    return PhysicsModel(**{**FAST, "interval_folds": interval_folds}).fit(
        X[train].reset_index(drop=True), rows.loc[train, "runtime_ms"].to_numpy()
    )


def describe(op: str, hardware: str, dtype: str = "float32", **shape) -> pd.DataFrame:
    return pd.DataFrame([{"op": op, "hardware": hardware, "dtype": dtype, **shape}])


def test_effective_peak_follows_the_cuda_backends_math_modes(registry):
    a100, v100, p4, t4 = (registry.get(h) for h in ("A100-PCIe-40GB", "V100-PCIe-32GB", "P4", "T4"))
    # one math mode per dtype for every op, convolutions included (TF32 is dtype tf32)
    assert effective_peak(a100, "float32") == (19.5e12, "fp32")  # IEEE float32 (data.backends.cuda)
    assert effective_peak(a100, "tf32") == (156e12, "tf32")
    assert effective_peak(v100, "float32") == (14e12, "fp32")
    assert effective_peak(v100, "tf32") == (14e12, "fp32")  # no TF32 before Ampere
    assert effective_peak(t4, "float16") == (65e12, "tensor16")
    assert effective_peak(p4, "float16") == (5.5e12, "fp32_acc16")  # fp32 accumulate, not 1/64 fp16
    assert effective_peak(v100, "bfloat16") == (14e12, "fp32_acc16")  # no bf16 rate on Volta


def test_tensor_core_peak_scales_with_operand_alignment(registry):
    """On tensor cores a row that is not a multiple of 16 bytes cuts the feed: an odd K in bf16 (2-byte rows) costs
    8x the aligned time, 4- and 8-byte rows 4x; float32 on the CUDA cores keeps its peak; the aligned 4096^3 bf16 GEMM
    is at the peak."""
    shapes = [
        describe("matmul", "H200-SXM", "bfloat16", m=4096, n=4096, k=4096),
        describe("matmul", "H200-SXM", "bfloat16", m=4096, n=4096, k=4095),
        describe("matmul", "H200-SXM", "bfloat16", m=4096, n=4096, k=4094),
        describe("matmul", "H200-SXM", "float32", m=4096, n=4096, k=4096),
        describe("matmul", "H200-SXM", "float32", m=4096, n=4096, k=4095),
        describe("matmul", "H200-SXM", "bfloat16", m=4096, n=4096, k=4092),
    ]
    X = PhysicsFeaturizer(registry).transform(pd.concat(shapes, ignore_index=True))
    c = X["compute_ms"].to_numpy()
    assert c[0] == pytest.approx(2 * 4096**3 / 989.4e12 * 1e3, rel=0.02)
    assert c[1] / c[0] == pytest.approx(8.0, rel=0.01)  # 2-byte rows: 2 / 16 of the feed
    assert c[2] / c[0] == pytest.approx(4.0, rel=0.01)  # 4-byte rows
    assert c[5] / c[0] == pytest.approx(4.0, rel=0.01)  # 8-byte rows run the 4-byte kernel (NARROW_LOAD_BYTES)
    assert X["log2_align_bytes"][5] == 3.0  # the learner still tells them apart
    assert c[4] / c[3] == pytest.approx(1.0, rel=0.01)  # CUDA cores: no step


def test_conv_channels_do_not_cap_the_tensor_feed(registry):
    """cuDNN pads the channels of its tensor-core conv tiles (features.physics.ALIGNED_FEED_FAMILIES): 63 channels in
    bf16 cost their FLOPs at the tensor peak as 64 do; the learner still reads the alignment."""
    conv = {"batch": 32, "h": 56, "w": 56, "kernel": 3, "stride": 1, "padding": 1}
    rows = pd.concat(
        [
            describe("conv2d", "H200-SXM", "bfloat16", c_in=64, c_out=64, **conv),
            describe("conv2d", "H200-SXM", "bfloat16", c_in=63, c_out=63, **conv),
        ],
        ignore_index=True,
    )
    X = PhysicsFeaturizer(registry).transform(rows)
    per_flop = X["compute_ms"] / X["flops"]
    assert per_flop[1] / per_flop[0] == pytest.approx(1.0, rel=0.1)  # tile quantisation only, not 8x
    assert list(X["log2_align_bytes"]) == [4.0, 1.0]


def test_a_conv_of_few_input_channels_runs_on_the_cuda_cores(registry):
    """A network's stem (c_in = 3) in bf16 / fp16 / tf32 fills less than one 16-byte vector of channels: it is costed
    at the fp32 FMA peak in the 16-bit-on-FMA (or fp32) math mode, where 8 channels of 16-bit and 4 of tf32 stay on
    the tensor cores. The law's measurements (features.physics.MIN_TC_CONV_BYTES): every 16-bit conv of the pack with
    c_in < 8 on a GPU with tensor cores, above 1 GFLOP, runs at 0.1-0.6 of its fp32 peak and under 0.07 of its
    tensor peak."""
    from data.reference import load_reference
    from features.physics import MIN_TC_CONV_BYTES, has_matrix_units

    stem = {"batch": 8, "h": 224, "w": 224, "kernel": 7, "stride": 2, "padding": 3, "c_out": 64}
    rows = pd.concat(
        [
            describe("conv2d", "H200-SXM", "bfloat16", c_in=3, **stem),
            describe("conv2d", "H200-SXM", "bfloat16", c_in=8, **stem),
            describe("conv2d", "H200-SXM", "tf32", c_in=3, **stem),
            describe("conv2d", "H200-SXM", "tf32", c_in=4, **stem),
            describe("conv2d", "H200-SXM", "float32", c_in=3, **stem),
        ],
        ignore_index=True,
    )
    X = PhysicsFeaturizer(registry).transform(rows)
    assert list(X["mode_fp32_acc16"]) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert list(X["mode_tf32"]) == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert list(X["mode_tensor16"]) == [0.0, 1.0, 0.0, 0.0, 0.0]
    per_flop = (X["compute_ms"] / X["flops"]).to_numpy()
    assert per_flop[0] == pytest.approx(per_flop[4], rel=1e-9) and per_flop[2] == pytest.approx(per_flop[4], rel=1e-9)
    assert per_flop[1] < per_flop[0] / 5 and per_flop[3] < per_flop[2] / 5
    pack = load_reference()
    conv = pack[(pack["status"] == "ok") & (pack["op"] == "conv2d") & pack["dtype"].isin(["float16", "bfloat16"])]
    few = conv[conv["c_in"] * 2 < MIN_TC_CONV_BYTES]
    few = few[[has_matrix_units(registry.get(h)) for h in few["hardware"]]]
    assert set(few["hardware"]) >= {"V100-SXM2-16GB", "T4", "H200-SXM"}
    rate = few["flops"] / (few["runtime_ms"] * 1e-3)
    fp32 = np.array([registry.get(h).peak_flops("float32") for h in few["hardware"]])
    tensor = np.array([registry.get(h).peak_tflops["float16"] * 1e12 for h in few["hardware"]])
    big = (few["flops"] > 1e9).to_numpy()  # above the launch floor
    assert ((rate / fp32)[big] > 0.1).all() and ((rate / fp32)[big] < 0.6).all()
    assert ((rate / tensor)[big] < 0.07).all()


def test_a_tf32_conv_of_a_short_reduction_runs_at_the_float32_rate(registry):
    """In TF32 a spatial conv also needs a reduction (c_in x kh x kw) of MIN_TF32_CONV_K: a 3 x 3 conv of 12 input
    channels (K = 108) is costed at the fp32 peak in the fp32 mode, one of 16 (K = 144) on the TF32 tensor cores, a
    7 x 7 stem of 4 (K = 196) too; a 1 x 1 conv (not measured) and every 16-bit conv keep their mode. NeuSight's float32
    convs on an A100 (PyTorch's TF32 default) follow the law; on a V100 they are IEEE float32 anyway."""
    from features.physics import MIN_TF32_CONV_K

    assert 9 * 12 < MIN_TF32_CONV_K <= 9 * 16
    conv = {"batch": 16, "h": 56, "w": 56, "c_out": 256, "kernel": 3, "stride": 1, "padding": 1}
    stem = {"batch": 8, "h": 224, "w": 224, "kernel": 7, "stride": 2, "padding": 3, "c_out": 64}
    pointwise = {**conv, "kernel": 1, "padding": 0}
    ns = "neusight@6945927"
    rows = pd.concat(
        [
            describe("conv2d", "H200-SXM", "tf32", c_in=12, **conv),
            describe("conv2d", "H200-SXM", "tf32", c_in=16, **conv),
            describe("conv2d", "H200-SXM", "tf32", c_in=4, **stem),
            describe("conv2d", "H200-SXM", "tf32", c_in=64, **pointwise),
            describe("conv2d", "H200-SXM", "bfloat16", c_in=12, **conv),
            describe("conv2d", "H200-SXM", "float32", c_in=12, **conv),
            describe("conv2d", "A100-PCIe-40GB", c_in=12, source=ns, **conv),
            describe("conv2d", "A100-PCIe-40GB", c_in=16, source=ns, **conv),
            describe("conv2d", "V100-PCIe-32GB", c_in=12, source=ns, **conv),
        ],
        ignore_index=True,
    )
    X = PhysicsFeaturizer(registry).transform(rows)
    assert list(X["mode_fp32"]) == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert list(X["mode_tf32"]) == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert X["mode_tensor16"][4] == 1.0
    per_flop = (X["compute_ms"] / X["flops"]).to_numpy()
    assert per_flop[0] == pytest.approx(per_flop[5], rel=0.2)  # the float32 rate (tiles aside), not 7x faster
    assert per_flop[1] < per_flop[0] / 4 and per_flop[7] < per_flop[6] / 4


def test_a_gpu_layernorm_of_an_unaligned_row_reads_it_twice(registry):
    """PyTorch's vectorised layernorm needs a row of a multiple of 4 elements; any other row takes the two-kernel path,
    which reads it twice (features.physics.LAYERNORM_VECTOR): 2 047 and 4 095 cost 1.5x the memory time of 2 048 and
    4 096 per byte, 2 044 does not; softmax has no such step."""
    from features.physics import LAYERNORM_TWO_PASS

    rows = pd.concat(
        [describe("layernorm", "H200-SXM", "bfloat16", m=4096, n=n) for n in (2048, 2047, 2044, 4096, 4095)]
        + [describe("softmax", "H200-SXM", "bfloat16", m=4096, n=n) for n in (2048, 2047)],
        ignore_index=True,
    )
    X = PhysicsFeaturizer(registry).transform(rows)
    per_byte = (X["memory_ms"] / X["bytes"]).to_numpy()
    assert per_byte[1] / per_byte[0] == pytest.approx(LAYERNORM_TWO_PASS) == 1.5
    assert per_byte[4] / per_byte[3] == pytest.approx(1.5) and per_byte[2] == pytest.approx(per_byte[0])
    assert per_byte[6] == pytest.approx(per_byte[5])  # softmax: one pass either way
    assert X["bytes"][1] < X["bytes"][0]  # the row's bytes are what it holds; the second read is in the time


def test_float32_convs_measured_with_pytorch_defaults_run_in_tf32(registry):
    """NeuSight measured with PyTorch's defaults (cuDNN TF32 on, matmul TF32 off): its float32 convs on a GPU with
    TF32 units are costed at the TF32 peak, its GEMMs and every conv on older GPUs stay IEEE; the project's own
    backend (IEEE) is the default; ``conv_fp32_math`` asks for either, and a bad value is one clear error."""
    conv = {"batch": 32, "c_in": 64, "c_out": 128, "h": 56, "w": 56, "kernel": 3, "stride": 1, "padding": 1}
    rows = pd.concat(
        [
            describe("conv2d", "A100-PCIe-40GB", source="neusight@6945927", **conv),
            describe("conv2d", "A100-PCIe-40GB", source="cuda", **conv),
            describe("conv2d", "V100-PCIe-32GB", source="neusight@6945927", **conv),
            describe("matmul", "A100-PCIe-40GB", source="neusight@6945927", m=4096, n=4096, k=4096),
            describe("conv2d", "A100-PCIe-40GB", conv_fp32_math="tf32", **conv),
            describe("conv2d", "A100-PCIe-40GB", source="neusight@6945927", conv_fp32_math="ieee", **conv),
        ],
        ignore_index=True,
    )
    X = PhysicsFeaturizer(registry).transform(rows)
    assert list(X["mode_tf32"]) == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    c = X["compute_ms"].to_numpy()
    assert c[1] / c[0] == pytest.approx(156 / 19.5, rel=0.01)  # 64-channel rows are 16-byte aligned in tf32
    with pytest.raises(FeatureError, match="conv_fp32_math must be one of"):
        PhysicsFeaturizer(registry).transform(describe("conv2d", "A100-PCIe-40GB", conv_fp32_math="fast", **conv))


def test_tf32_reaches_gemms_and_convs_only(registry):
    """A TF32 flag reaches cuBLAS and cuDNN only (features.physics.TF32_FAMILIES): an SDPA (PyTorch's float32
    attention kernel) or a softmax in tf32 is costed as in float32, while a GEMM in tf32 takes the TF32 peak."""
    sdpa = {"batch": 4, "heads": 16, "seq_len": 2048, "head_dim": 64, "causal": 0}
    rows = pd.concat(
        [
            describe("sdpa", "H100-SXM", "tf32", **sdpa),
            describe("sdpa", "H100-SXM", "float32", **sdpa),
            describe("matmul", "H100-SXM", "tf32", m=4096, n=4096, k=4096),
            describe("softmax", "H100-SXM", "tf32", m=64, n=4096),
            describe("softmax", "H100-SXM", "float32", m=64, n=4096),
        ],
        ignore_index=True,
    )
    X = PhysicsFeaturizer(registry).transform(rows)
    assert list(X["mode_fp32"]) == [1.0, 1.0, 0.0, 1.0, 1.0]
    assert list(X["mode_tf32"]) == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert X["physics_ms"].iloc[0] == X["physics_ms"].iloc[1]
    assert X["physics_ms"].iloc[3] == X["physics_ms"].iloc[4]


def test_gemm_tiles_and_waves(registry):
    X = PhysicsFeaturizer(registry).transform(
        pd.concat(
            [
                describe("matmul", "H100-SXM", "float16", m=4096, n=4096, k=4096),
                describe("matmul", "H100-SXM", "float16", m=4097, n=4096, k=4096),
            ],
            ignore_index=True,
        )
    )
    ideal_ms = 2 * 4096**3 / 989.4e12 * 1e3
    assert ideal_ms <= X["compute_ms"][0] <= 1.3 * ideal_ms  # tile/wave quantisation only adds
    assert X["compute_ms"][1] >= X["compute_ms"][0]  # one more row never makes it faster
    assert np.all((X["tail_occupancy"] > 0) & (X["tail_occupancy"] <= 1))
    assert np.all((X["tile_fill"] > 0) & (X["tile_fill"] <= 1))
    assert X["log2_align_bytes"][0] == 4 and X["log2_align_bytes"][1] == 4  # K, N multiples of 8: 16 B
    odd = PhysicsFeaturizer(registry).transform(describe("matmul", "H100-SXM", "float16", m=64, n=4095, k=64))
    assert odd["log2_align_bytes"][0] == 1  # an odd row of fp16: 2-byte aligned


def test_a_convolution_and_attention_reduce_over_their_whole_k(registry, monkeypatch):
    """features.physics.WHOLE_K_FAMILIES: a forward conv (implicit GEMM) and a fused SDPA are not split along K; a
    GEMM of the same dims is. A conv of few output tiles and a long K (M = batch x h x w = 49, N = 218, K = 9 x 1128)
    is costed as its tiles walking all of K: one wave of one tile's full K loop, not a 16-way split."""
    import features.physics as fp

    conv = describe("conv2d", "V100-PCIe-32GB", batch=1, c_in=1128, c_out=218, h=7, w=7, kernel=3, stride=1, padding=1)
    gemm = describe("matmul", "V100-PCIe-32GB", m=49, n=218, k=9 * 1128)
    sdpa = describe("sdpa", "H200-SXM", "bfloat16", batch=1, heads=2, seq_len=4096, head_dim=64, causal=0)
    X = PhysicsFeaturizer(registry).transform(pd.concat([conv, gemm, sdpa], ignore_index=True))
    assert X["log2_split_k"].tolist()[0] == 0 and X["log2_split_k"].tolist()[2] == 0
    assert X["log2_split_k"][1] > 0  # cuBLAS splits K where it pays
    per_sm = registry.get("V100-PCIe-32GB").peak_flops("float32") / 80
    # the best tile is 32 x 32 (14 tiles, one wave on 80 SMs), each walking all 10 152 of K
    assert X["compute_ms"][0] == pytest.approx(2.0 * 32 * 32 * 9 * 1128 / per_sm * 1e3, rel=1e-9)
    assert X["compute_ms"][0] > 4 * X["compute_ms"][1]  # the GEMM of the same dims, split
    monkeypatch.setattr(fp, "WHOLE_K_FAMILIES", ())
    split = PhysicsFeaturizer(registry).transform(pd.concat([conv, sdpa], ignore_index=True))
    assert split["log2_split_k"][0] > 0 and split["compute_ms"][0] < X["compute_ms"][0] / 4
    assert split["compute_ms"][1] < X["compute_ms"][2]  # 2 x 32 query tiles on 132 SMs: the split was shorter


@pytest.mark.shared_data
def test_whole_k_explains_the_packs_convolutions_better_than_a_split(registry, monkeypatch):
    """The evidence for WHOLE_K_FAMILIES: on every NeuSight GPU of the pack, log(runtime / compute time) of its convs
    over 0.3 ms (the floor a small share) spreads less with the whole K than with the best split."""
    import features.physics as fp
    from data.reference import load_reference

    rows = load_reference()
    rows = rows[(rows["status"] == "ok") & (rows["op"] == "conv2d") & (rows["runtime_ms"] > 0.3)]
    rows = rows[rows["source"].str.startswith("neusight")].reset_index(drop=True)
    whole = PhysicsFeaturizer(registry).transform(rows)["compute_ms"].to_numpy()
    monkeypatch.setattr(fp, "WHOLE_K_FAMILIES", ())
    split = PhysicsFeaturizer(registry).transform(rows)["compute_ms"].to_numpy()
    y = rows["runtime_ms"].to_numpy(float)
    gpus = rows["hardware"].to_numpy()
    assert len(set(gpus)) == 4
    for gpu in set(gpus):
        i = gpus == gpu
        spread_whole, spread_split = np.std(np.log(y[i] / whole[i])), np.std(np.log(y[i] / split[i]))
        assert spread_whole < spread_split - 0.01, (gpu, spread_whole, spread_split)


def test_memory_bound_ops_move_with_bandwidth(registry):
    """A GPU with twice the bandwidth (all else equal) runs a large layernorm / add about twice as fast. Both are
    spec variants no row was measured on, of no known architecture (a measured GPU's own correction would apply to
    the A100 itself, and a close variant of it would borrow that correction)."""
    model = fitted()
    a100 = registry.get("A100-PCIe-40GB")
    bw = a100.memory_bandwidth_gbs
    slow, fast = (
        dataclasses.replace(a100, id=f"A100-{x}xBW", aliases=(), memory_bandwidth_gbs=x * bw, architecture=None)
        for x in (1.5, 3.0)
    )
    reg = HardwareRegistry([*registry, slow, fast])
    for op in ("layernorm", "add"):
        X = PhysicsFeaturizer(reg).transform(
            pd.concat([describe(op, h, m=16384, n=8192) for h in (slow.id, fast.id)], ignore_index=True)
        )
        slow_ms, fast_ms = model.predict(X)
        assert 1.8 <= slow_ms / fast_ms <= 2.0, (op, slow_ms, fast_ms)


def test_a_measured_gpu_has_its_own_correction_per_math_mode():
    """Every training GPU and math mode with enough rows gets a correction; the unseen math modes of the H200 do not
    (its bf16 rows are predicted by the shared model)."""
    model = fitted()
    keys = {c["key"] for c in model.corrections_}
    assert all(c["origin"] == "fit" for c in model.corrections_)
    assert any(k.endswith("|fp32") for k in keys) and not any(k.endswith("|tensor16") for k in keys)
    rows, X = small_rows(), small_frame()
    bf16 = np.flatnonzero((rows["dtype"] == "bfloat16").to_numpy())[:20]
    _, _, which = model._parts(X.iloc[bf16].reset_index(drop=True))
    assert (which == -1).all()
    fp32 = np.flatnonzero(neusight_mask())[:20]
    _, _, which = model._parts(X.iloc[fp32].reset_index(drop=True))
    assert (which >= 0).all()
    plain = PhysicsModel(**{**FAST, "hardware_corrections": False}).fit(
        X[neusight_mask()].reset_index(drop=True), rows.loc[neusight_mask(), "runtime_ms"].to_numpy()
    )
    assert plain.corrections_ == []


def test_an_oversampled_gpu_and_family_does_not_set_the_shared_efficiency():
    """A (GPU, family) group counts as at most ``group_rows`` rows in the shared learner's loss: the A100's GEMM rows
    repeated 10 times pull the shared efficiency of the T4's GEMMs toward the A100's level unweighted, and hardly at
    all weighted (against a fit on each group once; the per-GPU corrections off, the shared learner alone)."""
    rows, X = small_rows(), small_frame()
    gemm = (rows["family"] == "gemm").to_numpy()
    a100 = np.flatnonzero(gemm & (rows["hardware"] == "A100-PCIe-40GB").to_numpy())
    t4 = np.flatnonzero(gemm & (rows["hardware"] == "T4").to_numpy())
    y = rows["runtime_ms"].to_numpy()

    def shared_log_eff(index: np.ndarray, **params) -> float:
        model = PhysicsModel(**{**FAST, "hardware_corrections": False, **params}).fit(
            X.iloc[index].reset_index(drop=True), y[index]
        )
        return float(np.mean(np.log(model.efficiency(X.iloc[t4].reset_index(drop=True)))))

    once = shared_log_eff(np.concatenate([a100, t4]))
    repeated = np.concatenate([np.tile(a100, 10), t4])
    unweighted = shared_log_eff(repeated, group_rows=0)
    weighted = shared_log_eff(repeated, group_rows=len(t4))
    assert shared_log_eff(repeated, group_rows=10 * len(a100)) == pytest.approx(unweighted)  # no group over: weight 1
    assert abs(unweighted - once) > 0.05  # the two GPUs' GEMMs run at other shares of their peaks
    assert abs(weighted - once) < 0.25 * abs(unweighted - once)


def test_a_new_variant_of_a_measured_chip_borrows_its_correction(registry):
    """An unseen GPU close to a measured one of its architecture (A100 80 GB SXM4 next to the A100 PCIe 40 GB, the
    H100 next to the H200) takes that GPU's correction for the same math mode, and still says it is unseen; one of
    another architecture (L4, Ada) or far from every measured sibling (TITAN X Pascal vs the P4 / P100) does not."""

    model = fitted()
    shapes = [(512, 1024, 768), (2048, 2048, 2048), (96, 4096, 1000)]
    gpus = ["A100-SXM4-80GB", "H100-SXM", "L4", "TITAN-X-Pascal"]
    rows = pd.concat([describe("matmul", h, m=m, n=n, k=k) for h in gpus for m, n, k in shapes], ignore_index=True)
    X = PhysicsFeaturizer(registry).transform(rows)
    shared = copy.deepcopy(model)
    shared.borrow_corrections = False
    on, off = model.predict(X), shared.predict(X)
    moved = ~np.isclose(on, off, rtol=1e-9)
    assert list(moved.reshape(len(gpus), len(shapes)).all(axis=1)) == [True, True, False, False]
    assert not model.predict_domain(X)["hardware_seen"].any()
    # the borrowed share fades with the distance: a spec variant further from the A100 moves toward the shared model
    a100 = registry.get("A100-PCIe-40GB")
    far = [dataclasses.replace(a100, id=f"A100-{x}xBW", aliases=(), memory_bandwidth_gbs=x * 1555) for x in (1.2, 1.6)]
    Xv = PhysicsFeaturizer(HardwareRegistry([*registry, *far])).transform(
        pd.concat([describe("matmul", h.id, m=2048, n=2048, k=2048) for h in far], ignore_index=True)
    )
    log_shift = np.abs(np.log(model.predict(Xv) / shared.predict(Xv)))
    assert log_shift[0] > log_shift[1] > 0
    donor = describe("matmul", "A100-PCIe-40GB", m=2048, n=2048, k=2048)  # the donor itself: its own correction
    _, _, which = model._parts(PhysicsFeaturizer(registry).transform(donor))
    assert which[0] >= 0


def test_large_matmul_moves_with_physics_and_is_flagged(registry):
    """No silent cap: 40960^3 (and 81920^3, the largest fp16 cube whose three matrices fit the 80 GB) on H100-SXM come
    back within 2x of the spec-scaled physics."""
    model = fitted()
    X = PhysicsFeaturizer(registry).transform(
        pd.concat(
            [describe("matmul", "H100-SXM", "float16", m=s, n=s, k=s) for s in (4096, 40960, 81920)], ignore_index=True
        )
    )
    pred = model.predict(X)
    phys = X["physics_ms"].to_numpy()
    for big in (1, 2):
        scaled = pred[0] * phys[big] / phys[0]  # about 1000x, then 8000x
        assert scaled / 2 <= pred[big] <= 2 * scaled, (pred, phys)
    dom = model.predict_domain(X)
    assert not dom["in_domain"][1] and not dom["in_domain"][2]
    assert dom["domain_distance"][2] > dom["domain_distance"][1] > 0


def test_efficiency_stays_in_bounds():
    model = fitted()
    X = small_frame()
    eff = model.efficiency(X)
    assert np.all(eff > 0) and np.all(eff <= model.e_max)
    extreme = X.copy()
    extreme[list(FEATURES)] = extreme[list(FEATURES)] * 100.0  # far outside anything seen
    eff = model.efficiency(extreme)
    assert np.all(eff > 0) and np.all(eff <= model.e_max)


@pytest.mark.parametrize("column, low, high", [("tail_occupancy", 0.1, 1.0), ("log2_k_per_split", 4.0, 14.0)])
def test_monotone_where_physics_orders_the_efficiency(column, low, high):
    """A fuller tail wave or a longer main loop per CTA never lowers the learned efficiency (monotone constraints of
    the xgb learner)."""
    model = fitted()
    X = small_frame()
    X = X[X["family_gemm"] == 1].head(50).reset_index(drop=True)
    lo, hi = X.copy(), X.copy()
    lo[column], hi[column] = low, high
    assert np.all(model.efficiency(hi) >= model.efficiency(lo) - 1e-9)


def test_save_load_round_trip(tmp_path):
    rows, X = small_rows(), small_frame()
    model = fitted()
    h200 = np.flatnonzero((rows["hardware"] == "H200-SXM").to_numpy() & (rows["dtype"] != "float32").to_numpy())
    calibrated = model.calibrate(X.iloc[h200[:40]], rows["runtime_ms"].to_numpy()[h200[:40]], hardware="H200-SXM")
    for m, name in ((model, "base"), (calibrated, "calibrated")):
        loaded = load_model(m.save(tmp_path / name))
        assert isinstance(loaded, PhysicsModel)
        np.testing.assert_allclose(loaded.predict(X), m.predict(X), rtol=1e-6)
        pd.testing.assert_frame_equal(loaded.predict_domain(X), m.predict_domain(X))


def test_fit_on_descriptions_equals_fit_on_frame():
    rows = small_rows().head(300)
    y = rows["runtime_ms"].to_numpy()
    a = PhysicsModel(**FAST).fit(rows, y)
    b = PhysicsModel(**FAST).fit(PhysicsFeaturizer(HardwareRegistry.from_dir()).transform(rows), y)
    np.testing.assert_allclose(a.predict(rows), b.predict(rows), rtol=1e-9)


def test_calibrate_learns_a_new_gpu_from_its_rows():
    """A model that never saw the H200's tensor-core rows, calibrated on 60 of them, predicts the others better;
    it records the hardware and the number of rows, and leaves other GPUs' predictions alone."""
    rows, X = small_rows(), small_frame()
    model = fitted()
    y = rows["runtime_ms"].to_numpy()
    new = np.flatnonzero((rows["hardware"] == "H200-SXM").to_numpy() & (rows["dtype"] != "float32").to_numpy())
    cal, test = new[::5][:60], np.setdiff1d(new, new[::5][:60])
    tuned = model.calibrate(X.iloc[cal], y[cal], hardware="H200-SXM")
    before = np.mean(np.abs(model.predict(X.iloc[test]) / y[test] - 1))
    after = np.mean(np.abs(tuned.predict(X.iloc[test]) / y[test] - 1))
    assert after < 0.85 * before, (before, after)
    assert tuned.corrections_[-1]["hardware"] == "H200-SXM" and tuned.corrections_[-1]["rows"] == 60
    other = np.flatnonzero(neusight_mask())[:200]
    np.testing.assert_allclose(tuned.predict(X.iloc[other]), model.predict(X.iloc[other]))
    dom = tuned.predict_domain(X.iloc[test])
    # rows of the families the correction was kept for say so; the others keep the model's own answer
    kept = np.isin(rows["family"].to_numpy()[test], tuned.corrections_[-1].get("families", []))
    assert (dom["calibrated_on"].to_numpy() == np.where(kept, "H200-SXM", "")).all() and kept.any()
    assert dom["hardware_seen"].all()


def test_calibrate_keeps_a_correction_only_for_the_families_it_improves():
    """The new GPU's rows of a family the model already answers exactly keep the model's answer; a family it answers
    2x too slow takes the correction: never worse than the model on any family's rows, out of fold."""
    rows, X = small_rows(), small_frame()
    model = fitted()
    h200 = np.flatnonzero((rows["hardware"] == "H200-SXM").to_numpy() & (rows["dtype"] != "float32").to_numpy())
    fam = rows["family"].to_numpy()[h200]
    gemm, other = h200[fam == "gemm"][:40], h200[fam != "gemm"][:40]
    cal = np.concatenate([gemm, other])
    # measured = the model's own answer for the GEMMs, half of it for the others
    y = model.predict(X.iloc[cal]) * np.where(np.isin(cal, gemm), 1.0, 0.5)
    tuned = model.calibrate(X.iloc[cal].reset_index(drop=True), y, hardware="H200-SXM", method="correction")
    corr = tuned.corrections_[-1]
    assert "gemm" not in corr["families"] and set(corr["families"]) and corr["mape_out_of_fold"] < corr["mape_before"]
    np.testing.assert_allclose(tuned.predict(X.iloc[gemm]), model.predict(X.iloc[gemm]))  # the model's own answer
    assert np.median(tuned.predict(X.iloc[other]) / model.predict(X.iloc[other])) < 0.8
    report = tuned.calibration_oof_.groupby("family").apply(
        lambda g: (
            np.abs(np.expm1(g["after"] - g["measured"])).mean(),
            np.abs(np.expm1(g["before"] - g["measured"])).mean(),
        )
    )
    assert all(after <= before for after, before in report)


@functools.lru_cache(maxsize=2)
def neusight_only(keep_rows: int) -> PhysicsModel:
    """Fitted on the NeuSight slice only: no attention row, no H200 row, no back-to-back harness."""
    rows, X = small_rows(), small_frame()
    ns = neusight_mask()
    return PhysicsModel(**{**FAST, "keep_rows": keep_rows}).fit(
        X[ns].reset_index(drop=True), rows.loc[ns, "runtime_ms"].to_numpy()
    )


def test_calibrate_refits_and_learns_a_family_it_never_saw(tmp_path):
    """A model that kept its rows calibrates by a refit: fitted on NeuSight (no attention, no PyTorch stream), the
    H200's other rows come out better than by a correction of the model's guess (the same rows, a model that kept
    none) and well under the guess's error, and the refit learned the family it never saw: its stream floor of SDPA
    is the one the H200's rows fit, where the guess had it from the other families' by their launch ratios; the
    calibrated model keeps the new rows (3x) and answers for other GPUs exactly as before, also after a save and
    load."""
    from models.physics import NEW_ROW_REPEATS, estimate_floors

    rows, X = small_rows(), small_frame()
    y = rows["runtime_ms"].to_numpy()
    h200 = np.flatnonzero(~neusight_mask())
    cal, test = h200[::4], np.setdiff1d(h200, h200[::4])
    errors, refit = {}, None
    for keep in (50000, 0):
        model = neusight_only(keep)
        # a refit where the model kept rows (asked by name: auto keeps the simpler correction unless the refit beats
        # it out of fold by a standard error), a correction where it kept none
        tuned = model.calibrate(X.iloc[cal], y[cal], hardware="H200-SXM", method="refit" if keep else "auto")
        errors[tuned.corrections_[-1]["method"]] = np.mean(np.abs(tuned.predict(X.iloc[test]) / y[test] - 1))
        # either way beats the model's own answer out of fold, by far
        assert tuned.corrections_[-1]["mape_out_of_fold"] < 0.8 * tuned.corrections_[-1]["mape_before"]
        if keep:
            refit = tuned.corrections_[-1]["model"]
            assert len(tuned.rows_["y"]) == len(model.rows_["y"]) + NEW_ROW_REPEATS * len(cal)
            ns = np.flatnonzero(neusight_mask())[:300]
            np.testing.assert_array_equal(tuned.predict(X.iloc[ns]), model.predict(X.iloc[ns]))
            loaded = load_model(tuned.save(tmp_path / "refit"))
            np.testing.assert_allclose(loaded.predict(X.iloc[test]), tuned.predict(X.iloc[test]), rtol=1e-6)
            assert len(loaded.rows_["y"]) == len(tuned.rows_["y"])
    assert set(errors) == {"refit", "correction"}
    guess = np.mean(np.abs(neusight_only(0).predict(X.iloc[test]) / y[test] - 1))  # the model before calibrating
    # measured: refit 0.147, correction 0.165, uncalibrated 0.381 (0.157 / 0.167 / 0.373 before attention's
    # exponentials; the guess's SDPA floor, 32.5 us from the other families' by their launch ratios, is near the H200
    # set's 27.8)
    assert errors["refit"] < errors["correction"] and errors["refit"] < 0.6 * guess, (errors, guess)
    stream = estimate_floors(X.iloc[h200].reset_index(drop=True), y[h200])["back_to_back"]["attention"]
    assert stream / 1.2 < refit.floors_["back_to_back"]["attention"] < stream * 1.2


def test_calibrate_keeps_a_simpler_answer_unless_a_way_beats_it_by_a_standard_error():
    """The one-standard-error rule behind calibrate's auto choice: a gain on a few rows that is within the noise of
    the paired errors keeps the incumbent (a floor scale of 2 from 10 random H100 rows was 1.4 points better on them
    out of fold and 11 points worse on the others); a gain on most rows wins; a bad method name is one line."""
    from models.physics.corrections import beats

    rng = np.random.default_rng(0)
    logy = rng.normal(size=10)
    incumbent = logy + np.log(1.3)  # 30% over on every row
    noisy = logy + np.log(np.tile([1.0, 1.56], 5))  # exact on half the rows, 56% over on the others: 28% mean
    assert np.mean(np.abs(np.expm1(noisy - logy))) == pytest.approx(0.28)
    assert not beats(noisy, incumbent, logy)  # 2 points better on average, 30 better or 26 worse row by row
    assert beats(logy + np.log(1.1) + rng.normal(scale=0.02, size=10), incumbent, logy)
    assert not beats(incumbent, incumbent, logy)
    with pytest.raises(ValueError, match="^calibrate: method must be one of auto, refit, correction, got 'best'$"):
        fitted().calibrate(small_frame().head(10), small_rows()["runtime_ms"].head(10), method="best")


def test_a_correction_keeps_the_launch_floor_under_the_fastest_measured_call():
    """The floor scale of a new GPU's correction stays under every row's runtime: trees correct the kernel only, so a
    floor above a measured call stays wrong (a measured GPU's own correction is not bounded: models.physics). Here
    the large rows (one runtime, kernels predicted 0.5-3) fit best with the floor over the runtime of five small ones
    measured at 0.8, which hold it under 0.8."""
    from models.physics.corrections import fit_correction

    kernel = np.concatenate([np.full(5, 0.01), np.linspace(0.5, 3.0, 45)])
    logy = np.log(np.concatenate([np.full(5, 0.8), np.full(45, 3.0)]))

    def loss(scale):  # the best over the kernel's bias
        return min(np.sum((np.log(scale + kernel * np.exp(b)) - logy) ** 2) for b in np.linspace(-2, 2, 81))

    corr = fit_correction(np.zeros((50, 1)), np.ones(50), kernel, logy, 0, 0, ("x",), bounded=True)
    assert 0.7 < corr["floor_scale"] <= 0.8  # the largest grid step under the bound, not the grid's bottom
    assert loss(1.26) < loss(corr["floor_scale"])  # the bound binds: unbounded, a floor of 1.26 fits better
    own = fit_correction(np.zeros((50, 1)), np.ones(50), kernel, logy, 0, 0, ("x",))  # a measured GPU's own: free
    assert own["floor_scale"] == pytest.approx(1.26, rel=0.01)


def test_a_measured_gpus_correction_scales_each_floor_group_on_its_own():
    """A measured GPU's own correction scales each floor group's floor by its own rows (the host path of one family
    is not the same multiple of the shared floor on every host); a group of too few rows takes the GPU's one scale,
    and so does every group of a correction fitted without groups (a new GPU's few rows)."""
    from models.physics.corrections import MIN_GROUP_SCALE_ROWS, fit_correction, group_scale

    groups = np.array(["gemm"] * 20 + ["linear"] * 20 + ["norm"] * (MIN_GROUP_SCALE_ROWS - 1))
    kernel = np.full(len(groups), 1e-3)  # floor-bound calls
    logy = np.log(np.where(groups == "gemm", 0.5, np.where(groups == "linear", 2.0, 1.0)))
    F, floor = np.zeros((len(groups), 1)), np.ones(len(groups))
    corr = fit_correction(F, floor, kernel, logy, 0, 0, ("x",), groups=groups)
    assert corr["floor_scales"]["gemm"] == pytest.approx(0.5, rel=0.06)
    assert corr["floor_scales"]["linear"] == pytest.approx(2.0, rel=0.06)
    assert "norm" not in corr["floor_scales"]
    np.testing.assert_allclose(
        group_scale(corr, np.array(["linear", "norm"])), [corr["floor_scales"]["linear"], corr["floor_scale"]]
    )
    one = fit_correction(F, floor, kernel, logy, 0, 0, ("x",))
    assert "floor_scales" not in one and np.all(group_scale(one, groups) == one["floor_scale"])


def test_a_second_gpu_calibrated_after_a_first_keeps_the_first(registry):
    """Calibrating GPU B by a refit on a model already calibrated on GPU A refits with A's rows too and leaves A's
    answers as they were (A keeps its own refit)."""
    from models.physics import NEW_ROW_REPEATS

    rows, X = small_rows(), small_frame()
    y = rows["runtime_ms"].to_numpy()
    model = neusight_only(50000)
    h200 = np.flatnonzero(~neusight_mask())
    first = model.calibrate(X.iloc[h200[::4]], y[h200[::4]], hardware="H200-SXM")
    a100 = np.flatnonzero((rows["hardware"] == "A100-PCIe-40GB").to_numpy())[:30]
    variant = rows.iloc[a100].assign(hardware="A100-SXM4-80GB").reset_index(drop=True)
    Xv = PhysicsFeaturizer(registry).transform(variant)
    # by name: auto may keep the model's own answer for B (its 30 rows are an A100's, which the model knows)
    second = first.calibrate(Xv, variant["runtime_ms"].to_numpy(), hardware="A100-SXM4-80GB", method="refit")
    assert [c["hardware"] for c in second.corrections_ if c.get("origin") != "fit"] == ["H200-SXM", "A100-SXM4-80GB"]
    assert len(second.rows_["y"]) == len(first.rows_["y"]) + NEW_ROW_REPEATS * len(variant)
    np.testing.assert_array_equal(second.predict(X.iloc[h200]), first.predict(X.iloc[h200]))
    assert not np.allclose(second.predict(Xv), first.predict(Xv))


def test_a_model_saved_without_its_rows_calibrates_by_a_correction(tmp_path):
    """An artifact without training rows (``keep_rows=0``) still calibrates, by a correction; a refit asks for them."""
    rows, X = small_rows(), small_frame()
    y = rows["runtime_ms"].to_numpy()
    path = neusight_only(0).save(tmp_path / "old")
    assert not (path / "training_rows.parquet").exists()
    h200 = np.flatnonzero(~neusight_mask())[:40]
    old = load_model(path)
    auto = old.calibrate(X.iloc[h200], y[h200], hardware="H200-SXM")
    assert auto.corrections_[-1]["method"] in ("correction", "none")
    assert old.calibrate(X.iloc[h200], y[h200], method="correction").corrections_[-1]["method"] == "correction"
    with pytest.raises(ValueError, match="^calibrate: a refit needs the model's training rows"):
        old.calibrate(X.iloc[h200], y[h200], method="refit")
    new = load_model(neusight_only(50000).save(tmp_path / "new"))
    assert new.calibrate(X.iloc[h200], y[h200], method="refit").corrections_[-1]["method"] == "refit"


def test_calibrating_a_variant_starts_from_the_borrowed_correction(registry):
    """A new variant of a measured chip is calibrated on top of its sibling's borrowed correction (the model's own
    zero-shot answer), not on the bare shared model: the correction's ``mape_before`` is the borrowing model's error
    on the new rows."""

    rows, model = small_rows(), fitted()
    a100 = np.flatnonzero((rows["hardware"] == "A100-PCIe-40GB").to_numpy())[:40]
    variant = rows.iloc[a100].assign(hardware="A100-SXM4-80GB").reset_index(drop=True)  # stands in for its rows
    X, y = PhysicsFeaturizer(registry).transform(variant), variant["runtime_ms"].to_numpy()
    shared = copy.deepcopy(model)
    shared.borrow_corrections = False
    tuned, plain = model.calibrate(X, y, hardware="A100-SXM4-80GB"), shared.calibrate(X, y, hardware="A100-SXM4-80GB")
    borrowed_error = np.mean(np.abs(model.predict(X) / y - 1)) * 100
    shared_error = np.mean(np.abs(shared.predict(X) / y - 1)) * 100
    assert tuned.corrections_[-1]["mape_before"] == pytest.approx(borrowed_error)
    assert plain.corrections_[-1]["mape_before"] == pytest.approx(shared_error)
    assert borrowed_error != pytest.approx(shared_error)


def test_calibrate_rejects_bad_rows():
    rows, X = small_rows(), small_frame()
    model = fitted()
    y = rows["runtime_ms"].to_numpy()
    h200 = np.flatnonzero((rows["hardware"] == "H200-SXM").to_numpy())
    with pytest.raises(ValueError, match=f"at least {MIN_CALIBRATION_ROWS}"):
        model.calibrate(X.iloc[h200[:3]], y[h200[:3]])
    bad = y[h200[:20]].copy()
    bad[0] = -1.0
    with pytest.raises(ValueError, match="finite and > 0"):
        model.calibrate(X.iloc[h200[:20]], bad)
    mixed = np.concatenate([h200[:10], np.flatnonzero(neusight_mask())[:10]])
    with pytest.raises(ValueError, match="one hardware"):
        model.calibrate(X.iloc[mixed], y[mixed])
    with pytest.raises(ValueError, match="shape"):
        model.calibrate(X.iloc[h200[:20]], y[h200[:10]])
    for exc in (model.calibrate.__doc__,):
        assert "ValueError" in exc


def test_bad_input_is_one_clear_error(registry):
    with pytest.raises(FeatureError, match="no physics model"):
        PhysicsFeaturizer(registry).transform(describe("mlp", "A100-PCIe-40GB", batch=8, width=64, depth=2))
    with pytest.raises(FeatureError, match="unknown hardware"):
        PhysicsFeaturizer(registry).transform(describe("matmul", "no-such-gpu", m=8, n=8, k=8))
    with pytest.raises(FeatureError, match="fpga"):
        PhysicsFeaturizer(registry).transform(describe("matmul", "xcvu13p", m=8, n=8, k=8))
    rows = small_rows().head(50)
    with pytest.raises(ValueError, match="> 0"):
        PhysicsModel(**FAST).fit(rows, -rows["runtime_ms"].to_numpy())
    with pytest.raises(ValueError, match="unknown learner"):
        PhysicsModel(learner="svm", **FAST).fit(rows, rows["runtime_ms"].to_numpy())
    with pytest.raises(ValueError, match="or workload descriptions"):
        PhysicsModel(**FAST).fit(pd.DataFrame({"x": [1.0]}), [1.0])


def test_cpu_rows_are_handled_and_flagged():
    """A CPU spec (kind cpu: measured fp32 peak and copy bandwidth) gets a physics time and is out of domain for
    a model that saw only GPUs."""
    cpu = HardwareRegistry.from_dir().get("T4")
    cpu = dataclasses.replace(
        cpu,
        id="cpu-test-2t",
        kind="cpu",
        vendor="x86_64",
        aliases=(),
        sm_count=2,
        memory_bandwidth_gbs=20.0,
        l2_cache_mb=1.0,
        peak_tflops={"float32": 0.1},
    )
    reg = HardwareRegistry([*HardwareRegistry.from_dir(), cpu])
    X = PhysicsFeaturizer(reg).transform(describe("matmul", "cpu-test-2t", m=512, n=512, k=512))
    assert X["hw_is_gpu"][0] == 0 and X["physics_ms"][0] >= 2 * 512**3 / 0.1e12 * 1e3 * 0.99
    dom = fitted().predict_domain(X)
    assert not dom["in_domain"][0] and dom["runtime_ms"][0] > 0


@pytest.mark.slow
def test_mlp_learner_fits_and_round_trips(tmp_path):
    rows, X = small_rows(), small_frame()
    y = rows["runtime_ms"].to_numpy()
    model = PhysicsModel(learner="mlp", epochs=3, interval_folds=False).fit(X, y)
    eff = model.efficiency(X)
    assert np.all(eff > 0) and np.all(eff <= model.e_max)
    loaded = load_model(model.save(tmp_path / "mlp"))
    np.testing.assert_allclose(loaded.predict(X), model.predict(X), rtol=1e-5)
    assert np.median(np.abs(model.predict(X) / y - 1)) < 1.0  # learned something (roofline alone is ~0.6)


def test_a_gpu_with_a_new_balance_of_its_specs_is_flagged_outside(registry):
    """Each L4 spec (float32 peak, bandwidth, SMs, L2) lies inside the span of the training GPUs, but its float32
    ridge point (101 FLOP/byte) is 1.8 octaves above theirs (12.5-28.6): its rows are flagged outside, for that
    reason, with a wider interval than the same shape on a spec-only GPU of a trained balance (the H100)."""
    model = fitted(interval_folds=True)
    X = PhysicsFeaturizer(registry).transform(
        pd.concat([describe("matmul", h, m=1024, n=1024, k=1024) for h in ("L4", "H100-SXM")], ignore_index=True)
    )
    dom = model.predict_domain(X)
    assert list(dom["in_domain"]) == [False, True] and not dom["hardware_seen"].any()
    assert dom["domain_reason"][0].startswith("hw_log2_ridge_fp32 +1.8")
    width = np.log(dom["hi_ms"] / dom["lo_ms"]).to_numpy()
    assert width[0] > width[1]


def test_a_family_never_trained_on_takes_the_others_efficiency(monkeypatch):
    """GEMMs held out of training (NeuSight slice + the H200's float32 rows, every GEMM removed) are predicted from
    the efficiency the other families (convolutions as implicit GEMMs, memory-bound ops) taught: the learned margin is
    offset by -log(e_max), so one margin means one efficiency whatever the family's bound. Without the offset (conv's
    bound is 4, GEMM's 1.25) the same margin gives GEMMs a fraction of the efficiency, and their error grows."""
    rows, X = small_rows(), small_frame()
    y = rows["runtime_ms"].to_numpy()
    fp32 = neusight_mask() | (rows["dtype"] == "float32").to_numpy()
    gemm = (rows["family"] == "gemm").to_numpy() & fp32
    train = fp32 & ~gemm

    def held_out_mape():
        model = PhysicsModel(**FAST).fit(X[train].reset_index(drop=True), y[train])
        return np.mean(np.abs(model.predict(X[gemm].reset_index(drop=True)) / y[gemm] - 1))

    offset = held_out_mape()
    monkeypatch.setattr(PhysicsModel, "_shift", lambda self, X: np.zeros(len(X)))  # the margin as it was
    plain = held_out_mape()
    assert offset < 0.6 * plain and offset < 0.4, (offset, plain)


def test_a_gemms_efficiency_does_not_read_bytes_over_l2():
    """GEMM rows do not read bytes / L2 (across GPUs it names the GPU, models.physics.learner.L2_INPUT): a GEMM's
    efficiency is the same whatever the ratio; a model asked to read it (``gemm_bytes_over_l2=True``), or one that
    never saw a GEMM, gets the column."""
    X = small_frame()
    model = fitted()
    gemm = X[(X["family_gemm"] > 0).to_numpy()].head(50).reset_index(drop=True)
    assert len(gemm) == 50
    small, large = gemm.copy(), gemm.copy()
    small["log2_bytes_over_l2"], large["log2_bytes_over_l2"] = -8.0, 12.0
    np.testing.assert_array_equal(model.efficiency(small), model.efficiency(large))
    column = FEATURES.index("log2_bytes_over_l2")
    assert np.all(model._inputs(large)[:, column] == 0)
    y = small_rows()["runtime_ms"].to_numpy()
    reads = PhysicsModel(**FAST, gemm_bytes_over_l2=True).fit(X, y)
    assert reads.gemm_l2_masked_ is False and np.all(reads._inputs(large)[:, column] == 12.0)
    assert np.all(large["log2_bytes_over_l2"] == 12.0)  # the frame itself is left as it was
    # a model that never saw a GEMM predicts them as the convolutions it knows, which read the ratio
    no_gemm = (X["family_gemm"] == 0).to_numpy()
    never = PhysicsModel(**FAST).fit(X[no_gemm].reset_index(drop=True), y[no_gemm])
    assert model.gemm_l2_masked_ is True and never.gemm_l2_masked_ is False
    assert np.all(never._inputs(large)[:, column] == 12.0)
    assert not np.array_equal(never.efficiency(small), never.efficiency(large))


def test_a_model_fitted_with_other_physics_laws_is_refused_in_one_line(tmp_path):
    """A model saves the version of the time laws it learned against (features.physics.PHYSICS_VERSION) and loads
    back with today's laws; an artifact of other laws (or of none) is refused with one line that says to refit it,
    by load_model and by the served pyfunc's loader."""
    import json

    from features.physics import PHYSICS_VERSION
    from models.physics import PhysicsVersionError

    rows, X = small_rows(), small_frame()
    model = PhysicsModel(**FAST).fit(X, rows["runtime_ms"].to_numpy())
    path = model.save(tmp_path / "today")
    assert json.loads((path / "physics.json").read_text())["physics_version"] == PHYSICS_VERSION
    np.testing.assert_array_equal(load_model(path).predict(X), model.predict(X))
    state = json.loads((path / "physics.json").read_text())
    for saved in (PHYSICS_VERSION - 1, None):
        if saved is None:
            state.pop("physics_version")
        else:
            state["physics_version"] = saved
        (path / "physics.json").write_text(json.dumps(state))
        with pytest.raises(PhysicsVersionError) as caught:
            load_model(path)
        message = str(caught.value)
        assert "\n" not in message and message.endswith(
            f"saved with physics laws v{saved or 0}, this code has v{PHYSICS_VERSION}: refit it (make run)"
        ), message
    # served: the pyfunc's loader says the same line as an MLflow load error (what the CLI and the registry report)
    from types import SimpleNamespace

    from mlflow.exceptions import MlflowException

    from models.pyfunc import CostModelPyfunc, make_meta, write_artifacts

    meta = make_meta(
        model="physics",
        target={"name": "runtime_ms", "columns": ["runtime_ms"], "combine": {"runtime_ms": "sum"}},
        encoder={"_target_": "features.physics.PhysicsFeaturizer"},
        unit="kernel",
        intervals={"runtime_ms": {"log_halfwidth": 0.1, "by_hardware": {}}},
        level=0.9,
    )
    arts = write_artifacts(tmp_path / "served", model, HardwareRegistry.from_dir(), meta)
    (tmp_path / "served" / "model" / "physics.json").write_text(json.dumps(state))
    refused = r"saved with physics laws v0, this code has v\d+: refit it \(make run\)$"
    with pytest.raises(MlflowException, match=refused):
        CostModelPyfunc().load_context(SimpleNamespace(artifacts=arts))


def test_a_gemms_operand_layout_comes_from_its_columns_its_config_or_its_op(registry):
    """transpose_a / transpose_b: the columns where given, else a row's ``config`` (DeepBench's transposes), else
    row-major; ``linear`` reads its weight as [n, k]; other ops 0; a bad value is one clear error naming the row."""
    rows = pd.concat(
        [
            describe("matmul", "T4", m=64, n=64, k=64),
            describe("linear", "T4", m=64, n=64, k=64),
            describe("matmul", "T4", m=64, n=64, k=64, config='{"transpose_a": 1, "transpose_b": 0}'),
            describe("bmm", "T4", batch=2, m=64, n=64, k=64, config='{"transpose_a": 0, "transpose_b": 1}'),
            describe("softmax", "T4", m=64, n=64),
        ],
        ignore_index=True,
    )
    X = PhysicsFeaturizer(registry).transform(rows)
    assert X["transpose_a"].tolist() == [0, 0, 1, 0, 0] and X["transpose_b"].tolist() == [0, 1, 0, 1, 0]
    given = rows.assign(transpose_a=["1", None, "0", "true", "1"])  # a column wins over config; not on a softmax
    assert PhysicsFeaturizer(registry).transform(given)["transpose_a"].tolist() == [1, 0, 0, 1, 0]
    with pytest.raises(FeatureError, match=r"^row 1: transpose_b must be 0 or 1, got '2'$"):
        PhysicsFeaturizer(registry).transform(rows.assign(transpose_b=[None, "2", None, None, None]))


def test_the_efficiency_reads_the_operand_layout(registry):
    """DeepBench times each GEMM shape in two layouts: on the TITAN Xp a 24000 x 8448 x 2816 float32 GEMM takes
    109 ms stored row-major and 152 ms with B stored [n, k]; fitted on that GPU's GEMMs, the model tells them apart
    (with the layout columns left out of the learner it could not)."""
    from data.reference import load_reference

    pack = load_reference()
    rows = pack[(pack["hardware"] == "TITAN-Xp") & (pack["op"] == "matmul") & (pack["status"] == "ok")]
    rows = rows.reset_index(drop=True)
    X = PhysicsFeaturizer(registry).transform(rows)
    assert set(X["transpose_b"]) == {0.0, 1.0}
    model = PhysicsModel(**FAST).fit(X, rows["runtime_ms"].to_numpy())
    big = rows[(rows["m"] == 24000) & (rows["n"] == 8448) & (rows["k"] == 2816)]
    assert len(big) == 2
    nn = big.assign(config='{"transpose_a": 0, "transpose_b": 0}').head(1)
    nt = big.assign(config='{"transpose_a": 0, "transpose_b": 1}').head(1)
    measured = big.set_index(X.loc[big.index, "transpose_b"])["runtime_ms"]
    assert measured[1.0] / measured[0.0] > 1.3
    assert model.predict(nt)[0] / model.predict(nn)[0] > 1.1


def test_a_few_rows_of_a_harness_and_their_repeats_do_not_set_its_floors(registry):
    """A harness that no line's intercept was fitted for (four GEMMs of a new GPU, the fastest slow rather than
    floor-bound) keeps the floors its prior gives; calibrate's refit repeats a new GPU's rows, and a repeated row is
    one kernel to the floors (three times four rows would fit a line)."""
    from models.physics import GRAPH_FLOORS_MS

    rows, X = small_rows(), small_frame()
    ns, y = neusight_mask(), rows["runtime_ms"].to_numpy()
    few = rows[~ns & (rows["op"] == "matmul").to_numpy()].head(4).assign(harness="cuda_graph")
    Xf, yf = PhysicsFeaturizer(registry).transform(few), few["runtime_ms"].to_numpy()
    Xn = X[ns].reset_index(drop=True)
    repeated = PhysicsModel(**FAST).fit(pd.concat([Xn, Xf, Xf, Xf], ignore_index=True), np.r_[y[ns], yf, yf, yf])
    assert repeated.floors_["cuda_graph"] == GRAPH_FLOORS_MS
    once = PhysicsModel(**FAST).fit(pd.concat([Xn, Xf], ignore_index=True), np.r_[y[ns], yf])
    assert once.floors_ == repeated.floors_


def test_graph_rows_pull_the_measured_graph_floors_by_their_number(registry):
    """Graph-timed rows (a new GPU's few, calibrate's refit) move a family's graph floor from the measured one
    (GRAPH_FLOORS_MS) toward their own line's intercept with weight n / (n + GRAPH_PRIOR_ROWS): a few rows of a family
    are too few to fit a floor alone; a family without graph rows keeps the measured floor."""
    from features.physics import HARNESSES
    from models.physics import GRAPH_FLOORS_MS, GRAPH_PRIOR_ROWS, estimate_floors, family_floors, regime_index

    rows, X = small_rows(), small_frame()
    y = rows["runtime_ms"].to_numpy()
    gemm = (~neusight_mask()) & rows["op"].isin(["matmul", "bmm"]).to_numpy()  # linear: a floor of its own
    graph = rows[gemm].assign(harness="cuda_graph").reset_index(drop=True)
    Xg = PhysicsFeaturizer(registry).transform(graph)
    yg = y[gemm] * 0.5  # a graph's floor is below the stream's: the fitted line differs from the prior
    Xa = pd.concat([X[neusight_mask()], Xg], ignore_index=True)
    ya = np.r_[y[neusight_mask()], yg]
    own = family_floors(Xa, ya, regime_index(Xa) == HARNESSES.index("cuda_graph"))["gemm"]
    n = len(graph)
    w = n / (n + GRAPH_PRIOR_ROWS)
    floors = estimate_floors(Xa, ya)["cuda_graph"]
    assert own != pytest.approx(GRAPH_FLOORS_MS["gemm"], rel=0.05)
    assert floors["gemm"] == pytest.approx(np.exp(w * np.log(own) + (1 - w) * np.log(GRAPH_FLOORS_MS["gemm"])))
    assert min(own, GRAPH_FLOORS_MS["gemm"]) * 1.01 < floors["gemm"] < max(own, GRAPH_FLOORS_MS["gemm"]) / 1.01
    assert floors["softmax"] == pytest.approx(GRAPH_FLOORS_MS["softmax"], rel=1e-12)
    assert floors["conv"] == pytest.approx(GRAPH_FLOORS_MS["conv"], rel=1e-12)


@functools.lru_cache(maxsize=1)
def pack_neusight_h200() -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """The shipped pack's NeuSight rows (10 per GPU, op and dtype, seed 0) and all its H200 rows: rows, their physics
    frame and runtimes (the floors' tests)."""
    from data.backends.reference import select
    from data.reference import load_reference

    pack = load_reference()
    rows = select(
        pack[pack["status"] == "ok"].reset_index(drop=True),
        sources=["neusight", "hopper"],
        cap={"neusight": 10},
        seed=0,
    ).reset_index(drop=True)
    return rows, PhysicsFeaturizer(HardwareRegistry.from_dir()).transform(rows), rows["runtime_ms"].to_numpy(float)


def test_a_family_no_row_has_takes_its_floor_from_the_others_by_their_launch_ratios():
    """A family without training rows (check e's SDPAs, the held-out family split) gets the floor of each other family
    of its harness times the measured ratio of the two families' graph floors (GRAPH_FLOORS_MS), the median over
    them (models.physics.unseen_family_floor): on the pack's NeuSight and H200 rows without the SDPAs, the H200 set's
    stream floor of SDPA comes out within 1.2x of the one its SDPA rows fit (27.8 us), where the median of the other
    families' floors (the first rule) says 10 us."""
    from models.physics import GRAPH_FLOORS_MS, estimate_floors, families_of, unseen_family_floor

    assert unseen_family_floor({"gemm": 0.01}, "attention") == pytest.approx(
        0.01 * GRAPH_FLOORS_MS["attention"] / GRAPH_FLOORS_MS["gemm"]
    )
    assert unseen_family_floor({"gemm": 0.01, "conv": 0.02, "softmax": 0.5}, "gemm") == pytest.approx(0.01)  # median
    rows, X, y = pack_neusight_h200()
    seen = families_of(X) != "attention"
    fitted = estimate_floors(X, y)["back_to_back"]
    unseen = estimate_floors(X[seen].reset_index(drop=True), y[seen])["back_to_back"]
    assert fitted["attention"] > 20e-3  # the H200 set's SDPAs: ~28 us a call in a stream
    assert fitted["attention"] / 1.2 < unseen["attention"] < fitted["attention"] * 1.2
    others = [unseen[f] for f in set(families_of(X[seen]))]
    assert np.median(others) < fitted["attention"] / 2  # the first rule's floor


def test_a_family_one_harness_lacks_takes_its_floor_from_that_harness_not_from_another():
    """A family with rows in one harness but none (or none floor-bound) in another (check e: the H200 set's stream has
    no floor-bound convolution, NeuSight's per-call timing has many) takes, in the harness that lacks it, that
    harness's other floors times the families' launch ratios, not the other harness's floor of it scaled by the two
    harnesses' ratio: NeuSight's per-call conv / GEMM floor ratio is 3.6 where the stream's, DeepBench's loop and a
    CUDA graph show 2.0-2.8. On the pack's NeuSight and H200 rows, the H200 set's stream floor of each of conv, GEMM
    and softmax with that family's H200 rows dropped comes out within 1.2x of the one they fit (copied from NeuSight's
    it would not)."""
    from models.physics import estimate_floors, families_of

    rows, X, y = pack_neusight_h200()
    h200, fam = (rows["hardware"] == "H200-SXM").to_numpy(), families_of(X)
    fitted = estimate_floors(X, y)["back_to_back"]
    assert fitted["conv"] > 15e-3 and fitted["gemm"] > 7e-3  # the H200 set's stream: ~21 and ~10 us
    for family in ("conv", "gemm", "softmax"):
        keep = ~(h200 & (fam == family))
        assert (fam[keep] == family).any()  # NeuSight still has it
        lacking = estimate_floors(X[keep].reset_index(drop=True), y[keep])["back_to_back"]
        assert fitted[family] / 1.2 < lacking[family] < fitted[family] * 1.2, family


@functools.lru_cache(maxsize=1)
def cpu_rows() -> tuple[pd.DataFrame, HardwareRegistry]:
    """36 real kernels timed on this machine's CPU (one thread) and a registry that knows it."""
    from data.backends.cpu import CpuBackend
    from data.hardware import detect_cpu

    spec = detect_cpu(1)
    backend = CpuBackend(num_threads=1, min_run_time=0.005, warmup=1, hardware=spec, energy=False)
    work = [("gelu", {"m": m, "n": n}) for m in (16, 64, 256) for n in (128, 512, 1024)]
    work += [("add", {"m": m, "n": n}) for m in (16, 64, 256) for n in (128, 512, 1024)]
    work += [("layernorm", {"m": m, "n": n}) for m in (16, 64, 256) for n in (128, 512, 1024)]
    work += [("matmul", {"m": s, "n": s, "k": k}) for s in (32, 64, 128) for k in (32, 64, 128)]
    rows = pd.DataFrame([backend.measure({"op": op, "params": p, "dtype": "float32"}) for op, p in work])
    return rows[rows["status"] == "ok"].reset_index(drop=True), HardwareRegistry([*HardwareRegistry.from_dir(), spec])


def test_cpu_rows_get_an_efficiency_learner_of_their_own(tmp_path):
    """Fitted on GPU and CPU rows, the GPU predictions are those of a model that never saw the CPU (its floors and
    corrections were per regime and hardware already; now the learner too), the CPU rows are learned (not left to the
    GPU learner), and both round-trip; with ``device_learners`` off the CPU rows move the GPU predictions."""
    cpu, reg = cpu_rows()
    assert len(cpu) >= 30
    Xc = PhysicsFeaturizer(reg).transform(cpu)
    Xg, yg = small_frame(), small_rows()["runtime_ms"].to_numpy()
    X, y = pd.concat([Xg, Xc], ignore_index=True), np.r_[yg, cpu["runtime_ms"].to_numpy()]
    gpu_only = PhysicsModel(**FAST).fit(Xg, yg)
    both = PhysicsModel(**FAST).fit(X, y)
    joint = PhysicsModel(**FAST, device_learners=False).fit(X, y)
    assert both.cpu_learner_ is not None and gpu_only.cpu_learner_ is None
    np.testing.assert_allclose(both.predict(Xg), gpu_only.predict(Xg), rtol=1e-9)
    assert np.max(np.abs(joint.predict(Xg) / gpu_only.predict(Xg) - 1)) > 0.01
    yc = cpu["runtime_ms"].to_numpy()
    own, borrowed = (np.median(np.abs(np.log(m.predict(Xc) / yc))) for m in (both, gpu_only))
    assert own < borrowed  # the CPU learner knows the CPU better than the GPU learner does
    loaded = load_model(both.save(tmp_path / "both"))
    np.testing.assert_allclose(loaded.predict(X), both.predict(X), rtol=1e-9)


def test_a_row_wise_kernel_of_few_rows_is_bound_by_one_rows_walk(registry):
    """A layernorm / softmax of fewer rows than a GPU can walk at once takes one row's serial walk (cycles a + b n at
    the boost clock), not its bytes over the bandwidth; waves of SMs x ROWS_PER_SM rows add up; other ops and CPUs
    have no such bound; the model predicts at least the floor plus the walk."""
    from features.physics import ROW_LATENCY, ROWS_PER_SM

    h100 = registry.get("H100-SXM")
    wave = h100.sm_count * ROWS_PER_SM
    X = PhysicsFeaturizer(registry).transform(
        pd.concat(
            [
                describe("layernorm", "H100-SXM", "bfloat16", m=1, n=14764),
                describe("layernorm", "H100-SXM", "float32", m=1, n=14764),
                describe("layernorm", "H100-SXM", "float32", m=wave + 1, n=14764),
                describe("softmax", "H100-SXM", "float32", m=4, n=4730),
                describe("add", "H100-SXM", "float32", m=1, n=14764),
            ],
            ignore_index=True,
        )
    )
    a, b = ROW_LATENCY["layernorm"]
    walk = (a + b * 14764) / (h100.boost_clock_mhz * 1e6) * 1e3
    assert X["latency_ms"][0] == pytest.approx(walk)
    assert X["latency_ms"][1] == pytest.approx(walk)  # a row of elements: 16-bit takes as long as 32-bit
    assert X["latency_ms"][2] == pytest.approx(2 * walk)
    assert X["latency_ms"][0] > 10 * X["memory_ms"][0]  # 59 KB over 3.35 TB/s: 0.02 us; the walk: 17 us
    a, b = ROW_LATENCY["softmax"]
    assert X["latency_ms"][3] == pytest.approx((a + b * 4730) / (h100.boost_clock_mhz * 1e6) * 1e3)
    assert X["latency_ms"][4] == 0
    model = fitted()
    floor, kernel, _ = model._parts(X)
    assert np.all(kernel[:4] >= X["latency_ms"][:4].to_numpy() - 1e-12)
    assert model.predict(X)[0] >= floor[0] + walk
    # the same layernorm on a CPU: no row-walk bound
    cpu, reg = cpu_rows()
    Xc = PhysicsFeaturizer(reg).transform(describe("layernorm", cpu["hardware"][0], m=1, n=14764))
    assert Xc["latency_ms"][0] == 0


def test_a_softmax_of_long_rows_is_bound_by_elements_per_sm_cycle(registry):
    """Rows of more than 1024 elements: a softmax takes at least c cycles an element per SM (features.physics
    ELEMENT_CYCLES), so a 16-bit one is bound as long as a 32-bit one of its shape, where its bytes say half; rows of
    1024 and fewer, other ops and CPUs have no such bound; the model predicts at least the bound."""
    from features.physics import ELEMENT_CYCLES

    h200 = registry.get("H200-SXM")
    rows = [
        describe("softmax", "H200-SXM", "bfloat16", m=58387, n=8192),
        describe("softmax", "H200-SXM", "float32", m=58387, n=8192),
        describe("softmax", "H200-SXM", "bfloat16", m=58387, n=2048),
        describe("softmax", "H200-SXM", "bfloat16", m=58387, n=1024),
        describe("gelu", "H200-SXM", "bfloat16", m=58387, n=8192),
        describe("softmax", "H200-SXM", "bfloat16", m=82868, n=4096),
    ]
    X = PhysicsFeaturizer(registry).transform(pd.concat(rows, ignore_index=True))
    (_, c_short), (_, c_long) = ELEMENT_CYCLES["softmax"]
    per_cycle = h200.sm_count * h200.boost_clock_mhz * 1e6
    assert X["latency_ms"][0] == pytest.approx(58387 * 8192 * c_long / per_cycle * 1e3)  # ~1.4 ms
    assert X["latency_ms"][1] == X["latency_ms"][0]
    assert X["memory_ms"][0] == pytest.approx(X["memory_ms"][1] / 2)
    assert X["latency_ms"][0] > 2 * X["memory_ms"][0]  # 1.9 GB over 4.8 TB/s: 0.4 ms
    assert X["latency_ms"][2] == pytest.approx(58387 * 2048 * c_short / per_cycle * 1e3)
    assert X["latency_ms"][3] < X["memory_ms"][3]  # a warp a row: the row walk only, no element bound
    assert X["latency_ms"][4] > 0  # a GELU: its math bound (the next test)
    # rows of exactly 4 096 take the long rows' bound (1 024-thread blocks): the H200 set's bf16 82 868 x 4 096: 1.05 ms
    assert X["latency_ms"][5] == pytest.approx(82868 * 4096 * c_long / per_cycle * 1e3)  # 1.04 ms
    assert np.all(fitted().predict(X)[[0, 1, 2, 5]] >= X["latency_ms"][[0, 1, 2, 5]].to_numpy())


def test_attention_adds_its_exponentials_on_the_special_function_units(registry):
    """A fused attention's time is its two GEMMs' plus one exponential per score element at 16 a clock per SM
    (features.physics.SFU_OPS_PER_SM_CLOCK): on an H200 in bf16 0.92x the GEMMs' at head_dim 64, 0.46x at 128, half
    the elements when causal, none on a CPU. On the H200 set's SDPAs over 0.1 ms, the efficiency left (physics time /
    (runtime - the stream floor the rows fit)) no longer depends on the head dim: the median at 64 over the median at
    128 was 0.68 from the GEMMs alone; with the exponentials within 0.85-1.15."""
    from data.reference import load_reference
    from features.physics import attention_exp_s
    from models.physics import estimate_floors

    sdpa = {"batch": 1, "heads": 32, "seq_len": 4096, "causal": 0}
    rows = pd.concat(
        [describe("sdpa", "H200-SXM", "bfloat16", head_dim=d, **sdpa) for d in (64, 128)]
        + [describe("sdpa", "H200-SXM", "bfloat16", head_dim=64, **{**sdpa, "causal": 1})],
        ignore_index=True,
    )
    X = PhysicsFeaturizer(registry).transform(rows)
    ops, one = np.array(["sdpa"] * 3, dtype=object), np.ones(3)
    exp_ms = 1e3 * attention_exp_s(ops, 32 * one, 4096 * one, np.array([8192, 8192, 4096.0]), 132 * one, 1.98e9 * one)
    assert exp_ms[0] == pytest.approx(32 * 4096**2 / (16 * 132 * 1.98e9) * 1e3) and exp_ms[2] == exp_ms[0] / 2
    gemm_ms = X["compute_ms"].to_numpy() - exp_ms
    assert exp_ms[0] / gemm_ms[0] == pytest.approx(0.92, abs=0.05)
    assert exp_ms[1] / gemm_ms[1] == pytest.approx(0.46, abs=0.03)
    assert X["compute_ms"][2] == pytest.approx(X["compute_ms"][0] / 2, rel=0.1)  # causal: half of both
    cpu = attention_exp_s(ops, one, one, one, one, np.zeros(3))
    assert (cpu == 0).all()

    pack = load_reference()
    h200 = pack[(pack["status"] == "ok") & (pack["source"].str.startswith("hopper"))].reset_index(drop=True)
    Xh, y = PhysicsFeaturizer(registry).transform(h200), h200["runtime_ms"].to_numpy(float)
    floor = estimate_floors(Xh, y)["back_to_back"]["attention"]
    a = h200[((h200["op"] == "sdpa") & (h200["runtime_ms"] > 0.1)).to_numpy()]
    ya, head = a["runtime_ms"].to_numpy(float) - floor, a["head_dim"].to_numpy(int)
    compute = Xh.loc[a.index, "compute_ms"].to_numpy()
    seq, n = a["seq_len"].to_numpy(float), len(a)
    k = seq * np.where(a["causal"].astype(bool), 1.0, 2.0)
    exp_rows = 1e3 * attention_exp_s(
        np.full(n, "sdpa", dtype=object),
        (a["batch"] * a["heads"]).to_numpy(float),
        seq,
        k,
        np.full(n, 132.0),
        np.full(n, 1.98e9),
    )

    def ratio(ms):  # median efficiency at head_dim 64 over that at 128
        return np.median(ms[head == 64] / ya[head == 64]) / np.median(ms[head == 128] / ya[head == 128])

    assert ratio(compute - exp_rows) < 0.75 and 0.85 < ratio(compute) < 1.15, (
        ratio(compute - exp_rows),
        ratio(compute),
    )


def test_a_16_bit_gelu_is_bound_by_its_float32_math(registry):
    """A GELU takes at least F FLOP-equivalents an element at the fp32 FMA peak (features.physics.ELEMENT_FLOPS),
    whatever its dtype: the bound of a bf16 one is that of a float32 one and above its bytes' time on an H200;
    an add has none, nor a CPU."""
    from features.physics import ELEMENT_FLOPS

    h200 = registry.get("H200-SXM")
    rows = [
        describe("gelu", "H200-SXM", "bfloat16", m=107815, n=768),
        describe("gelu", "H200-SXM", "float32", m=107815, n=768),
        describe("add", "H200-SXM", "bfloat16", m=107815, n=768),
    ]
    X = PhysicsFeaturizer(registry).transform(pd.concat(rows, ignore_index=True))
    bound = 107815 * 768 * ELEMENT_FLOPS["gelu"] / h200.peak_flops("float32") * 1e3
    assert X["latency_ms"][0] == pytest.approx(bound) and X["latency_ms"][1] == pytest.approx(bound)
    assert X["memory_ms"][0] < bound < X["memory_ms"][1]  # 16-bit: the math binds; 32-bit: the bytes
    assert X["latency_ms"][2] == 0
    cpu, reg = cpu_rows()
    assert PhysicsFeaturizer(reg).transform(describe("gelu", cpu["hardware"][0], m=1000, n=768))["latency_ms"][0] == 0


def test_interval_folds_in_parallel_processes_equal_one_process():
    """The interval widening's folds run in ``n_jobs`` processes (one XGBoost thread each) and give what one process
    gives; the hardware keys (one string per spec position, formatted once per GPU) name each row's spec."""
    from features.physics import HARDWARE_IDENTITY
    from models.physics import hardware_keys

    X, y = small_frame(), small_rows()["runtime_ms"].to_numpy()
    one = PhysicsModel(n_estimators=30, interval_hardware_folds=3, n_jobs=1).fit(X, y)
    two = PhysicsModel(n_estimators=30, interval_hardware_folds=3, n_jobs=2).fit(X, y)
    assert one.widening_ is not None and json_equal(one.widening_, two.widening_)
    keys = hardware_keys(X)
    spec = np.round(X[list(HARDWARE_IDENTITY)].to_numpy(float), 6)
    assert list(keys[:50]) == [",".join(f"{v:.6f}" for v in row) for row in spec[:50]]
    assert len(set(keys)) == len({tuple(r) for r in spec})


def json_equal(a, b) -> bool:
    import json

    return json.dumps(a, sort_keys=True, default=float) == json.dumps(b, sort_keys=True, default=float)


def predicted_over_measured(left_out: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A small model fitted on ``small_rows`` but the ``left_out`` ones: predicted / measured runtime of the ``test``
    rows, and their runtimes (ms)."""
    rows, X = small_rows(), small_frame()
    y = rows["runtime_ms"].to_numpy(float)
    model = PhysicsModel(**FAST).fit(X[~left_out].reset_index(drop=True), y[~left_out])
    return model.predict(X[test].reset_index(drop=True)) / y[test], y[test]


def test_a_tf32_gemm_no_row_showed_runs_as_the_tensor_core_kernels_the_learner_knows():
    """The learner reads the math mode as ``tensor_cores`` plus a flag each for fp32, tf32 and 16-bit on the FMA
    units (features.physics.FEATURES): trained on the small NeuSight slice and every H200 row but its tf32 ones, the
    H200's tf32 GEMMs come out near their time, as the tensor-core kernels the learner knows (with the modes one-hot,
    an unseen mode falls between the trees' leaves)."""
    assert "tensor_cores" in FEATURES and "mode_tensor16" not in FEATURES and "mode_tf32" in FEATURES
    rows, X = small_rows(), small_frame()
    tf32 = (rows["dtype"] == "tf32").to_numpy()
    assert (X.loc[tf32, "tensor_cores"] == 1).all() and (X.loc[tf32, "mode_tf32"] == 1).all()
    assert (X.loc[(rows["dtype"] == "float32").to_numpy(), "tensor_cores"] == 0).all()
    ratio, y = predicted_over_measured(tf32, tf32 & (rows["family"] == "gemm").to_numpy())
    assert np.mean(np.abs(ratio - 1)) < 0.16, np.mean(np.abs(ratio - 1))
    assert 0.95 < np.median(ratio[y > 0.1]) < 1.08, np.median(ratio[y > 0.1])


def test_attention_no_row_showed_runs_as_the_gemms_the_learner_knows(monkeypatch):
    """A fused SDPA is two GEMMs: the learner reads a GEMM or attention row as ``gemm_like`` (features.physics
    .FEATURES), so attention outside training takes the GEMMs' leaves: trained on the small NeuSight slice and every
    H200 row but its SDPAs, the H200's SDPAs come out closer to their time than with a one-hot ``family_gemm`` in its
    place (an attention row then sits with the convolutions and memory-bound ops in every split on it)."""
    assert "gemm_like" in FEATURES and "family_gemm" not in FEATURES and "family_attention" in FEATURES
    rows, X = small_rows(), small_frame()
    sdpa = (rows["op"] == "sdpa").to_numpy()
    assert (X.loc[sdpa, "gemm_like"] == 1).all() and (
        X.loc[(rows["family"] == "gemm").to_numpy(), "gemm_like"] == 1
    ).all()
    assert (X.loc[(rows["family"] == "conv").to_numpy(), "gemm_like"] == 0).all()
    ratio, y = predicted_over_measured(sdpa, sdpa)
    one_hot_inputs = tuple("family_gemm" if f == "gemm_like" else f for f in FEATURES)
    monkeypatch.setattr("models.physics.model.FEATURES", one_hot_inputs)
    one_hot, _ = predicted_over_measured(sdpa, sdpa)
    mape, mape_one_hot = np.mean(np.abs(ratio - 1)), np.mean(np.abs(one_hot - 1))
    assert mape < 0.21 and mape < mape_one_hot - 0.02, (mape, mape_one_hot)
    assert 0.92 < np.median(ratio[y > 0.1]) < np.median(one_hot[y > 0.1]), np.median(ratio[y > 0.1])


def test_a_linear_has_the_floor_of_its_host_path():
    """``linear`` (addmm with its bias through cuBLASLt, an algorithm query on the host at every call) is a floor group
    of its own (models.physics.FLOOR_OPS): on the pack's NeuSight and H200 rows its per-call and stream floors lie
    above the other GEMMs'; a harness that timed no linear takes its GEMM floor times FLOOR_OP_PRIOR (a CUDA graph,
    no host code: the GEMM's)."""
    from models.physics import FLOOR_OP_PRIOR, FLOOR_REGIMES, GRAPH_FLOORS_MS, estimate_floors, regime_index

    rows, X, y = pack_neusight_h200()
    floors = estimate_floors(X, y)
    for harness in ("per_call", "back_to_back"):
        assert floors[harness]["linear"] > 1.15 * floors[harness]["gemm"], floors[harness]
    assert floors["cuda_graph"]["linear"] == GRAPH_FLOORS_MS["gemm"]
    other = (rows["op"] != "linear").to_numpy()
    prior = estimate_floors(X[other].reset_index(drop=True), y[other])
    for harness in ("per_call", "back_to_back", "cuda_graph"):
        assert prior[harness]["linear"] == pytest.approx(prior[harness]["gemm"] * FLOOR_OP_PRIOR[harness])
    model = fitted()
    linear = X[(rows["op"] == "linear").to_numpy()].reset_index(drop=True)
    gemm = [model.floors_[r]["gemm"] for r in np.asarray(FLOOR_REGIMES)[regime_index(linear)]]
    assert (model._floor(linear) > gemm).all()


def test_the_large_tiles_waste_is_a_monotone_input_of_gemm_rows(registry):
    """``log2_big_tile`` (features.physics.BIG_TILE): a skinny bmm wastes most of a 128 x 128 tile (the best tile of
    TILES less), a large square GEMM only what its waves' rounding costs over the best tile's (about 5% on the A100's
    108 SMs); 0 outside the GEMM family; the learner may only lower the efficiency as the waste grows."""
    from models.physics.learner import MONOTONE

    rows = pd.concat(
        [
            describe("bmm", "A100-PCIe-40GB", batch=64, m=512, n=3, k=512),
            describe("matmul", "A100-PCIe-40GB", m=4096, n=4096, k=4096),
            describe("conv2d", "A100-PCIe-40GB", batch=8, c_in=64, c_out=16, h=56, w=56, kernel=3, stride=1, padding=1),
        ],
        ignore_index=True,
    )
    waste = PhysicsFeaturizer(registry).transform(rows)["log2_big_tile"].to_numpy()
    assert waste[0] > 2 and 0 < waste[1] < 0.1 and waste[2] == 0
    assert MONOTONE["log2_big_tile"] == -1


@pytest.mark.shared_data
def test_the_large_tile_explains_the_a100s_batched_gemms(registry):
    """The evidence for BIG_TILE: NeuSight's A100 runs every bmm on ampere_sgemm_128x128, so over its bmm rows above
    0.2 ms log(runtime / time on the 128 x 128 tile) spreads far less than log(runtime / best tile's time) (0.19
    against 0.61), while its linears (six tiles) are explained better by the best tile."""
    from data.reference import load_reference

    rows = load_reference()
    rows = rows[(rows["status"] == "ok") & (rows["hardware"] == "A100-PCIe-40GB") & (rows["runtime_ms"] > 0.2)]
    rows = rows[rows["source"].str.startswith("neusight") & rows["op"].isin(["bmm", "linear"])].reset_index(drop=True)
    X = PhysicsFeaturizer(registry).transform(rows)
    best = X["compute_ms"].to_numpy()
    big = best * 2.0 ** X["log2_big_tile"].to_numpy()
    y = rows["runtime_ms"].to_numpy(float)
    for op, better in (("bmm", big), ("linear", best)):
        i = (rows["op"] == op).to_numpy()
        other = big if better is best else best
        assert i.sum() > 100
        assert np.std(np.log(y[i] / better[i])) < np.std(np.log(y[i] / other[i])) - 0.1, op
