"""The MLflow pyfunc every registered cost model is served as.

Self-contained: the logged model bundles the fitted :class:`CostModel`, the featurizer's hardware
registry (the spec sheets it was trained with, plus the measured local CPU), its meta (target, interval
half-width) *and the code* of the project packages it needs (``data``, ``features``, ``models``, as
MLflow ``code_paths``), so a caller needs only the model URI and the pinned third-party packages, not
this project. (MLflow puts the model's ``code/`` folder first on ``sys.path``; in a process that has
already imported these packages, e.g. the CLI or the main job, the imported copies are used.)

    >>> m = mlflow.pyfunc.load_model("models:/costmodel-runtime@champion")
    >>> m.predict(pd.DataFrame([{"op": "matmul", "m": 1024, "n": 1024, "k": 1024,
    ...                          "dtype": "float16", "hardware": "H100-SXM"}]))

Input: one row per workload with ``op``, ``hardware``, optional ``dtype`` (default float32) and the
op's shape columns; or ``hardware`` + ``mlir`` (module text), costed as the sum of the kernels recognised
in it. :func:`to_workloads` is the one place that turns a model input into workload descriptions.
Whole-network models (GNN, token transformer; ``costmodel-network-runtime``) are served by
:class:`NetworkPyfunc`: one row = one network's ``mlir`` + ``hardware`` (+ ``dtype``), predicted whole.
Output: per target (e.g. ``runtime_ms``) the point prediction and its split-conformal interval
``runtime_ms_lo`` / ``runtime_ms_hi`` at the level stored in the meta (nominal 90%; the half-width
calibrated for the row's hardware, else the global one; see ``models/conformal.py``).

Bad input (unknown hardware, unknown op, a missing or invalid shape) raises an ``MlflowException``
with error code ``INVALID_PARAMETER_VALUE`` whose message is the featurizer's one line naming the row:
MLflow's scoring server answers those with HTTP 400, and the CLI prints the message as is.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.types import ColSpec, Schema
from mlflow.types.schema import AnyType

from data.hardware import HardwareRegistry
from data.workloads import SHAPE_PARAMS
from features.tabular import FeatureError, TabularFeaturizer
from models.base import CostModel, load_model
from models.conformal import halfwidths, interval

ROOT = Path(__file__).resolve().parent.parent
CODE_PACKAGES = ("data", "features", "models")  # what the pyfunc imports, bundled with every logged model
INPUT_ERROR_PREFIX = "invalid workload: "
PEAK_TARGETS = ("peak_mem_bytes",)  # targets a module takes the max of over its kernels (others: the sum)


def output_columns(target: str) -> list[str]:
    return [target, f"{target}_lo", f"{target}_hi"]


def signature(target: str) -> ModelSignature:
    # Shape columns are typed Any: a single-op CSV gives int64, a mixed-op one float64 with NaN (a
    # column an op does not use), and MLflow will not cast int64 -> float64. The featurizer validates them.
    # A row gives either ``op`` + shapes or ``mlir`` (module text); :func:`to_workloads` checks which.
    inputs = Schema([ColSpec("string", "op", required=False), ColSpec("string", "hardware"),
                     ColSpec("string", "dtype", required=False), ColSpec("string", "mlir", required=False),
                     *[ColSpec(AnyType(), p, required=False) for p in SHAPE_PARAMS]])
    return ModelSignature(inputs=inputs, outputs=Schema([ColSpec("double", c) for c in output_columns(target)]))


def to_workloads(model_input) -> tuple[pd.DataFrame, np.ndarray]:
    """Turn a model input into a workload-description frame and, per workload, the input row it came from.

    A row with ``op`` (+ shapes) is one workload. A row with ``mlir`` text is lowered to the kernels
    recognised in the module (``features.mlir.workloads_from_mlir``: linalg matmul, batch_matmul,
    conv_2d_nchw_fchw, elementwise generics), each on the row's hardware; its cost is their sum.
    """
    df = pd.DataFrame(model_input).reset_index(drop=True)
    if "mlir" not in df.columns:
        if "op" not in df.columns:
            raise FeatureError("workloads lack column(s) op (give op + shape columns, or mlir text)")
        return df, np.arange(len(df))
    from features.mlir import workloads_from_mlir

    frames = []
    for i, row in df.iterrows():
        text = row["mlir"]
        if isinstance(text, str) and text.strip():
            kernels = workloads_from_mlir(text, where=f"row {i}")
            if kernels.empty:
                raise FeatureError(f"row {i}: no kernel recognised in the MLIR (matmul, batch_matmul, "
                                   "conv_2d_nchw_fchw, elementwise generic)")
            kernels = kernels.drop(columns=["mlir_op", "node"]).assign(hardware=row["hardware"])
            frames.append(kernels.astype({c: float for c in SHAPE_PARAMS}).assign(_row=i))
        elif isinstance(row.get("op"), str):
            frames.append(row.drop(labels=["mlir"]).to_frame().T.assign(_row=i))
        else:
            raise FeatureError(f"row {i}: give op + shape columns or mlir text")
    out = pd.concat(frames, ignore_index=True)
    return out.drop(columns="_row"), out["_row"].to_numpy(int)


def input_error(message: str) -> MlflowException:
    """The exception bad input raises inside ``predict``: HTTP 400 in MLflow's scoring server."""
    return MlflowException(INPUT_ERROR_PREFIX + message, error_code=INVALID_PARAMETER_VALUE)


