"""Property tests over the input boundary (hypothesis): whatever a user sends as a workload frame, a CSV / JSON file
or MLIR text, the answer is a valid feature frame or one ``FeatureError`` / ``WorkloadError`` line, never another
exception (which the CLI would print as a traceback and the scoring server answer with a 5xx)."""

from __future__ import annotations

import json
import math
import string

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data.costs import ECHO_CHARS
from data.hardware import HardwareRegistry
from data.workloads import DTYPES, OPS, SHAPE_PARAMS, WorkloadError, validate
from features.inputs import mlir_text, read_mlir, read_workloads
from features.tabular import FeatureError, TabularFeaturizer
from tests.test_costs import shapes

REGISTRY = HardwareRegistry.from_dir()
FEATURIZER = TabularFeaturizer(REGISTRY)
GPUS = [s.id for s in REGISTRY if s.kind == "gpu"]
HARDWARE_NAMES = [name for s in REGISTRY if s.kind == "gpu" for name in (s.id, *s.aliases)]
# one line, an echo of at most ECHO_CHARS characters of a cell plus the lists of known names a message may carry
LONGEST = 300 + max(len(", ".join(OPS)), len(", ".join(REGISTRY.ids)))
FAST = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

huge = st.sampled_from([10**9, 10**12, 10**18, 2**63 - 1, 2**63, 10**23, 10**30, -(2**63), -1, 0])
weird = st.one_of(
    huge,
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=8),
    st.just("x" * 5000),
    st.just("true"),
    st.just("64"),
    st.just(" 7 "),
    st.lists(st.integers(0, 3), max_size=2),
    st.decimals(allow_nan=False, allow_infinity=False),
)
small = st.integers(1, 64)
value = st.one_of(small, small, small, small.map(float), weird)
cell = st.one_of(st.sampled_from([*OPS, *GPUS, *DTYPES, "H100", "nvidia h100", ""]), st.text(max_size=12), weird)


def assert_one_line(exc: Exception) -> None:
    text = str(exc)
    assert "\n" not in text and "\r" not in text, text[:500]
    assert 0 < len(text) <= LONGEST, f"{len(text)} characters: {text[:500]}"
    assert "x" * (ECHO_CHARS + 1) not in text, "a long cell echoed whole"


def featurize_or_refuse(frame: pd.DataFrame) -> pd.DataFrame | None:
    """The property: a valid frame of finite features (``dtype_bytes`` is NaN for fixed point, by design), or one
    FeatureError line."""
    try:
        X = FEATURIZER.transform(frame)
    except FeatureError as exc:
        assert_one_line(exc)
        return None
    assert len(X) == len(frame) and np.isfinite(X.drop(columns="dtype_bytes").to_numpy()).all()
    assert (np.isfinite(X["dtype_bytes"]) | (X["dtype_fixed"] == 1)).all()  # fixed point has no torch width: NaN
    return X


@st.composite
def workload_frames(draw):
    """Valid rows (random ops, shapes, dtypes, hardware names and aliases), then 0 to 3 defects: a weird value, op,
    hardware or dtype cell, a missing parameter, an extra, repeated or dropped column. About a third stay valid."""
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(list(OPS)))
        row = {"op": op, "hardware": draw(st.sampled_from(HARDWARE_NAMES)), **draw(shapes(op))}
        if draw(st.booleans()):
            row["dtype"] = draw(st.sampled_from(list(DTYPES)))
        rows.append(row)
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        row = draw(st.sampled_from(rows))
        kind = draw(st.sampled_from(["value", "value", "op", "hardware", "dtype", "missing", "extra"]))
        if kind == "value":
            row[draw(st.sampled_from(list(SHAPE_PARAMS)))] = draw(weird)
        elif kind in ("op", "hardware", "dtype"):
            row[kind] = draw(cell)
        elif kind == "missing":
            row.pop(draw(st.sampled_from(sorted(row))))
        else:
            row[draw(st.sampled_from([*SHAPE_PARAMS, "note", "mlir", "m.1"]))] = draw(st.one_of(value, cell))
    frame = pd.DataFrame(rows)
    columns = draw(st.sampled_from(["same", "same", "same", "same", "repeat", "drop"]))
    if columns == "repeat":
        frame = pd.concat([frame, frame[[draw(st.sampled_from(list(frame.columns)))]]], axis=1)
    elif columns == "drop":
        frame = frame.drop(columns=[draw(st.sampled_from(list(frame.columns)))])
    return frame


