"""Analytical decomposition of a kernel's runtime on a GPU (or CPU), as vectorised columns.

Input: a workload description frame (``op``, ``hardware``, ``dtype``, shape columns; the same frame
``features.tabular.TabularFeaturizer`` reads, validated by its ``check``) and the hardware registry.
Output (:class:`PhysicsFeaturizer`): per row the physics times in ms, the hardware numbers they came from, and
DIMENSIONLESS features (:data:`FEATURES`) from which ``models.physics`` learns a bounded efficiency.

Math mode and peak (:func:`effective_peak`), as the project's cuda backend sets them (``data.backends.cuda``
``fp32_math``: IEEE float32 unless the dtype is ``tf32``, for cuBLAS and cuDNN alike):

* float32 (every op, convolutions included) runs on the CUDA cores: the fp32 FMA peak; except a conv measured with
  PyTorch's default math (cuDNN's TF32 flag is on by default, matmul's is off; a ``conv_fp32_math`` column asks,
  :data:`CONV_MATHS`), which runs on the TF32 tensor cores where a GPU has them;
* ``tf32``: the spec's TF32 tensor-core peak where it exists, else the fp32 peak, for GEMMs and convolutions; every
  other family runs the float32 kernel whatever the TF32 flags (:data:`TF32_FAMILIES`);
* float16 / bfloat16 GEMMs: PyTorch accumulates in fp32 (cuBLAS ``CUBLAS_COMPUTE_32F``), so a GPU with tensor /
  matrix cores runs them at the spec's tensor rate (fp32 accumulate) and a GPU without (Pascal: P4's native fp16
  is 1/64 of fp32, P100's half2 2x) at its fp32 FMA rate; a dtype the GPU has no rate for (bf16 on Volta) falls
  back to the fp32 rate (emulated);
* fp8 / int8: the spec's 8-bit tensor rate (mode ``tensor8``); weight-only int8 / int4 run at the 16-bit rate.

Operand alignment on tensor cores (:func:`alignment_factor`): tensor-core kernels feed their operands with 16-byte
vector loads (``cp.async`` / TMA); a contiguous row whose length is not a multiple of 16 bytes forces narrower loads
(or a fallback kernel), and the operand feed, not the math, bounds the kernel: the tensor peak is scaled by
``min(align_bytes, narrow_load_bytes) / 16`` below 16 bytes (NVIDIA's guidance to keep fp16 dims multiples of 8;
:data:`NARROW_LOAD_BYTES`, conf/physics.yaml). Not for convolutions (:data:`ALIGNED_FEED_FAMILIES`): cuDNN's
tensor-core kernels read NHWC tiles with the channels padded to the vector width, so an odd channel count does not
narrow their loads; the alignment stays a learner input there (docs/decisions/0007-tensor-core-operand-alignment.md).

GEMM-like ops (matmul, bmm, linear; conv2d as implicit GEMM, the op registry's ``gemm``; attention as the two GEMMs
of a fused kernel, M = seq, N = head_dim, K = 2 seq, half of K when causal; MoE as the grouped GEMM of the experts its
tokens touch) are split into output tiles ``tm x tn`` (and ``s`` slices of K, split-K) dealt to the SMs in waves
(NVIDIA, "Matrix Multiplication Background", tile and wave quantisation). Each wave costs one full tile per SM:

    t_compute(tile, s) = ceil(batch ceil(M/tm) ceil(N/tn) s / SMs) * 2 tm tn ceil(K/s) / (peak / SMs)

and the library is assumed to pick the fastest of :data:`TILES` x :data:`SPLIT_K` (a lower bound of its choice).
Memory: ``t_memory = bytes / bandwidth`` with bytes = inputs + weights + outputs once (``data.costs.costs``, the
closed forms of the op registry); ops without FLOPs (elementwise, norms, softmax, reductions) are memory time only;
collectives the ring time over the spec's interconnect (:func:`comm_time_s`). Physics time ``physics_ms = max(t_compute,
t_memory, t_comm)``: a roofline with tile and wave quantisation. What physics misses (per-tile efficiency, ramp-up, L2
reuse, library heuristics, the launch floor) is left to the learner, which sees only dimensionless numbers: waves,
tail-wave occupancy, tile fill, the large tile's waste (:data:`BIG_TILE`: a library may run a shape on it rather than
on the best tile), K depth, aspect ratios, alignment, operand layout, compute time over memory time, bytes over L2,
dtype class, op family.

Operand layout (:func:`layout_of`): a GEMM's A stored ``[k, m]`` (``transpose_a``) or B stored ``[n, k]``
(``transpose_b``, ``nn.Linear``'s weight) is read along another axis, and the library runs another kernel for it
(cuBLAS's NN / NT / TN variants; DeepBench times each shape in two layouts). Taken from ``transpose_a`` /
``transpose_b`` columns (0 / 1) where given, else from a row's ``config`` (DeepBench's rows carry their transposes
there), else A and B as stored row-major (``matmul``, ``bmm``); ``linear``'s weight is always ``[n, k]``.

The numbers of these laws that were fitted on measurements (row-wise bounds, the TF32 convolution threshold, the
layernorm's second read, the narrow tensor-core load, the PCIe fabric) live in ``conf/physics.yaml`` with their
provenance (:func:`laws`); this module keeps the physics and the definitions.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from data.costs import costs, echo, with_defaults
from data.hardware import HardwareRegistry, HardwareSpec
from data.ops import DTYPE_INFO, OPS, SHAPE_PARAMS, itemsize
from features.tabular import DTYPE_BYTES, FeatureError, TabularFeaturizer, kv_dtypes_of

LAWS_PATH = Path(__file__).resolve().parent.parent / "conf" / "physics.yaml"


@functools.lru_cache(maxsize=1)
def laws() -> dict:
    """The fitted and assumed numbers of the physics laws, ``conf/physics.yaml`` (each with its provenance there)."""
    return yaml.safe_load(LAWS_PATH.read_text())


# The version of the time laws of this module. A model saves the version it was fitted with, and code with other laws
# refuses to load it (models.physics.io): its efficiencies were learned against other times. Bump it with any change
# to a physics time or a learner input.
PHYSICS_VERSION = 39

TILES = (
    (256, 128),
    (128, 256),
    (128, 128),
    (128, 64),
    (64, 128),
    (64, 64),
    (128, 32),
    (32, 128),
    (64, 32),
    (32, 64),
    (32, 32),
)  # (tm, tn): the CTA tiles of cuBLAS / CUTLASS / cuDNN kernels (e.g. volta_sgemm_128x32)
SPLIT_K = (1, 2, 4, 8, 16)
# The libraries' largest common CTA tile. A library need not pick the best of TILES: NeuSight's own ``Kernel Name``
# column shows its batched GEMMs on ``ampere_sgemm_128x128`` and ``maxwell_sgemm_128x64`` whatever their shape. The
# learner reads how much longer this tile's wave-quantised time is than the best tile's (``log2_big_tile``, >= 0,
# monotone: more waste never makes a kernel faster), so what a GPU's library pays for running a shape on a large tile
# is learned where it shows (a measured GPU's correction; calibrate's rows of a new one). GEMM, attention and MoE rows
# only: convolutions' cuDNN tiles are another library's choice.
BIG_TILE = (128, 128)
MIN_K_PER_SPLIT = 64  # assumption: a K slice shorter than this is not worth a split (the libraries' own lower limit)
# Kernels that reduce over their whole K in one CTA, so no split-K: cuDNN's forward convolutions (implicit GEMM, K =
# c_in x kh x kw) and the fused attention kernels (FlashAttention-2's forward and the memory-efficient one walk every
# key block of their query tile in one CTA: K = the keys). docs/decisions/0006-whole-k-convolutions-and-attention.md.
WHOLE_K_FAMILIES = ("conv", "attention")
# A decode-like attention (at most this many query rows per KV head: one new token of each packed query head) splits
# its keys over CTAs and reduces the partial softmaxes after (FlashDecoding; vLLM's and FlashAttention's split-KV
# decode kernels): split-K, as a GEMM's, where the whole-K rule above holds for prefill.
SPLIT_KV_ROWS = 64
ALIGN_CAP_BYTES = 16  # 128-bit vector loads: alignment beyond 16 bytes gains nothing
# Below 16 bytes the library's tensor-core kernels load at most this many bytes at a time (fitted, conf/physics.yaml).
NARROW_LOAD_BYTES = laws()["tensor_core_feed"]["narrow_load_bytes"]
GEMM_FAMILIES = ("gemm", "conv", "attention", "moe")
# A convolution whose input channels fill less than one 16-byte vector (fewer than 8 in float16 / bfloat16, 4 in tf32:
# a network's stem on RGB images, c_in = 3, or a spectrogram's, c_in = 1) runs on the CUDA cores at the fp32 FMA
# peak, not the tensor cores: padded to a vector, its tiles would be mostly padding, and cuDNN picks a CUDA-core kernel.
# docs/decisions/0009-convolution-math-modes.md.
MIN_TC_CONV_BYTES = 16
# In TF32 a spatial conv (kh x kw > 1) also needs a reduction (c_in x kh x kw, the implicit GEMM's K) of this many or
# more to run on the tensor cores (fitted, conf/physics.yaml): below it, cuDNN runs it at the float32 rate.
MIN_TF32_CONV_K = laws()["conv"]["min_tf32_k"]
# PyTorch's layernorm on a GPU takes its vectorised one-pass kernel only for a row length that is a multiple of
# LAYERNORM_VECTOR elements (and aligned pointers); any other row runs two kernels, RowwiseMoments then
# LayerNormForward, which read the row twice: the memory time of LAYERNORM_TWO_PASS times the bytes (fitted,
# conf/physics.yaml). Their scalar loads are not modelled.
LAYERNORM_VECTOR = 4
LAYERNORM_TWO_PASS = laws()["layernorm"]["two_pass_reads"]
# the families whose tensor-core peak is scaled by their operands' alignment (module docstring): not convolutions
ALIGNED_FEED_FAMILIES = ("gemm", "attention", "moe")
MEMORY_FAMILIES = ("elementwise", "norm", "softmax", "reduction", "pool", "data_movement")  # bytes / bandwidth
# Collectives over the GPUs of a node: the elements a ring moves per GPU (the registry's ``wire``: 2 (g - 1) / g of
# the message for an all-reduce, (g - 1) / g for the others) over the spec's link bandwidth per GPU and direction,
# plus one link latency per ring step (2 (g - 1) for an all-reduce's reduce-scatter and all-gather phases, g - 1 for
# the others): NCCL's ring algorithm (its "bus bandwidth", NCCL tests' PERFORMANCE.md). The local HBM traffic of
# the same bytes is the memory bound beside it.
COMM_FAMILIES = ("collective",)
FAMILIES = GEMM_FAMILIES + MEMORY_FAMILIES + COMM_FAMILIES
PHYSICS_OPS = tuple(op for op, spec in OPS.items() if spec.family in FAMILIES)
GEMM_LIKE_FAMILIES = ("gemm", "attention", "moe")  # the learner's ``gemm_like`` (FEATURES)
# fp32 FMA, TF32 tensor core, fp16 / bf16 tensor core, 16-bit on the FMA units, fp8 / int8 tensor core
MODES = ("fp32", "tf32", "tensor16", "fp32_acc16", "tensor8")

# The learner's inputs: dimensionless (counts, ratios, flags) and one absolute scale, the physics time itself
# (``log2_physics_us``: how far a kernel is from its launch floor, docs/decisions/0014-absolute-time-input.md); no
# rate or size of one GPU, and no ratio of spec numbers alone (e.g. the ridge point): with a handful of training GPUs
# such a column names the GPU and the trees learn each GPU's own factor instead of a rule
# (docs/decisions/0013-dimensionless-learner-inputs.md).
# The math mode reaches the learner as ``tensor_cores`` (a tensor math mode) plus a flag each for the other modes, not
# as a one-hot: a TF32 kernel is a tensor-core kernel (the same multistage pipelines, 4-byte operands), and a mode no
# training row has then reads as its kind of kernel rather than falling between the trees' leaves. In the same way a
# GEMM, attention or MoE row reads ``gemm_like`` in place of a one-hot ``family_gemm`` (a fused SDPA is two GEMMs).
FEATURES = (
    *("gemm_like" if f == "gemm" else f"family_{f}" for f in FAMILIES),
    *(f"op_{op}" for op in PHYSICS_OPS),
    *(f"mode_{m}" for m in MODES if m != "tensor16"),
    "tensor_cores",
    "dtype_bytes",
    "log2_waves",
    "tail_occupancy",
    "tile_fill",
    "log2_big_tile",
    "log2_split_k",
    "log2_k",
    "log2_k_per_split",
    "log2_m_over_n",
    "log2_batch",
    "log2_align_bytes",
    "transpose_a",
    "transpose_b",
    "log2_compute_over_memory",
    "log2_bytes_over_l2",
    "log2_elements_per_sm",
    "log2_row",
    "conv_kernel",
    "conv_stride",
    "causal",
    "log2_m",
    "log2_kv_group",
    "kv_narrow",
    "log2_weight_bytes",
    "log2_gpus",
    "log2_physics_us",
)
# A GPU's spec position: the same for every row of one GPU (log2 of spec numbers, never a learner input); its rows
# share a hardware key and the distance between two positions decides a borrowed correction (models.physics).
HARDWARE_IDENTITY = (
    "hw_log2_peak_fp32",
    "hw_log2_bandwidth",
    "hw_log2_sm_count",
    "hw_log2_l2_bytes",
    "hw_is_gpu",
)
# Hardware position for the domain of validity (models/domain.py): also the peak of the row's math mode (it varies with
# the dtype) and the float32 ridge point (peak over bandwidth, FLOP per byte; it follows from the identity, so not in
# it). With a few training GPUs a spec ratio names the GPU, so the ridge is a domain axis only; but each spec inside
# the training span can still make a new balance (a GPU whose ridge point is far from every training GPU's runs its
# GEMMs where training has only skinny ones).
HARDWARE = ("hw_log2_peak_flops", *HARDWARE_IDENTITY, "hw_log2_ridge_fp32")
# The GPU's architecture (``vendor:architecture`` from the spec, '' where unknown): never a learner input; a GPU outside
# training borrows the per-GPU correction of its nearest measured sibling of the same architecture (models.physics).
ARCHITECTURE = "hw_architecture"
SIZE = ("log2_flops", "log2_bytes")  # the workload's size (for the domain: a bigger shape than any trained on)
TIMES = ("compute_ms", "memory_ms", "physics_ms", "latency_ms")
# A row-wise kernel's latency bound on a GPU (``latency_ms``, :func:`row_latency_s`): PyTorch's layernorm, rmsnorm
# and softmax kernels give each row to one CTA (softmax: a warp for rows up to 1024), which walks it serially, so few
# rows leave most SMs idle and the time is one row's walk, not the bytes over the bandwidth. Per op: cycles per row =
# a + b n (n = row length, elements: a 16-bit row takes as long as a 32-bit one), at the spec's boost clock, in waves of
# SMs x ROWS_PER_SM rows (fitted, conf/physics.yaml). models.physics applies it as a lower bound of the kernel time,
# after the learned efficiency. docs/decisions/0010-row-wise-kernel-bounds.md.
ROW_LATENCY = {op: tuple(ab) for op, ab in laws()["row_latency"]["cycles_per_row"].items()}
ROWS_PER_SM = laws()["row_latency"]["rows_per_sm"]
# A row-wise kernel's throughput bound on a GPU (in ``latency_ms`` too, :func:`element_bound_s`): PyTorch's softmax over
# rows longer than 1024 elements (no longer the warp-per-row kernel: a block per row, up to 1024 threads, passes for
# the max, the sum and the output) processes at most 1 / c elements per SM per cycle, whatever the dtype: a 16-bit
# softmax takes as long as a 32-bit one of the same shape, not half (the bytes say half). Per op, ``(n from, c)``
# pairs: rows of n elements or more take at least c cycles an element per SM at the spec's boost clock (fitted,
# conf/physics.yaml).
ELEMENT_CYCLES = {
    op: tuple((int(n), float(c)) for n, c in steps) for op, steps in laws()["element_cycles"]["by_op"].items()
}
# An elementwise op's math bound on a GPU (in ``latency_ms`` too, :func:`element_math_s`): PyTorch computes a 16-bit
# GELU in float32 (erf: a few dozen instructions an element), so it is bound by the CUDA cores where its bytes are
# few: at least F FLOP-equivalents an element at the spec's fp32 FMA peak, whatever the dtype (fitted,
# conf/physics.yaml).
ELEMENT_FLOPS = {op: float(f) for op, f in laws()["element_flops"]["by_op"].items()}
# Attention's softmax on the special-function units (in ``compute_ms``, :func:`attention_exp_s`): a fused attention
# kernel (PyTorch's flash and memory-efficient SDPA: FlashAttention-2's schedule) evaluates one exponential per score
# element between its two GEMMs, on the SFUs, which return 16 results per clock per SM (CUDA C Programming Guide,
# arithmetic instruction throughput: exp2 / log2 / rcp on compute capability 5.x-9.0), and a warp does not overlap
# them with its tensor-core GEMMs (FlashAttention-3 does, on Hopper; PyTorch's SDPA kernels do not). So the time is the
# GEMMs' plus score elements / (16 SMs clock).
SFU_OPS_PER_SM_CLOCK = 16.0
# The timing harness a runtime was measured with: a property of the harness and the software stack, not of the GPU,
# that decides the launch floor under a short kernel. ``back_to_back``: windows of back-to-back calls through a
# framework (PyTorch eager: the cuda backend, the H200 set; the CPU backend's blocked_autorange): the host's dispatch
# per call. ``per_call``: each call timed alone between two CUDA events (NeuSight): launch latency + dispatch.
# ``library_loop``: a C++ benchmark's host loop calling the library directly (DeepBench: cuBLAS / cuDNN, no framework
# dispatch). ``cuda_graph``: the kernel replayed from a CUDA graph, no host dispatch between calls, so its time is the
# device's (the cuda backend times short kernels so: data.backends.cuda), with a floor of the GPU's own launch gap.
# A frame's ``harness_index`` column (index into :data:`HARNESSES`): from a ``harness`` column where given, else from
# the row's ``timing_method`` (:data:`TIMING_HARNESS`), else from ``source`` (:data:`SOURCE_HARNESS`), else the
# default, ``back_to_back`` (what a model is asked for: a kernel in a stream of framework calls).
# docs/decisions/0008-launch-floors-per-harness.md.
HARNESSES = ("back_to_back", "per_call", "library_loop", "cuda_graph")
DEFAULT_HARNESS = "back_to_back"
SOURCE_HARNESS = {"neusight": "per_call", "deepbench": "library_loop"}  # source name prefix -> harness
TIMING_HARNESS = {"cuda_graph": "cuda_graph", "stream_loop": "back_to_back"}  # a row's timing_method -> harness
# float32 convolution math of the software that measured a row. ``ieee``: the project's cuda backend (``fp32_math``)
# and the H200 set. ``tf32``: PyTorch's defaults (``torch.backends.cudnn.allow_tf32`` is True, while
# ``cuda.matmul.allow_tf32`` is False since 1.12), so cuDNN runs float32 convolutions on the TF32 tensor cores of a
# GPU that has them (Ampere and later); NeuSight measured with the defaults (PyTorch 2.1). A frame's
# ``conv_fp32_math`` column where given, else from ``source`` (:data:`SOURCE_CONV_MATH`), else ``ieee``. Only a
# float32 conv on a GPU with a TF32 peak changes (its math mode becomes ``tf32``); GEMMs keep IEEE float32.
CONV_MATHS = ("ieee", "tf32")
# The families whose kernels a TF32 flag reaches (cuBLAS and cuDNN: ``torch.backends.cuda.matmul`` / ``cudnn``
# ``allow_tf32``); a tf32 row of any other family runs the float32 kernel: memory-bound ops have no matrix math, and
# scaled dot-product attention takes float32 through its memory-efficient kernel (flash attention takes 16-bit only),
# which reads no TF32 flag.
TF32_FAMILIES = ("gemm", "conv")
DEFAULT_CONV_MATH = "ieee"
SOURCE_CONV_MATH = {"neusight": "tf32"}


def row_setting(
    df: pd.DataFrame, column: str, choices: tuple, by_source: dict, default: str, by_column: dict | None = None
) -> np.ndarray:
    """Per row a setting of the software that measured it: the ``column`` where given, else from another column of
    the row (``by_column``: column -> {value -> setting}), else from the row's ``source`` (name prefix -> value,
    ``by_source``), else ``default``; a value not in ``choices`` is a ``FeatureError`` naming the row."""
    out = np.full(len(df), default, dtype=object)
    if "source" in df.columns:
        source = df["source"].astype(str).to_numpy().astype(str)
        for prefix, value in by_source.items():
            out[np.char.startswith(source, prefix)] = value
    for other, mapping in (by_column or {}).items():
        if other in df.columns:
            values = df[other].astype(str).to_numpy()
            for value, setting in mapping.items():
                out[values == value] = setting
    if column in df.columns:
        given = df[column]
        named = given.notna().to_numpy() & (given.astype(str).str.strip() != "").to_numpy()
        values = given.astype(str).str.strip().to_numpy()
        bad = np.flatnonzero(named & ~np.isin(values, choices))
        if len(bad):
            raise FeatureError(f"row {bad[0]}: {column} must be one of {', '.join(choices)}, got {values[bad[0]]!r}")
        out[named] = values[named]
    return out


# the settings of the software that measured a row: column -> (choices, by source prefix, default[, by column])
MEASUREMENT_SETTINGS = {
    "harness": (HARNESSES, SOURCE_HARNESS, DEFAULT_HARNESS, {"timing_method": TIMING_HARNESS}),
    "conv_fp32_math": (CONV_MATHS, SOURCE_CONV_MATH, DEFAULT_CONV_MATH),
}


def measurement_settings(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per row the settings of the software that measured it, by name (:data:`MEASUREMENT_SETTINGS`): what a served
    prediction needs to answer for the row as it was measured (its ``source`` is not a served input)."""
    return {column: row_setting(df, column, *spec) for column, spec in MEASUREMENT_SETTINGS.items()}