class CostModelPyfunc(mlflow.pyfunc.PythonModel):
    """Tabular cost model: one workload description (or MLIR lowered to its kernels) per row.

    Subclasses change only :meth:`encode` (input -> the model's ``X``); loading, the prediction, its
    interval and the error handling are shared.
    """

    def load_context(self, context):
        self.registry = HardwareRegistry.from_json(Path(context.artifacts["hardware"]).read_text())
        self.meta = json.loads(Path(context.artifacts["meta"]).read_text())
        self.featurizer = TabularFeaturizer(self.registry)
        self.model = load_model(context.artifacts["model"])

    def encode(self, model_input) -> tuple[object, list[str], np.ndarray]:
        """``(X, hardware id per X row, input row per X row)``; bad input raises ``FeatureError``."""
        workloads, rows = to_workloads(model_input)
        X = self.featurizer.transform(workloads)
        return X, [self.registry.resolve(h) for h in workloads["hardware"]], rows  # transform resolved every name

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        try:
            X, hardware, rows = self.encode(model_input)
        except FeatureError as exc:
            raise input_error(str(exc)) from None
        target = self.meta["target"]
        pred = np.asarray(self.model.predict(X), dtype=np.float64)  # the signature's double
        spec = self.meta["interval"]
        lo, hi = interval(pred, halfwidths(hardware, spec["log_halfwidth"], spec.get("by_hardware", {})))
        out = pd.DataFrame(dict(zip(output_columns(target), (pred, lo, hi))))
        # one output row per input row: an MLIR module's runtime (and energy) is the sum of its kernels (run one
        # after another; summing the interval ends is conservative, it assumes the kernels' errors move
        # together); its peak memory is the largest kernel's (one kernel's tensors live at a time: a lower
        # bound when a module keeps earlier results alive)
        reduce = "max" if target in PEAK_TARGETS else "sum"
        return out.groupby(rows, sort=True).agg(reduce).reset_index(drop=True)


# --- whole-network models (models/gnn.py, models/transformer.py): one MLIR module per row -----------------------
NETWORK_ENCODERS = {"gnn": "graph", "token_transformer": "tokens"}  # model name -> features.encoders encoding


def network_signature(target: str = "runtime_ms") -> ModelSignature:
    """A row is one whole network: its MLIR module text and the hardware it runs on (+ optional dtype)."""
    inputs = Schema([ColSpec("string", "mlir"), ColSpec("string", "hardware"),
                     ColSpec("string", "dtype", required=False)])
    return ModelSignature(inputs=inputs, outputs=Schema([ColSpec("double", c) for c in output_columns(target)]))


class NetworkPyfunc(CostModelPyfunc):
    """Serves a whole-network model (GNN over the MLIR op graph, or the token transformer).

    Each row's ``mlir`` is encoded whole by the encoding the model was trained on (``meta.encoder``:
    ``graph`` = ``GraphEncoder(registry, **meta.graph).encode(mlir, hardware=, dtype=)``, ``tokens`` =
    ``TokenEncoder().encode(mlir)``) and predicted as one network (not as a sum of kernels). Hardware
    must be in the bundled registry *and* among the hardware the model was trained on
    (``meta.trained_hardware``): these models learned from one machine's networks only (the token
    transformer does not even see the hardware), so any other hardware is refused rather than guessed.
    """

    def encode(self, model_input) -> tuple[object, list[str], np.ndarray]:
        X, hardware = encode_networks(model_input, self.registry, self.meta["encoder"],
                                      self.meta.get("trained_hardware"), self.meta.get("graph"))
        return X, hardware, np.arange(len(X))


