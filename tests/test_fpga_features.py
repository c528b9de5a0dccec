"""features.fpga: hls4ml Dense-layer estimates by hand and against real wa-hls4ml syntheses."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from data.importers.wa_hls4ml import import_wa_hls4ml
from features.fpga import bram18_blocks, fpga_features, hls4ml_features
from models import public_eval
from tests.conftest import SHARED


def dense(k, n, bits, reuse, strategy="resource") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "k": [k],
            "n": [n],
            "config": [json.dumps({"precision_bits": bits, "reuse_factor": reuse, "strategy": strategy})],
        }
    )


def test_bram18_blocks_by_hand():
    # 512 deep x 256 bits: the 512 x 36 mode, 8 blocks side by side; 1024 deep x 128 bits: 1K x 18, 8 blocks
    assert bram18_blocks([512, 1024, 2048, 100], [256, 128, 9, 0]).tolist() == [8, 8, 1, 0]
    # deeper than the deepest mode: cascaded 16K x 1 blocks
    assert bram18_blocks([40000], [3]).tolist() == [3 * 3]


def test_hls4ml_features_by_hand():
    f = hls4ml_features(
        pd.concat(
            [dense(256, 128, 12, 512), dense(32, 32, 20, 1, "latency"), dense(160, 192, 8, 480)], ignore_index=True
        )
    )
    r, lat, wrap = f.iloc[0], f.iloc[1], f.iloc[2]
    assert r["mults_per_cycle"] == 64 and r["dsp_per_mult"] == 1 and r["dsps_if_mapped"] == 64
    assert r["bram18_if_stored"] == np.ceil(64 * 12 / 36) and r["pipeline_depth"] == 514
    assert r["fully_parallel"] == 0 and r["reuse_case"] == 2 and r["mux_inputs_per_lane"] == 256
    assert lat["fully_parallel"] == 1 and lat["bram18_if_stored"] == 0 and lat["mults_per_cycle"] == 1024
    assert lat["dsp_per_mult"] == 2 and lat["bram18_base"] == 1  # 20-bit products: two DSP48E2 (27 x 18)
    assert wrap["reuse_case"] == 2 and wrap["outputs_per_lane"] == 3 and wrap["gcd_reuse_d_in"] == 1
    # what LUT / FF scale with: weights, outputs per lane (log2, power of two), DSP sharing of the latency strategy
    assert r["weights"] == 256 * 128 and r["log2_outputs_per_lane"] == 1 and r["outputs_per_lane_pow2"] == 1
    assert wrap["log2_outputs_per_lane"] == np.log2(3) and wrap["outputs_per_lane_pow2"] == 0
    assert lat["log2_outputs_per_lane"] == 0 and lat["shared_dsp"] == 0 and r["shared_dsp"] == 0
    assert hls4ml_features(dense(32, 32, 8, 4, "latency"))["shared_dsp"].iloc[0] == 1
    assert list(fpga_features(dense(32, 32, 8, 4)).columns) == list(
        f.columns[: len(fpga_features(dense(1, 1, 1, 1)).columns)]
    )
    assert public_eval.fpga_features is fpga_features  # moved, still importable from the old place
    with pytest.raises(ValueError, match="reuse_factor"):
        hls4ml_features(dense(32, 32, 8, 0))


@pytest.fixture(scope="module")
def synthesised(registry) -> pd.DataFrame:
    rows = import_wa_hls4ml(SHARED, registry=registry)
    return rows[rows["status"] == "ok"].reset_index(drop=True)


def test_estimates_match_real_syntheses(synthesised):
    """The estimates are physics, not fitted: on the real resource-strategy designs with reuse > 1, the BRAM_18K
    packing rule is within 0..+1 block of Vivado's count for most designs, and at >= 8 bits every multiplier is
    one DSP."""
    f = hls4ml_features(synthesised)
    stored = (f["fully_parallel"] == 0).to_numpy()
    diff = synthesised.loc[stored, "bram_18k"].to_numpy() - f.loc[stored, "bram18_if_stored"].to_numpy()
    assert np.mean((diff >= 0) & (diff <= 1)) > 0.85
    wide = stored & (f["precision_bits"] >= 8).to_numpy()
    assert np.array_equal(synthesised.loc[wide, "dsp"].to_numpy(), f.loc[wide, "dsps_if_mapped"].to_numpy())
    narrow = (f["precision_bits"] <= 4).to_numpy()
    assert (synthesised.loc[narrow, "dsp"] == 0).all()  # narrow products never use a DSP: the hurdle's zeros
    assert np.all(np.isfinite(f.to_numpy(float)))
