"""A toy encoder (one file + ``conf/encoder/toy.yaml``): the tabular features plus an energy baseline column, the
FLOPs at a fixed energy per FLOP plus the roofline time at the spec's idle power."""

from __future__ import annotations

import pandas as pd

from features.tabular import TabularFeaturizer


class ToyEncoder:
    unit = "kernel"

    def __init__(self, registry, joules_per_gflop: float = 0.3):
        self.tabular, self.joules_per_gflop = TabularFeaturizer(registry), joules_per_gflop

    def transform(self, rows: pd.DataFrame) -> pd.DataFrame:
        X = self.tabular.transform(rows)
        flops = 2 ** X["log2_flops"] - 1
        return X.assign(toy_energy_j=self.joules_per_gflop * flops / 1e9 + X["roofline_ms"] / 1e3 * 6.0)