def encode_networks(model_input, registry: HardwareRegistry, encoding: str,
                    trained_hardware: list[str] | None = None,
                    graph_options: dict | None = None) -> tuple[list, list[str]]:
    """Rows of ``mlir`` + ``hardware`` (+ ``dtype``) -> (one encoded network per row, resolved hardware ids).

    The one encoding path of whole networks, for training (``pipelines.tracking.register_network_model``)
    and serving (:class:`NetworkPyfunc`). ``encoding``: ``graph`` or ``tokens``. With ``trained_hardware``,
    other hardware is refused. ``graph_options`` are the ``GraphEncoder`` keyword arguments the model was trained
    with (``meta.graph``, e.g. ``{"op_names": false}``). Bad input raises ``FeatureError`` naming the row.
    """
    from data.workloads import DTYPES
    from features.encoders import GraphEncoder, TokenEncoder

    df = pd.DataFrame(model_input).reset_index(drop=True)
    missing = [c for c in ("mlir", "hardware") if c not in df.columns]
    if missing:
        raise FeatureError(f"networks lack column(s) {', '.join(missing)} (give mlir module text + hardware)")
    if df.empty:
        raise FeatureError("no networks given")
    if encoding not in ("graph", "tokens"):
        raise FeatureError(f"unknown network encoding {encoding!r}; known: graph, tokens")
    encoder = GraphEncoder(registry, **(graph_options or {})) if encoding == "graph" else TokenEncoder()
    X, hardware = [], []
    for i, row in enumerate(df.to_dict("records")):
        where = f"row {i}"
        text, dtype = row["mlir"], row.get("dtype")
        dtype = dtype if isinstance(dtype, str) else "float32"
        if not isinstance(text, str) or not text.strip():
            raise FeatureError(f"{where}: empty mlir (give the network's MLIR module text)")
        try:
            hw = registry.resolve(row["hardware"])
        except KeyError as exc:  # UnknownHardwareError: the registry's one line
            raise FeatureError(f"{where}: {exc}") from None
        if trained_hardware and hw not in trained_hardware:
            raise FeatureError(f"{where}: hardware {hw!r} is not among the hardware this network model was "
                               f"trained on ({', '.join(trained_hardware)})")
        if dtype not in DTYPES:
            raise FeatureError(f"{where}: unknown dtype {dtype!r}; known dtypes: {', '.join(DTYPES)}")
        X.append(encoder.encode(text, hardware=hw, dtype=dtype, where=where) if encoding == "graph"
                 else encoder.encode(text, where=where))
        hardware.append(hw)
    return X, hardware


def save_artifacts(model: CostModel, registry: HardwareRegistry, target: str, directory: Path,
                   log_halfwidth: float, level: float, by_hardware: dict[str, float] | None = None,
                   extra_meta: dict | None = None) -> dict[str, str]:
    """Write what the pyfunc needs into ``directory``; returns the ``artifacts`` mapping for log_model.

    ``log_halfwidth`` is the split-conformal ``q`` (``models.conformal.calibrate``) at ``level``,
    ``by_hardware`` the per-hardware ones (``calibrate_by_group``); rows of other hardware use the global one.
    ``extra_meta`` joins the meta (:class:`NetworkPyfunc` reads ``encoder`` and ``trained_hardware`` there).
    """
    directory.mkdir(parents=True, exist_ok=True)
    model.save(directory / "model")
    (directory / "hardware.json").write_text(registry.to_json())
    meta = {"target": target, "model": model.name,
            "interval": {"method": "split-conformal, log space, per hardware", "level": level,
                         "log_halfwidth": log_halfwidth, "by_hardware": by_hardware or {}}, **(extra_meta or {})}
    (directory / "meta.json").write_text(json.dumps(meta))
    return {"model": str(directory / "model"), "hardware": str(directory / "hardware.json"),
            "meta": str(directory / "meta.json")}


