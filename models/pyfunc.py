"""The one MLflow pyfunc every registered cost model is served as, and its one artifact writer.

Self-contained: the logged model bundles the fitted :class:`~models.base.CostModel`, the hardware registry it was
trained with (the spec sheets, plus e.g. the measured local CPU), its meta (below) *and the code* of the project
packages it needs (``data``, ``features``, ``models``, as MLflow ``code_paths``), so a caller needs only the model URI
and the pinned third-party packages. (MLflow puts the model's ``code/`` folder first on ``sys.path``, ahead of any
``models`` / ``data`` / ``features`` package of the caller's own; in a process that has already imported these
packages, e.g. the CLI or the main job, the imported copies are used.)

    >>> m = mlflow.pyfunc.load_model("models:/costmodel-runtime@champion")
    >>> m.predict(pd.DataFrame([{"op": "matmul", "m": 1024, "n": 1024, "k": 1024,
    ...                          "dtype": "float16", "hardware": "H100-SXM"}]))

:class:`CostModelPyfunc` is parameterised by the meta (:func:`make_meta`) rather than subclassed:

* ``encoder``: the encoder's config (``conf/encoder/<name>.yaml``, ``features.encoders.build_encoder``). A *kernel*
  encoder takes one workload per row (``op``, ``hardware``, optional ``dtype``, the op's shape columns), or a row of
  ``hardware`` + ``mlir`` text lowered to the kernels recognised in it (:func:`to_workloads`), whose costs combine
  into one row per the target's rule. A *network* encoder takes one whole network per row (``mlir`` + ``hardware``
  + optional ``dtype``), predicted whole; its hardware must be among ``trained_hardware``.
* ``target``: the target's facts (``conf/target/<name>.yaml``): the output ``columns`` (e.g. ``runtime_ms``; the
  power model: runtime_ms, power_w, energy_j), how kernels combine into a module or network per column (``sum``,
  ``max``, ``time_weighted`` = the runtime-weighted mean, i.e. total energy / total runtime for power), and
  ``network_totals``: rows sharing a ``network`` value are one network's layers, whose totals repeat on its rows
  as ``network_<column>`` (NaN without a ``network``).
* ``intervals``: per column, the split-conformal half-width (``log_halfwidth``, in the column's ``transform`` space)
  and the per-hardware ones (``by_hardware``; rows of other hardware use the global one), at ``level``.

Output: per column the point prediction and its interval ``<column>_lo`` / ``<column>_hi`` (interval ends combine
like the point: summed ends are conservative, they assume the kernels' errors move together). A model with a domain
of validity (``predict_domain``, e.g. ``models.physics``; meta ``domain``) serves its own interval, widened with the
distance outside its training data, takes an optional ``harness`` column (the timing harness a runtime is asked
for: ``back_to_back``, the default, ``per_call``, ``library_loop`` or ``cuda_graph``; ``features.physics.HARNESSES``)
and an optional
``conv_fp32_math`` column (``ieee``, the default, or ``tf32``: float32 convs under PyTorch's default cuDNN math;
``features.physics.CONV_MATHS``), optional ``transpose_a`` / ``transpose_b`` columns (0 or 1: a GEMM's operand
layout, ``features.physics.layout_of``) and adds ``in_domain``
(bool), ``domain_distance`` (0 inside) and
``domain_reason`` (the largest contributor, e.g. ``hw_log2_peak_flops +1.78``; ``models.domain``); an MLIR row is
inside only if every kernel is.

A runtime kernel model also answers LLM requests: rows with an ``llm_config`` column (a Hugging Face config.json as
JSON text, ``hardware``, ``tp``, ``batch``, ``isl``, ``osl``, optional ``ep``, ``dtype``, ``kv_dtype``) get one row
of serving figures each (``models.llm_api.llm_rows``: TTFT, TPOT, memory, throughput; ``docs/llm.md``), its kernels
costed by this model.

Bad input (unknown hardware, unknown op, a missing or invalid shape, MLIR that is not text) raises an
``MlflowException`` with error code ``INVALID_PARAMETER_VALUE`` whose message is the encoder's one line naming the
row: a scoring server answers those with HTTP 400 (``costmodel serve`` with that line as the whole message), the CLI
prints it, the Python API raises it as a ``ValueError``.

A kernel model's signature declares the outputs only. The inputs are checked by the encoder, the one validation
boundary of every entry (CLI, Python, REST, MLIR rows): MLflow's per-column input check would refuse an int64 shape
column for a
``double`` column (or a float64 one, NaN where an op lacks the parameter, for ``long``), check ``Any`` columns cell by
cell (most of the time of a large batch), answer an empty hardware column with its own message ("Can not safely
convert float64 to <U0") and drop undeclared columns silently. Which columns a row takes is the module docstring's
and the logged input example's.
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

from data.hardware import HardwareRegistry
from data.workloads import SHAPE_PARAMS
from features.inputs import mlir_text
from features.tabular import FeatureError
from models.base import CostModel, load_model
from models.conformal import bounded_interval, halfwidths

ROOT = Path(__file__).resolve().parent.parent
CODE_PACKAGES = ("data", "features", "models")  # what the pyfunc imports, bundled with every logged model
# conf/ files the bundled code reads: features.physics.LAWS_PATH; an LLM request's models/llm.py, models/compose.py
CODE_CONF = ("physics.yaml", "llm.yaml", "execution.yaml")
INPUT_ERROR_PREFIX = "invalid workload: "
MESSAGE_CHARS = 600  # an error line's length limit (a message may list the known ops or hardware ids)
COMBINE = ("sum", "max", "time_weighted")
# a model with a domain of validity (``predict_domain``, meta ``domain``) adds these outputs (models/domain.py)
DOMAIN_COLUMNS = {"in_domain": "boolean", "domain_distance": "double", "domain_reason": "string"}


def output_columns(target: dict) -> list[str]:
    """``<c>, <c>_lo, <c>_hi`` per column, then ``network_<c>`` per column when the target has network totals."""
    cols = [c for col in target["columns"] for c in (col, f"{col}_lo", f"{col}_hi")]
    return cols + ([f"network_{c}" for c in target["columns"]] if target.get("network_totals") else [])


def signature(meta: dict) -> ModelSignature:
    """Outputs per the target (:func:`output_columns`). Inputs: a whole-network model's three string columns (cheap
    to check, and they tell a network model from a kernel one); a kernel model declares none (the encoder checks
    them: see the module docstring)."""
    inputs = None
    if meta["unit"] == "network":
        inputs = Schema(
            [ColSpec("string", "mlir"), ColSpec("string", "hardware"), ColSpec("string", "dtype", required=False)]
        )
    outputs = Schema(
        [ColSpec("double", c) for c in output_columns(meta["target"])]
        + ([ColSpec(t, c) for c, t in DOMAIN_COLUMNS.items()] if meta.get("domain") else [])
    )
    return ModelSignature(inputs=inputs, outputs=outputs)


def to_workloads(model_input) -> tuple[pd.DataFrame, np.ndarray]:
    """Turn a model input into a workload-description frame and, per workload, the input row it came from.

    A row with ``op`` (+ shapes) is one workload. A row with ``mlir`` text is lowered to the kernels
    recognised in the module (``features.mlir.workloads_from_mlir``: linalg matmul, batch_matmul,
    conv_2d_nchw_fchw, elementwise generics), each on the row's hardware.
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
        if isinstance(text, (bytes, bytearray)) or isinstance(text, str) and text.strip():
            kernels = workloads_from_mlir(mlir_text(text, where=f"row {i}"), where=f"row {i}")
            if kernels.empty:
                raise FeatureError(
                    f"row {i}: no kernel recognised in the MLIR (matmul, batch_matmul, "
                    "conv_2d_nchw_fchw, elementwise generic)"
                )
            kernels = kernels.drop(columns=["mlir_op", "node"]).assign(hardware=row["hardware"])
            frames.append(kernels.astype({c: float for c in SHAPE_PARAMS}).assign(_row=i))
        elif isinstance(row.get("op"), str):
            frames.append(row.drop(labels=["mlir"]).to_frame().T.assign(_row=i))
        else:
            raise FeatureError(f"row {i}: give op + shape columns or mlir text")
    out = pd.concat(frames, ignore_index=True)
    return out.drop(columns="_row"), out["_row"].to_numpy(int)


