"""What the hooks share: a cost model from a URI or an object, and one cached runtime per workload."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd


def load(model, tracking_uri: str | None = None, hardware_specs=None):
    """A loaded cost model: ``model`` itself if it predicts (``models.api.CostModelClient``, a loaded pyfunc, the lean
    loader's model, a ``models.serving.Predictor``), else a model URI loaded by the lean loader (``models.loader``)
    with ``hardware_specs`` added (``models.specs.as_specs``)."""
    if hasattr(model, "predict"):
        if hardware_specs:
            _predictor(model).with_hardware(hardware_specs)
        return model
    from models.loader import load as lean_load

    return lean_load(str(model), tracking_uri, hardware=hardware_specs)


def _predictor(model):
    for get in (lambda m: m.pyfunc.unwrap_python_model(), lambda m: m.unwrap_python_model(), lambda m: m):
        try:
            inner = get(model)
        except AttributeError:
            continue
        if hasattr(inner, "registry"):
            return inner
    raise ValueError(f"{type(model).__name__} has no hardware registry (give a cost model)")


def registry_of(model):
    """The hardware registry the model predicts with."""
    return _predictor(model).registry


class RuntimeCache:
    """``runtime_ms`` of one workload (a mapping of the cost model's input columns) per distinct workload, asked of
    the model once."""

    def __init__(self, model):
        self.model = model
        self.cache: dict[tuple, float] = {}

    def __call__(self, workload: Mapping) -> float:
        key = tuple(sorted((k, str(v)) for k, v in workload.items()))
        if key not in self.cache:
            out = self.model.predict(pd.DataFrame([dict(workload)]))
            self.cache[key] = float(out["runtime_ms"].iloc[0])
        return self.cache[key]

    def many(self, workloads: list[Mapping]) -> list[float]:
        """Several workloads, the new ones in one call."""
        keys = [tuple(sorted((k, str(v)) for k, v in w.items())) for w in workloads]
        todo = {k: w for k, w in zip(keys, workloads) if k not in self.cache}
        if todo:
            out = self.model.predict(pd.DataFrame([dict(w) for w in todo.values()]))
            self.cache.update(zip(todo, out["runtime_ms"].astype(float)))
        return [self.cache[k] for k in keys]
