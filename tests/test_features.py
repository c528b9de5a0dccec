import numpy as np
import pandas as pd
import pytest

from features.tabular import FeatureError, TabularFeaturizer


@pytest.fixture(scope="module")
def featurizer(registry):
    return TabularFeaturizer(registry)


def test_shape_and_spec_features_join_by_hardware_name(featurizer, registry):
    df = pd.DataFrame(
        [
            {"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "H100-SXM"},
            {"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "NVIDIA_H100_80GB_HBM3"},
            {"op": "layernorm", "m": 64, "n": 768, "hardware": "T4"},  # dtype defaults to float32
        ]
    )
    X = featurizer.transform(df)
    assert len(X) == 3 and np.isfinite(X.to_numpy()).all()
    pd.testing.assert_series_equal(X.iloc[0], X.iloc[1], check_names=False)  # alias -> same spec
    h100 = registry.get("H100-SXM")
    assert X.loc[0, "hw_log2_peak_flops"] == pytest.approx(np.log2(h100.peak_flops("float16")))
    assert X.loc[0, "log2_flops"] == pytest.approx(np.log2(2 * 1024**3 + 1))
    assert X.loc[2, "dtype_float32"] == 1 and X.loc[2, "k"] == 0
    compute = 2 * 1024**3 / h100.peak_flops("float16") * 1e3
    memory = 3 * 1024 * 1024 * 2 / h100.bandwidth_bytes_s * 1e3
    assert X.loc[0, "roofline_ms"] == pytest.approx(max(compute, memory))


def test_feature_columns_do_not_depend_on_the_batch(featurizer):
    a = featurizer.transform(pd.DataFrame([{"op": "add", "m": 8, "n": 8, "hardware": "L4"}]))
    b = featurizer.transform(
        pd.DataFrame(
            [
                {
                    "op": "conv2d",
                    "batch": 1,
                    "c_in": 3,
                    "c_out": 8,
                    "h": 8,
                    "w": 8,
                    "kernel": 3,
                    "stride": 1,
                    "padding": 1,
                    "hardware": "L4",
                }
            ]
        )
    )
    assert list(a.columns) == list(b.columns)


@pytest.mark.parametrize(
    "row,msg",
    [
        ({"op": "matmul", "m": 1, "n": 1, "k": 1, "hardware": "H1000"}, "row 0: unknown hardware 'H1000'"),
        ({"op": "matmul", "m": 1, "n": 1, "hardware": "T4"}, "row 0: op 'matmul' needs shape parameter 'k'"),
        ({"op": "matmul", "m": "x", "n": 1, "k": 1, "hardware": "T4"}, "must be an integer"),
        ({"op": "matmul", "m": 1, "n": 1, "k": 1, "hardware": "T4", "dtype": "float8"}, "unknown dtype"),
        ({"op": "fft", "m": 1, "hardware": "T4"}, "unknown op 'fft'"),
        ({"m": 1, "hardware": "T4"}, "lack column"),
    ],
)
def test_bad_rows_get_one_clear_error(featurizer, row, msg):
    with pytest.raises(FeatureError, match=msg):
        featurizer.transform(pd.DataFrame([row]))


def test_wave_features_match_a_hand_count(featurizer, registry):
    """matmul 1000x3000 (k 512) on a T4 (40 SMs); conv2d as implicit GEMM on an A100 (108 SMs)."""
    X = featurizer.transform(
        pd.DataFrame(
            [
                {"op": "matmul", "m": 1000, "n": 3000, "k": 512, "hardware": "T4"},
                {
                    "op": "conv2d",
                    "batch": 2,
                    "c_in": 16,
                    "c_out": 32,
                    "h": 28,
                    "w": 28,
                    "kernel": 3,
                    "stride": 1,
                    "padding": 1,
                    "hardware": "A100-PCIe-40GB",
                },
                {"op": "add", "m": 4096, "n": 4096, "hardware": "T4"},
            ]
        )
    )
    t4 = registry.get("T4")
    assert t4.sm_count == 40
    # 128x128 tiles: ceil(1000/128) = 8 rows x ceil(3000/128) = 24 columns = 192 tiles -> 5 waves on 40 SMs
    assert X.loc[0, "log2_waves_128"] == pytest.approx(np.log2(5))
    assert X.loc[0, "wave_eff_128"] == pytest.approx(192 / 200)
    # 64x64: 16 x 47 = 752 tiles -> 19 waves; 256x256: 4 x 12 = 48 tiles -> 2 waves, the tail wave 8 of 40 SMs
    assert X.loc[0, "log2_waves_64"] == pytest.approx(np.log2(19))
    assert X.loc[0, "wave_eff_64"] == pytest.approx(752 / 760)
    assert X.loc[0, "log2_waves_256"] == pytest.approx(1.0) and X.loc[0, "wave_eff_256"] == pytest.approx(48 / 80)
    # each wave costs one full tile's FLOPs per SM: 5 x (2*1000*3000*512 / 192) / (8.1 TFLOP/s / 40)
    wave_ms = 5 * (2 * 1000 * 3000 * 512 / 192) / (t4.peak_flops("float32") / 40) * 1e3
    assert X.loc[0, "log2_wave_ms_128"] == pytest.approx(np.log2(wave_ms))
    assert X.loc[0, "memory_bound"] == 0 and X.loc[0, "log2_intensity_over_ridge"] > 0
    # conv2d: M = 2*28*28 = 1568 -> 13 row tiles, N = 32 -> 1: 13 tiles in one wave on 108 SMs
    assert X.loc[1, "log2_waves_128"] == 0 and X.loc[1, "wave_eff_128"] == pytest.approx(13 / 108)
    # add: 3 x 4096^2 fp32 values moved, 48 MiB over a 4 MiB L2; memory-bound
    assert X.loc[2, "memory_bound"] == 1
    assert X.loc[2, "log2_bytes_over_l2"] == pytest.approx(np.log2(3 * 4096**2 * 4 / (4 * 2**20)))
    assert np.isfinite(X.to_numpy()).all()


# --- the vectorised featurizer against a per-row reference ------------------------------------------------------
def reference_features(registry, df: pd.DataFrame) -> pd.DataFrame:
    """The tabular features computed row by row, the straightforward way: ``validate`` per row, FLOPs and bytes
    from FlopCounterMode (``count_cost``), spec numbers looked up per row, the wave features from integer
    arithmetic (``gemm_dims``). ``TabularFeaturizer`` (vectorised, closed forms) must give the same frame."""
    from data.backends.sim_roofline import gemm_dims
    from data.ops import DTYPE_INFO
    from data.workloads import DTYPES, OPS, SHAPE_PARAMS, count_cost, validate
    from features.tabular import DTYPE_BYTES, TILES

    rows = []
    for r in df.to_dict("records"):
        dt = r.get("dtype") if isinstance(r.get("dtype"), str) else "float32"
        p = validate(r["op"], {k: r.get(k) for k in SHAPE_PARAMS}, dt)
        s = registry.get(r["hardware"])
        flops, nbytes = count_cost(r["op"], p, dt)
        peak, bw, sms = s.peak_flops(DTYPE_INFO[dt].rate), s.bandwidth_bytes_s, max(float(s.sm_count), 1.0)
        x = {k: float(p.get(k, 0)) for k in SHAPE_PARAMS}
        x |= {f"op_{op}": float(r["op"] == op) for op in OPS} | {f"dtype_{d}": float(dt == d) for d in DTYPES}
        x |= {
            "dtype_bytes": float(DTYPE_BYTES.get(dt, np.nan)),
            "log2_flops": np.log2(flops + 1),
            "log2_bytes": np.log2(nbytes),
            "tensor_bytes": nbytes,
            "log2_intensity": np.log2(flops / nbytes + 1e-3),
            "hw_is_gpu": float(s.kind == "gpu"),
            "hw_sm_count": float(s.sm_count),
            "hw_clock_mhz": float(s.boost_clock_mhz),
            "hw_memory_gb": float(s.memory_gb),
            "hw_l2_mb": float(s.l2_cache_mb),
            "hw_log2_peak_flops": np.log2(peak),
            "hw_log2_peak_fp32": np.log2(s.peak_flops("float32")),
            "hw_log2_bandwidth": np.log2(bw),
            "hw_ridge_intensity": peak / bw,
            "roofline_compute_ms": flops / peak * 1e3,
            "roofline_memory_ms": nbytes / bw * 1e3,
            "roofline_ms": max(flops / peak, nbytes / bw) * 1e3,
        }
        x["log2_roofline_ms"] = np.log2(x["roofline_ms"])
        memory_ms = nbytes / bw * 1e3
        dims = gemm_dims(r["op"], p)
        for t in TILES:
            if dims is not None:
                tiles = float(dims[0] * -(-dims[1] // t) * -(-dims[2] // t))
            else:
                tiles = float(np.ceil(nbytes / DTYPE_BYTES.get(dt, 4) / t**2))
            tiles = max(tiles, 1.0)
            waves = np.ceil(tiles / sms)
            x[f"log2_waves_{t}"] = np.log2(waves)
            x[f"wave_eff_{t}"] = tiles / (waves * sms)
            x[f"log2_wave_ms_{t}"] = np.log2(waves * (flops / tiles) / (peak / sms) * 1e3 if flops > 0 else memory_ms)
        ratio = (flops / nbytes) / (peak / bw)
        x |= {
            "log2_intensity_over_ridge": np.log2(ratio + 1e-6),
            "memory_bound": float(ratio < 1),
            "log2_bytes_over_l2": np.log2(nbytes / max(s.l2_cache_mb * 2**20, 1.0)),
            "log2_bytes_per_sm": np.log2(nbytes / sms),
            "log2_flops_per_sm": np.log2(flops / sms + 1),
            "log2_roofline_compute_ms": np.log2(flops / peak * 1e3 + 1e-9),
            "log2_roofline_memory_ms": np.log2(memory_ms),
            "log2_wave_roofline_ms": np.log2(max(2 ** x["log2_wave_ms_128"], memory_ms)),
        }
        rows.append(x)
    return pd.DataFrame(rows)


def mixed_workloads(registry, n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` rows over every op, each dtype it has a kernel for and GPU spec (ids and aliases) that can run it,
    shapes from a small pool per op (so the reference's FlopCounterMode cache keeps it quick), some dtypes missing,
    shape columns as NaN where unused."""
    from data.workloads import OPS
    from features.tabular import MATH_FAMILIES, unit_problem
    from tests.test_costs import _dtype_valid

    rng = np.random.default_rng(seed)
    names = [name for s in registry if "float32" in s.peak_tflops for name in (s.id, *s.aliases)]
    pool = {op: [_valid_shape(op, rng) for _ in range(4)] for op in OPS}
    rows = []
    for i in range(n):
        op = list(OPS)[i % len(OPS)]
        dtypes = OPS[op].dtypes
        dtype = [*dtypes, None][rng.integers(len(dtypes) + 1)]
        hardware = names[rng.integers(len(names))]
        if dtype and OPS[op].family in MATH_FAMILIES and unit_problem(registry.get(hardware), dtype):
            dtype = None  # a dtype this GPU has no units for is refused (tests of that: test_physics)
        shape = _dtype_valid(op, dict(pool[op][rng.integers(4)]), dtype or "float32")
        rows.append(
            {"op": op, "hardware": hardware, **shape, **({"dtype": dtype} if dtype else {}), "note": f"row {i}"}
        )
    return pd.DataFrame(rows)


def _valid_shape(op, rng) -> dict:
    from tests.test_costs import _draw

    return _draw(op, rng)


@pytest.mark.slow  # ~500 distinct FlopCounterMode runs in the reference: ~8 s
def test_vectorised_features_equal_the_per_row_reference(featurizer, registry):
    df = mixed_workloads(registry, 2000)
    X = featurizer.transform(df)
    pd.testing.assert_frame_equal(X, reference_features(registry, df), check_exact=False, rtol=1e-12, atol=0)
    # the checked frame keeps the caller's columns and gives every shape column, 0 where the op does not use it
    checked = featurizer.check(df)
    assert list(checked.columns[: len(df.columns)]) == list(df.columns)
    assert checked["note"].tolist() == df["note"].tolist()
    assert checked.loc[0, "op"] == "matmul" and checked.loc[0, "batch"] == 0 and checked.loc[0, "k"] == df.loc[0, "k"]
    assert set(checked["hardware"]) <= set(registry.ids) and not checked["dtype"].isna().any()
    pd.testing.assert_frame_equal(featurizer.features(checked), X)


def test_power_featurizer_keeps_the_tabular_columns_first(registry):
    from features.tabular import PowerFeaturizer

    df = pd.DataFrame(
        [
            {"op": "matmul", "m": 512, "n": 512, "k": 512, "dtype": "float16", "hardware": "H100-SXM"},
            {"op": "gelu", "m": 4096, "n": 1024, "hardware": "T4"},
        ]
    )
    X = PowerFeaturizer(registry).transform(df)
    base = TabularFeaturizer(registry).transform(df)
    pd.testing.assert_frame_equal(X[list(base.columns)], base)
    assert (X["analytical_power_w"] >= X["hw_idle_power_w"]).all() and (X["analytical_power_w"] <= X["hw_tdp_w"]).all()


def test_work_tiles_of_one_workload_and_of_arrays_agree():
    from features.tabular import work_tiles

    p = {"m": 1000, "n": 3000, "k": 512}
    assert work_tiles("matmul", p, 0.0, 4, 128) == 8 * 24
    assert work_tiles("add", {"m": 4096, "n": 4096}, 3 * 4096**2 * 4, 4, 128) == 3 * 4096**2 / 128**2
    many = work_tiles(
        np.array(["matmul", "add"], object),
        {"m": [1000, 4096], "n": [3000, 4096], "k": [512, 0]},
        [0.0, 3 * 4096**2 * 4],
        [4, 4],
        128,
    )
    np.testing.assert_array_equal(many, [8 * 24, 3 * 4096**2 / 128**2])


# --- optional parameters and the ops added with them -----------------------------------------------------------
NEW_OP_ROWS = [
    {"op": "conv2d", "batch": 8, "c_in": 64, "c_out": 128, "h": 56, "w": 56, "kernel": 3, "stride": 1, "padding": 1},
    {
        "op": "conv2d",
        "batch": 8,
        "c_in": 64,
        "c_out": 128,
        "h": 56,
        "w": 56,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
        "groups": 32,
    },
    {
        "op": "conv2d",
        "batch": 8,
        "c_in": 64,
        "c_out": 64,
        "h": 56,
        "w": 56,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
        "groups": 64,
    },  # depthwise
    {
        "op": "conv2d",
        "batch": 8,
        "c_in": 64,
        "c_out": 128,
        "h": 56,
        "w": 56,
        "kernel": 3,
        "stride": 1,
        "padding": 2,
        "dilation": 2,
    },
    {"op": "sdpa", "batch": 4, "heads": 16, "seq_len": 1, "head_dim": 128, "causal": 0, "kv_len": 4096},
    {"op": "sdpa", "batch": 4, "heads": 16, "seq_len": 512, "head_dim": 128, "causal": 1},
    {"op": "max_pool2d", "batch": 8, "c_in": 64, "h": 112, "w": 112, "kernel": 3, "stride": 2, "padding": 1},
    {"op": "avg_pool2d", "batch": 8, "c_in": 64, "h": 112, "w": 112, "kernel": 2, "stride": 2, "padding": 0},
    {"op": "adaptive_avg_pool2d", "batch": 8, "c_in": 2048, "h": 7, "w": 7, "out_size": 1},
    {"op": "batchnorm", "batch": 8, "c_in": 64, "h": 56, "w": 56},
    {"op": "rmsnorm", "m": 4096, "n": 4096},
    {"op": "embedding", "m": 2048, "n": 4096, "k": 32000},
    {"op": "ewise", "m": 4096, "n": 4096, "inputs": 3},
    {"op": "ewise", "m": 4096, "n": 4096, "inputs": 0},
    *({"op": op, "m": 4096, "n": 4096} for op in ("copy", "silu", "sigmoid", "hardtanh")),
]


def test_new_ops_and_optional_params_equal_the_per_row_reference(featurizer, registry):
    df = pd.DataFrame(NEW_OP_ROWS).assign(hardware="A100-SXM4-80GB", dtype="float16")
    X = featurizer.transform(df)
    pd.testing.assert_frame_equal(X, reference_features(registry, df), check_exact=False, rtol=1e-12, atol=0)
    dense, grouped, depthwise = X.iloc[0], X.iloc[1], X.iloc[2]
    # a grouped conv does 1/groups of the dense FLOPs; it is one GEMM per group (N = c_out / groups), so its 128x128
    # tiles are 32 groups x ceil(8*56*56 / 128) x 1, not the dense 196 x 1
    assert 2 ** grouped["log2_flops"] == pytest.approx((2 ** dense["log2_flops"] - 1) / 32 + 1)
    assert 2 ** grouped["log2_waves_128"] == pytest.approx(np.ceil(32 * 196 / registry.get("A100-SXM4-80GB").sm_count))
    assert depthwise["groups"] == 64 and dense["groups"] == 0 and dense["dilation"] == 0
    assert X.loc[4, "kv_len"] == 4096 and X.loc[5, "kv_len"] == 0  # 0: at its default (kv_len = seq_len)


@pytest.mark.parametrize("unset", [None, np.nan, 0, 1, "drop"])
def test_an_optional_param_at_its_default_featurizes_as_the_row_without_it(featurizer, unset):
    conv = {k: v for k, v in NEW_OP_ROWS[0].items()} | {"hardware": "H100-SXM"}
    base = featurizer.transform(pd.DataFrame([conv]))
    df = pd.DataFrame([conv | {"groups": 4}, conv])
    if unset == "drop":
        df = df.iloc[1:].drop(columns="groups")
    else:
        df = df.iloc[1:].assign(groups=unset, dilation=unset)
    pd.testing.assert_frame_equal(featurizer.transform(df.reset_index(drop=True)), base)


@pytest.mark.parametrize(
    "row,msg",
    [
        ({"groups": 3}, r"row 0: op 'conv2d': c_in 64 and c_out 128 must be multiples of groups 3"),
        ({"groups": -4}, r"row 0: op 'conv2d': shape parameter 'groups' must be >= 1, got -4"),
        ({"groups": 2.5}, r"row 0: op 'conv2d': shape parameter 'groups' must be an integer, got 2\.5"),
        ({"groups": True}, r"must be an integer, got True \(a boolean\)"),
        ({"dilation": 40}, r"row 0: op 'conv2d': dilated kernel span 81 larger than padded input h=56"),
        ({"dilation": 2**63}, r"shape parameter 'dilation' = 9\.22e\+18 is beyond int64"),
    ],
)
def test_bad_optional_params_get_one_clear_error(featurizer, row, msg):
    conv = NEW_OP_ROWS[0] | {"hardware": "H100-SXM"}
    with pytest.raises(FeatureError, match=msg):
        featurizer.transform(pd.DataFrame([conv | row], dtype=object))


def test_power_featurizer_costs_a_grouped_conv_as_grouped(registry):
    from data.backends.sim_roofline import SimRooflineBackend
    from features.tabular import PowerFeaturizer

    conv = {
        "op": "conv2d",
        "batch": 64,
        "c_in": 256,
        "c_out": 256,
        "h": 56,
        "w": 56,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
        "hardware": "H100-SXM",
        "dtype": "float16",
    }
    X = PowerFeaturizer(registry).transform(pd.DataFrame([conv, conv | {"groups": 256}]))
    sim = SimRooflineBackend(registry.get("H100-SXM"))
    shape = {k: v for k, v in conv.items() if k not in ("op", "hardware", "dtype")}
    assert X.loc[1, "analytical_runtime_ms"] == pytest.approx(
        sim.runtime_s("conv2d", shape | {"groups": 256}, "float16") * 1e3
    )
    # dense: 237 GFLOP in 2 waves of 128x128 tiles; depthwise: 256 GEMMs with N = 1, each paying a full 128-wide
    # tile (1/128 tile efficiency), 1/256 of the FLOPs: about half the dense time, not the same
    assert X.loc[1, "analytical_runtime_ms"] < X.loc[0, "analytical_runtime_ms"] / 1.5


def test_power_featurizer_runtime_equals_the_simulator_row_by_row(registry):
    """The vectorised analytical runtime is the sim-roofline backend's, workload by workload, over every op, dtype
    and GPU with a TDP (optional parameters drawn)."""
    from data.backends.sim_roofline import SimRooflineBackend
    from data.workloads import OPS
    from features.tabular import PowerFeaturizer

    df = mixed_workloads(registry, 600, seed=1)
    df = df[[registry.get(h).tdp_w is not None for h in df["hardware"]]].reset_index(drop=True)
    X = PowerFeaturizer(registry).transform(df)
    sims = {s.id: SimRooflineBackend(s) for s in registry}
    want = [
        sims[registry.get(r["hardware"]).id].runtime_s(
            r["op"],
            {k: r.get(k) for k in OPS[r["op"]].names},
            r["dtype"] if isinstance(r.get("dtype"), str) else "float32",
        )
        for r in df.to_dict("records")
    ]
    np.testing.assert_allclose(X["analytical_runtime_ms"], np.array(want) * 1e3, rtol=1e-12)
    assert len(df) > 300 and df["op"].nunique() == len(OPS)