@FAST
@given(workload_frames())
def test_any_workload_frame_gives_features_or_one_line(frame):
    featurize_or_refuse(frame)


@FAST
@given(
    op=st.one_of(st.sampled_from(list(OPS)), cell),
    params=st.dictionaries(st.sampled_from(SHAPE_PARAMS), value),
    dtype=st.one_of(st.sampled_from(list(DTYPES)), cell),
)
def test_validate_returns_ints_or_one_workload_error(op, params, dtype):
    try:
        out = validate(op, params, dtype)
    except WorkloadError as exc:
        assert_one_line(exc)
        return
    assert set(OPS[op].params) <= set(out) <= set(OPS[op].names)
    assert all(type(v) is int and 0 <= v < 2**63 for v in out.values())


json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.floats(), st.text(max_size=10)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@FAST
@given(
    records=st.lists(
        st.dictionaries(
            st.sampled_from(["op", "hardware", "dtype", *SHAPE_PARAMS, "x"]), st.one_of(value, cell, json_value)
        ),
        min_size=1,
        max_size=3,
    )
)
def test_any_json_records_give_features_or_one_line(records):
    """What a REST client or a .json file sends: records of any JSON values (as the scoring server's parser builds
    the frame: ``pd.DataFrame(records)``)."""
    featurize_or_refuse(pd.DataFrame(records))


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(str.encode),
        st.lists(
            st.lists(
                st.one_of(
                    st.sampled_from(
                        ["op", "m", "n", "k", "hardware", "matmul", "T4", "1e23", "inf", "true", "", '"', ","]
                    ),
                    st.text(string.printable, max_size=6),
                ),
                min_size=1,
                max_size=6,
            ),
            min_size=1,
            max_size=4,
        ).map(lambda rows: "\n".join(",".join(r) for r in rows).encode()),
    ),
    suffix=st.sampled_from([".csv", ".json", ".jsonl"]),
)
def test_any_file_reads_to_features_or_one_line(tmp_path_factory, data, suffix):
    path = tmp_path_factory.mktemp("in") / f"workloads{suffix}"
    path.write_bytes(data)
    try:
        frame = read_workloads(path)
    except FeatureError as exc:
        assert_one_line(exc)
        return
    featurize_or_refuse(frame)


def test_file_boundary_examples(tmp_path):
    cases = {
        "dup.csv": (b"op,m,n,k,m,hardware\nmatmul,1,4,4,5,T4\n", r"^dup.csv: column 'm' repeats in the header"),
        "dup.json": (b'[{"op": "matmul", "m": 1, "m": 2}]', r"^dup.json: key 'm' repeats in a record"),
        "bin.csv": (b"op,m\n\xff\xfe\x00", r"^bin.csv: not UTF-8 text \(byte 0xff at offset 5\)"),
        "empty.csv": (b"op,m,n,k,hardware\n", r"^empty.csv holds no workloads$"),
        "bad.json": (b"[{", r"^cannot parse bad.json: "),
        "scalar.json": (b"3", r"^scalar.json: expected JSON records"),
        "x.txt": (b"op\n", r"^unsupported input 'x.txt'"),
    }
    for name, (data, msg) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(FeatureError, match=msg):
            read_workloads(tmp_path / name)
    with pytest.raises(FeatureError, match=r"^input file not found: "):
        read_workloads(tmp_path / "missing.csv")
    (tmp_path / "bom.csv").write_bytes("\ufeffop,m,n,k,hardware\nmatmul,8,8,8,T4\n".encode())
    assert list(read_workloads(tmp_path / "bom.csv").columns) == ["op", "m", "n", "k", "hardware"]


