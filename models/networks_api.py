"""Cost a whole network with a per-kernel cost model: a PyTorch module or an MLIR module -> per-kernel predictions
and their total.

    from models.networks_api import predict_module, predict_mlir
    with torch.device("meta"):
        net = torchvision_like_resnet()
    res = predict_module(net, torch.empty(8, 3, 224, 224, device="meta"), "models:/costmodel-runtime@champion",
                         hardware="H100-SXM", dtype="float16")
    res.kernels     # one row per kernel: node, target (ATen op), module path, op, dtype, shapes + predictions
                    #   + launched, fused_into, device_ms, step_ms (its share of the network runtime)
    res.total       # {"runtime_ms", "runtime_ms_lo", "runtime_ms_hi", (power_w, energy_j + ends), "execution", ...}
    res.unmapped    # [(aten op, count), ...] not costed (also warned about in one line)

``model`` is a model URI (``models:/name@alias``, ``runs:/...``; loaded with ``models.api.load_pyfunc``) or an
object with ``predict(DataFrame)`` (a loaded pyfunc). The kernels' predictions compose into the network's figures
by ``execution`` (``models.compose``: ``eager`` = PyTorch's default, ``cuda_graph``, ``compiled``; constants in
``conf/execution.yaml``): runtime = launch + per-kernel steps (launch-bound kernels cost their host dispatch in
eager, a small gap in a graph; pointwise ops fuse when compiled); with a power model (runtime_ms + power_w per
kernel, e.g. ``costmodel-power``) energy = static power x runtime + the kernels' dynamic energies and power =
energy / runtime; with a runtime-only model power and energy are absent. ``sum_runtime_ms`` keeps the plain sum
of the kernels' predictions. ``execution=None`` gives the plain rules instead: runtime and energy (and their
interval ends) are sums, peak memory is the largest kernel's, power is energy / runtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from data.ops import SHAPE_PARAMS
from features.tabular import FeatureError

DESCRIBE = ("node", "target", "module", "mlir_op")  # kernel columns that describe, never enter the model
PEAK_TARGETS = ("peak_mem_bytes",)


@dataclasses.dataclass
class NetworkPrediction:
    kernels: pd.DataFrame  # workloads + hardware + one column per prediction
    total: dict[str, float]  # the network's figures (module docstring)
    unmapped: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    capture: str = ""  # torch.export / make_fx / mlir
    execution: str | None = None  # the execution mode of the total (None: plain sums)


def _load(model):
    if isinstance(model, str):
        from mlflow.exceptions import MlflowException

        from models.api import load_pyfunc

        try:
            return load_pyfunc(model)
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


def takes_networks(model) -> bool:
    """A whole-network model: its meta's unit is ``network`` (older models: a signature with ``mlir``, no ``op``)."""
    meta = getattr(model.unwrap_python_model(), "meta", None) or {}
    if "unit" in meta:
        return meta["unit"] == "network"
    names = model_input_columns(model) or []
    return "mlir" in names and "op" not in names


def check_signature(kernels: pd.DataFrame, model, where: str = "model") -> None:
    """A shape column the kernels use but the model's signature lacks would be dropped by MLflow, and e.g. a
    depthwise conv costed as a dense one: refuse it in one line instead."""
    names = model_input_columns(model)
    if names is None:
        return
    if "op" not in names:
        raise FeatureError(
            f"{where} is a whole-network model (its input is MLIR text, not kernels): give it the "
            "module's MLIR, or use a per-kernel model"
        )
    used = [c for c in SHAPE_PARAMS if c in kernels.columns and kernels[c].notna().any() and c not in names]
    if used:
        raise FeatureError(
            f"{where} was logged without the shape column(s) {', '.join(used)} that these kernels use "
            "(it predates them): re-register it with this version"
        )


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


def _registry(loaded):
    """The project's hardware registry plus the specs a served model carries (e.g. the CPU it was measured on)."""
    from data.hardware import HardwareRegistry

    registry = HardwareRegistry.from_dir()
    unwrap = getattr(loaded, "unwrap_python_model", None)
    own = getattr(unwrap(), "registry", None) if callable(unwrap) else getattr(loaded, "registry", None)
    for spec in own or ():
        if spec.id not in registry:
            registry.add(spec)
    return registry


