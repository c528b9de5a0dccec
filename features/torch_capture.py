"""A PyTorch model -> the kernels it launches, as workloads in the :mod:`data.workloads` conventions.

    rows, unmapped = workloads_from_module(model, (torch.empty(1, 3, 224, 224, device="meta"),))

Capture. The module is exported with ``torch.export.export(strict=False)`` (the pre-dispatch ATen graph, every
node carrying a fake tensor with its shape, strides and dtype). When export fails (an output torch.export cannot
flatten, a construct it rejects), ``make_fx(pre_dispatch=True)`` traces the same ATen level by running the module on
``meta`` tensors; :attr:`Capture.method` says which ran and why. Nothing is computed and, with a module built under
``torch.device("meta")`` (:func:`load_factory` does this; Hugging Face models built from a config work the same way),
no weight is allocated. The module runs in eval mode (inference: batch norm uses its running statistics, dropout is
off); its train/eval flags are restored afterwards.

Which ops are kernels (the decompositions chosen):

* ops that are one kernel or one library call on a GPU stay whole: ``linear`` (-> ``linear``, or ``matmul``
  without bias), ``conv2d`` / ``convolution`` (-> ``conv2d`` with ``groups`` and ``dilation``), batch norm,
  layer norm, RMS norm, softmax, ``scaled_dot_product_attention`` (-> ``sdpa``, ``kv_len`` when the keys are
  longer or shorter than the queries), ``embedding``, max / avg / adaptive avg pooling (an adaptive pool to 1x1
  is the ``mean`` eager PyTorch launches for it);
* every other node is replayed on ``meta`` tensors of its recorded shapes and strides under a dispatch mode that
  records the ATen kernels eager PyTorch runs for it: a ``reshape`` or ``contiguous`` of a non-contiguous tensor
  records the ``clone`` it launches (-> ``copy``) and of a contiguous one only views (nothing); ``matmul`` records
  ``bmm`` / ``mm`` and the copies of operands that cannot be viewed as 3-d; ``einsum`` its permutes and ``bmm``;
  ``to`` a ``_to_copy`` only when the dtype changes;
* views (any op whose schema returns an alias of its input: ``view``, ``transpose``, ``expand``, ``select``, ...),
  allocations (``empty``), asserts and eval-mode dropout cost nothing;
* pointwise ops (ATen's ``pointwise`` tag) -> the named elementwise op when one exists and all of its operands are
  full-size (``add``, ``mul``, ``div``, ``pow``, ``relu``, ``gelu``, ``tanh``, ``silu``, ``sigmoid``, ``hardtanh``;
  ``sub`` -> ``add``), its ``*_scalar`` form when one operand is a scalar or a broadcast, else ``ewise`` with the
  count of full-size tensor operands; factories (``arange``, ``full``, ``ones``, ...) -> ``ewise`` with 0 inputs;
  reductions (ATen's ``reduction`` tag) -> ``sum`` / ``mean`` / ``max`` over [output elements, reduced elements];
  copies (``clone``, ``_to_copy``, ``cat``, ``index``, ``gather``, ``pad``, ``repeat``, ``tril``, scatters)
  -> ``copy`` of the elements written;
* anything else is *unmapped*: named with its count in one warning line (``strict=True`` raises ValueError with
  that line), never dropped silently.

Shapes collapse as the conventions say: an elementwise kernel's [m, n] is (elements / last dim, last dim); a
``linear`` on [batch, tokens, k] has m = batch x tokens. dtype is the kernel's floating dtype; integer and bool
kernels (position ids, masks) are costed in the model's float dtype: they are small.
"""

from __future__ import annotations

import copy as _copy
import dataclasses
import functools
import importlib
import math
import operator
import os
import re
import sys
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from data.workloads import DTYPES, SHAPE_PARAMS, WorkloadError, validate

aten = torch.ops.aten

TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
COLUMNS = ["node", "target", "module", "op", "dtype", *SHAPE_PARAMS]
# the dtypes a whole module runs in (quantised GEMM formats are a kernel's, not a module's: data.ops.DTYPE_INFO)
CAPTURE_DTYPES = ("float32", "tf32", "float16", "bfloat16")


class CaptureError(ValueError):
    """A model, factory or example input that cannot be captured; the message is one line naming the problem."""


# ----------------------------------------------------------------------------------------------------- capture
@dataclasses.dataclass
class Capture:
    graph_module: torch.fx.GraphModule
    method: str  # "torch.export" or "make_fx"
    note: str = ""  # why torch.export was not used, when it was not