def code_paths(directory: Path) -> list[str]:
    """Copies of the project packages the pyfunc imports (no caches), for ``log_model(code_paths=...)``."""
    paths = []
    for pkg in CODE_PACKAGES:
        dest = directory / pkg
        shutil.copytree(ROOT / pkg, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
        paths.append(str(dest))
    return paths


# --- power surrogate (models/power.py): runtime + power predicted, energy derived -------------------------------
POWER_TARGETS = ("runtime_ms", "power_w", "energy_j")
NETWORK_COLUMNS = ("network_runtime_ms", "network_energy_j", "network_power_w")


def power_output_columns() -> list[str]:
    return [c for t in POWER_TARGETS for c in output_columns(t)] + list(NETWORK_COLUMNS)


def power_signature() -> ModelSignature:
    """Like :func:`signature`, plus an optional ``network`` column (rows sharing it are one network's layers)."""
    base = signature("runtime_ms")
    inputs = Schema([*base.inputs.inputs, ColSpec("string", "network", required=False)])
    return ModelSignature(inputs=inputs, outputs=Schema([ColSpec("double", c) for c in power_output_columns()]))


class PowerPyfunc(CostModelPyfunc):
    """Serves a :class:`models.power.PowerSurrogate`: runtime, power and energy per row, with intervals.

    ``energy_j = power_w * runtime_ms / 1000`` of the same prediction (derived). Intervals: split-conformal
    per target (``meta.intervals``; energy's half-width calibrated on the derived energy). A row with
    ``mlir`` text costs the sum of its kernels (power = energy / runtime). Rows that share a ``network``
    value are the layers of one network: each keeps its own figures, and ``network_runtime_ms`` (sum),
    ``network_energy_j`` (sum) and ``network_power_w`` (= energy / runtime, not a sum of powers) repeat the
    network's totals on its rows (NaN without a ``network``). Network interval ends: runtime and energy
    ends summed (conservative); power ends are the runtime-weighted means of the layer power ends.
    """

    def load_context(self, context):
        from features.tabular import PowerFeaturizer
        from models.power import PowerSurrogate

        self.registry = HardwareRegistry.from_json(Path(context.artifacts["hardware"]).read_text())
        self.meta = json.loads(Path(context.artifacts["meta"]).read_text())
        self.featurizer = PowerFeaturizer(self.registry)
        self.model = PowerSurrogate.load(context.artifacts["model"])

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        df = pd.DataFrame(model_input).reset_index(drop=True)
        network = df["network"] if "network" in df.columns else pd.Series([None] * len(df))
        try:
            workloads, rows = to_workloads(df.drop(columns=["network"], errors="ignore"))
            X = self.featurizer.transform(workloads)
        except FeatureError as exc:
            raise input_error(str(exc)) from None
        pred = self.model.predict(X)
        hardware = [self.registry.resolve(h) for h in workloads["hardware"]]
        out = pd.DataFrame(index=range(len(pred)))
        for t in POWER_TARGETS:
            spec = self.meta["intervals"][t]
            lo, hi = interval(pred[t], halfwidths(hardware, spec["log_halfwidth"], spec.get("by_hardware", {})))
            out[t], out[f"{t}_lo"], out[f"{t}_hi"] = pred[t].to_numpy(float), lo, hi
        out = _sum_kernels(out, rows)  # MLIR rows: the sum of their kernels
        for c in NETWORK_COLUMNS:
            out[c] = np.nan
        for _, idx in network.dropna().groupby(network.dropna(), sort=False).groups.items():
            t, e = out.loc[idx, "runtime_ms"].sum(), out.loc[idx, "energy_j"].sum()
            out.loc[idx, "network_runtime_ms"], out.loc[idx, "network_energy_j"] = t, e
            out.loc[idx, "network_power_w"] = e / (t / 1e3)
        return out[power_output_columns()]


def _sum_kernels(out: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """One row per input row: runtime and energy (and interval ends) summed; power = energy / runtime, and its
    ends the runtime-weighted means of the kernels' power ends."""
    if len(rows) == len(set(rows)):
        return out.reset_index(drop=True)
    weighted = out[["power_w_lo", "power_w_hi"]].mul(out["runtime_ms"], axis=0)
    summed = out.drop(columns=["power_w", "power_w_lo", "power_w_hi"]).groupby(rows, sort=True).sum()
    w = weighted.groupby(rows, sort=True).sum()
    summed["power_w"] = summed["energy_j"] / (summed["runtime_ms"] / 1e3)
    summed["power_w_lo"] = w["power_w_lo"] / summed["runtime_ms"]
    summed["power_w_hi"] = w["power_w_hi"] / summed["runtime_ms"]
    return summed.reset_index(drop=True)


def save_power_artifacts(surrogate, registry: HardwareRegistry, directory: Path, intervals: dict[str, dict],
                         level: float) -> dict[str, str]:
    """Write what :class:`PowerPyfunc` needs; ``intervals[target] = {"log_halfwidth", "by_hardware"}``."""
    directory.mkdir(parents=True, exist_ok=True)
    surrogate.save(directory / "model")
    (directory / "hardware.json").write_text(registry.to_json())
    meta = {"targets": ["runtime_ms", "power_w"], "derived": {"energy_j": "power_w * runtime_ms / 1000"},
            "model": surrogate.name, "level": level,
            "intervals": {t: {"method": "split-conformal, log space, per hardware", "level": level, **v}
                          for t, v in intervals.items()}}
    (directory / "meta.json").write_text(json.dumps(meta))
    return {"model": str(directory / "model"), "hardware": str(directory / "hardware.json"),
            "meta": str(directory / "meta.json")}