# --- MLIR text -------------------------------------------------------------------------------------------------
MATMUL = """module {
  func.func @main(%a: tensor<MxKxf32>, %b: tensor<KxNxf32>) -> tensor<MxNxf32> {
    %0 = tensor.empty() : tensor<MxNxf32>
    %1 = linalg.matmul ins(%a, %b : tensor<MxKxf32>, tensor<KxNxf32>) outs(%0 : tensor<MxNxf32>) -> tensor<MxNxf32>
    return %1 : tensor<MxNxf32>
  }
}
"""


def mlir_features_or_refuse(text: str) -> None:
    """MLIR text -> kernels (features.mlir) -> features on an H100, or one FeatureError line at some step."""
    from features.mlir import workloads_from_mlir

    try:
        kernels = workloads_from_mlir(mlir_text(text), where="row 0")
    except FeatureError as exc:
        assert_one_line(exc)
        return
    if not kernels.empty:
        featurize_or_refuse(
            kernels.drop(columns=["mlir_op", "node"])
            .astype({c: float for c in SHAPE_PARAMS})
            .assign(hardware="H100-SXM")
        )


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(dims=st.tuples(*[st.sampled_from([1, 7, 4096, 10**6, 10**9, 2**31, 2**40]) for _ in range(3)]))
def test_mlir_with_any_dims_gives_features_or_one_line(dims):
    """A real linalg.matmul module whose dims grow up to 2^40: the featurizer refuses what an H100 cannot hold."""
    m, k, n = dims
    mlir_features_or_refuse(MATMUL.replace("M", str(m)).replace("K", str(k)).replace("N", str(n)))


def test_mlir_too_large_for_the_device_is_refused_naming_the_tensor():
    with pytest.raises(
        FeatureError,
        match=r"^row 0: matmul A 10\^6x10\^6 float32 = 4\.0e\+12 bytes exceeds H100-SXM "
        r"memory 80 GB$",
    ):
        from features.mlir import workloads_from_mlir

        text = MATMUL.replace("M", str(10**6)).replace("K", str(10**6)).replace("N", "8")
        kernels = workloads_from_mlir(text).drop(columns=["mlir_op", "node"])
        FEATURIZER.transform(kernels.astype({c: float for c in SHAPE_PARAMS}).assign(hardware="H100-SXM"))


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.one_of(st.binary(max_size=300), st.text(max_size=300), st.just("\ud800"), st.just("module {}\x00")))
def test_any_bytes_or_text_as_mlir_give_text_or_one_line(data):
    try:
        text = mlir_text(data)
    except FeatureError as exc:
        assert_one_line(exc)
        return
    assert isinstance(text, str) and "\x00" not in text
    text.encode("utf-8")  # what the MLIR bindings and the sha256 cache key need


def test_mlir_read_boundary_examples(tmp_path):
    (tmp_path / "net.mlir").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff")
    with pytest.raises(
        FeatureError, match=r"^net.mlir: not UTF-8 text \(byte 0xff at offset 8, line 1\): MLIR files are UTF-8"
    ):
        read_mlir(tmp_path / "net.mlir")
    (tmp_path / "nul.mlir").write_bytes(b"module {}\x00")
    with pytest.raises(FeatureError, match=r"^nul.mlir: a NUL character at offset 9"):
        read_mlir(tmp_path / "nul.mlir")
    with pytest.raises(FeatureError, match=r"unpaired surrogate at character 2"):
        mlir_text("ab\ud800")
    with pytest.raises(FeatureError, match=r"MLIR must be module text, got int"):
        mlir_text(3)
    (tmp_path / "ok.mlir").write_text(MATMUL)
    assert read_mlir(tmp_path / "ok.mlir") == MATMUL