def input_error(message: str) -> MlflowException:
    """The exception bad input raises inside ``predict``: HTTP 400 in MLflow's scoring server. One line, at most
    ``MESSAGE_CHARS`` characters (the encoder's messages already echo at most ~80 characters of a cell)."""
    line = " ".join(str(message).split())
    if len(line) > MESSAGE_CHARS:
        line = line[:MESSAGE_CHARS] + "..."
    return MlflowException(INPUT_ERROR_PREFIX + line, error_code=INVALID_PARAMETER_VALUE)


def combine(out: pd.DataFrame, groups, rules: dict[str, str]) -> pd.DataFrame:
    """One row per group of ``out`` (points and interval ends) by each column's rule: ``sum``, ``max`` or
    ``time_weighted`` (the mean weighted by the rows' ``runtime_ms``; power = total energy / total runtime)."""
    groups = np.asarray(groups)
    parts = {}
    for col, rule in rules.items():
        cols = [col, f"{col}_lo", f"{col}_hi"]
        if rule == "time_weighted":
            weight = out["runtime_ms"].to_numpy(float)
            summed = out[cols].mul(weight, axis=0).groupby(groups, sort=True).sum()
            parts[col] = summed.div(pd.Series(weight).groupby(groups, sort=True).sum().to_numpy(), axis=0)
        elif rule in ("sum", "max"):
            parts[col] = out[cols].groupby(groups, sort=True).agg(rule)
        else:
            raise ValueError(f"unknown combine rule {rule!r} for {col} (known: {', '.join(COMBINE)})")
    return pd.concat(parts.values(), axis=1).reset_index(drop=True)


