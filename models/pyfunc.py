"""The MLflow pyfunc every registered cost model is served as.

It bundles the fitted :class:`CostModel`, the featurizer's hardware registry (the spec sheets it was
trained with, plus the measured local CPU) and its target name, so a caller needs only the model URI:

    >>> m = mlflow.pyfunc.load_model("models:/costmodel-runtime@champion")
    >>> m.predict(pd.DataFrame([{"op": "matmul", "m": 1024, "n": 1024, "k": 1024,
    ...                          "dtype": "float16", "hardware": "H100-SXM"}]))

Input: one row per workload with ``op``, ``hardware``, optional ``dtype`` (default float32) and the
op's shape columns. Output: a frame with one column, the target (e.g. ``runtime_ms``).
Unknown hardware or a malformed row raises ``features.tabular.FeatureError`` naming the row.
"""
from __future__ import annotations

import json
from pathlib import Path

import mlflow.pyfunc
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, Schema
from mlflow.types.schema import AnyType

from data.hardware import HardwareRegistry
from data.workloads import SHAPE_PARAMS
from features.tabular import TabularFeaturizer
from models.base import CostModel, load_model


def signature(target: str) -> ModelSignature:
    # Shape columns are typed Any: a single-op CSV gives int64, a mixed-op one float64 with NaN (a
    # column an op does not use), and MLflow will not cast int64 -> float64. The featurizer validates them.
    inputs = Schema([ColSpec("string", "op"), ColSpec("string", "hardware"),
                     ColSpec("string", "dtype", required=False),
                     *[ColSpec(AnyType(), p, required=False) for p in SHAPE_PARAMS]])
    return ModelSignature(inputs=inputs, outputs=Schema([ColSpec("double", target)]))


class CostModelPyfunc(mlflow.pyfunc.PythonModel):
    def load_context(self, context):
        self.registry = HardwareRegistry.from_json(Path(context.artifacts["hardware"]).read_text())
        self.meta = json.loads(Path(context.artifacts["meta"]).read_text())
        self.featurizer = TabularFeaturizer(self.registry)
        self.model = load_model(context.artifacts["model"])

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        X = self.featurizer.transform(pd.DataFrame(model_input))
        return pd.DataFrame({self.meta["target"]: self.model.predict(X)})


def save_artifacts(model: CostModel, registry: HardwareRegistry, target: str, directory: Path) -> dict[str, str]:
    """Write what the pyfunc needs into ``directory``; returns the ``artifacts`` mapping for log_model."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save(directory / "model")
    (directory / "hardware.json").write_text(registry.to_json())
    (directory / "meta.json").write_text(json.dumps({"target": target, "model": model.name}))
    return {"model": str(directory / "model"), "hardware": str(directory / "hardware.json"),
            "meta": str(directory / "meta.json")}