def compose_total(
    per_kernel: pd.DataFrame,
    hardware: str,
    execution: str,
    registry=None,
    table: Mapping | None = None,
    free_ops: int = 0,
) -> tuple[dict, pd.DataFrame]:
    """The network's figures from its kernels' predictions under ``execution`` (``models.compose``; ``free_ops``:
    the kernel-free ATen calls of the forward pass): the plain rules (:func:`total`) for the other columns, the
    composition for runtime, power and energy. Returns the total and the per-kernel frame with the composition's
    columns."""
    from data.hardware import HardwareRegistry
    from models.compose import compose, load_execution, static_power

    if "runtime_ms" not in per_kernel.columns:
        raise FeatureError(f"execution {execution!r} composes runtimes: the model predicts no runtime_ms")
    registry = registry or HardwareRegistry.from_dir()
    try:
        spec = registry.get(hardware)
    except KeyError as exc:
        raise FeatureError(str(exc)) from None
    table = table or load_execution()
    if spec.kind not in table:
        raise FeatureError(
            f"hardware {spec.id!r} is a {spec.kind}: no execution constants for it "
            f"(conf/execution.yaml has {', '.join(table)})"
        )
    power = "power_w" in per_kernel.columns and pd.to_numeric(per_kernel["power_w"], errors="coerce").notna().all()
    ps, src = static_power(spec, registry) if power else (None, "")
    try:
        comp = compose(
            per_kernel.drop(columns=[] if power else [c for c in per_kernel.columns if c.startswith("power_w")]),
            execution,
            table[spec.kind],
            ps,
            src,
            free_ops,
        )
    except ValueError as exc:
        raise FeatureError(str(exc)) from None
    plain = total(
        per_kernel[
            [
                c
                for c in per_kernel.columns
                if c in _PREDICTED or c.removesuffix("_lo").removesuffix("_hi") in _PREDICTED
            ]
        ]
    )
    out = {k: v for k, v in plain.items() if not k.startswith(("runtime_ms", "power_w", "energy_j"))}
    out.update(comp.total, sum_runtime_ms=plain["runtime_ms"])
    return out, comp.kernels


_PREDICTED = ("runtime_ms", "power_w", "energy_j", "peak_mem_bytes")


def network_total(
    per_kernel: pd.DataFrame, targets: list[str], hardware: str, execution: str, registry=None
) -> tuple[dict, pd.DataFrame]:
    """The network's figures from the predicted ``targets`` columns of its kernels: composed under ``execution``
    when the model predicts a runtime (:func:`compose_total`), else by the plain rules (:func:`total`; e.g. peak
    memory alone). Returns the total and the per-kernel frame (with the composition's columns when composed)."""
    if "runtime_ms" in targets:
        return compose_total(per_kernel, hardware, execution, registry)
    return total(per_kernel[targets]), per_kernel


def with_total(per_kernel: pd.DataFrame, row: Mapping, **label) -> pd.DataFrame:
    """The per-kernel table with the network's total as its last row, named by ``label`` (e.g. ``node="total"``)."""
    return pd.concat([per_kernel, pd.DataFrame([{**label, **row}])], ignore_index=True)


def predict_rows(model, workloads: pd.DataFrame) -> pd.DataFrame:
    """``model.predict(workloads)`` (the lean loader's model or MLflow's pyfunc): bad input is one FeatureError line,
    the featurizer's own (raised inside an MLflow pyfunc with ``models.serving.INPUT_ERROR_PREFIX``) or the reason of
    MLflow's schema check. Imports no MLflow."""
    from models.api import is_mlflow_error
    from models.serving import INPUT_ERROR_PREFIX

    try:
        return model.predict(workloads)
    except FeatureError:
        raise
    except Exception as exc:
        if not is_mlflow_error(exc):
            raise
        if exc.message.startswith(INPUT_ERROR_PREFIX):
            raise FeatureError(exc.message.removeprefix(INPUT_ERROR_PREFIX)) from None
        raise FeatureError(f"bad input: {_schema_reason(str(exc))}") from None


def _schema_reason(message: str) -> str:
    """MLflow's schema errors quote the whole input frame first; keep the reason after ``Error:``."""
    reason = message.rsplit("Error: ", 1)[-1] if "Error: " in message else message
    return " ".join(reason.split())[:300]


def mlir_kernels(
    text: str, where: str = "mlir", dims: Mapping[str, object] | None = None, strict: bool = False, warn=None
) -> pd.DataFrame:
    """The kernels recognised in an MLIR module (``features.mlir.workloads_from_mlir``: ``mlir_op``, ``node``,
    ``op``, ``dtype`` + shape columns; ``dims`` binds its dynamic sizes). The ops with no workload mapping are said in
    one line through ``warn`` (default: a Python warning; ``strict``: a FeatureError instead). No kernel recognised is
    a FeatureError."""
    import warnings

    from features.mlir import workloads_from_mlir
    from features.mlir.workloads import unmapped_line

    with warnings.catch_warnings():
        if warn is not None:
            warnings.simplefilter("ignore")
        df = workloads_from_mlir(text, where=where, dims=dims, strict=strict)
    line = unmapped_line(df.attrs.get("unmapped", {}))
    if line and warn is not None:
        warn(f"{where}: {line}")
    if df.empty:
        raise FeatureError(f"{where}: no kernel recognised (what maps: features/mlir/workloads.py)")
    return df