class _Flat(torch.nn.Module):
    """``module(*args, **kwargs)`` returning only the tensors of its output (a list): caches, ``ModelOutput`` and
    other containers torch.export cannot flatten are no obstacle to costing the forward pass."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return [t for t in _leaves(self.module(*args, **kwargs)) if isinstance(t, torch.Tensor)]


def _leaves(obj, depth: int = 0) -> Iterable:
    if depth > 8:
        return
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from _leaves(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v, depth + 1)
    elif hasattr(obj, "to_tuple"):  # transformers' ModelOutput
        yield from _leaves(obj.to_tuple(), depth + 1)


def capture(module: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any] | None = None) -> Capture:
    """The module's ATen graph: torch.export (non-strict), else make_fx running the module once on its inputs
    (free on meta tensors; module docstring)."""
    flat, kwargs = _Flat(module), dict(kwargs or {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ep = torch.export.export(flat, tuple(args), kwargs, strict=False)
            return Capture(ep.graph_module, "torch.export")
        except Exception as exc:  # noqa: BLE001 - any export failure falls back to make_fx, and says why
            note = f"torch.export failed ({type(exc).__name__}: {_first_line(exc)}); traced with make_fx"
        from torch.fx.experimental.proxy_tensor import make_fx

        try:  # runs the module once for real: free on meta tensors (the inputs follow the module's device)
            gm = make_fx(functools.partial(flat, **kwargs), tracing_mode="real", pre_dispatch=True)(*args)
        except Exception as exc:  # noqa: BLE001 - both tracers failed: one line naming both reasons
            token = _token_input_line(exc, args)
            if token:
                raise CaptureError(f"cannot capture {type(module).__name__}: {token}") from None
            raise CaptureError(
                f"cannot capture {type(module).__name__}: {note.split('; ')[0]}; make_fx failed too "
                f"({type(exc).__name__}: {_first_line(exc)})"
            ) from None
    return Capture(gm, "make_fx", note)


def _token_input_line(exc: BaseException, args: tuple) -> str:
    """The fix for an embedding given floating-point example inputs (token ids are integers), naming the integer
    form of each such input; empty for any other failure."""
    if "'indices'" not in str(exc) or "Long, Int" not in str(exc):
        return ""
    floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not floats:
        return ""
    shapes = ", ".join("int64:" + "x".join(str(d) for d in a.shape) for a in floats)
    return (
        f"token inputs need int64:{shapes.removeprefix('int64:')} (an embedding takes integer token ids; "
        f"--example-input {shapes}, --dtype then sets the model's float dtype only)"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return " ".join(text[0].split())[:200] if text else ""


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")


# ----------------------------------------------------------------------------------------------------- mapping
WHOLE = {  # ATen ops kept whole (one kernel / one library call on a GPU); everything else is replayed
    "linear",
    "conv2d",
    "convolution",
    "_convolution",
    "batch_norm",
    "_native_batch_norm_legit_no_training",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "layer_norm",
    "native_layer_norm",
    "rms_norm",
    "_fused_rms_norm",
    "softmax",
    "_softmax",
    "log_softmax",
    "_log_softmax",
    "_safe_softmax",
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "embedding",
    "max_pool2d",
    "max_pool2d_with_indices",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "_adaptive_avg_pool2d",
    "group_norm",
    "native_group_norm",
}
NO_KERNEL = {  # allocations, asserts, metadata, scalar reads and views ATen does not mark as aliases
    "_unsafe_view",
    "_reshape_alias",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "empty_permuted",
    "resize",
    "set",
    "_assert_tensor_metadata",
    "_assert_scalar",
    "_assert_async",
    "_functional_assert_scalar",
    "sym_constrain_range",
    "sym_constrain_range_for_size",
    "_local_scalar_dense",
    "item",
    "sym_size",
    "sym_numel",
    "sym_stride",
    "sym_storage_offset",
    "lift_fresh",
    "lift_fresh_copy",
    "dropout",
    "feature_dropout",
    "alpha_dropout",
    "detach",
    "_to_dense",
    "is_same_size",
    "is_nonzero",
    "_has_compatible_shallow_copy_type",
    "record_stream",
}
FACTORIES = {
    "arange",
    "full",
    "zeros",
    "ones",
    "new_ones",
    "new_zeros",
    "new_full",
    "full_like",
    "zeros_like",
    "ones_like",
    "scalar_tensor",
    "fill",
    "zero",
    "linspace",
    "logspace",
    "eye",
    "rand",
    "randn",
    "randint",
    "rand_like",
    "randn_like",
    "randint_like",
    "randperm",
    "normal",
    "uniform",
    "bernoulli",
}
COPIES = {
    "clone",
    "_to_copy",
    "copy",
    "cat",
    "concat",
    "concatenate",
    "stack",
    "hstack",
    "vstack",
    "index",
    "_unsafe_index",
    "index_select",
    "gather",
    "take",
    "take_along_dim",
    "repeat",
    "tile",
    "repeat_interleave",
    "flip",
    "roll",
    "constant_pad_nd",
    "pad",
    "reflection_pad1d",
    "reflection_pad2d",
    "replication_pad1d",
    "replication_pad2d",
    "tril",
    "triu",
    "narrow_copy",
    "_reshape_copy",
    "masked_select",
}
WRITES_SOURCE = {
    "index_put": "values",
    "_unsafe_index_put": "values",
    "slice_scatter": "src",
    "select_scatter": "src",
    "diagonal_scatter": "src",
    "scatter": "src",
    "scatter_add": "src",
    "scatter_reduce": "src",
    "index_add": "source",
    "index_copy": "source",
    "masked_scatter": "source",
}
SCANS = {"cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "diff"}
NAMED_UNARY = {
    "relu": "relu",
    "gelu": "gelu",
    "tanh": "tanh",
    "silu": "silu",
    "sigmoid": "sigmoid",
    "hardtanh": "hardtanh",
}
NAMED_BINARY = {"add": "add", "sub": "add", "rsub": "add", "mul": "mul", "div": "div", "pow": "pow"}
BITWISE_DUNDER = {"__and__", "__or__", "__xor__", "__lshift__", "__rshift__", "__iand__", "__ior__", "__ixor__"}
REDUCTION_OP = {
    "sum": "sum",
    "nansum": "sum",
    "mean": "mean",
    "nanmean": "mean",
    "amax": "max",
    "amin": "max",
    "max": "max",
    "min": "max",
    "argmax": "max",
    "argmin": "max",
    "aminmax": "max",
}


def _name(func) -> str:
    """``aten.add_.Tensor`` -> ``add``: the op's base name, in-place ``_`` suffix removed (same kernel)."""
    name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _bind(func, args: tuple, kwargs: Mapping) -> dict[str, Any]:
    """Arguments by their schema names (positional ones bound in order), defaults filled in."""
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _is_view(func) -> bool:
    """An op whose first result aliases an input without writing it: a view, no kernel."""
    rets = func._schema.returns
    return bool(rets) and rets[0].alias_info is not None and not rets[0].alias_info.is_write


