import pandas as pd
import pytest

from data.backends.cpu import CpuBackend
from data.hardware import detect_cpu
from data.schema import COLUMNS, SchemaViolation, dataset_hash, validate
from data.store import read_dataset, write_dataset


@pytest.fixture(scope="module")
def rows():
    backend = CpuBackend(num_threads=1, min_run_time=0.002, warmup=1, hardware=detect_cpu(1))
    work = [
        {"op": "matmul", "params": {"m": 32, "n": 32, "k": 32}, "dtype": "float32"},
        {"op": "gelu", "params": {"m": 64, "n": 64}, "dtype": "float32"},
    ]
    return validate(pd.DataFrame([backend.measure(w) for w in work]))


def test_backend_rows_validate(rows):
    assert list(rows.columns) == COLUMNS
    assert (rows["status"] == "ok").all() and (rows["runtime_ms"] > 0).all()


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (lambda df: df.assign(runtime_ms=-1.0), "runtime_ms"),
        (lambda df: df.assign(op="convolution"), "op"),
        (lambda df: df.assign(backend="gpu-magic"), "backend"),
        (lambda df: df.assign(dtype="float8"), "dtype"),
        (lambda df: df.assign(runtime_ms=None), "status 'ok' need runtime_ms"),
        (lambda df: df.assign(status="error", error=None), "need an error message"),
        (lambda df: df.assign(surprise=1), "surprise"),
        (lambda df: df.drop(columns=["hardware"]), "hardware"),
        (lambda df: df.assign(m=-4), "m"),
    ],
)
def test_schema_rejects_bad_rows(rows, mutate, msg):
    with pytest.raises(SchemaViolation, match=msg):
        validate(mutate(rows))


def test_store_roundtrip_and_refuses_bad_rows(rows, tmp_path):
    path = write_dataset(rows, tmp_path / "d.parquet")
    back = read_dataset(path)
    pd.testing.assert_frame_equal(back, rows)
    assert dataset_hash(back) == dataset_hash(rows)
    with pytest.raises(SchemaViolation):
        write_dataset(rows.assign(runtime_ms=-1.0), tmp_path / "bad.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet"]  # nothing half-written left behind


def test_dataset_hash_sees_any_change(rows):
    changed = rows.copy()
    changed.loc[0, "runtime_ms"] = changed.loc[0, "runtime_ms"] * 1.0001
    assert dataset_hash(changed) != dataset_hash(rows)