# --- the issue's cases, one by one -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "row,msg",
    [
        (
            {"m": 10**12, "n": 10**12, "k": 10**12},
            r"^row 0: matmul A 10\^12x10\^12 float32 = 4\.0e\+24 bytes exceeds "
            r"H100-SXM memory 80 GB$",
        ),
        ({"m": 1e23, "n": 1e23, "k": 1e23}, r"^row 0: op 'matmul': shape parameter 'm' = 1e\+23 is beyond int64"),
        (
            {"m": math.inf, "n": 8, "k": 8},
            r"^row 0: op 'matmul': shape parameter 'm' must be a finite integer, got inf$",
        ),
        (
            {"m": True, "n": 8, "k": 8},
            r"^row 0: op 'matmul': shape parameter 'm' must be an integer, got True "
            r"\(a boolean\)$",
        ),
        ({"m": 8, "n": 8, "k": 8, "hardware": None}, r"^row 0: empty hardware cell \(give a hardware id"),
        ({"m": 8, "n": 8, "k": 8, "hardware": ""}, r"^row 0: empty hardware cell"),
        ({"m": 8, "n": 8, "k": 8, "op": None}, r"^row 0: empty op cell"),
        (
            {"m": 8, "n": 8, "k": 8, "op": "z" * 5_000_000},
            r"^row 0: unknown op 'z{80}'\.\.\. \(5000000 characters\); "
            r"known",
        ),
    ],
)
def test_issue_cases_are_one_line(row, msg):
    frame = pd.DataFrame([{"op": "matmul", "hardware": "H100-SXM", **row}])
    with pytest.raises(FeatureError, match=msg) as info:
        FEATURIZER.transform(frame)
    assert_one_line(info.value)


def test_conv_input_beyond_the_device_names_tensor_size_and_memory():
    row = {
        "op": "conv2d",
        "batch": 1,
        "c_in": 3,
        "c_out": 8,
        "h": 10**9,
        "w": 10**9,
        "kernel": 3,
        "stride": 1,
        "padding": 1,
        "hardware": "H100-SXM",
    }
    ok = {"op": "add", "m": 8, "n": 8, "hardware": "T4"}
    with pytest.raises(
        FeatureError,
        match=r"^row 3: conv2d input 1x3x10\^9x10\^9 float32 = 1\.2e\+19 bytes exceeds "
        r"H100-SXM memory 80 GB$",
    ):
        FEATURIZER.transform(pd.DataFrame([ok, ok, ok, row, ok]))
    # tensors that fit one by one but not together
    with pytest.raises(
        FeatureError,
        match=r"^row 0: matmul tensors together \(A, B, output\) = 1\.2e\+11 bytes exceed "
        r"A100-PCIe-40GB memory 40 GB$",
    ):
        FEATURIZER.transform(
            pd.DataFrame([{"op": "matmul", "m": 10**5, "k": 10**5, "n": 10**5, "hardware": "A100-PCIe-40GB"}])
        )


def test_repeated_columns_are_refused():
    frame = pd.DataFrame([["matmul", 8, 8, 8, 9, "T4"]], columns=["op", "m", "n", "k", "m", "hardware"])
    with pytest.raises(FeatureError, match=r"^duplicate column\(s\) 'm': give each column once$"):
        FEATURIZER.transform(frame)
    renamed = pd.read_csv(__import__("io").StringIO("op,m,n,k,m,hardware\nmatmul,8,8,8,9,T4\n"))
    with pytest.raises(FeatureError, match=r"^column 'm.1' repeats column 'm' \(a CSV reader renames"):
        FEATURIZER.transform(renamed)


def test_integer_text_and_floats_are_read_as_their_integers():
    frame = pd.DataFrame([{"op": "matmul", "m": "64", "n": 64.0, "k": np.int32(64), "hardware": "T4"}])
    same = pd.DataFrame([{"op": "matmul", "m": 64, "n": 64, "k": 64, "hardware": "T4"}])
    pd.testing.assert_frame_equal(FEATURIZER.transform(frame), FEATURIZER.transform(same))


def test_json_numbers_beyond_int64_are_refused_not_overflowing():
    records = json.loads('[{"op": "matmul", "m": 100000000000000000000000, "n": 1, "k": 1, "hardware": "T4"}]')
    with pytest.raises(FeatureError, match=r"shape parameter 'm' = 1e\+23 is beyond int64"):
        FEATURIZER.transform(pd.DataFrame(records))
