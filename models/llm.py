"""An LLM as it is served: a Hugging Face config, a GPU and a parallel layout -> prefill time, time per output
token, memory and energy, composed from the kernel cost model (a library: no MLflow, no CLI).

    from models.llm import parse_config, read_config, predict_llm, RooflineCoster
    cfg = parse_config(read_config("llama-3.1-8b.json"))
    res = predict_llm(cfg, "H200-SXM", RooflineCoster(), tp=1, batch=32, isl=2000, osl=500)
    res.summary        # ttft_ms, tpot_ms (+ _lo / _hi), prefill_ms, tokens_per_s_per_gpu, max_concurrency, ...
    res.decode_curve   # the decode step as the context grows
    res.breakdown      # per kernel category: GEMMs, attention, MoE, all-reduce, norms, elementwise, sampling

**The config** (:func:`parse_config`): dense decoders (``LlamaForCausalLM``, ``MistralForCausalLM``,
``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``) and mixture-of-experts ones (``MixtralForCausalLM``,
``Qwen3MoeForCausalLM``); only the architecture numbers are read, never weights.

**The layout** (:func:`check_layout`): ``tp`` GPUs split every layer (Megatron tensor parallelism: attention heads,
MLP columns, the vocabulary); ``ep`` splits a MoE layer's experts over the same GPUs, each expert's intermediate
over ``tp / ep`` of them (aiconfigurator's moe_tp x moe_ep = tp). ``tp`` must divide the query heads; with more GPUs
than KV heads each GPU holds one KV head, replicated ``tp / kv_heads`` times (what vLLM does: ``tp`` must then be
a multiple of the KV heads), else the KV heads split evenly.

**One engine step** (:func:`step_kernels`): the kernels one GPU launches for a forward pass over ``decode``
sequences at a KV length and ``prefill`` sequences' chunks, as the serving engines fuse them: the embedding, per
layer a fused residual add + RMSNorm, the fused QKV GEMM, (Qwen3's per-head q / k norms), rotary embedding, the
KV-cache write, GQA attention (a decode ``sdpa`` row of one query per sequence against its cache, a prefill row of
the chunk, causal, against its prefix + chunk), the output projection, a tensor-parallel all-reduce, then the MLP
(fused gate-up GEMM, SiLU-and-mul, down GEMM) or the MoE block (router GEMM, top-k softmax, the fused expert
kernel ``moe``), another all-reduce; then the LM head on the sampled positions only, the logits' all-gather and
sampling (softmax and arg-max over the vocabulary). GEMM weights are in ``dtype`` (bfloat16, float8_e4m3fn per
tensor, fp8_block, int8 W8A8, int8_wo / int4_wo weight-only); activations, attention, norms and the LM head in
bfloat16 (float16 for a float16 model); the KV cache in ``kv_dtype``. An fp8 GEMM's activation quantisation is
taken as fused into the kernel before it (the engines' fusion passes).

**Kernel costs** come through a small interface, :class:`KernelCoster` (kernel rows -> a kernel's device time
``runtime_ms`` with ``_lo`` / ``_hi``, ``in_domain``, ``costed_by``): :class:`PredictCoster` over a kernel cost model
(the registered model, or a fitted one), asked for the CUDA-graph harness (a kernel replayed without host dispatch,
as aiconfigurator times the engines' kernels), and :class:`RooflineCoster`, the plain spec roofline:
``max(FLOPs / peak[dtype], bytes / bandwidth)`` per kernel, a collective ``latency + wire bytes / link bandwidth``.
An op the kernel model cannot cost (no physics for it, a dtype its hardware snapshot has no rate for) is costed by the
roofline and marks the result out of domain.

**A step's time** is the composition of its kernels' device times (``models.compose``, the modes' launch and
per-kernel gap of ``conf/execution.yaml``, no host floor inside a device time): the serving engines replay their
steps from CUDA graphs (vLLM's piecewise graphs, SGLang, TensorRT-LLM's runtime), decode-only and chunked-prefill
steps alike (``conf/llm.yaml`` ``execution``); with a power model, its power and energy.

**The serving law** (:func:`plan`, :func:`serve`; ``docs/decisions/0004-llm-serving-law.md``): ``C`` closed-loop
clients, ``isl`` tokens in and ``osl`` out, on an engine with continuous batching and chunked prefill (a step holds
at most ``token_budget`` tokens: the running sequences' decode tokens first, then prefill, ``P`` tokens of it).
``R`` requests run: all ``C`` on a paged KV cache (vLLM, SGLang: they preempt when it fills), at most the memory fit
on an engine that reserves a request's whole cache (TensorRT-LLM: the others queue). A prompt longer than ``P`` is
prefilled in ``n_c`` chunks; shorter ones share a step, ``g = min(R, P // isl)`` at a time.

* TPOT: a request's ``osl - 1`` decode steps hold the other groups' prefills, ``m = (G - 1) n_c`` mixed steps
  (``G = R / g`` groups): ``TPOT = [(osl - 1 - m) s_dec(R) + (G - 1) S_pref] / (osl - 1)`` (``S_pref``: a group's
  ``n_c`` mixed steps; the prefill work is the same however it is grouped, the GEMMs being compute-bound at a
  prompt's tokens). With more prefill steps than decode steps (prefill-bound) every step is mixed,
  ``D = g (osl - 1) / n_c`` sequences decode beside each chunk, ``TPOT = s_mix(D)``.
* TTFT, steady state: a prompt arrives alone and runs in the next step beside the others' decodes,
  ``TTFT = S_one + TPOT / 2`` (the step in flight); prefill-bound, it also waits ``G n_c - n_c - (osl - 1)`` steps
  (Little's law over the cycle). A benchmark's first wave (``requests_per_client`` requests per client, all
  clients starting at once) prefills in groups one after another, a mean of ``S_pref (G + 1) / 2``, weighted
  ``1 / requests_per_client``. Above the memory fit the extra clients queue: ``TTFT += (C / R - 1) x`` a request's
  lifetime.
* Every step also costs the engine's host time per sequence (``host_ms_per_request``: scheduling, sampling,
  detokenising).

Throughput per GPU = requests per second x ``osl`` / ``tp``; energy per output token = the steps' time-weighted
power / output tokens per second per GPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from data.costs import costs, echo, with_defaults
from data.ops import DTYPE_INFO, KV_DTYPES, MOE_DTYPES, OPS, QUANTISED_GEMM, itemsize

CONF_PATH = Path(__file__).resolve().parent.parent / "conf" / "llm.yaml"
GIB = 2.0**30

# architectures -> (kind, q/k norm per head, QKV bias): the Hugging Face class names this module knows
ARCHITECTURES: dict[str, tuple[str, bool, bool]] = {
    "LlamaForCausalLM": ("dense", False, False),
    "MistralForCausalLM": ("dense", False, False),
    "Qwen2ForCausalLM": ("dense", False, True),
    "Qwen3ForCausalLM": ("dense", True, False),
    "MixtralForCausalLM": ("moe", False, False),
    "Qwen3MoeForCausalLM": ("moe", True, False),
}
MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}
# a head_dim the architecture's transformers config class defaults to when config.json leaves it out (else the
# hidden size over the heads)
HEAD_DIM_DEFAULTS = {"Qwen3ForCausalLM": 128, "Qwen3MoeForCausalLM": 128}
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp8": "float8_e4m3fn"}
WEIGHT_DTYPES = ("bfloat16", "float16", *QUANTISED_GEMM)
CATEGORIES = ("gemm", "attention", "moe", "all_reduce", "norm", "elementwise", "embedding", "sampling", "engine")
COST_COLUMNS = ("runtime_ms", "runtime_ms_lo", "runtime_ms_hi")


class LLMError(ValueError):
    """A config, layout or request that cannot be costed; the message is one line naming the problem."""


# --------------------------------------------------------------------------- the config
@dataclasses.dataclass(frozen=True)
class LLMConfig:
    name: str
    architecture: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # a dense MLP's (Mixtral: each expert's)
    vocab: int
    tied: bool = False  # the LM head shares the embedding's weights
    qkv_bias: bool = False
    qk_norm: bool = False  # Qwen3: an RMSNorm over each query and key head
    sliding_window: int | None = None
    experts: int = 0
    topk: int = 0
    moe_intermediate: int = 0  # each expert's intermediate size
    moe_layers: int = 0  # layers whose MLP is a MoE block (the others: a dense MLP of ``intermediate``)

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    def parameters(self) -> dict[str, float]:
        """Parameter counts of the whole model by part (``gemm``: the layers' GEMM weights, quantised with the
        model's dtype; ``other``: embedding, LM head, norms, router and biases, kept in 16 bits)."""
        h, d = self.hidden, self.head_dim
        attn = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h
        mlp = (
            self.dense_layers * 3 * h * self.intermediate
            + self.moe_layers * self.experts * 3 * h * self.moe_intermediate
        )
        other = self.vocab * h * (1 if self.tied else 2) + self.layers * 2 * h + h
        other += self.layers * ((self.heads + 2 * self.kv_heads) * d if self.qkv_bias else 0)
        other += self.layers * (2 * d if self.qk_norm else 0) + self.moe_layers * h * self.experts
        return {"gemm": float(self.layers * attn + mlp), "other": float(other)}


def read_config(source, name: str | None = None) -> tuple[dict, str]:
    """A config.json as a dict and its display name: ``source`` is a path, JSON text or a mapping."""
    if isinstance(source, Mapping):
        return dict(source), name or "config"
    if isinstance(source, (bytes, bytearray)):
        source = source.decode("utf-8", "replace")
    text, where = None, name
    if isinstance(source, str) and source.lstrip().startswith("{"):
        text, where = source, name or "config"
    else:
        path = Path(source)
        where = name or path.name.removesuffix(".json").removesuffix("_config").removesuffix("-config")
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise LLMError(f"config file not found: {echo(str(source), 160)}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise LLMError(f"cannot read config {echo(str(source), 160)}: {type(exc).__name__}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LLMError(f"config {where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise LLMError(f"config {where}: a config.json is a JSON object, got {type(raw).__name__}")
    return raw, where


def _int(raw: Mapping, key: str, where: str, default=None, need: str = "") -> int:
    value = raw.get(key, default)
    if value is None:
        raise LLMError(f"config {where}: lacks {key!r}{need}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise LLMError(f"config {where}: {key} must be a positive integer, got {echo(value, 80)}")
    return int(value)


def parse_config(raw: Mapping, where: str = "config") -> LLMConfig:
    """The architecture numbers of a Hugging Face config.json (module docstring); one :class:`LLMError` line for
    an unknown architecture or a missing or invalid field."""
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs:
        arch = archs[0]
    elif raw.get("model_type") in MODEL_TYPES:
        arch = MODEL_TYPES[raw["model_type"]]
    else:
        arch = archs if archs is not None else raw.get("model_type")
        if arch is None:
            raise LLMError(f"config {where}: lacks 'architectures' (and a known 'model_type')")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise LLMError(
            f"config {where}: architecture {echo(arch, 80)} is not supported (supported: {', '.join(ARCHITECTURES)})"
        )
    kind, qk_norm, qkv_bias = ARCHITECTURES[arch]
    hidden = _int(raw, "hidden_size", where)
    heads = _int(raw, "num_attention_heads", where)
    kv_heads = _int(raw, "num_key_value_heads", where, default=heads)
    layers = _int(raw, "num_hidden_layers", where)
    head_dim = raw.get("head_dim", HEAD_DIM_DEFAULTS.get(arch))
    if head_dim is None:
        if hidden % heads:
            raise LLMError(f"config {where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
        head_dim = hidden // heads
    head_dim = _int({"head_dim": head_dim}, "head_dim", where)
    if heads % kv_heads:
        raise LLMError(
            f"config {where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    # Qwen configs carry a sliding_window used only with use_sliding_window true; Mistral's applies as given
    window = raw.get("sliding_window") if raw.get("use_sliding_window", not arch.startswith("Qwen")) else None
    window = None if window is None else _int({"sliding_window": window}, "sliding_window", where)
    experts = topk = moe_inter = moe_layers = 0
    inter = _int(raw, "intermediate_size", where, need=" (the MLP's width)")
    if kind == "moe":
        key = "num_local_experts" if arch == "MixtralForCausalLM" else "num_experts"
        experts = _int(raw, key, where, need=" (the experts of a MoE layer)")
        topk = _int(raw, "num_experts_per_tok", where, need=" (the experts each token is routed to)")
        if topk > experts:
            raise LLMError(f"config {where}: num_experts_per_tok {topk} exceeds {key} {experts}")
        if arch == "MixtralForCausalLM":
            moe_inter, moe_layers = inter, layers
        else:
            moe_inter = _int(raw, "moe_intermediate_size", where, need=" (each expert's width)")
            step = _int(raw, "decoder_sparse_step", where, default=1)
            dense = set(raw.get("mlp_only_layers") or ())
            moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    return LLMConfig(
        name=where,
        architecture=arch,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=inter,
        vocab=_int(raw, "vocab_size", where),
        tied=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=qkv_bias or bool(raw.get("attention_bias", False)),
        qk_norm=qk_norm,
        sliding_window=window,
        experts=experts,
        topk=topk,
        moe_intermediate=moe_inter,
        moe_layers=moe_layers,
    )


def load_config(source, name: str | None = None) -> LLMConfig:
    """:func:`read_config` then :func:`parse_config`."""
    raw, where = read_config(source, name)
    return parse_config(raw, where)


# --------------------------------------------------------------------------- the layout and the dtypes
@dataclasses.dataclass(frozen=True)
class Layout:
    tp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp

    @property
    def moe_tp(self) -> int:
        return self.tp // self.ep


def check_layout(cfg: LLMConfig, tp: int, ep: int = 1) -> Layout:
    """The layout, or one :class:`LLMError` line: ``tp`` divides the query heads and the MLP widths; the KV heads
    split evenly (``kv_heads % tp == 0``) or, with more GPUs than KV heads, replicate (``tp % kv_heads == 0``, as
    vLLM requires); ``ep`` divides ``tp`` and the experts (a dense model has ``ep`` 1)."""
    for flag, v in (("--tp", tp), ("--ep", ep)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise LLMError(f"{flag} must be a positive integer, got {echo(v, 40)}")
    tp, ep = int(tp), int(ep)
    if cfg.heads % tp:
        raise LLMError(f"--tp {tp} does not divide the {cfg.heads} attention heads of {cfg.name}")
    if tp <= cfg.kv_heads and cfg.kv_heads % tp:
        raise LLMError(f"--tp {tp} does not divide the {cfg.kv_heads} KV heads of {cfg.name}")
    if tp > cfg.kv_heads and tp % cfg.kv_heads:
        raise LLMError(
            f"--tp {tp} is not a multiple of the {cfg.kv_heads} KV heads of {cfg.name} (with more GPUs than KV "
            "heads each GPU holds one, replicated)"
        )
    if cfg.dense_layers and cfg.intermediate % tp:
        raise LLMError(f"--tp {tp} does not divide the MLP's intermediate size {cfg.intermediate} of {cfg.name}")
    if not cfg.moe:
        if ep != 1:
            raise LLMError(f"--ep {ep}: {cfg.name} is a dense model (expert parallelism needs a MoE model)")
        return Layout(tp, 1)
    if tp % ep:
        raise LLMError(f"--ep {ep} does not divide --tp {tp} (the experts split over the tensor-parallel GPUs)")
    if cfg.experts % ep:
        raise LLMError(f"--ep {ep} does not divide the {cfg.experts} experts of {cfg.name}")
    if cfg.moe_intermediate % (tp // ep):
        raise LLMError(
            f"tp / ep = {tp // ep} does not divide the experts' intermediate size {cfg.moe_intermediate} of {cfg.name}"
        )
    return Layout(tp, ep)


def dtype_name(value: str | None, default: str, allowed, what: str) -> str:
    """A dtype given by the user (an alias such as bf16 / fp8 accepted) checked against ``allowed``."""
    if value is None or value == "":
        return default
    name = DTYPE_ALIASES.get(str(value).lower(), str(value))
    if name not in allowed:
        raise LLMError(f"unknown {what} {echo(value, 40)}; known: {', '.join(allowed)} (aliases bf16, fp16, fp8)")
    return name


@dataclasses.dataclass(frozen=True)
class Precision:
    weights: str  # the GEMMs' dtype (data.ops.DTYPE_INFO)
    kv: str  # the KV cache's storage
    act: str  # activations, attention math, norms, LM head

    @classmethod
    def of(cls, cfg: LLMConfig, dtype: str | None = None, kv_dtype: str | None = None) -> Precision:
        weights = dtype_name(dtype, "bfloat16", WEIGHT_DTYPES, "--dtype")
        act = "float16" if weights == "float16" else "bfloat16"
        kv = dtype_name(kv_dtype, act, KV_DTYPES, "--kv-dtype")
        if cfg.moe and weights not in MOE_DTYPES:
            raise LLMError(f"--dtype {weights}: no fused MoE kernel in it (MoE dtypes: {', '.join(MOE_DTYPES)})")
        return cls(weights, kv, act)


# --------------------------------------------------------------------------- memory
def load_conf(path: str | Path = CONF_PATH) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text())


@dataclasses.dataclass(frozen=True)
class Memory:
    weights_gib: float  # per GPU
    kv_bytes_per_token: float  # the whole model (all layers, all KV heads)
    kv_bytes_per_token_gpu: float  # one GPU's share (replicated KV heads counted on every GPU)
    usable_gib: float  # weights + reserve + the KV cache's room
    reserve_gib: float  # runtime reserve + activations of a full step
    kv_room_gib: float  # what is left for the KV cache
    max_concurrency: int  # requests of isl + osl tokens whose KV cache fits


def kv_heads_per_gpu(cfg: LLMConfig, tp: int) -> int:
    return max(1, cfg.kv_heads // tp)


def memory(
    cfg: LLMConfig, layout: Layout, prec: Precision, memory_gib: float, isl: int, osl: int, conf: dict
) -> Memory:
    """Weights, KV cache per token and the largest concurrency that fits one GPU of ``memory_gib`` (module
    docstring; ``conf``: conf/llm.yaml). A request reserves its whole ``isl + osl`` tokens of KV cache (what
    TensorRT-LLM reserves; vLLM allocates as it goes and preempts when full)."""
    tp, h, d = layout.tp, cfg.hidden, cfg.head_dim
    kvl = kv_heads_per_gpu(cfg, tp)
    w16 = 2.0
    gemm_attn = h * (cfg.heads // tp + 2 * kvl) * d + (cfg.heads // tp) * d * h
    gemm_mlp = cfg.dense_layers * 3 * h * (cfg.intermediate // tp) if cfg.dense_layers else 0
    gemm_moe = cfg.moe_layers * (cfg.experts // layout.ep) * 3 * h * (cfg.moe_intermediate // layout.moe_tp)
    wbytes = DTYPE_INFO[prec.weights].weight * (cfg.layers * gemm_attn + gemm_mlp + gemm_moe)
    vocab_l = math.ceil(cfg.vocab / tp)
    other = vocab_l * h * (1 if cfg.tied else 2) + cfg.layers * 2 * h + h + cfg.moe_layers * h * cfg.experts
    other += cfg.layers * (((cfg.heads // tp) + 2 * kvl) * d if cfg.qkv_bias else 0) + cfg.layers * 2 * d * cfg.qk_norm
    weights = (wbytes + w16 * other) / GIB
    kv_item = DTYPE_INFO[prec.kv].act
    kv_token = cfg.layers * 2 * cfg.kv_heads * d * kv_item
    kv_token_gpu = cfg.layers * 2 * kvl * d * kv_item
    budget = int(conf["token_budget"])
    inter = max(cfg.intermediate if cfg.dense_layers else 0, cfg.moe_intermediate * cfg.topk // max(layout.ep, 1))
    act = budget * (3 * inter // tp + 4 * h) * w16 + 2 * budget * vocab_l * 4.0  # one step's largest tensors + logits
    reserve = float(conf["runtime_reserve_gib"]) + act / GIB
    usable = float(conf["memory_fraction"]) * (memory_gib - weights - reserve) + weights + reserve
    room = usable - weights - reserve  # the KV cache takes memory_fraction of what weights and runtime leave
    per_request = kv_token_gpu * (isl + osl)
    fit = int(max(room, 0.0) * GIB // per_request) if per_request > 0 else 0
    return Memory(weights, kv_token, kv_token_gpu, usable, reserve, room, fit)


# --------------------------------------------------------------------------- one step's kernels
@dataclasses.dataclass(frozen=True)
class Step:
    """One engine step: ``decode`` sequences generating one token each against ``context`` cached tokens (the new
    one included), and ``prefill`` sequences each processing a ``chunk`` of its prompt after ``prefix`` tokens
    already cached; ``last``: the chunk ends the prompt (its last position is sampled)."""

    decode: int = 0
    context: int = 0
    prefill: int = 0
    chunk: int = 0
    prefix: int = 0
    last: bool = True

    @property
    def tokens(self) -> int:
        return self.decode + self.prefill * self.chunk

    @property
    def sampled(self) -> int:
        return self.decode + (self.prefill if self.last else 0)


def _kv_len(cfg: LLMConfig, n: int, at_least: int = 1) -> int:
    return max(at_least, min(n, cfg.sliding_window) if cfg.sliding_window else n)


def step_kernels(cfg: LLMConfig, layout: Layout, prec: Precision, step: Step) -> pd.DataFrame:
    """The kernels one GPU launches in ``step`` (module docstring): one row per distinct kernel with ``name``
    (its name in the layer), ``category``, ``op``, ``dtype``, ``kv_dtype``, the op's shape columns and ``count``
    (calls per step), in layer order."""
    tp, h, d = layout.tp, cfg.hidden, cfg.head_dim
    hq, kvl = cfg.heads // tp, kv_heads_per_gpu(cfg, tp)
    T, S, L = step.tokens, step.sampled, cfg.layers
    act, w = prec.act, prec.weights
    vocab_l = math.ceil(cfg.vocab / tp)
    rows: list[dict] = []

    def add(name, category, op, count, dtype=act, **shape):
        if count > 0:
            rows.append({"name": name, "category": category, "op": op, "dtype": dtype, "count": int(count), **shape})

    def all_reduce(name, count):
        if tp > 1:
            add(name, "all_reduce", "all_reduce", count, n=T * h, gpus=tp)

    if T <= 0:
        raise LLMError("a step needs at least one token")
    add("embedding", "embedding", "embedding", 1, m=T, n=h, k=vocab_l)
    all_reduce("embedding_all_reduce", 1)
    add("input_rmsnorm", "norm", "rmsnorm", 1, m=T, n=h)
    add("add_rmsnorm", "norm", "ewise", 2 * L - 1, m=T, n=h, inputs=3)  # residual add fused into the norm
    add("qkv_proj", "gemm", "linear", L, dtype=w, m=T, n=(hq + 2 * kvl) * d, k=h)
    if cfg.qk_norm:
        add("q_norm", "norm", "rmsnorm", L, m=T * hq, n=d)
        add("k_norm", "norm", "rmsnorm", L, m=T * kvl, n=d)
    add("rotary", "elementwise", "ewise", L, m=T, n=(hq + kvl) * d, inputs=1)
    add("kv_cache_write", "elementwise", "copy", L, m=T, n=2 * kvl * d)
    if step.decode:
        add(
            "attention_decode",
            "attention",
            "sdpa",
            L,
            batch=step.decode,
            heads=hq,
            seq_len=1,
            head_dim=d,
            causal=0,
            kv_len=_kv_len(cfg, step.context),
            num_kv_heads=kvl,
            kv_dtype=prec.kv,
        )
    if step.prefill:
        add(
            "attention_prefill",
            "attention",
            "sdpa",
            L,
            batch=step.prefill,
            heads=hq,
            seq_len=step.chunk,
            head_dim=d,
            causal=1,
            kv_len=_kv_len(cfg, step.prefix + step.chunk, step.chunk),
            num_kv_heads=kvl,
            kv_dtype=prec.kv,
        )
    add("o_proj", "gemm", "linear", L, dtype=w, m=T, n=h, k=hq * d)
    all_reduce("attention_all_reduce", L)
    if cfg.dense_layers:
        inter = cfg.intermediate // tp
        add("gate_up_proj", "gemm", "linear", cfg.dense_layers, dtype=w, m=T, n=2 * inter, k=h)
        add("silu_and_mul", "elementwise", "ewise", cfg.dense_layers, m=T, n=inter, inputs=2)
        add("down_proj", "gemm", "linear", cfg.dense_layers, dtype=w, m=T, n=h, k=inter)
        all_reduce("mlp_all_reduce", cfg.dense_layers)
    if cfg.moe_layers:
        add("router", "moe", "linear", cfg.moe_layers, m=T, n=cfg.experts, k=h)
        add("topk_softmax", "moe", "softmax", cfg.moe_layers, dtype="float32", m=T, n=cfg.experts)
        add(
            "experts",
            "moe",
            "moe",
            cfg.moe_layers,
            dtype=w,
            m=T,
            n=cfg.moe_intermediate,
            k=h,
            experts=cfg.experts,
            topk=cfg.topk,
            tp=layout.moe_tp,
            ep=layout.ep,
        )
        all_reduce("moe_all_reduce", cfg.moe_layers)
    if S:
        add("lm_head", "gemm", "linear", 1, m=S, n=vocab_l, k=h)
        if tp > 1:
            add("logits_all_gather", "all_reduce", "all_gather", 1, n=S * vocab_l * tp, gpus=tp)
        add("sampling_softmax", "sampling", "softmax", 1, dtype="float32", m=S, n=cfg.vocab)
        add("sampling_argmax", "sampling", "max", 1, dtype="float32", m=S, n=cfg.vocab)
    out = pd.DataFrame(rows)
    if "kv_dtype" not in out.columns:
        out["kv_dtype"] = ""
    out["kv_dtype"] = out["kv_dtype"].fillna("")
    return out


def step_flops(kernels: pd.DataFrame) -> float:
    """FLOPs of a step's kernels, each times its count (the registry's closed forms)."""
    flops, _ = kernel_costs(kernels)
    return float((flops * kernels["count"].to_numpy(float)).sum())


def kernel_costs(kernels: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(flops, bytes)`` of each kernel row (one call), ``data.costs.costs``."""
    params = {c: kernels[c].to_numpy(float) for c in _shape_columns(kernels)}
    return costs(
        kernels["op"].to_numpy(object),
        params,
        kernels["dtype"].to_numpy(object),
        kv_dtypes=kernels["kv_dtype"].to_numpy(object),
    )


def _shape_columns(frame: pd.DataFrame) -> list[str]:
    from data.ops import SHAPE_PARAMS

    return [c for c in SHAPE_PARAMS if c in frame.columns]


# --------------------------------------------------------------------------- kernel costs
class KernelCoster:
    """Kernel rows (op, dtype, kv_dtype, shape columns) on one hardware -> per row ``runtime_ms``, ``runtime_ms_lo``,
    ``runtime_ms_hi`` (a kernel timed back to back), ``in_domain``, ``costed_by``, ``note``; a power-capable
    coster adds ``power_w`` (+ ends)."""

    name = "kernel model"
    has_domain = True

    def cost(self, kernels: pd.DataFrame, hardware: str) -> pd.DataFrame:
        raise NotImplementedError


def link_of(spec, conf: dict) -> tuple[float, float, str]:
    """``(bytes/s one direction, latency s, source)`` of a GPU's link to its peers: the spec's own ``interconnect``
    (``bandwidth_gbs``, ``latency_us``) where it has one, else ``conf/llm.yaml`` ``links`` by architecture (an
    assumption named as one)."""
    own = spec.extra.get("interconnect") if isinstance(spec.extra, dict) else None
    links = conf["links"]
    link = links.get(spec.architecture or "", links["default"])
    if isinstance(own, dict) and own.get("bandwidth_gbs"):
        lat = own.get("latency_us", link["latency_us"])
        return float(own["bandwidth_gbs"]) * 1e9, float(lat) * 1e-6, f"{spec.id}: interconnect"
    return float(link["bandwidth_gbs"]) * 1e9, float(link["latency_us"]) * 1e-6, " ".join(str(link["source"]).split())


class RooflineCoster(KernelCoster):
    """The plain spec roofline (module docstring): ``max(FLOPs / peak[dtype], bytes / bandwidth)``; a collective
    ``latency + wire bytes / link bandwidth``."""

    name = "roofline"
    has_domain = False

    def __init__(self, registry=None, conf: dict | None = None):
        from data.hardware import HardwareRegistry

        self.registry = registry or HardwareRegistry.from_dir()
        self.conf = conf or load_conf()

    def device_ms(self, kernels: pd.DataFrame, spec) -> np.ndarray:
        from features.tabular import peak_rate, roofline_s, unit_problem

        ops, dtypes = kernels["op"].to_numpy(object), kernels["dtype"].to_numpy(object)
        for dt in pd.unique(dtypes[[OPS[o].family in ("gemm", "attention", "moe") for o in ops]]):
            problem = unit_problem(spec, dt)
            if problem:
                raise LLMError(problem)
        flops, nbytes = kernel_costs(kernels)
        peak = np.array([peak_rate(spec, dt) for dt in dtypes], float)
        t = roofline_s(flops, nbytes, peak, spec.bandwidth_bytes_s)
        coll = np.array([OPS[o].wire is not None for o in ops])
        if coll.any():
            bw, lat, _ = link_of(spec, self.conf)
            for op in pd.unique(ops[coll]):
                rows = np.flatnonzero(coll & (ops == op))
                p = with_defaults(op, {c: kernels[c].to_numpy(float)[rows] for c in OPS[op].names})
                wire = OPS[op].wire(p) * np.array([itemsize(dt) for dt in dtypes[rows]])
                t[rows] = lat + wire / bw
        return t * 1e3

    def cost(self, kernels: pd.DataFrame, hardware: str) -> pd.DataFrame:
        t = self.device_ms(kernels, self.registry.get(hardware))
        return pd.DataFrame(
            {
                "runtime_ms": t,
                "runtime_ms_lo": t,
                "runtime_ms_hi": t,
                "in_domain": True,
                "costed_by": self.name,
                "note": "",
            },
            index=kernels.index,
        )


class PredictCoster(KernelCoster):
    """A kernel cost model's ``predict(frame) -> frame`` (``runtime_ms`` + ends, optional ``in_domain``,
    ``power_w``), asked one (op, dtype) group at a time, for the timing ``harness`` where the model takes one (a
    CUDA graph's device time); a group it cannot cost (a ``ValueError``: no physics for the op, no rate for the
    dtype in its hardware snapshot) is costed by ``fallback`` and said so."""

    def __init__(
        self,
        predict: Callable[[pd.DataFrame], pd.DataFrame],
        name: str,
        fallback: KernelCoster | None = None,
        harness: str | None = None,
    ):
        self.predict = predict
        self.name = name
        self.fallback = fallback
        self.harness = harness  # asked of a model that takes one (features.physics.HARNESSES): cuda_graph

    def cost(self, kernels: pd.DataFrame, hardware: str) -> pd.DataFrame:
        parts = []
        for (_op, _dtype), sub in kernels.groupby(["op", "dtype"], sort=False):
            cols = ["op", "dtype"] + [c for c in _shape_columns(sub) if sub[c].notna().any()]
            if (sub["kv_dtype"] != "").any():
                cols.append("kv_dtype")
            frame = sub[cols].assign(hardware=hardware).reset_index(drop=True)
            if self.harness:
                frame["harness"] = self.harness
            try:
                got = pd.DataFrame(self.predict(frame)).reset_index(drop=True)
            except ValueError as exc:
                if self.fallback is None:
                    raise LLMError(str(exc)) from None
                got = self.fallback.cost(sub, hardware).reset_index(drop=True)
                got = got.assign(in_domain=False, note=" ".join(str(exc).split())[:200])
            else:
                got = got.assign(costed_by=self.name, note=got.get("domain_reason", ""))
                if "in_domain" not in got.columns:
                    got["in_domain"] = True
            got.index = sub.index
            parts.append(got)
        out = pd.concat(parts).loc[kernels.index]
        keep = [*COST_COLUMNS, "in_domain", "costed_by", "note"]
        keep += [c for c in ("power_w", "power_w_lo", "power_w_hi") if c in out.columns]
        return out[keep].assign(in_domain=out["in_domain"].astype(bool), note=out["note"].fillna("").astype(str))


# --------------------------------------------------------------------------- the serving plan and law
@dataclasses.dataclass(frozen=True)
class Plan:
    """What the serving law needs to know about one (model, layout, C, isl, osl): see the module docstring."""

    concurrency: int  # C
    running: int  # R: min(C, max_concurrency) where the excess queues, else C
    group: int  # g: requests admitted (and prefilled) together
    groups: int  # G = ceil(R / g)
    chunks: tuple[tuple[int, int], ...]  # a request's prefill chunks: (tokens, prefix)
    regime: str  # decode-bound | prefill-bound
    decoding: int  # sequences decoding beside a prefill chunk
    mixed_steps: int  # prefill steps of other groups inside one request's decode steps
    budget: int  # tokens per step
    prefill_budget: int  # the step's tokens left for prefill
    isl: int
    osl: int


def plan(concurrency: int, isl: int, osl: int, max_concurrency: int, budget: int, queue: bool = True) -> Plan:
    """The steps the serving law composes (module docstring). Decode tokens take their share of a step's budget
    first, at most half of it, so a prefill always progresses. ``queue``: requests beyond ``max_concurrency`` wait
    for a slot (an engine that reserves a request's whole KV cache); else every request is admitted (a paged cache
    that preempts when full) and ``running`` is the concurrency."""
    C = int(concurrency)
    R = max(1, min(C, int(max_concurrency))) if queue else C
    P = max(1, budget - min(R, budget // 2))
    if isl <= P:
        g, chunks = min(R, max(1, P // isl)), ((isl, 0),)
    else:
        g = 1
        chunks = tuple((min(P, isl - s), s) for s in range(0, isl, P))
    G, n_c = -(-R // g), len(chunks)
    if (G - 1) * n_c <= osl - 1:
        return Plan(C, R, g, G, chunks, "decode-bound", R - g, (G - 1) * n_c, budget, P, isl, osl)
    D = min(R - g, -(-g * (osl - 1) // n_c))
    return Plan(C, R, g, G, chunks, "prefill-bound", D, (G - 1) * n_c, budget, P, isl, osl)


def law_steps(p: Plan, points: int) -> dict[str, Step]:
    """The named steps the law and the report read: the steady decode step at the mean context, each mixed step of
    a group's prefill, the decode curve over the context, the batch's prefill alone, one request's prefill alone."""
    mean_ctx = p.isl + (p.osl + 1) // 2
    steps: dict[str, Step] = {"decode": Step(decode=p.running, context=mean_ctx)}
    last = len(p.chunks) - 1
    for j, (c, pre) in enumerate(p.chunks):
        steps[f"mix{j}"] = Step(p.decoding, mean_ctx if p.decoding else 0, p.group, c, pre, j == last)
        if p.group > 1:  # one prompt arriving alone beside the other running requests' decodes
            d = p.running - 1
            steps[f"one{j}"] = Step(d, mean_ctx if d else 0, 1, c, pre, j == last)
        steps[f"alone{j}"] = Step(prefill=1, chunk=c, prefix=pre, last=j == last)
    contexts = np.unique(np.linspace(p.isl + 1, p.isl + max(p.osl, 1), max(points, 1)).round().astype(int))
    for ctx in contexts:
        steps[f"curve{ctx}"] = Step(decode=p.running, context=int(ctx))
    chunks = _chunks(p.isl, p.budget)
    for name in batch_weights(p):
        size, j = (int(v) for v in name.removeprefix("batch").split("_"))
        steps[name] = Step(prefill=size, chunk=chunks[j][0], prefix=chunks[j][1], last=j == len(chunks) - 1)
    return steps


def _chunks(isl: int, size: int) -> tuple[tuple[int, int], ...]:
    return tuple((min(size, isl - s), s) for s in range(0, isl, size))


def serve(p: Plan, s: Mapping[str, float], conf: Mapping | None = None) -> dict[str, float]:
    """The serving law (module docstring) on step times ``s`` (ms, by :func:`law_steps` name; ``conf``:
    conf/llm.yaml ``requests_per_client``): ``ttft_ms``,
    ``tpot_ms``, ``queue_ms``, ``lifetime_ms``, ``requests_per_ms``, ``prefill_ms`` (the batch's prefill alone),
    ``ttft_alone_ms`` (one request on an idle engine), ``decode_mean_ms`` (the decode curve's mean)."""
    n_c, O = len(p.chunks), p.osl
    S_pref = sum(s[f"mix{j}"] for j in range(n_c))
    S_one = sum(s[f"one{j}" if p.group > 1 else f"mix{j}"] for j in range(n_c))
    mix_mean = S_pref / n_c
    if p.regime == "decode-bound":
        tpot = ((O - 1 - p.mixed_steps) * s["decode"] + (p.groups - 1) * S_pref) / (O - 1) if O > 1 else s["decode"]
        ttft = S_one + 0.5 * tpot  # steady state: a prompt arrives alone, after the step in flight
        lifetime = ttft + (O - 1) * tpot
        rate = p.running / lifetime
    else:
        tpot = mix_mean
        wait = max(0, p.groups * n_c - n_c - (O - 1))
        ttft = S_pref + 0.5 * tpot + wait * mix_mean
        lifetime = p.groups * n_c * mix_mean
        rate = p.group / (n_c * mix_mean)
    k = float((conf or {}).get("requests_per_client") or 0)
    if k >= 1:  # the first wave: every client starts at once, the groups prefill one after another
        ttft = ttft * (1 - 1 / k) + S_pref * (p.groups + 1) / 2 / k
    queue = (p.concurrency / p.running - 1.0) * lifetime if p.concurrency > p.running else 0.0
    batch = sum(k * s[name] for name, k in batch_weights(p).items())
    curve = [v for k, v in s.items() if k.startswith("curve")]
    return {
        "ttft_ms": ttft + queue,
        "tpot_ms": tpot,
        "queue_ms": queue,
        "lifetime_ms": lifetime,
        "requests_per_ms": rate,
        "prefill_ms": batch,
        "ttft_alone_ms": sum(s[f"alone{j}"] for j in range(n_c)),
        "decode_mean_ms": float(np.mean(curve)),
    }


def batch_weights(p: Plan) -> dict[str, int]:
    """How many times each ``batch*`` step of :func:`law_steps` runs in the batch's prefill alone."""
    g0 = min(p.running, max(1, p.budget // p.isl)) if p.isl <= p.budget else 1
    nb = len(_chunks(p.isl, p.budget))
    out = {f"batch{g0}_{j}": p.running // g0 for j in range(nb)}
    if p.running % g0:
        out.update({f"batch{p.running % g0}_{j}": 1 for j in range(nb)})
    return out


def cycle_weights(p: Plan) -> dict[str, float]:
    """Each law step's share of a cycle's time weights (the count of its occurrences per request lifetime), for
    the mean power: the decode steps and every group's prefill chunks."""
    n_c = len(p.chunks)
    if p.regime == "decode-bound":
        out = {"decode": float(max(p.osl - 1 - p.mixed_steps, 0))}
        out.update({f"mix{j}": float(p.groups) for j in range(n_c)})
        return out
    return {f"mix{j}": float(p.groups) for j in range(n_c)}


# --------------------------------------------------------------------------- the whole prediction
@dataclasses.dataclass
class LLMPrediction:
    summary: dict  # the flat figures (one REST row)
    decode_curve: pd.DataFrame  # context, step_ms (+ ends)
    breakdown: pd.DataFrame  # per category: decode step ms and share, batch prefill ms and share
    steps: pd.DataFrame  # every composed step: its shape and times
    kernels: pd.DataFrame  # the steady decode step's kernels with their costs
    notes: list[str]


def compose_step(k: pd.DataFrame, mode: str, ex, static_w: float | None) -> tuple[dict, pd.Series]:
    """One step's time (and power) from its kernels' costs (``models.compose.compose``; each row repeated
    ``count`` times) and its time by category."""
    from models.compose import compose

    cols = ["op", "inputs", "category", *COST_COLUMNS] + [c for c in ("power_w", "power_w_lo", "power_w_hi") if c in k]
    expanded = k.loc[k.index.repeat(k["count"].to_numpy(int)), [c for c in cols if c in k.columns]]
    comp = compose(expanded.reset_index(drop=True), mode, ex, static_w if "power_w" in k else None)
    return comp.total, comp.kernels.groupby("category")["step_ms"].sum()


@dataclasses.dataclass
class Prepared:
    """One request's kernels before they are costed (:func:`prepare`), and what :func:`finish` needs after."""

    cfg: LLMConfig
    spec: object
    layout: Layout
    prec: Precision
    mem: Memory
    plan: Plan
    steps: dict[str, Step]
    kernels: pd.DataFrame  # every law step's kernels, ``step`` naming it


def prepare(
    cfg: LLMConfig,
    hardware: str,
    *,
    tp: int = 1,
    ep: int = 1,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    batch: int = 1,
    isl: int = 1024,
    osl: int = 128,
    kv_reserve: str | None = None,
    registry=None,
    conf: dict | None = None,
) -> Prepared:
    """Check a request and list its steps' kernels (module docstring); one :class:`LLMError` line for a bad request
    or a model that does not fit. ``kv_reserve``: ``full`` (a request reserves its ``isl + osl`` tokens of KV cache
    when admitted, as TensorRT-LLM's default scheduler does: requests beyond the fit queue) or ``paged`` (every
    request is admitted and its cache grows as the tokens come, vLLM and SGLang, which preempt when it is full);
    default ``conf`` ``kv_reserve``."""
    from data.hardware import HardwareRegistry, UnknownHardwareError

    conf = conf or load_conf()
    registry = registry or HardwareRegistry.from_dir()
    for flag, v in (("--batch", batch), ("--isl", isl), ("--osl", osl)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise LLMError(f"{flag} must be a positive integer, got {echo(v, 40)}")
    try:
        spec = registry.get(hardware)
    except UnknownHardwareError as exc:
        raise LLMError(str(exc)) from None
    if spec.kind != "gpu":
        raise LLMError(f"hardware {spec.id!r} is a {spec.kind}: LLM serving is costed on GPUs")
    layout = check_layout(cfg, tp, ep)
    prec = Precision.of(cfg, dtype, kv_dtype)
    mem = memory(cfg, layout, prec, spec.memory_gb, isl, osl, conf)
    if mem.kv_room_gib <= 0 or mem.max_concurrency < 1:
        raise LLMError(
            f"{cfg.name} does not fit {layout.tp} x {spec.id} in {prec.weights}: weights {mem.weights_gib:.1f} GiB + "
            f"reserve {mem.reserve_gib:.1f} GiB per GPU leave {max(mem.kv_room_gib, 0):.1f} GiB of "
            f"{mem.usable_gib:.1f} usable for a KV cache of {isl + osl} tokens "
            f"({mem.kv_bytes_per_token_gpu * (isl + osl) / GIB:.2f} GiB); use more GPUs or a smaller dtype"
        )
    reserve = kv_reserve or conf.get("kv_reserve", "full")
    if reserve not in ("full", "paged"):
        raise LLMError(f"kv_reserve must be full or paged, got {echo(reserve, 40)}")
    fit = mem.max_concurrency
    p = plan(batch, isl, osl, fit, int(conf["token_budget"]), queue=reserve == "full")
    steps = law_steps(p, int(conf.get("decode_points", 5)))
    frames = [step_kernels(cfg, layout, prec, st).assign(step=name) for name, st in steps.items()]
    return Prepared(cfg, spec, layout, prec, mem, p, steps, pd.concat(frames, ignore_index=True))


def price(prepared: list[Prepared], coster: KernelCoster, power: KernelCoster | None = None) -> list[pd.DataFrame]:
    """Every request's kernels with their costs: each distinct kernel (per hardware) costed once, in one call of
    ``coster`` (and ``power``) per hardware."""
    if not prepared:
        return []
    allk = pd.concat(
        [pr.kernels.assign(_req=i, hardware=pr.spec.id) for i, pr in enumerate(prepared)], ignore_index=True
    )
    key_cols = ["hardware", "op", "dtype", "kv_dtype", *_shape_columns(allk)]
    codes = allk.groupby(key_cols, dropna=False, sort=False).ngroup().to_numpy()
    first = pd.Series(np.arange(len(allk))).groupby(codes).first().to_numpy()
    unique = allk.iloc[first].reset_index(drop=True)
    parts = []
    for hw, sub in unique.groupby("hardware", sort=False):
        got = coster.cost(sub.drop(columns=["hardware", "_req", "step"]), hw)
        if power is not None:
            pw = power.cost(sub.drop(columns=["hardware", "_req", "step"]), hw)
            got = got.assign(**{c: pw[c] for c in ("power_w", "power_w_lo", "power_w_hi") if c in pw})
        parts.append(got)
    priced = pd.concat(parts).loc[unique.index]
    allk = allk.join(priced.iloc[codes].reset_index(drop=True))
    return [g.drop(columns=["_req", "hardware"]).reset_index(drop=True) for _, g in allk.groupby("_req", sort=True)]


@dataclasses.dataclass
class Composed:
    """A request's steps composed from their priced kernels (:func:`compose_steps`), before the serving law."""

    times: dict[str, dict[str, float]]  # "" / "_lo" / "_hi" -> step name -> ms (kernels only)
    power: dict[str, float]  # step name -> W per GPU (with a power model)
    by_category: dict[str, pd.Series]  # step name -> ms per kernel category
    modes: dict[str, str]  # step name -> execution mode
    launches: dict[str, int]  # step name -> kernels launched
    kernels: pd.DataFrame  # the priced kernels (``step`` naming each one's step)


def compose_steps(pr: Prepared, allk: pd.DataFrame, registry=None, conf: dict | None = None) -> Composed:
    """Each law step's time (and power) from its priced kernels, by execution mode (``models.compose``)."""
    from models.compose import load_execution, static_power

    conf = conf or load_conf()
    gpu = load_execution()["gpu"]
    ex = dataclasses.replace(gpu, floor_ms={f: 0.0 for f in gpu.floor_ms})  # device times in: no host floor inside
    power = "power_w" in allk.columns and bool(pd.to_numeric(allk["power_w"], errors="coerce").notna().all())
    static_w = static_power(pr.spec, registry)[0] if power else None
    if not power:
        allk = allk.drop(columns=[c for c in allk.columns if c.startswith("power_w")])
    out = Composed({end: {} for end in ("", "_lo", "_hi")}, {}, {}, {}, {}, allk)
    for name, k in allk.groupby("step", sort=False):
        mode = conf["execution"]["decode" if pr.steps[name].prefill == 0 else "prefill"]
        total, out.by_category[name] = compose_step(k, mode, ex, static_w)
        for end in out.times:
            out.times[end][name] = total.get(f"runtime_ms{end}", total["runtime_ms"])
        if "power_w" in total:
            out.power[name] = total["power_w"]
        out.modes[name], out.launches[name] = mode, int(k["count"].sum())
    return out


def finish(pr: Prepared, c: Composed, coster: KernelCoster, conf: dict | None = None) -> LLMPrediction:
    """The serving law over the composed steps, and the report (module docstring). Every step also costs the
    engine's host time per sequence (``conf`` ``host_ms_per_request``)."""
    conf = conf or load_conf()
    p, steps = pr.plan, pr.steps
    host = float(conf.get("host_ms_per_request") or 0.0)
    engine = {n: host * (st.decode + st.prefill) for n, st in steps.items()}
    times = {end: {n: v + engine[n] for n, v in t.items()} for end, t in c.times.items()}
    laws = {end: serve(p, times[end], conf) for end in times}
    summary = _summary(pr, laws, coster, c.kernels)
    if c.power:
        w = cycle_weights(p)
        tw = {n: w[n] * times[""][n] for n in w}
        mean_w = sum(tw[n] * c.power[n] for n in w) / sum(tw.values())
        summary["power_w_per_gpu"] = mean_w
        summary["energy_per_token_j"] = mean_w / summary["tokens_per_s_per_gpu"]
    curve = pd.DataFrame(
        [
            {"context": st.context, **{f"step_ms{e}": times[e][n] for e in times}}
            for n, st in steps.items()
            if n.startswith("curve")
        ]
    )
    cats = {n: pd.concat([v, pd.Series({"engine": engine[n]})]) if engine[n] else v for n, v in c.by_category.items()}
    pre = pd.concat([cats[n] * k for n, k in batch_weights(p).items()], axis=1).sum(axis=1)
    dec = cats["decode"]
    bd = pd.DataFrame({"decode_ms": dec, "prefill_ms": pre}).reindex([x for x in CATEGORIES if x in dec or x in pre])
    bd = bd.fillna(0.0)
    bd["decode_share"] = bd["decode_ms"] / bd["decode_ms"].sum()
    bd["prefill_share"] = bd["prefill_ms"] / max(bd["prefill_ms"].sum(), 1e-12)
    rows = [
        {
            "step": n,
            **dataclasses.asdict(st),
            "execution": c.modes[n],
            "kernels": c.launches[n],
            **{f"runtime_ms{e}": times[e][n] for e in times},
        }
        for n, st in steps.items()
    ]
    kernels = c.kernels[c.kernels["step"] == "decode"].drop(columns="step").reset_index(drop=True)
    return LLMPrediction(
        summary, curve, bd.reset_index(names="category"), pd.DataFrame(rows), kernels, _notes(summary, p)
    )


def predict_llm(
    cfg: LLMConfig,
    hardware: str,
    coster: KernelCoster,
    *,
    power: KernelCoster | None = None,
    registry=None,
    conf: dict | None = None,
    **request,
) -> LLMPrediction:
    """Serve ``cfg`` on ``tp`` GPUs of ``hardware`` at ``batch`` concurrent requests of ``isl`` / ``osl`` tokens
    (``request``: :func:`prepare`'s keywords); ``coster`` costs the kernels, ``power`` (optional) gives their
    power. One :class:`LLMError` line for a bad request or a model that does not fit."""
    conf = conf or load_conf()
    pr = prepare(cfg, hardware, registry=registry, conf=conf, **request)
    return finish(pr, compose_steps(pr, price([pr], coster, power)[0], registry, conf), coster, conf)


def _summary(pr: Prepared, laws, coster, allk) -> dict:
    cfg, spec, layout, prec, mem, p = pr.cfg, pr.spec, pr.layout, pr.prec, pr.mem, pr.plan
    law = laws[""]
    out = {
        "model": cfg.name,
        "architecture": cfg.architecture,
        "parameters_b": sum(cfg.parameters().values()) / 1e9,
        "hardware": spec.id,
        "tp": layout.tp,
        "ep": layout.ep,
        "gpus": layout.gpus,
        "dtype": prec.weights,
        "kv_dtype": prec.kv,
        "batch": p.concurrency,
        "isl": p.isl,
        "osl": p.osl,
        "kernel_model": coster.name,
    }
    for key in ("prefill_ms", "ttft_ms", "tpot_ms", "decode_mean_ms", "ttft_alone_ms"):
        out[key] = law[key]
        out[f"{key}_lo"] = min(laws["_lo"][key], law[key])
        out[f"{key}_hi"] = max(laws["_hi"][key], law[key])
    out.update(
        queue_ms=law["queue_ms"],
        tokens_per_s_per_gpu=law["requests_per_ms"] * 1e3 * p.osl / layout.gpus,
        weights_gib_per_gpu=mem.weights_gib,
        kv_bytes_per_token=mem.kv_bytes_per_token,
        kv_bytes_per_token_per_gpu=mem.kv_bytes_per_token_gpu,
        kv_cache_gib_per_gpu=mem.kv_room_gib,
        max_concurrency=mem.max_concurrency,
        running=p.running,
        regime=p.regime,
        prefill_group=p.group,
        prefill_chunks=len(p.chunks),
        token_budget=p.budget,
    )
    fallback = sorted(set(allk.loc[allk["costed_by"] != coster.name, "op"])) if coster.has_domain else []
    out["costed_by_roofline"] = ",".join(fallback)
    if coster.has_domain:
        inside = bool(allk["in_domain"].all())
        far = allk[~allk["in_domain"].astype(bool)]
        out["in_domain"] = inside
        out["domain_reason"] = "" if inside else _domain_reason(far)
    else:
        out["in_domain"] = None
        out["domain_reason"] = "the plain roofline has no domain of validity"
    return out


def _domain_reason(far: pd.DataFrame, most: int = 4) -> str:
    """The kernels outside the kernel model's domain, each with its reason (the model's, or why the roofline costed
    it), at most ``most`` named."""
    parts = []
    for (name, by), sub in far.groupby(["name", "costed_by"], sort=False):
        note = next((n for n in sub["note"] if n), "")
        parts.append(f"{name} ({'roofline: ' if by == 'roofline' else ''}{note[:80] or 'outside'})")
    more = f"; {len(parts) - most} more kernels" if len(parts) > most else ""
    return f"{len(parts)} kernels outside the kernel model's training domain: " + "; ".join(parts[:most]) + more


def _notes(summary: dict, p: Plan) -> list[str]:
    notes = []
    if p.concurrency > summary["max_concurrency"] and p.concurrency == p.running:
        notes.append(
            f"batch {p.concurrency} exceeds the largest concurrency that fits ({summary['max_concurrency']}): a paged "
            "KV cache fills up and the engine preempts requests (their recomputation is not costed)"
        )
    if p.concurrency > p.running:
        notes.append(
            f"batch {p.concurrency} exceeds the largest concurrency that fits ({summary['max_concurrency']}): "
            f"{p.concurrency - p.running} requests queue, {summary['queue_ms']:.0f} ms each on average (in ttft)"
        )
    if summary["costed_by_roofline"]:
        notes.append(
            f"the kernel model cannot cost {summary['costed_by_roofline']}: those kernels are costed by the spec "
            "roofline (in_domain false)"
        )
    return notes


def _int_cell(row: Mapping, key: str, default: int | None, i: int) -> int:
    v = row.get(key)
    if v is None or isinstance(v, float) and math.isnan(v):
        if default is None:
            raise LLMError(f"row {i}: an LLM request needs {key!r}")
        return default
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) or v != int(v):
        raise LLMError(f"row {i}: {key} must be an integer, got {v!r}"[:200])
    return int(v)


def _text_cell(row: Mapping, key: str) -> str | None:
    v = row.get(key)
    if v is None or isinstance(v, float) and math.isnan(v) or v == "":
        return None
    return str(v)


def llm_rows(
    frame: pd.DataFrame, predict: Callable[[pd.DataFrame], pd.DataFrame], registry=None, harness: str | None = None
) -> pd.DataFrame:
    """One LLM request per row (``llm_config``: the config.json as JSON text or an object, ``hardware``, ``tp``,
    ``batch``, ``isl``, ``osl``; optional ``ep``, ``dtype``, ``kv_dtype``) -> one row of figures each
    (``LLMPrediction.summary``), the kernels costed by ``predict`` (a kernel model's own) and the roofline where it
    cannot, for the timing ``harness`` where the model takes one. The served pyfunc's answer to an LLM request
    (REST)."""
    from data.hardware import HardwareRegistry

    registry = registry or HardwareRegistry.from_dir()
    coster = PredictCoster(predict, "served kernel model", fallback=RooflineCoster(registry), harness=harness)
    out = []
    for i, row in enumerate(frame.to_dict("records")):
        if not _text_cell(row, "hardware"):
            raise LLMError(f"row {i}: an LLM request needs 'hardware'")
        text = row.get("llm_config")
        if not isinstance(text, Mapping) and not (isinstance(text, str) and text.lstrip().startswith("{")):
            raise LLMError(f"row {i}: llm_config must be a config.json's JSON text (or a JSON object)")
        raw, where = read_config(text, f"row {i}")
        cfg = parse_config(raw, where)
        res = predict_llm(
            cfg,
            row["hardware"],
            coster,
            tp=_int_cell(row, "tp", 1, i),
            ep=_int_cell(row, "ep", 1, i),
            dtype=_text_cell(row, "dtype"),
            kv_dtype=_text_cell(row, "kv_dtype"),
            batch=_int_cell(row, "batch", None, i),
            isl=_int_cell(row, "isl", None, i),
            osl=_int_cell(row, "osl", None, i),
            registry=registry,
        )
        out.append({**res.summary, "model": raw.get("_name_or_path") or cfg.architecture})
    return pd.DataFrame(out)