class CostModelPyfunc(mlflow.pyfunc.PythonModel):
    """Serves any :class:`~models.base.CostModel` with the encoder, target facts and intervals of its meta."""

    def load_context(self, context):
        from features.encoders import build_encoder

        self.registry = HardwareRegistry.from_json(Path(context.artifacts["hardware"]).read_text())
        self.meta = upgrade_meta(json.loads(Path(context.artifacts["meta"]).read_text()))
        self.encoder = build_encoder(self.meta["encoder"], self.registry)
        path = Path(context.artifacts["model"])
        if (path / "model.json").exists():
            self.model = load_model(path)
        else:  # a power surrogate saved before it was a CostModel
            from models.power import PowerSurrogate

            self.model = PowerSurrogate.load_legacy(path)

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        target, meta = self.meta["target"], self.meta
        df = pd.DataFrame(model_input).reset_index(drop=True)
        if "llm_config" in df.columns and meta["unit"] == "kernel" and "runtime_ms" in target["columns"]:
            return self._predict_llm(df)
        network = df.pop("network") if "network" in df.columns else None
        try:
            if meta["unit"] == "network":
                from features.encoders import network_rows

                records, hardware = network_rows(df, self.registry, meta.get("trained_hardware"))
                X, rows = self.encoder.transform(pd.DataFrame(records)), np.arange(len(records))
            else:
                workloads, rows = to_workloads(df)
                X = self.encoder.transform(workloads)
                hardware = self._hardware_ids(workloads["hardware"])  # transform resolved each already
        except FeatureError as exc:
            raise input_error(str(exc)) from None
        domain = self.model.predict_domain(X) if meta.get("domain") else None  # interval widened outside
        pred = np.asarray(self.model.predict(X) if domain is None else domain["runtime_ms"], dtype=np.float64).reshape(
            len(rows), -1
        )  # the signature's double
        out = pd.DataFrame(index=range(len(rows)))
        codes, ids = pd.factorize(np.asarray(hardware, dtype=object))
        for j, col in enumerate(target["columns"]):
            spec = meta["intervals"][col]
            if domain is not None:
                lo, hi = domain["lo_ms"].to_numpy(float), domain["hi_ms"].to_numpy(float)
            else:
                q = halfwidths(ids, spec["log_halfwidth"], spec.get("by_hardware", {}))[codes]  # per distinct hardware
                lo, hi = bounded_interval(
                    pred[:, j], q, spec.get("transform", "log"), spec.get("lower"), spec.get("upper")
                )
            out[col], out[f"{col}_lo"], out[f"{col}_hi"] = pred[:, j], lo, hi
        if len(set(rows)) < len(rows):  # MLIR rows: their kernels combine into one row each
            out = combine(out, rows, {c: target["combine"][c] for c in target["columns"]})
        if domain is not None:  # a module is inside only if every kernel is; its distance is its farthest kernel's
            out = out.join(domain_of_rows(domain, rows))
        if target.get("network_totals"):
            totals = {c: np.full(len(out), np.nan) for c in target["columns"]}
            if network is not None:
                named = network.notna().to_numpy()
                if named.any():
                    by = combine(out[named], network[named].to_numpy(), {c: target["combine"][c] for c in totals})
                    keys = np.unique(network[named].to_numpy())  # combine's groups, sorted
                    where = np.searchsorted(keys, network[named].to_numpy())
                    for c in totals:
                        totals[c][named] = by[c].to_numpy()[where]
            for c, v in totals.items():
                out[f"network_{c}"] = v
        return out[output_columns(target) + (list(DOMAIN_COLUMNS) if domain is not None else [])]

    def _predict_llm(self, df: pd.DataFrame) -> pd.DataFrame:
        """LLM requests (a row per request with ``llm_config``): ``models.llm_api.llm_rows`` over this model's own
        kernel predictions; a bad request is one line (HTTP 400)."""
        from models.llm_api import llm_rows

        def kernels(frame: pd.DataFrame) -> pd.DataFrame:
            try:
                return self.predict(None, frame)
            except MlflowException as exc:
                raise ValueError(exc.message.removeprefix(INPUT_ERROR_PREFIX)) from None

        try:
            return llm_rows(df, kernels, self.registry)
        except ValueError as exc:
            raise input_error(str(exc)) from None

    def _hardware_ids(self, names: pd.Series) -> np.ndarray:
        """The registry id of each row's hardware name, resolved once per distinct name."""
        codes, uniques = pd.factorize(names.astype(str))
        return np.array([self.registry.resolve(u) for u in uniques], dtype=object)[codes]


