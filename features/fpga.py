"""FPGA features of an hls4ml Dense layer: what hls4ml and Vivado HLS build from (d_in, d_out, precision, reuse).

Rows are schema rows of ``data.importers.wa_hls4ml`` (op ``dense``, ``k`` = d_in, ``n`` = d_out, ``config`` JSON with
``precision_bits``, ``reuse_factor``, ``strategy``). Two feature sets:

* :func:`fpga_features`: the layer description and log2 products (the evaluation's features so far);
* :func:`hls4ml_features`: the same plus the quantities hls4ml's Dense templates fix (hls4ml ``nnet_dense_latency``
  / ``nnet_dense_resource``; Duarte et al., JINST 2018; Fahim et al., "hls4ml: an open-source codesign workflow",
  2021), each an estimate the learned model corrects rather than rediscovers:

  - multiplications per clock cycle (the block factor) = ceil(d_in x d_out / reuse factor): the multipliers that
    exist in hardware; ``fully_parallel`` = reuse 1 or the latency strategy (every weight in registers);
  - multiplier width: a ``precision x precision`` product, ``product_bits`` = 2 x precision; a DSP48E2 multiplies
    up to 27 x 18 bits, so ``dsp_per_mult`` = ceil(p / 27) x ceil(p / 18) when the product maps to DSPs
    (``dsps_if_mapped`` = multipliers x that) and ``lut_mult_bits`` = multipliers x p^2 when it maps to LUTs
    (Vivado HLS maps narrow products to fabric: here no design below 6 bits uses a DSP);
  - weight storage: d_in x d_out x p bits; with the resource strategy each of the block-factor lanes reads one
    weight per cycle for ``reuse`` cycles, so the weights form a memory ``reuse`` deep and block x p bits wide,
    packed into BRAM_18K blocks of 16K x 1 ... 1K x 18, 512 x 36 bits (the widest mode that is deep enough):
    ``bram18_if_stored`` = ceil(width / mode width) x ceil(depth / mode depth); 0 when fully parallel;
  - accumulator width 2p + ceil(log2 d_in), and the adder-tree depth ceil(log2 d_in);
  - pipeline depth by strategy: resource = reuse + 2 cycles (the pipelined multiply-accumulate loop, initiation
    interval 1, plus the output stage), fully parallel = 1 + the adder-tree depth / 4 (a few adds per 5 ns cycle);
  - what LUT and FF scale with: ``weights`` (d_in x d_out: a fully parallel design multiplies every weight by a
    constant and sums them in adder trees), ``d_out`` and ``d_in`` for a stored-weight design (on the 589 stored
    syntheses here that share outputs per lane, d_out and precision with another d_in, LUT = 32.3 x d_in +
    d_out x g(outputs per lane, d_out, precision) within 0.5 %: an input multiplexer, then ``reuse / d_in``
    accumulators per lane); ``log2_outputs_per_lane`` and whether it is a power of two
    (``outputs_per_lane_pow2``): g jumps between 2, 3 and 4 outputs per lane and above 32 multipliers, Vivado's
    choices; ``shared_dsp``: latency strategy with reuse > 1 and >= 8-bit products, where Vivado shares a few
    DSPs over hundreds of cycles.

The estimates are positive where a model uses them as a base (``base_columns``): ``*_base`` columns are the
estimates floored at 1.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from features.config import config_frame

# BRAM_18K aspect ratios (depth, width) of a Xilinx UltraScale+ 18 Kb block RAM (UG573), widest last
BRAM18_MODES = ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))


def fpga_features(rows: pd.DataFrame) -> pd.DataFrame:
    """Layer (d_in = k, d_out = n), precision bits, reuse factor, strategy and derived products (log2)."""
    cfg = config_frame(rows)
    k, n = rows["k"].to_numpy(float), rows["n"].to_numpy(float)
    bits, rf = cfg["cfg_precision_bits"].to_numpy(float), cfg["cfg_reuse_factor"].to_numpy(float)
    strategy = np.array([json.loads(c)["strategy"] == "resource" for c in rows["config"]], float)
    return pd.DataFrame(
        {
            "d_in": k,
            "d_out": n,
            "precision_bits": bits,
            "reuse_factor": rf,
            "strategy_resource": strategy,
            "log2_weights": np.log2(k * n),
            "log2_weight_bits": np.log2(k * n * bits),
            "log2_mults_per_cycle": np.log2(k * n / rf),
            "log2_reuse_factor": np.log2(rf),
        }
    )


def bram18_blocks(depth, width_bits) -> np.ndarray:
    """BRAM_18K blocks for a memory ``depth`` words deep and ``width_bits`` wide: the widest mode at least as deep
    (or the deepest mode, cascaded), times the blocks side by side for the width."""
    depth, width = np.asarray(depth, float), np.asarray(width_bits, float)
    out = np.full(depth.shape, np.nan)
    for d, w in reversed(BRAM18_MODES):  # widest mode first
        fits = np.isnan(out) & (depth <= d)
        out[fits] = np.ceil(width[fits] / w)
    deep = np.isnan(out)
    d0, w0 = BRAM18_MODES[0]
    out[deep] = np.ceil(width[deep] / w0) * np.ceil(depth[deep] / d0)
    return np.where(width > 0, out, 0.0)


def hls4ml_features(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`fpga_features` plus the hls4ml Dense-layer estimates of the module docstring."""
    cfg = config_frame(rows)
    sizes = np.concatenate([cfg["cfg_reuse_factor"], cfg["cfg_precision_bits"], rows["k"], rows["n"]]).astype(float)
    if np.any(sizes < 1):
        raise ValueError("reuse_factor, precision_bits, d_in (k) and d_out (n) must be >= 1")
    base = fpga_features(rows)
    k, n = base["d_in"].to_numpy(float), base["d_out"].to_numpy(float)
    p, rf = base["precision_bits"].to_numpy(float), base["reuse_factor"].to_numpy(float)
    resource = base["strategy_resource"].to_numpy(float)
    mults = np.ceil(k * n / rf)
    parallel = ((rf <= 1) | (resource == 0)).astype(float)
    dsp_per_mult = np.ceil(p / 27) * np.ceil(p / 18)
    bram = np.where(parallel > 0, 0.0, bram18_blocks(rf, mults * p))
    tree = np.ceil(np.log2(np.maximum(k, 2)))
    depth = np.where(parallel > 0, 1 + tree / 4, rf + 2)
    out = base.assign(
        mults_per_cycle=mults,
        log2_mults=np.log2(mults),
        fully_parallel=parallel,
        product_bits=2 * p,
        dsp_per_mult=dsp_per_mult,
        dsps_if_mapped=mults * dsp_per_mult,
        log2_lut_mult_bits=np.log2(mults * p * p),
        weight_bits=k * n * p,
        bram18_if_stored=bram,
        bram18_capacity=np.ceil(k * n * p / 18432),
        accumulator_bits=2 * p + tree,
        adder_tree_depth=tree,
        pipeline_depth=depth,
        log2_outputs_x_accumulator=np.log2(n * (2 * p + tree)),
        log2_inputs_x_bits=np.log2(k * p),
    )
    # the resource strategy's index pattern (hls4ml nnet_dense_resource): lane m reads input (c + m * reuse) mod d_in
    # at cycle c, so it multiplexes min(reuse, d_in) inputs; reuse > d_in wraps around the inputs (with or without a
    # remainder) and then also switches accumulators
    mux_inputs = np.where(parallel > 0, 1.0, np.minimum(rf, k))
    case = np.where(parallel > 0, 0.0, np.where(rf <= k, 1.0, np.where(rf % k == 0, 2.0, 3.0)))
    out = out.assign(
        mux_inputs_per_lane=mux_inputs,
        log2_mux_bits=np.log2(mults * p * mux_inputs),
        reuse_case=case,
        outputs_per_lane=np.where(parallel > 0, 1.0, np.maximum(rf / k, 1.0)),
        reuse_pow2=(np.log2(rf) % 1 == 0).astype(float),
        d_in_pow2=(np.log2(k) % 1 == 0).astype(float),
        d_out_pow2=(np.log2(n) % 1 == 0).astype(float),
        gcd_reuse_d_in=np.gcd(rf.astype(int), k.astype(int)) / k,
    )
    # what LUT and FF scale with (docs/search.md): a fully parallel design pays per weight (constant multipliers,
    # adder trees), a stored-weight design per output (each lane keeps reuse / d_in accumulators) and per input
    # (the input multiplexer); with the latency strategy and reuse > 1, Vivado shares the DSP multipliers of
    # >= 8-bit products (a few DSPs, hundreds of cycles) and keeps the rest of the fully parallel datapath
    out = out.assign(
        weights=k * n,
        log2_d_in=np.log2(k),
        log2_d_out=np.log2(n),
        log2_outputs_per_lane=np.where(parallel > 0, 0.0, np.log2(rf / k)),
        outputs_per_lane_pow2=np.where(parallel > 0, 1.0, (np.log2(rf / k) % 1 == 0).astype(float)),
        shared_dsp=((resource == 0) & (rf > 1) & (p >= 8)).astype(float),
    )
    out["dsps_base"] = np.maximum(out["dsps_if_mapped"], 1.0)
    out["bram18_base"] = np.maximum(bram, 1.0)
    out["latency_base"] = np.maximum(depth, 1.0)
    return out


