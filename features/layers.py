"""Layer encoding of whole networks: each network as the list of its measured layers (``conf/encoder/layers.yaml``).

``LayerEncoder(registry, layers)`` holds the layer table once (the distinct layers ``data.collect.collect_networks``
measured, with ``layer_id`` and ``runtime_ms``): their tabular features (``TabularFeaturizer``) and measured
runtimes. ``transform(networks)`` maps each network row (its ``layer_ids`` JSON list) to a :class:`LayerSet`: the
positions of its layers in that table, in network order (a repeated layer counts each time). Layer-sum models
(``models.layer_sum``) learn from the layers and add them up per network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.tabular import FeatureError, TabularFeaturizer


@dataclass(frozen=True)
class LayerTable:
    features: pd.DataFrame  # one row per distinct layer
    runtime_ms: np.ndarray  # its measured runtime


@dataclass(frozen=True)
class LayerSet:
    positions: np.ndarray  # rows of ``table`` (network order, repeats kept)
    table: LayerTable


class LayerEncoder:
    unit = "network"

    def __init__(self, registry, layers: pd.DataFrame | None = None):
        if layers is None:
            raise FeatureError("the layer encoding needs the measured layer table (layers=, pipelines.networks)")
        layers = layers.reset_index(drop=True)
        self.table = LayerTable(TabularFeaturizer(registry).transform(layers), layers["runtime_ms"].to_numpy(float))
        self.position = {lid: i for i, lid in enumerate(layers["layer_id"])}

    def transform(self, rows: pd.DataFrame) -> list[LayerSet]:
        if "layer_ids" not in rows.columns:
            raise FeatureError("networks lack column layer_ids (the measured layers of each network)")
        out = []
        for i, ids in enumerate(rows["layer_ids"]):
            try:
                out.append(LayerSet(np.array([self.position[x] for x in json.loads(ids)], int), self.table))
            except KeyError as exc:
                raise FeatureError(f"row {i}: layer {exc.args[0]!r} is not in the measured layer table") from None
        return out