def harness_of(df: pd.DataFrame) -> np.ndarray:
    """Per row the index of its timing harness in :data:`HARNESSES` (float)."""
    names = row_setting(df, "harness", *MEASUREMENT_SETTINGS["harness"])
    return pd.Categorical(names, categories=HARNESSES).codes.astype(float)


LAYOUT = ("transpose_a", "transpose_b")  # operand storage of a GEMM row (module docstring, :func:`layout_of`)
LAYOUT_OPS = ("matmul", "bmm", "linear")


def layout_of(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per row ``transpose_a`` / ``transpose_b`` (0.0 or 1.0) of a GEMM op (0 for other ops): the columns where
    given (0 / 1 / true / false; anything else is a ``FeatureError`` naming the row), else the row's ``config`` (JSON
    with those keys, as DeepBench's rows carry them), else 0; ``linear`` always reads its weight as ``[n, k]``."""
    ops = df["op"].to_numpy(object)
    out = {name: np.zeros(len(df)) for name in LAYOUT}
    if "config" in df.columns:
        cfg = df["config"].astype(str).to_numpy()
        for value, idx in pd.Series(np.arange(len(df))).groupby(cfg, sort=False).indices.items():
            try:
                parsed = json.loads(value) if value.startswith("{") else {}
            except ValueError:
                parsed = {}
            for name in LAYOUT:
                out[name][idx] = 1.0 if parsed.get(name) in (1, True) else 0.0
    for name in LAYOUT:
        if name in df.columns:
            given = df[name]
            named = given.notna().to_numpy() & (given.astype(str).str.strip() != "").to_numpy()
            text = given.astype(str).str.strip().str.lower().to_numpy()
            bad = np.flatnonzero(named & ~np.isin(text, ("0", "1", "0.0", "1.0", "true", "false")))
            if len(bad):
                raise FeatureError(f"row {bad[0]}: {name} must be 0 or 1, got {echo(given.iloc[bad[0]], 20)}")
            out[name][named] = np.isin(text[named], ("1", "1.0", "true")).astype(float)
    out["transpose_b"][ops == "linear"] = 1.0
    gemm = np.isin(ops, LAYOUT_OPS)
    return {name: np.where(gemm, v, 0.0) for name, v in out.items()}


def conv_tf32_of(df: pd.DataFrame) -> np.ndarray:
    """True per row whose float32 convolutions ran in TF32 (:data:`CONV_MATHS`)."""
    return row_setting(df, "conv_fp32_math", *MEASUREMENT_SETTINGS["conv_fp32_math"]) == "tf32"


def has_matrix_units(spec: HardwareSpec) -> bool:
    """Tensor cores (NVIDIA compute capability >= 7.0) or matrix cores (AMD CDNA)."""
    if spec.kind != "gpu":
        return False
    cc = spec.extra.get("compute_capability")
    if spec.vendor == "nvidia" and cc is not None:
        return float(cc) >= 7.0
    return str(spec.architecture or "").lower().startswith("cdna")


def effective_peak(spec: HardwareSpec, dtype: str) -> tuple[float, str]:
    """``(peak FLOP/s, math mode)`` a kernel in ``dtype`` runs at, the same for every op (module docstring)."""
    fp32 = spec.peak_flops("float32")
    rates = spec.peak_tflops
    if dtype == "float32":
        return fp32, "fp32"
    if dtype == "tf32":
        return (float(rates["tf32"]) * 1e12, "tf32") if "tf32" in rates else (fp32, "fp32")
    rate = DTYPE_INFO[dtype].rate if dtype in DTYPE_INFO else dtype
    if rate in ("float16", "bfloat16"):  # float16 / bfloat16, and weight-only int8 / int4 dequantised to bfloat16
        if has_matrix_units(spec) and rate in rates:
            return float(rates[rate]) * 1e12, "tensor16"
        return fp32, "fp32_acc16"
    if rate in ("fp8", "int8") and rate in rates:  # fp8 (e4m3) and int8 tensor cores
        return float(rates[rate]) * 1e12, "tensor8"
    raise FeatureError(f"dtype {dtype!r} has no math mode on {spec.id} (its spec lists no {rate} rate)")


TENSOR_MODES = ("tf32", "tensor16", "tensor8")  # the math modes that run on tensor / matrix cores


def alignment_factor(mode: np.ndarray, align_bytes: np.ndarray) -> np.ndarray:
    """Share of the tensor peak a GEMM-like kernel can feed on tensor cores (module docstring): 1 for 16-byte rows,
    else ``min(align_bytes, NARROW_LOAD_BYTES) / 16``; 1 on the CUDA cores."""
    fed = np.where(align_bytes >= ALIGN_CAP_BYTES, ALIGN_CAP_BYTES, np.minimum(align_bytes, NARROW_LOAD_BYTES))
    return np.where(np.isin(mode, TENSOR_MODES), fed / ALIGN_CAP_BYTES, 1.0)


def _ceil_div(a, b):
    return -(-a // b)


def _two_adic_bytes(n: np.ndarray, dtype_bytes: np.ndarray) -> np.ndarray:
    """Largest power-of-two byte alignment of a row of ``n`` elements, capped at 16 bytes (vector loads)."""
    n = np.maximum(n.astype(np.int64), 1)
    return np.minimum((n & -n) * dtype_bytes, ALIGN_CAP_BYTES).astype(float)


def tile_time(batch, m, n, k, tm, tn, split, per_sm, sms):
    """Compute time (s) of a GEMM on ``tm x tn`` tiles and ``split`` slices of K, in waves of one tile per SM, and its
    ``(waves, tiles)`` (module docstring formula)."""
    tiles = batch * _ceil_div(m, tm) * _ceil_div(n, tn) * split
    waves = _ceil_div(tiles, sms)
    return waves * 2.0 * tm * tn * _ceil_div(k, split) / per_sm, waves, tiles


def gemm_time(batch, m, n, k, peak, sms, whole_k=None):
    """Best tile / split-K compute time (s) over :data:`TILES` x :data:`SPLIT_K`, and that choice's numbers; rows
    where ``whole_k`` (a boolean array) is true are not split (:data:`WHOLE_K_FAMILIES`).

    Returns ``(t_s, waves, tiles, tm, tn, split)``, arrays over rows (module docstring formula).
    """
    best = np.full(len(m), np.inf)
    out = {key: np.zeros(len(m)) for key in ("waves", "tiles", "tm", "tn", "split")}
    per_sm = peak / sms
    may_split = np.ones(len(m), bool) if whole_k is None else ~np.asarray(whole_k, bool)
    for tm, tn in TILES:
        for s in SPLIT_K:
            ok = (s == 1) | ((k >= s * MIN_K_PER_SPLIT) & may_split)
            t, waves, tiles = tile_time(batch, m, n, k, tm, tn, s, per_sm, sms)
            t = np.where(ok, t, np.inf)
            better = t < best
            best = np.where(better, t, best)
            for key, v in (("waves", waves), ("tiles", tiles), ("tm", tm), ("tn", tn), ("split", s)):
                out[key] = np.where(better, v, out[key])
    return best, out["waves"], out["tiles"], out["tm"], out["tn"], out["split"]


def _shape_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per row: family, flops, bytes, GEMM dims (batch, M, N, K), the contiguous row lengths of the two operands and
    the elements a collective moves over the links: the op registry's closed forms (``data.ops``: ``flops``,
    ``tensors``, ``gemm``, ``rows``, ``wire``) evaluated at every shape parameter, optional ones included, one numpy
    pass per (op, dtype, KV dtype)."""
    ops, dtypes = df["op"].to_numpy(object), df["dtype"].to_numpy(object)
    unknown = [op for op in pd.unique(ops) if OPS[op].family not in FAMILIES]
    if unknown:
        i = int(np.flatnonzero(ops == unknown[0])[0])
        raise FeatureError(
            f"row {i}: op {unknown[0]!r} (family {OPS[unknown[0]].family}) has no physics model; ops with one: "
            f"{', '.join(PHYSICS_OPS)}"
        )
    n = len(df)
    shapes = {p: df[p].to_numpy(float) for p in SHAPE_PARAMS}
    kv = kv_dtypes_of(df)
    flops, nbytes = costs(ops, shapes, dtypes, kv_dtypes=kv)
    out = {c: np.zeros(n) for c in ("g_batch", "g_m", "g_n", "g_k", "row_a", "row_b", "wire")}
    codes, names = pd.factorize(ops)
    for c, op in enumerate(names):
        rows = np.flatnonzero(codes == c)
        spec = OPS[op]
        p = with_defaults(op, {k: shapes[k][rows] for k in spec.names})
        ones = np.ones(len(rows))
        gemm = spec.gemm(p) if spec.gemm is not None else (ones, p.get("m", ones), p.get("n", ones), 0 * ones)
        row_a, row_b = spec.rows(p) if spec.rows is not None else (ones, ones)
        values = (*gemm, row_a, row_b, spec.wire(p) if spec.wire is not None else 0 * ones)
        for col, v in zip(("g_batch", "g_m", "g_n", "g_k", "row_a", "row_b", "wire"), values):
            out[col][rows] = v * ones
    family = np.array([OPS[op].family for op in names], object)[codes]
    return pd.DataFrame({"family": family, "flops": flops, "bytes": nbytes, **out})


def _hardware_table(df: pd.DataFrame, registry: HardwareRegistry, family: np.ndarray) -> dict[str, np.ndarray]:
    """Per row: effective peak and math mode, bandwidth, SMs, L2, from the spec (once per distinct hw/dtype)."""
    dtype = df["dtype"].to_numpy(object)
    # a float32 conv measured with cuDNN's TF32 default runs in the tf32 math mode (:data:`CONV_MATHS`)
    dtype = np.where((family == "conv") & (dtype == "float32") & conv_tf32_of(df), "tf32", dtype)
    dtype = np.where(~np.isin(family, TF32_FAMILIES) & (dtype == "tf32"), "float32", dtype)  # :data:`TF32_FAMILIES`
    dtype = np.where(np.isin(family, COMM_FAMILIES), "float32", dtype)  # a collective does no math: no peak of its own
    pairs = pd.DataFrame({"h": df["hardware"].to_numpy(), "d": dtype})
    keys = ("peak", "fp32", "bw", "sms", "l2", "gpu", "clock", "link_bw", "link_lat", "pcie")
    out = {k: np.zeros(len(df)) for k in keys}
    out["mode"] = np.empty(len(df), dtype=object)
    out["arch"] = np.full(len(df), "", dtype=object)
    for (h, d), idx in pairs.groupby(["h", "d"], sort=False).indices.items():
        spec = registry.get(h)
        if spec.kind not in ("gpu", "cpu"):
            raise FeatureError(f"hardware {spec.id!r} is a {spec.kind}: the physics model covers GPUs and CPUs")
        if spec.memory_bandwidth_gbs <= 0 or spec.sm_count <= 0:
            raise FeatureError(f"hardware {spec.id!r} lacks memory bandwidth or SM count in its spec")
        peak, mode = effective_peak(spec, d)
        out["peak"][idx], out["mode"][idx] = peak, mode
        out["link_bw"][idx], out["link_lat"][idx], out["pcie"][idx] = link_of(spec)
        out["fp32"][idx] = spec.peak_flops("float32")
        out["bw"][idx], out["sms"][idx] = spec.bandwidth_bytes_s, float(spec.sm_count)
        out["l2"][idx] = max(float(spec.l2_cache_mb), 0.25) * 2**20
        out["gpu"][idx] = float(spec.kind == "gpu")
        out["clock"][idx] = float(spec.boost_clock_mhz) * 1e6
        out["arch"][idx] = f"{spec.vendor}:{spec.architecture}".lower() if spec.architecture else ""
    return out


def link_of(spec: HardwareSpec) -> tuple[float, float, bool]:
    """``(bytes / s per GPU and direction, s per hop, over PCIe)`` of the spec's intra-node interconnect (its
    ``interconnect`` block: NVLink or PCIe); ``(0, 0, False)`` where the spec has none."""
    kind = str(spec.interconnect.get("kind", "")).lower()
    return spec.link_bandwidth_bytes_s, spec.link_latency_s or 0.0, kind.startswith("pcie")


def comm_time_s(ops, wire_bytes, gpus, link_bw, link_lat, pcie) -> np.ndarray:
    """Per row the ring time (s) of a collective (:data:`COMM_FAMILIES`): the bytes a GPU sends over its link at the
    link's bandwidth, shared on a PCIe node by the ring's GPUs beyond two (``(2 / g)^exponent``, conf/physics.yaml),
    plus a link latency per ring step (2 (g - 1) for an all-reduce, g - 1 for the others); 0 for other ops."""
    comm = np.isin(ops, [op for op, spec in OPS.items() if spec.family in COMM_FAMILIES])
    steps = np.where(ops == "all_reduce", 2.0, 1.0) * np.maximum(gpus - 1, 0)
    share = np.where(
        pcie, np.minimum(1.0, 2.0 / np.maximum(gpus, 1)) ** laws()["collective"]["pcie_fabric_exponent"], 1
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        t = wire_bytes / (np.where(link_bw > 0, link_bw, np.nan) * share) + steps * link_lat
    return np.where(comm, t, 0.0)


def row_latency_s(ops: np.ndarray, m: np.ndarray, n: np.ndarray, sms: np.ndarray, clock_hz: np.ndarray) -> np.ndarray:
    """Per row the latency bound (s) of a row-wise kernel on a GPU (:data:`ROW_LATENCY`; 0 for other ops and where
    ``clock_hz`` is 0: a CPU)."""
    out = np.zeros(len(ops))
    for op, (a, b) in ROW_LATENCY.items():
        i = (ops == op) & (clock_hz > 0)
        if i.any():
            waves = np.ceil(np.maximum(m[i], 1) / (sms[i] * ROWS_PER_SM))
            out[i] = waves * (a + b * n[i]) / clock_hz[i]
    return out


def attention_exp_s(ops: np.ndarray, batch, m, k, sms: np.ndarray, clock_hz: np.ndarray) -> np.ndarray:
    """Per row the time (s) of a fused attention's exponentials on the SFUs (:data:`SFU_OPS_PER_SM_CLOCK`): its score
    elements (batch x heads x seq x kv, half when causal: ``batch m k / 2`` of its GEMM dims, K being 2 seq or seq)
    over 16 a clock per SM; 0 for other ops and where ``clock_hz`` is 0 (a CPU)."""
    att = (ops == "sdpa") & (clock_hz > 0)
    elements = batch.astype(float) * m * np.maximum(k, 1) / 2.0
    return np.where(att, elements / (SFU_OPS_PER_SM_CLOCK * sms * np.maximum(clock_hz, 1.0)), 0.0)


def element_bound_s(ops: np.ndarray, m: np.ndarray, n: np.ndarray, sms: np.ndarray, clock_hz: np.ndarray) -> np.ndarray:
    """Per row the throughput bound (s) of a row-wise kernel on a GPU (:data:`ELEMENT_CYCLES`; 0 for other ops, rows
    shorter than the first length, and where ``clock_hz`` is 0: a CPU)."""
    out = np.zeros(len(ops))
    for op, steps in ELEMENT_CYCLES.items():
        i = (ops == op) & (clock_hz > 0)
        if not i.any():
            continue
        cycles = np.zeros(int(i.sum()))
        for n_from, c in steps:
            cycles = np.where(n[i] >= n_from, c, cycles)
        out[i] = np.maximum(m[i], 1) * n[i] * cycles / (sms[i] * clock_hz[i])
    return out


def element_math_s(ops: np.ndarray, m: np.ndarray, n: np.ndarray, fp32_flops: np.ndarray) -> np.ndarray:
    """Per row the math bound (s) of an elementwise op on a GPU (:data:`ELEMENT_FLOPS`; 0 for other ops and where
    ``fp32_flops`` is 0: a CPU)."""
    out = np.zeros(len(ops))
    for op, f in ELEMENT_FLOPS.items():
        i = (ops == op) & (fp32_flops > 0)
        out[i] = np.maximum(m[i], 1) * n[i] * f / fp32_flops[i]
    return out


def derived_inputs(X) -> dict[str, np.ndarray]:
    """The learner columns read off the one-hot columns of a physics frame (a frame or a dict of arrays):
    ``tensor_cores`` (a tensor math mode) and ``gemm_like`` (a GEMM, attention or MoE row)."""
    return {
        "tensor_cores": sum(np.asarray(X[f"mode_{m}"], float) for m in TENSOR_MODES),
        "gemm_like": sum(np.asarray(X[f"family_{f}"], float) for f in GEMM_LIKE_FAMILIES),
    }


def physics_columns(df: pd.DataFrame, registry: HardwareRegistry) -> pd.DataFrame:
    """The physics frame of a description frame already normalised by ``TabularFeaturizer.check``."""
    shp = _shape_table(df)
    fam = shp["family"].to_numpy(object)
    hw = _hardware_table(df, registry, fam)
    dtype = df["dtype"].to_numpy(object)
    dbytes = np.array([DTYPE_BYTES[d] for d in dtype], float)
    # a conv with fewer input channels than one 16-byte vector holds runs on the CUDA cores (:data:`MIN_TC_CONV_BYTES`),
    # in TF32 also one of a short reduction (:data:`MIN_TF32_CONV_K`)
    reduction, channels = shp["g_k"].to_numpy(float), shp["row_a"].to_numpy(float)
    narrow = channels * dbytes < MIN_TC_CONV_BYTES
    short = (hw["mode"] == "tf32") & (reduction < MIN_TF32_CONV_K) & (reduction > channels)  # a spatial kernel
    off = (fam == "conv") & np.isin(hw["mode"], TENSOR_MODES) & (narrow | short)
    hw["peak"] = np.where(off, hw["fp32"], hw["peak"])
    hw["mode"] = np.where(off, np.where(hw["mode"] == "tf32", "fp32", "fp32_acc16"), hw["mode"])
    flops, nbytes = shp["flops"].to_numpy(float), shp["bytes"].to_numpy(float)
    batch, m, n, k = (shp[c].to_numpy(np.int64) for c in ("g_batch", "g_m", "g_n", "g_k"))
    is_gemm = np.isin(fam, GEMM_FAMILIES)
    sms = hw["sms"].astype(np.int64)
    align = np.minimum(
        _two_adic_bytes(shp["row_a"].to_numpy(), dbytes), _two_adic_bytes(shp["row_b"].to_numpy(), dbytes)
    )
    peak = hw["peak"] * np.where(np.isin(fam, ALIGNED_FEED_FAMILIES), alignment_factor(hw["mode"], align), 1.0)

    whole_k = np.isin(fam, WHOLE_K_FAMILIES) & ~((fam == "attention") & (m <= SPLIT_KV_ROWS))
    t_c, waves, tiles, tm, tn, split = gemm_time(batch, m, n, np.maximum(k, 1), peak, sms, whole_k)
    t_c = np.where(is_gemm, t_c, 0.0)
    t_big, _, _ = tile_time(batch, m, n, np.maximum(k, 1), *BIG_TILE, 1, peak / sms, sms)
    big_tile = np.where(np.isin(fam, GEMM_LIKE_FAMILIES), np.maximum(t_big / np.maximum(t_c, 1e-30), 1.0), 1.0)
    ops = df["op"].to_numpy(object)
    t_c = t_c + attention_exp_s(ops, batch, m, k, hw["sms"], np.where(hw["gpu"] > 0, hw["clock"], 0.0))
    two_pass = (ops == "layernorm") & (hw["gpu"] > 0) & (df["n"].to_numpy(float) % LAYERNORM_VECTOR != 0)
    t_m = nbytes / hw["bw"] * np.where(two_pass, LAYERNORM_TWO_PASS, 1.0)  # :data:`LAYERNORM_VECTOR`
    comm = np.isin(fam, COMM_FAMILIES)
    gpus = df["gpus"].to_numpy(float)
    if comm.any() and (hw["link_bw"][comm] <= 0).any():
        i = int(np.flatnonzero(comm & (hw["link_bw"] <= 0))[0])
        raise FeatureError(
            f"row {i}: hardware {df['hardware'].iloc[i]!r} has no interconnect in its spec (conf/hardware "
            "`interconnect:` block): no collective time"
        )
    wire = shp["wire"].to_numpy(float) * dbytes
    t_comm = comm_time_s(ops, wire, gpus, hw["link_bw"], hw["link_lat"], hw["pcie"] > 0)
    physics = np.maximum.reduce([t_c, t_m, t_comm])
    elements = nbytes / dbytes
    waves_mem = np.ceil(elements / (sms * 1024.0 * 4))  # 1024 threads x 4 elements per SM per round
    X: dict[str, np.ndarray] = {}
    for f in FAMILIES:
        X[f"family_{f}"] = (fam == f).astype(float)
    for op in PHYSICS_OPS:
        X[f"op_{op}"] = (ops == op).astype(float)
    for mode in MODES:
        X[f"mode_{mode}"] = (hw["mode"] == mode).astype(float)
    X.update(derived_inputs(X))
    X["dtype_bytes"] = dbytes
    X["log2_waves"] = np.log2(np.where(is_gemm, waves, waves_mem))
    X["tail_occupancy"] = np.where(is_gemm, tiles / np.maximum(waves * sms, 1), 1.0)
    useful = 2.0 * batch * m * n * np.maximum(k, 1)
    X["tile_fill"] = np.where(is_gemm, useful / np.maximum(tiles * 2.0 * tm * tn * np.maximum(k, 1) / split, 1), 1.0)
    X["log2_big_tile"] = np.log2(big_tile)
    X["log2_split_k"] = np.where(is_gemm, np.log2(split), 0.0)
    X["log2_k"] = np.where(is_gemm, np.log2(np.maximum(k, 1)), 0.0)
    X["log2_k_per_split"] = np.where(is_gemm, np.log2(np.maximum(k, 1) / split), 0.0)
    X["log2_m_over_n"] = np.where(is_gemm, np.log2(m / n), 0.0)
    X["log2_batch"] = np.log2(batch)
    X["log2_align_bytes"] = np.log2(align)
    X.update(layout_of(df))
    X["log2_compute_over_memory"] = np.where(is_gemm, np.log2(np.maximum(t_c, 1e-15) / t_m), -10.0)
    X["log2_bytes_over_l2"] = np.log2(nbytes / hw["l2"])
    X["log2_elements_per_sm"] = np.log2(elements / sms)
    X["log2_row"] = np.where(is_gemm, 0.0, np.log2(np.maximum(df["n"].to_numpy(float), 1)))
    X["conv_kernel"] = np.where(fam == "conv", df["kernel"].to_numpy(float), 0.0)
    X["conv_stride"] = np.where(fam == "conv", df["stride"].to_numpy(float), 0.0)
    X["causal"] = np.where(ops == "sdpa", df["causal"].to_numpy(float), 0.0)
    gemm_like = np.isin(fam, GEMM_LIKE_FAMILIES)
    X["log2_m"] = np.where(gemm_like, np.log2(np.maximum(m, 1)), 0.0)  # query rows / tokens of a tile: decode is 1-8
    heads, kv_heads = df["heads"].to_numpy(float), df["num_kv_heads"].to_numpy(float)
    group = heads / np.where(kv_heads > 0, kv_heads, np.maximum(heads, 1))
    X["log2_kv_group"] = np.where(ops == "sdpa", np.log2(np.maximum(group, 1)), 0.0)
    kv_bytes = np.array([itemsize(d, "kv", kv or None) for d, kv in zip(dtype, kv_dtypes_of(df))], float)
    X["kv_narrow"] = np.where(ops == "sdpa", (kv_bytes < dbytes).astype(float), 0.0)
    weight_bytes = np.array([itemsize(d, "weight") for d in dtype], float)
    X["log2_weight_bytes"] = np.where(np.isin(fam, ("gemm", "moe")), np.log2(weight_bytes / dbytes), 0.0)
    X["log2_gpus"] = np.where(comm, np.log2(np.maximum(gpus, 1)), 0.0)
    X["hw_log2_peak_flops"] = np.log2(hw["peak"])
    X["hw_log2_peak_fp32"] = np.log2(hw["fp32"])
    X["hw_log2_bandwidth"] = np.log2(hw["bw"])
    X["hw_log2_sm_count"] = np.log2(hw["sms"])
    X["hw_log2_l2_bytes"] = np.log2(hw["l2"])
    X["hw_is_gpu"] = hw["gpu"]
    X["hw_log2_ridge_fp32"] = np.log2(hw["fp32"] / hw["bw"])
    X[ARCHITECTURE] = hw["arch"]
    X["flops"], X["bytes"] = flops, nbytes
    X["log2_flops"], X["log2_bytes"] = np.log2(flops + 1), np.log2(nbytes)
    X["compute_ms"], X["memory_ms"], X["physics_ms"] = t_c * 1e3, t_m * 1e3, physics * 1e3
    X["comm_ms"] = t_comm * 1e3
    X["log2_physics_us"] = np.log2(np.maximum(physics * 1e6, 1e-3))
    gpu = hw["gpu"] > 0  # a CPU has none of these bounds
    clock, fp32 = np.where(gpu, hw["clock"], 0.0), np.where(gpu, hw["fp32"], 0.0)
    n_rows, row_len = df["m"].to_numpy(float), df["n"].to_numpy(float)
    X["latency_ms"] = 1e3 * np.maximum.reduce(
        [
            row_latency_s(ops, n_rows, row_len, hw["sms"], clock),
            element_bound_s(ops, n_rows, row_len, hw["sms"], clock),
            element_math_s(ops, n_rows, row_len, fp32),
        ]
    )
    X["harness_index"] = harness_of(df)
    return pd.DataFrame(X)


class PhysicsFeaturizer:
    """Workload descriptions -> the physics frame (times, hardware position, dimensionless :data:`FEATURES`).

    Validation is ``TabularFeaturizer.check``'s (one clear error per bad row); ops without a physics model
    (networks: split them into layers with ``data.workloads.network_layers``; FPGA layers) and non-GPU/CPU hardware
    raise ``FeatureError`` naming the row or hardware.
    """

    def __init__(self, registry: HardwareRegistry):
        self.registry = registry

    def transform(self, workloads: pd.DataFrame) -> pd.DataFrame:
        df = TabularFeaturizer(self.registry).check(workloads)
        if len(df) == 0:
            raise FeatureError("no workloads to featurize")
        return physics_columns(df, self.registry)
