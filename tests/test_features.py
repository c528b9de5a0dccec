import numpy as np
import pandas as pd
import pytest

from features.tabular import FeatureError, TabularFeaturizer


@pytest.fixture(scope="module")
def featurizer(registry):
    return TabularFeaturizer(registry)


def test_shape_and_spec_features_join_by_hardware_name(featurizer, registry):
    df = pd.DataFrame([
        {"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "H100-SXM"},
        {"op": "matmul", "m": 1024, "n": 1024, "k": 1024, "dtype": "float16", "hardware": "NVIDIA_H100_80GB_HBM3"},
        {"op": "layernorm", "m": 64, "n": 768, "hardware": "T4"},  # dtype defaults to float32
    ])
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
    b = featurizer.transform(pd.DataFrame([{"op": "conv2d", "batch": 1, "c_in": 3, "c_out": 8, "h": 8, "w": 8,
                                            "kernel": 3, "stride": 1, "padding": 1, "hardware": "L4"}]))
    assert list(a.columns) == list(b.columns)


@pytest.mark.parametrize("row,msg", [
    ({"op": "matmul", "m": 1, "n": 1, "k": 1, "hardware": "H1000"}, "row 0: unknown hardware 'H1000'"),
    ({"op": "matmul", "m": 1, "n": 1, "hardware": "T4"}, "row 0: op 'matmul' needs shape parameter 'k'"),
    ({"op": "matmul", "m": "x", "n": 1, "k": 1, "hardware": "T4"}, "must be an integer"),
    ({"op": "matmul", "m": 1, "n": 1, "k": 1, "hardware": "T4", "dtype": "float8"}, "unknown dtype"),
    ({"op": "fft", "m": 1, "hardware": "T4"}, "unknown op 'fft'"),
    ({"m": 1, "hardware": "T4"}, "lack column"),
])
def test_bad_rows_get_one_clear_error(featurizer, row, msg):
    with pytest.raises(FeatureError, match=msg):
        featurizer.transform(pd.DataFrame([row]))


def test_wave_features_match_a_hand_count(featurizer, registry):
    """matmul 1000x3000 (k 512) on a T4 (40 SMs); conv2d as implicit GEMM on an A100 (108 SMs)."""
    X = featurizer.transform(pd.DataFrame([
        {"op": "matmul", "m": 1000, "n": 3000, "k": 512, "hardware": "T4"},
        {"op": "conv2d", "batch": 2, "c_in": 16, "c_out": 32, "h": 28, "w": 28, "kernel": 3, "stride": 1,
         "padding": 1, "hardware": "A100-PCIe-40GB"},
        {"op": "add", "m": 4096, "n": 4096, "hardware": "T4"},
    ]))
    t4 = registry.get("T4")
    assert t4.sm_count == 40
    # 128x128 tiles: ceil(1000/128) = 8 rows x ceil(3000/128) = 24 columns = 192 tiles -> 5 waves on 40 SMs
    assert X.loc[0, "log2_waves_128"] == pytest.approx(np.log2(5))
    assert X.loc[0, "wave_eff_128"] == pytest.approx(192 / 200)
    # 64x64: 16 x 47 = 752 tiles -> 19 waves; 256x256: 4 x 12 = 48 tiles -> 2 waves, the tail wave 8 of 40 SMs
    assert X.loc[0, "log2_waves_64"] == pytest.approx(np.log2(19)) and X.loc[0, "wave_eff_64"] == pytest.approx(752 / 760)
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
