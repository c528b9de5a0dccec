"""Cost a whole network with a per-kernel cost model: a PyTorch module or an MLIR module -> per-kernel predictions
and their total.

    from models.networks_api import predict_module, predict_mlir
    with torch.device("meta"):
        net = torchvision_like_resnet()
    res = predict_module(net, torch.empty(8, 3, 224, 224, device="meta"), "models:/costmodel-runtime@champion",
                         hardware="H100-SXM", dtype="float16")
    res.kernels     # one row per kernel: node, target (ATen op), module path, op, dtype, shapes + predictions
    res.total       # {"runtime_ms": ..., "runtime_ms_lo": ..., "runtime_ms_hi": ...}
    res.unmapped    # [(aten op, count), ...] not costed (also warned about in one line)

``model`` is a model URI (``models:/name@alias``, ``runs:/...``; loaded with ``mlflow.pyfunc.load_model``) or an
object with ``predict(DataFrame)`` (a loaded pyfunc). The composition is the one ``.mlir`` input already has: the
kernels run one after another, so runtime and energy (and their interval ends) are sums, peak memory is the largest
kernel's, and power is energy / runtime (its ends the runtime-weighted means). Launch overheads and fusion by
execution mode are not modelled here yet.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import pandas as pd

from data.workloads import SHAPE_PARAMS
from features.tabular import FeatureError

DESCRIBE = ("node", "target", "module", "mlir_op")  # kernel columns that describe, never enter the model
PEAK_TARGETS = ("peak_mem_bytes",)


@dataclasses.dataclass
class NetworkPrediction:
    kernels: pd.DataFrame                      # workloads + hardware + one column per prediction
    total: dict[str, float]                    # the network's figures (module docstring)
    unmapped: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    capture: str = ""                          # torch.export / make_fx / mlir


def _load(model):
    if isinstance(model, str):
        import mlflow.pyfunc
        from mlflow.exceptions import MlflowException

        try:
            return mlflow.pyfunc.load_model(model)
        except (MlflowException, OSError) as exc:
            raise FeatureError(f"cannot load model {model!r}: {str(exc).strip().splitlines()[0]}") from None
    if not hasattr(model, "predict"):
        raise FeatureError(f"model must be a model URI or have predict(), got {type(model).__name__}")
    return model


def model_input_columns(model) -> list[str] | None:
    """The input column names of a loaded pyfunc's signature (None when it has none)."""
    meta = getattr(model, "metadata", None)
    schema = meta.get_input_schema() if meta is not None else None
    return schema.input_names() if schema is not None else None


def check_signature(kernels: pd.DataFrame, model, where: str = "model") -> None:
    """A shape column the kernels use but the model's signature lacks would be dropped by MLflow, and e.g. a
    depthwise conv costed as a dense one: refuse it in one line instead."""
    names = model_input_columns(model)
    if names is None:
        return
    if "op" not in names:
        raise FeatureError(f"{where} is a whole-network model (its input is MLIR text, not kernels): give it the "
                           "module's MLIR, or use a per-kernel model")
    used = [c for c in SHAPE_PARAMS if c in kernels.columns and kernels[c].notna().any() and c not in names]
    if used:
        raise FeatureError(f"{where} was logged without the shape column(s) {', '.join(used)} that these kernels use "
                           "(it predates them): re-register it with this version")


def total(preds: pd.DataFrame) -> dict[str, float]:
    """The network's figures from its kernels' predictions (module docstring)."""
    out: dict[str, float] = {}
    for col in preds.columns:
        values = pd.to_numeric(preds[col], errors="coerce")
        if values.isna().all():
            continue
        base = col.removesuffix("_lo").removesuffix("_hi")
        if base in PEAK_TARGETS:
            out[col] = float(values.max())
        elif base != "power_w":
            out[col] = float(values.sum())
    if "power_w" in preds.columns and "runtime_ms" in preds.columns:
        runtime = pd.to_numeric(preds["runtime_ms"], errors="coerce")
        for col in ("power_w", "power_w_lo", "power_w_hi"):
            if col in preds.columns:
                if col == "power_w" and "energy_j" in out:
                    out[col] = out["energy_j"] / (out["runtime_ms"] / 1e3)
                else:
                    out[col] = float(np.nansum(pd.to_numeric(preds[col], errors="coerce") * runtime) / runtime.sum())
    return out


def predict_kernels(kernels: pd.DataFrame, model, hardware: str) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per-kernel predictions of a workload frame on ``hardware`` and their total."""
    from mlflow.exceptions import MlflowException

    from models.pyfunc import INPUT_ERROR_PREFIX

    if kernels.empty:
        raise FeatureError("no kernel to cost")
    loaded = _load(model)
    check_signature(kernels, loaded, model if isinstance(model, str) else "the model")
    frame = kernels.drop(columns=[c for c in DESCRIBE if c in kernels.columns]).assign(hardware=hardware)
    frame = frame.astype({c: float for c in SHAPE_PARAMS if c in frame.columns})
    try:
        preds = loaded.predict(frame)
    except MlflowException as exc:
        msg = exc.message
        raise FeatureError(msg.removeprefix(INPUT_ERROR_PREFIX) if msg.startswith(INPUT_ERROR_PREFIX)
                           else " ".join(msg.split())[:300]) from None
    preds = pd.DataFrame(preds).reset_index(drop=True)
    per_kernel = kernels.reset_index(drop=True).assign(hardware=hardware).join(preds)
    return per_kernel, total(preds)


def predict_module(module, example_inputs, model, hardware: str, dtype: str | None = None,
                   kwargs: Mapping[str, Any] | None = None, strict: bool = False) -> NetworkPrediction:
    """Cost one forward pass of a ``torch.nn.Module`` (``features.torch_capture.workloads_from_module``)."""
    from features.torch_capture import workloads_from_module

    kernels, unmapped = workloads_from_module(module, example_inputs, dtype=dtype, strict=strict, kwargs=kwargs)
    per_kernel, tot = predict_kernels(kernels, model, hardware)
    return NetworkPrediction(per_kernel, tot, unmapped, kernels.attrs.get("capture", ""))


def predict_mlir(text: str, model, hardware: str, dims: Mapping[str, object] | None = None,
                 where: str = "mlir", strict: bool = False) -> NetworkPrediction:
    """Cost an MLIR module's kernels (``features.mlir.workloads_from_mlir``; ``dims`` binds dynamic sizes)."""
    from features.mlir import workloads_from_mlir

    kernels = workloads_from_mlir(text, where=where, dims=dims, strict=strict)
    if kernels.empty:
        raise FeatureError(f"{where}: no kernel recognised")
    per_kernel, tot = predict_kernels(kernels, model, hardware)
    return NetworkPrediction(per_kernel, tot, sorted(kernels.attrs.get("unmapped", {}).items()), "mlir")