def domain_of_rows(domain: pd.DataFrame, rows) -> pd.DataFrame:
    """``in_domain``, ``domain_distance``, ``domain_reason`` per input row from its kernels' (``rows``: the input row
    of each kernel): inside only if every kernel is, the farthest kernel's distance and reason."""
    frame = domain[list(DOMAIN_COLUMNS)].assign(_row=np.asarray(rows)).reset_index(drop=True)
    far = frame.sort_values("domain_distance", ascending=False, kind="stable").groupby("_row", sort=True).head(1)
    out = far.sort_values("_row").set_index("_row")
    out["in_domain"] = frame.groupby("_row", sort=True)["in_domain"].all()
    return out.reset_index(drop=True).astype({"in_domain": bool, "domain_distance": float, "domain_reason": str})


NetworkPyfunc = PowerPyfunc = CostModelPyfunc  # the class names of models logged before the one serving class


def upgrade_meta(meta: dict) -> dict:
    """The meta of a model logged before the one serving class, in the current layout (the same numbers), so a
    process that imported this code (the CLI, the champion rule re-scoring an old champion) still serves it. A fresh
    process loads such a model with the code bundled in it."""
    if "unit" in meta:
        return meta
    if "targets" in meta:  # the power surrogate: runtime and power predicted, energy derived
        cols = ["runtime_ms", "power_w", "energy_j"]
        return {
            "model": meta.get("model"),
            "unit": "kernel",
            "level": meta["level"],
            "intervals": meta["intervals"],
            "encoder": {"_target_": "features.tabular.PowerFeaturizer"},
            "target": {
                "name": "power",
                "columns": cols,
                "network_totals": True,
                "combine": {"runtime_ms": "sum", "power_w": "time_weighted", "energy_j": "sum"},
            },
        }
    target, encoding = meta["target"], meta.get("encoder")
    encoder = {
        "graph": {"_target_": "features.encoders.GraphEncoder", **(meta.get("graph") or {})},
        "tokens": {"_target_": "features.encoders.TokenEncoder"},
    }.get(encoding, {"_target_": "features.tabular.TabularFeaturizer"})
    return {
        "model": meta.get("model"),
        "unit": "network" if encoding else "kernel",
        "encoder": encoder,
        "level": meta["interval"]["level"],
        "intervals": {target: meta["interval"]},
        "target": {
            "name": target,
            "columns": [target],
            "combine": {target: "max" if target == "peak_mem_bytes" else "sum"},
        },
        **({"trained_hardware": meta["trained_hardware"]} if meta.get("trained_hardware") else {}),
    }


