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
