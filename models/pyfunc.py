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
of serving figures each (``models.serving.Predictor``, ``models.llm.llm_rows``: TTFT, TPOT, memory, throughput;
``docs/llm.md``), its kernels costed by this model.

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
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.types import ColSpec, Schema

from data.hardware import HardwareRegistry
from features.tabular import FeatureError
from models.base import ArtifactError, CostModel
from models.serving import (  # noqa: F401 - the serving names, importable from here as before
    COMBINE,
    DOMAIN_COLUMNS,
    INPUT_ERROR_PREFIX,
    MESSAGE_CHARS,
    Predictor,
    combine,
    domain_of_rows,
    output_columns,
    to_workloads,
    upgrade_meta,
)

ROOT = Path(__file__).resolve().parent.parent
CODE_PACKAGES = ("data", "features", "models")  # what the pyfunc imports, bundled with every logged model
# conf/ files the bundled code reads: features.physics.LAWS_PATH; an LLM request's models/llm.py, models/compose.py
CODE_CONF = ("physics.yaml", "llm.yaml", "execution.yaml")


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


def input_error(message: str) -> MlflowException:
    """The exception bad input raises inside ``predict``: HTTP 400 in MLflow's scoring server. One line, at most
    ``MESSAGE_CHARS`` characters (the encoder's messages already echo at most ~80 characters of a cell)."""
    line = " ".join(str(message).split())
    if len(line) > MESSAGE_CHARS:
        line = line[:MESSAGE_CHARS] + "..."
    return MlflowException(INPUT_ERROR_PREFIX + line, error_code=INVALID_PARAMETER_VALUE)


class CostModelPyfunc(mlflow.pyfunc.PythonModel):
    """Serves any :class:`~models.base.CostModel` with the encoder, target facts and intervals of its meta: MLflow's
    face of :class:`models.serving.Predictor`, whose ``FeatureError`` it raises as the one-line
    ``MlflowException`` (HTTP 400). ``registry``, ``meta``, ``encoder``, ``model`` and ``with_hardware`` are the
    predictor's."""

    def load_context(self, context):
        a = context.artifacts
        try:
            self.predictor = Predictor.from_artifacts(a["hardware"], a["meta"], a["model"])
        except ArtifactError as exc:  # one line that says what to do, as MLflow's own load errors are
            raise MlflowException(str(exc)) from None

    def __getattr__(self, name):
        if name in ("registry", "meta", "encoder", "model", "with_hardware") and "predictor" in self.__dict__:
            return getattr(self.__dict__["predictor"], name)
        raise AttributeError(name)

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        try:
            return self.predictor.predict(model_input)
        except FeatureError as exc:
            raise input_error(str(exc)) from None


NetworkPyfunc = PowerPyfunc = CostModelPyfunc  # the class names of models logged before the one serving class


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
    """Copies of the project packages the pyfunc imports (no caches), for ``log_model(code_paths=...)``."""
    paths = []
    for pkg in CODE_PACKAGES:
        dest = directory / pkg
        shutil.copytree(ROOT / pkg, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
        paths.append(str(dest))
    conf = directory / "conf"  # the configuration the bundled code reads beside itself (the physics laws' numbers)
    conf.mkdir(parents=True, exist_ok=True)
    for name in CODE_CONF:
        shutil.copy2(ROOT / "conf" / name, conf / name)
    paths.append(str(conf))
    return paths