# LUT and FF per design regime (``fully_parallel`` 0 / 1) for ``models.hurdle.HurdleModel(regime_column=
# "fully_parallel", regime_models=LUT_FF_REGIMES)`` on :func:`hls4ml_features`: a stored-weight design as
# alpha x d_in (the input multiplexer; LUT only) + d_out x exp(f(outputs per lane, multipliers, precision, ...)),
# a fully parallel one as weights x exp(f(precision, strategy, DSP sharing, adder-tree depth)). Each tree then
# learns a per-output or per-weight cost that stays in the range seen in training, and the size of a withheld
# layer shape enters through the base and the offset (docs/search.md, "FPGA").
STORED_LUT_FF_FEATURES = [
    "precision_bits",
    "log2_outputs_per_lane",
    "log2_mults",
    "log2_d_out",
    "reuse_case",
    "outputs_per_lane_pow2",
]
PARALLEL_LUT_FF_FEATURES = ["precision_bits", "strategy_resource", "shared_dsp", "dsp_per_mult", "adder_tree_depth"]
LUT_FF_REGIMES = {
    "lut": {
        "features": {"0": STORED_LUT_FF_FEATURES, "1": PARALLEL_LUT_FF_FEATURES},
        "base_columns": {"0": "d_out", "1": "weights"},
        "offset_columns": {"0": "d_in"},
    },
    "ff": {
        "features": {"0": STORED_LUT_FF_FEATURES, "1": PARALLEL_LUT_FF_FEATURES},
        "base_columns": {"0": "d_out", "1": "weights"},
    },
}