def _tensors(values) -> list[torch.Tensor]:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(t for t in v if isinstance(t, torch.Tensor))
    return out


def _first(out) -> torch.Tensor | None:
    ts = _tensors([out])
    return ts[0] if ts else None


def _mn(shape) -> tuple[int, int]:
    n = int(shape[-1]) if len(shape) else 1
    numel = math.prod(int(d) for d in shape)
    return (numel // n if n else 0), n


class _Kernels:
    """Maps one ATen call (op, bound arguments, output) to workload dicts; collects what it cannot map."""

    def __init__(self, default_dtype: str, labels: Mapping[torch.dtype, str]):
        self.default_dtype = default_dtype
        self.labels = labels
        self.unmapped: Counter = Counter()

    def dtype(self, tensors: list[torch.Tensor]) -> str:
        """The first tensor's dtype that is a workload dtype; else (integer, bool, float64) the model's."""
        return next((self.labels[t.dtype] for t in tensors if t.dtype in self.labels), self.default_dtype)

    def unmap(self, func, why: str = "") -> None:
        self.unmapped[str(func) + (f" ({why})" if why else "")] += 1

    def map(self, func, args: tuple, kwargs: Mapping, out) -> list[dict] | None:
        """Workloads of one call ([] = no kernel), or None when the op has no mapping (counted as unmapped)."""
        name = _name(func)
        if name in NO_KERNEL or (name not in COPIES and _is_view(func)):
            return []
        b = _bind(func, args, kwargs)
        ins = _tensors(b.values())
        res = _first(out)
        dtype = self.dtype(ins + ([res] if res is not None else []))
        if res is not None and res.numel() == 0:
            return []
        try:
            rows = self._map(func, name, b, ins, res)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:  # an overload read otherwise
            rows = f"arguments not understood: {type(exc).__name__}"
        if rows is None or isinstance(rows, str):  # no mapping, or one with the reason it does not apply
            self.unmap(func, rows or "")
            return None
        return [dict(r, dtype=r.get("dtype", dtype)) for r in rows]

    def _map(self, func, name: str, b: dict, ins: list, res) -> list[dict] | str | None:  # noqa: C901 - one table
        """Workload dicts, or a string saying why a known op cannot be mapped here, or None for an unknown op."""
        tags = set(func.tags)
        if name == "linear":
            x, w, bias = b["input"], b["weight"], b.get("bias")
            m, k, n = x.numel() // x.shape[-1], w.shape[1], w.shape[0]
            return [{"op": "linear" if bias is not None else "matmul", "m": m, "n": n, "k": k}]
        if name in ("mm", "addmm"):
            a, w = (b["self"], b["mat2"]) if name == "mm" else (b["mat1"], b["mat2"])
            return [{"op": "matmul" if name == "mm" else "linear", "m": a.shape[0], "n": w.shape[1], "k": a.shape[1]}]
        if name in ("bmm", "baddbmm"):
            a, w = (b["self"], b["mat2"]) if name == "bmm" else (b["batch1"], b["batch2"])
            return [{"op": "bmm", "batch": a.shape[0], "m": a.shape[1], "n": w.shape[2], "k": a.shape[2]}]
        if name in ("mv", "addmv"):
            a = b["mat"]
            return [{"op": "matmul", "m": a.shape[0], "n": 1, "k": a.shape[1]}]
        if name in ("dot", "vdot"):
            return [{"op": "matmul", "m": 1, "n": 1, "k": b["self"].shape[0]}]
        if name in ("conv2d", "convolution", "_convolution"):
            return self._conv(func, b)
        if name in (
            "batch_norm",
            "_native_batch_norm_legit_no_training",
            "native_batch_norm",
            "_native_batch_norm_legit",
        ):
            x = b["input"]
            if x.dim() < 2 or x.dim() > 4:
                return f"{x.dim()}-d input"
            h, w = (list(x.shape[2:]) + [1, 1])[:2]
            return [{"op": "batchnorm", "batch": x.shape[0], "c_in": x.shape[1], "h": h, "w": w}]
        if name in ("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm"):
            x, n = b["input"], math.prod(b["normalized_shape"])
            return [{"op": "layernorm" if "layer" in name else "rmsnorm", "m": x.numel() // n, "n": n}]
        if name in ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax"):
            x = b["self"]
            n = x.shape[b["dim"]] if x.dim() else 1
            return [{"op": "softmax", "m": x.numel() // n, "n": n}]
        if name.startswith("_scaled_dot_product") or name == "scaled_dot_product_attention":
            q, k = b["query"], b["key"]
            if q.dim() < 3:
                return f"{q.dim()}-d query"
            heads = q.shape[-3] if q.dim() >= 4 else 1
            batch = math.prod(q.shape[:-3]) if q.dim() >= 4 else q.shape[0]
            row = {
                "op": "sdpa",
                "batch": batch,
                "heads": heads,
                "seq_len": q.shape[-2],
                "head_dim": q.shape[-1],
                "causal": int(bool(b.get("is_causal"))),
                "kv_len": k.shape[-2],
                "num_kv_heads": k.shape[-3] if k.dim() >= 4 else 1,  # fewer than heads: grouped-query (enable_gqa)
            }
            return [row]
        if name == "embedding":
            w, ids = b["weight"], b["indices"]
            return [{"op": "embedding", "m": ids.numel(), "n": w.shape[1], "k": w.shape[0], "dtype": self.dtype([w])}]
        if name in ("max_pool2d", "max_pool2d_with_indices", "avg_pool2d"):
            return self._pool(func, name, b)
        if name in ("adaptive_avg_pool2d", "_adaptive_avg_pool2d"):
            x, size = b["self"], list(b["output_size"])
            bc, (h, w) = math.prod(x.shape[:-2]), x.shape[-2:]
            if size == [1, 1]:  # what eager PyTorch launches: a mean over h*w
                return [{"op": "mean", "m": bc, "n": h * w}]
            if size[0] != size[1]:
                return f"output {size[0]}x{size[1]}"
            c = x.shape[-3] if x.dim() == 4 else x.shape[0]
            return [{"op": "adaptive_avg_pool2d", "batch": bc // c, "c_in": c, "h": h, "w": w, "out_size": size[0]}]
        if res is None:
            return "no tensor output"
        if name in WRITES_SOURCE:
            src = b.get(WRITES_SOURCE[name])
            src = src if isinstance(src, torch.Tensor) else res
            m, n = _mn(src.shape)
            return [{"op": "copy", "m": m, "n": n}]
        if name in COPIES or "view_copy" in tags:
            m, n = _mn(res.shape)
            return [{"op": "copy", "m": m, "n": n}]
        if name in FACTORIES:
            m, n = _mn(res.shape)
            return [{"op": "ewise", "m": m, "n": n, "inputs": 0}]
        if name in SCANS:
            m, n = _mn(res.shape)
            return [{"op": "ewise", "m": m, "n": n, "inputs": 1}]
        if torch.Tag.pointwise in tags or name in BITWISE_DUNDER:
            return self._pointwise(name, ins, res)
        if (
            torch.Tag.reduction in tags
            or name in REDUCTION_OP
            or name
            in (
                "var",
                "std",
                "var_mean",
                "std_mean",
                "norm",
                "linalg_vector_norm",
                "prod",
                "logsumexp",
                "all",
                "any",
                "count_nonzero",
            )
        ):
            x = ins[0] if ins else res
            m = max(res.numel(), 1)
            return [{"op": REDUCTION_OP.get(name, "sum"), "m": m, "n": max(x.numel() // m, 1)}]
        return None

    def _pointwise(self, name: str, ins: list, res) -> list[dict]:
        numel = res.numel()
        n_full = sum(1 for t in ins if t.numel() == numel)
        m, n = _mn(res.shape)
        if name in NAMED_UNARY and n_full == 1:
            return [{"op": NAMED_UNARY[name], "m": m, "n": n}]
        if name in NAMED_BINARY and n_full >= 2:
            return [{"op": NAMED_BINARY[name], "m": m, "n": n}]
        if name in NAMED_BINARY and n_full == 1:
            return [{"op": NAMED_BINARY[name] + "_scalar", "m": m, "n": n}]
        return [{"op": "ewise", "m": m, "n": n, "inputs": min(n_full, 3)}]

    def _conv(self, func, b: dict) -> list[dict] | None:
        x, w = b["input"], b["weight"]
        if b.get("transposed"):
            return "transposed"
        if x.dim() not in (3, 4) or w.dim() != 4:
            return f"{w.dim() - 2}-d"
        if x.dim() == 3:  # unbatched [c, h, w]
            x = x.unsqueeze(0)
        kh, kw = w.shape[2:]
        pair = lambda v: (list(v) * 2)[:2] if isinstance(v, (list, tuple)) else [v, v]  # noqa: E731
        stride, dilation = pair(b["stride"]), pair(b["dilation"])
        padding = b["padding"]
        if isinstance(padding, str):  # conv2d.padding: "same" / "valid"
            padding = [0, 0] if padding == "valid" else [dilation[0] * (kh - 1) // 2, dilation[1] * (kw - 1) // 2]
        padding = pair(padding)
        if kh != kw or stride[0] != stride[1] or padding[0] != padding[1] or dilation[0] != dilation[1]:
            return f"kernel {kh}x{kw}, stride {stride}, padding {padding}, dilation {dilation}"
        return [
            {
                "op": "conv2d",
                "batch": x.shape[0],
                "c_in": x.shape[1],
                "c_out": w.shape[0],
                "h": x.shape[2],
                "w": x.shape[3],
                "kernel": kh,
                "stride": stride[0],
                "padding": padding[0],
                "groups": b.get("groups") or 1,
                "dilation": dilation[0],
            }
        ]

    def _pool(self, func, name: str, b: dict) -> list[dict] | None:
        x = b["self"]
        pair = lambda v: (list(v) * 2)[:2] if isinstance(v, (list, tuple)) and len(v) else v  # noqa: E731
        kernel = pair(b["kernel_size"])
        stride = pair(b["stride"]) or kernel
        padding = pair(b["padding"])
        dilation = pair(b.get("dilation") or [1, 1])
        kernel, stride, padding, dilation = (
            [v, v] if isinstance(v, int) else v for v in (kernel, stride, padding, dilation)
        )
        if len(set(kernel)) != 1 or len(set(stride)) != 1 or len(set(padding)) != 1 or dilation != [1, 1]:
            return f"kernel {kernel}, stride {stride}, padding {padding}, dilation {dilation}"
        c = x.shape[-3]
        batch = math.prod(x.shape[:-3]) if x.dim() >= 4 else 1
        op = "avg_pool2d" if name == "avg_pool2d" else "max_pool2d"
        return [
            {
                "op": op,
                "batch": batch,
                "c_in": c,
                "h": x.shape[-2],
                "w": x.shape[-1],
                "kernel": kernel[0],
                "stride": stride[0],
                "padding": padding[0],
            }
        ]


class _Recorder(TorchDispatchMode):
    """Records every ATen call that reaches the dispatcher (after composite ops decomposed), with its output."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, args, kwargs or {}, out))
        return out


def _materialise(value):
    """FX argument -> a meta tensor of the recorded shape/strides/dtype (nodes), recursively for lists."""
    if isinstance(value, torch.fx.Node):
        val = value.meta.get("val")
        if isinstance(val, torch.Tensor):
            return _meta_like(val)
        if isinstance(val, (list, tuple)):
            return type(val)(_meta_like(v) if isinstance(v, torch.Tensor) else v for v in val)
        return val
    if isinstance(value, (list, tuple)):
        return type(value)(_materialise(v) for v in value)
    if isinstance(value, dict):
        return {k: _materialise(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        return _meta_like(value)
    return value


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    path = re.sub(r"^L\['self'\]\.?", "", path)
    path = path.removeprefix("module.").removeprefix("module")  # the _Flat wrapper
    return path


def _nodes(gm: torch.fx.GraphModule) -> Iterable[torch.fx.Node]:
    """Call nodes in execution order; a higher-order op's subgraph (e.g. a ``no_grad`` region) inline."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            subs = [
                getattr(gm, a.target)
                for a in node.args
                if isinstance(a, torch.fx.Node)
                and a.op == "get_attr"
                and isinstance(getattr(gm, a.target, None), torch.fx.GraphModule)
            ]
            if len(subs) == 1 and node.target.__name__ in (
                "wrap_with_set_grad_enabled",
                "wrap_with_autocast",
                "wrap_activation_checkpoint",
                "tag_activation_checkpoint",
            ):
                yield from _nodes(subs[0])
                continue
        yield node


def kernels_of_graph(
    gm: torch.fx.GraphModule, default_dtype: str = "float32", labels: Mapping[torch.dtype, str] | None = None
) -> tuple[list[dict], Counter]:
    """Workload dicts (with ``node``, ``target``, ``module``) of every kernel in a captured graph + unmapped ops."""
    labels = labels or {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    kern = _Kernels(default_dtype, labels)
    rows: list[dict] = []
    for node in _nodes(gm):
        target = node.target
        if target is operator.getitem or not isinstance(target, torch._ops.OpOverload):
            if not (
                target is operator.getitem
                or getattr(target, "__module__", "") in ("_operator", "math")
                or str(target).startswith("<built-in function")
            ):
                kern.unmap(target if isinstance(target, str) else getattr(target, "__name__", str(target)))
            continue
        where = {"node": node.name, "module": _module_path(node)}
        args, kwargs = _materialise(node.args), _materialise(node.kwargs)
        if _name(target) in WHOLE:
            rows += [
                dict(r, target=str(target), **where) for r in kern.map(target, args, kwargs, node.meta.get("val")) or ()
            ]
            continue
        try:
            with _Recorder() as rec:
                target(*args, **kwargs)
            calls = rec.calls
        except Exception:  # noqa: BLE001 - a replay that meta tensors cannot run: map the node as it stands
            calls = [(target, args, kwargs, node.meta.get("val"))]
        for func, a, kw, out in calls:
            rows += [dict(r, target=str(func), **where) for r in kern.map(func, a, kw, out) or ()]
    return rows, kern.unmapped


# ----------------------------------------------------------------------------------------------------- public API
def unmapped_line(unmapped: Mapping[str, int] | Iterable[tuple[str, int]]) -> str:
    """``3 op call(s) have no workload mapping (not costed): aten.foo.default x2, aten.bar.default x1``."""
    items = list(unmapped.items() if isinstance(unmapped, Mapping) else unmapped)
    if not items:
        return ""
    total = sum(c for _, c in items)
    return f"{total} op call(s) have no workload mapping (not costed): " + ", ".join(
        f"{name} x{count}" for name, count in items
    )


def _dtype_label(dtype) -> tuple[str | None, torch.dtype | None]:
    if dtype is None:
        return None, None
    if isinstance(dtype, torch.dtype):
        label = {DTYPES[k]: k for k in reversed(CAPTURE_DTYPES)}.get(dtype)
        if label is None:
            raise CaptureError(f"dtype {dtype} has no workload dtype; known: {', '.join(CAPTURE_DTYPES)}")
        return label, dtype
    if dtype not in CAPTURE_DTYPES:
        raise CaptureError(f"unknown dtype {dtype!r}; known: {', '.join(CAPTURE_DTYPES)}")
    return dtype, DTYPES[dtype]


def _module_dtype(module: torch.nn.Module) -> torch.dtype:
    for t in list(module.parameters()) + list(module.buffers()):
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _module_device(module: torch.nn.Module) -> torch.device | None:
    for t in list(module.parameters()) + list(module.buffers()):
        return t.device
    return None


def workloads_from_module(
    module: torch.nn.Module,
    example_inputs,
    dtype: str | torch.dtype | None = None,
    strict: bool = False,
    kwargs: Mapping[str, Any] | None = None,
) -> tuple[pd.DataFrame, list[tuple[str, int]]]:
    """The kernels of one forward pass of ``module`` on ``example_inputs``, as workload rows + unmapped ops.

    ``example_inputs``: a tensor or a tuple of tensors (their shapes and dtypes matter, not their values; ``meta``
    tensors allocate nothing). ``kwargs``: keyword inputs of ``forward``. ``dtype``: cost the model in this dtype
    (``float16``, ``bfloat16``, ``tf32``, ...; a copy of the module is cast, floating inputs too); default: the
    module's own. Returns ``(rows, unmapped)``: one row per kernel in call order with ``node`` (graph node),
    ``target`` (the ATen op), ``module`` (the submodule path it ran in), ``op``, ``dtype`` and the op's shape
    columns (validated, nullable integers); ``unmapped`` = ``[(aten op, count), ...]`` of calls with no mapping,
    also warned about in one line, or raised as ValueError with ``strict=True``. ``rows.attrs`` holds
    ``capture`` (torch.export or make_fx), ``capture_note`` (why not torch.export) and ``free_ops`` (ATen calls that
    launch no kernel: views, reshapes of contiguous tensors, ...; each still costs host time in eager mode).
    """
    if not isinstance(module, torch.nn.Module):
        raise CaptureError(f"expected a torch.nn.Module, got {type(module).__name__}")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if not all(isinstance(a, torch.Tensor) for a in args):
        raise CaptureError("example inputs must be tensors (e.g. torch.empty(1, 3, 224, 224, device='meta'))")
    label, tdtype = _dtype_label(dtype)
    if tdtype is not None and tdtype != _module_dtype(module):
        module = _copy.deepcopy(module).to(tdtype)
    if tdtype is not None:
        args = tuple(a.to(tdtype) if a.is_floating_point() else a for a in args)
    device = _module_device(module)
    if device is not None:  # inputs follow the module (meta inputs for a module with weights, and back)
        move = lambda a: a if a.device == device else torch.zeros(a.shape, dtype=a.dtype, device=device)  # noqa: E731
        args = tuple(move(a) for a in args)
        kwargs = {k: move(v) if isinstance(v, torch.Tensor) else v for k, v in (kwargs or {}).items()}
    flags = {m: m.training for m in module.modules()}
    module.eval()
    try:
        cap = capture(module, args, kwargs)
    finally:
        for m, flag in flags.items():
            m.training = flag
    base = _module_dtype(module)
    labels = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    if label is not None:
        labels[tdtype] = label
    default = labels.get(base, "float32")
    found, unmapped = kernels_of_graph(cap.graph_module, default, labels)
    rows = []
    for r in found:
        params = {k: v for k, v in r.items() if k in SHAPE_PARAMS}
        try:
            params = validate(r["op"], params, r["dtype"])
        except WorkloadError as exc:
            unmapped[f"{r['target']} ({exc})"] += 1
            continue
        rows.append(
            {
                "node": r["node"],
                "target": r["target"],
                "module": r["module"],
                "op": r["op"],
                "dtype": r["dtype"],
                **params,
            }
        )
    df = pd.DataFrame(rows, columns=COLUMNS).astype({c: "Int64" for c in SHAPE_PARAMS})
    ops = sum(1 for n in _nodes(cap.graph_module) if isinstance(n.target, torch._ops.OpOverload))
    df.attrs.update(capture=cap.method, capture_note=cap.note, free_ops=ops - len({r["node"] for r in found}))
    items = sorted(unmapped.items(), key=lambda kv: (-kv[1], kv[0]))
    if items:
        line = unmapped_line(items)
        if strict:
            raise ValueError(line)
        warnings.warn(line, stacklevel=2)
    return df, items


def counted_flops(module: torch.nn.Module, example_inputs, kwargs: Mapping[str, Any] | None = None) -> float:
    """FLOPs ``torch.utils.flop_counter.FlopCounterMode`` counts for one eval-mode forward pass (meta tensors
    recommended): the reference the workloads' FLOPs are checked against."""
    from torch.utils.flop_counter import FlopCounterMode

    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    flags = {m: m.training for m in module.modules()}
    module.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            module(*args, **(kwargs or {}))
    finally:
        for m, flag in flags.items():
            m.training = flag
    return float(counter.get_total_flops())


# ----------------------------------------------------------------------------------------------------- CLI helpers
def load_factory(spec: str) -> torch.nn.Module:
    """``pkg.module:factory`` -> ``factory()`` called under ``torch.device("meta")`` (no weights allocated).

    The module is looked up as ``python -m`` would: the current directory first, then the installed packages."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise CaptureError(f"--torch {spec!r}: expected pkg.module:factory (a function returning an nn.Module)")
    mod_name, attr = spec.split(":")
    cwd = os.getcwd()
    try:
        if cwd not in sys.path:  # a console script's sys.path lacks the current directory
            sys.path.insert(0, cwd)
        mod = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - an import error of the user's module is one line
        raise CaptureError(
            f"--torch {spec}: cannot import {mod_name!r} ({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    factory = mod
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise CaptureError(f"--torch {spec}: module {mod_name!r} has no attribute {attr!r}")
    if not callable(factory):
        raise CaptureError(f"--torch {spec}: {attr!r} is not callable")
    try:
        with torch.device("meta"):
            module = factory()
    except Exception as exc:  # noqa: BLE001 - the factory's own failure is one line
        raise CaptureError(f"--torch {spec}: {attr}() failed ({type(exc).__name__}: {_first_line(exc)})") from None
    if not isinstance(module, torch.nn.Module):
        raise CaptureError(f"--torch {spec}: {attr}() returned {type(module).__name__}, not a torch.nn.Module")
    return module


_SHAPE = re.compile(r"^(?:(?P<dtype>[a-z0-9]+):)?(?P<shape>\d+(?:x\d+)*)$")


def parse_example_input(text: str) -> torch.Tensor:
    """``1x3x224x224`` (float32) or ``int64:1x128`` (token ids) -> an empty ``meta`` tensor of that shape."""
    match = _SHAPE.match(str(text).strip())
    if not match:
        raise CaptureError(
            f"--example-input {text!r}: expected a shape like 1x3x224x224 or dtype:shape like int64:1x128"
        )
    dtype = match["dtype"] or "float32"
    if dtype not in TORCH_DTYPES:
        raise CaptureError(f"--example-input {text!r}: unknown dtype {dtype!r}; known: {', '.join(TORCH_DTYPES)}")
    shape = tuple(int(d) for d in match["shape"].split("x"))
    if any(d < 1 for d in shape):
        raise CaptureError(f"--example-input {text!r}: every dimension must be >= 1")
    return torch.empty(shape, dtype=TORCH_DTYPES[dtype], device="meta")


def workloads_from_factory(
    spec: str, example_inputs: list[str], dtype: str | None = None, strict: bool = False
) -> tuple[pd.DataFrame, list[tuple[str, int]]]:
    """:func:`workloads_from_module` of ``pkg.module:factory`` (:func:`load_factory`) on example-input shapes
    (:func:`parse_example_input`), the capture's own warnings silenced (the caller says what was unmapped): the
    kernels ``costmodel predict --torch`` costs. Bad input is a ValueError line (:class:`CaptureError`, ``strict``'s
    unmapped line, an unknown ``dtype``)."""
    module = load_factory(spec)
    inputs = tuple(parse_example_input(s) for s in example_inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return workloads_from_module(module, inputs, dtype=dtype, strict=strict)