def make_meta(
    *,
    model: str,
    target: dict,
    encoder: dict,
    unit: str,
    intervals: dict[str, dict],
    level: float,
    trained_hardware: list[str] | None = None,
    **extra,
) -> dict:
    """The served model's meta (see the module docstring); ``intervals[column]`` holds ``log_halfwidth``,
    ``by_hardware`` and the column's ``transform`` / ``lower`` / ``upper``."""
    for col in target["columns"]:
        if col not in intervals:
            raise ValueError(f"no calibrated interval for output column {col!r}")
        if target["combine"].get(col) not in COMBINE:
            raise ValueError(f"target {target['name']}: combine rule of {col} must be one of {', '.join(COMBINE)}")
    return {
        "model": model,
        "target": target,
        "encoder": encoder,
        "unit": unit,
        "level": level,
        "intervals": {c: {"method": "split-conformal per hardware", "level": level, **v} for c, v in intervals.items()},
        **({"trained_hardware": trained_hardware} if trained_hardware is not None else {}),
        **extra,
    }


def write_artifacts(directory: Path, model: CostModel, registry: HardwareRegistry, meta: dict) -> dict[str, str]:
    """Write what the pyfunc needs into ``directory`` (the model, the hardware registry, the meta); returns the
    ``artifacts`` mapping for ``mlflow.pyfunc.log_model``."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save(directory / "model")
    (directory / "hardware.json").write_text(registry.to_json())
    (directory / "meta.json").write_text(json.dumps(meta))
    return {
        "model": str(directory / "model"),
        "hardware": str(directory / "hardware.json"),
        "meta": str(directory / "meta.json"),
    }


def code_paths(directory: Path) -> list[str]:
    """Copies of the project packages the pyfunc imports (no caches) and of the configs they read at predict time
    (``conf/``: :data:`CODE_CONF`), for ``log_model(code_paths=...)``."""
    paths = []
    for pkg in CODE_PACKAGES:
        dest = directory / pkg
        shutil.copytree(ROOT / pkg, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
        paths.append(str(dest))
    conf = directory / "conf"  # the configuration the bundled code reads beside itself (physics laws, LLM serving)
    conf.mkdir(parents=True, exist_ok=True)
    for name in CODE_CONF:
        shutil.copy2(ROOT / "conf" / name, conf / name)
    paths.append(str(conf))
    return paths