def predict_input(
    model,
    source,
    hardware: str | None = None,
    where: str = "input",
    dim_specs: list[str] | None = None,
    strict: bool = False,
    execution: str = "eager",
    name: str = "the model",
    warn=None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What ``costmodel predict`` answers for a loaded ``model`` and its input ``source``: a workload table (a
    DataFrame; a whole-network model's output leaves out its ``mlir`` column), or an MLIR module's text (a str) on
    ``hardware``: one row for a whole-network model (:func:`takes_networks`; output ``input``, ``hardware`` + the
    prediction), else the kernels recognised in it (:func:`mlir_kernels`; ``dim_specs``: ``--dim`` strings,
    ``features.mlir.dynamic.parse_dim_specs``; ``warn`` says the unmapped ops) plus their total composed under
    ``execution`` (:func:`network_total`). Returns ``(table, predictions)``; bad input is one FeatureError line.
    ``name``: the model's name in error lines."""
    network, kernels = takes_networks(model), False
    if not isinstance(source, str):  # a workload table
        workloads = source
    elif network:  # a whole-network model: the module is one row
        workloads = pd.DataFrame([{"input": where, "mlir": source, "hardware": hardware}])
    else:  # a kernel model: the kernels recognised in the module, and their total
        from features.mlir.dynamic import parse_dim_specs

        workloads = mlir_kernels(source, where, parse_dim_specs(dim_specs), strict, warn).assign(hardware=hardware)
        workloads = workloads.astype(
            {c: float for c in workloads if str(workloads[c].dtype) == "Int64" and c != "node"}
        )
        check_signature(workloads, model, name)
        kernels = True
    preds = predict_rows(model, workloads.drop(columns=["mlir_op", "node", "input"], errors="ignore"))
    out = workloads.reset_index(drop=True).join(preds.reset_index(drop=True), rsuffix="_predicted")
    if network:  # the module text is the input, not an output column
        out = out.drop(columns=["mlir"])
    elif kernels:  # one row per recognised kernel plus their total
        row, out = network_total(out, list(preds.columns), hardware, execution, _registry(model))
        out = with_total(out, row, mlir_op="total")
    return out, preds


def predict_kernels(
    kernels: pd.DataFrame, model, hardware: str, execution: str | None = None, where: str | None = None
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per-kernel predictions of a workload frame on ``hardware`` and the network's total: composed under
    ``execution`` (:func:`compose_total`), or by the plain rules (:func:`total`) when it is None. ``where``: the
    model's name in error lines (default its URI)."""
    if kernels.empty:
        raise FeatureError("no kernel to cost")
    free_ops = int(kernels.attrs.get("free_ops", 0) or 0)
    loaded = _load(model)
    check_signature(kernels, loaded, where or (model if isinstance(model, str) else "the model"))
    frame = kernels.drop(columns=[c for c in DESCRIBE if c in kernels.columns]).assign(hardware=hardware)
    frame = frame.astype({c: float for c in SHAPE_PARAMS if c in frame.columns})
    preds = pd.DataFrame(predict_rows(loaded, frame)).reset_index(drop=True)
    preds = preds.drop(columns=[c for c in preds.columns if c.startswith("network_") and preds[c].isna().all()])
    per_kernel = kernels.reset_index(drop=True).assign(hardware=hardware).join(preds)
    if execution is None:
        return per_kernel, total(preds)
    tot, per_kernel = compose_total(per_kernel, hardware, execution, _registry(loaded), free_ops=free_ops)
    return per_kernel, tot


def predict_module(
    module,
    example_inputs,
    model,
    hardware: str,
    dtype: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    strict: bool = False,
    execution: str | None = "eager",
) -> NetworkPrediction:
    """Cost one forward pass of a ``torch.nn.Module`` (``features.torch_capture.workloads_from_module``) run in
    ``execution`` mode (module docstring)."""
    from features.torch_capture import workloads_from_module

    kernels, unmapped = workloads_from_module(module, example_inputs, dtype=dtype, strict=strict, kwargs=kwargs)
    per_kernel, tot = predict_kernels(kernels, model, hardware, execution)
    return NetworkPrediction(per_kernel, tot, unmapped, kernels.attrs.get("capture", ""), execution)


def predict_mlir(
    text: str,
    model,
    hardware: str,
    dims: Mapping[str, object] | None = None,
    where: str = "mlir",
    strict: bool = False,
    execution: str | None = "eager",
) -> NetworkPrediction:
    """Cost an MLIR module's kernels (``features.mlir.workloads_from_mlir``; ``dims`` binds dynamic sizes) run in
    ``execution`` mode."""
    kernels = mlir_kernels(text, where, dims=dims, strict=strict)
    per_kernel, tot = predict_kernels(kernels, model, hardware, execution)
    return NetworkPrediction(per_kernel, tot, sorted(kernels.attrs.get("unmapped", {}).items()), "mlir", execution)
