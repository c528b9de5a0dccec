"""User input read at the boundary: files and cells that must be text, tables whose columns must be unique.

Every entry that takes a file or an MLIR string from a user (the CLI's ``predict`` / ``featurize``, the pyfunc's
``mlir`` column) reads it here, so that bad input ends in one :class:`features.tabular.FeatureError` line instead of
a ``UnicodeDecodeError`` traceback or a silently dropped column:

* :func:`mlir_text`: a str or bytes that must be MLIR module text: UTF-8 only (a binary file is refused with the
  offset of its first bad byte), no NUL character, no lone surrogate (JSON can carry one; the MLIR bindings cannot
  encode it);
* :func:`read_mlir`: a ``.mlir`` file through :func:`mlir_text`;
* :func:`read_workloads`: a ``.csv``, ``.jsonl`` / ``.ndjson`` or ``.json`` (array of records) file of workloads,
  UTF-8, refusing a repeated CSV header or JSON key (pandas would rename the first, JSON keep the last) and an
  empty table. The values are checked by ``TabularFeaturizer.check``, the one validation of workload frames.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd

from data.costs import echo
from features.tabular import FeatureError

TABLE_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".json")


def mlir_text(value, where: str = "mlir") -> str:
    """``value`` (str or bytes) as MLIR module text, or one FeatureError line saying why it is not text."""
    if isinstance(value, (bytes, bytearray, memoryview)):  # UTF-8 text, or MLIR bytecode (e.g. a jax.export artifact)
        from features.mlir.graph import decode_mlir

        value = decode_mlir(bytes(value), where)
    elif not isinstance(value, str):
        raise FeatureError(f"{where}: MLIR must be module text, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FeatureError(
            f"{where}: not valid Unicode text (an unpaired surrogate at character {exc.start})"
        ) from None
    nul = value.find("\x00")
    if nul >= 0:
        raise FeatureError(f"{where}: a NUL character at offset {nul}: binary data, not MLIR module text")
    return value


def read_mlir(path) -> str:
    """The text of a ``.mlir`` file (:func:`mlir_text`); a missing or unreadable file is one FeatureError line."""
    return mlir_text(_read_bytes(Path(path)), where=Path(path).name)


def read_workloads(path) -> pd.DataFrame:
    """A workload table from ``.csv``, ``.jsonl`` / ``.ndjson`` or ``.json`` (an array of records)."""
    path = Path(path)
    if path.suffix not in TABLE_SUFFIXES:
        raise FeatureError(f"unsupported input {echo(path.name, 80)}: use .csv, .jsonl or .json")
    return parse_workloads(_read_bytes(path), path.suffix, path.name)


def parse_workloads(data: bytes, suffix: str, name: str = "input") -> pd.DataFrame:
    """:func:`read_workloads` of bytes already read (e.g. standard input), in the format of ``suffix``."""
    if suffix not in TABLE_SUFFIXES:
        raise FeatureError(f"unsupported format {echo(suffix, 20)}: use .csv, .jsonl or .json")
    text = _decode(data, name, "a UTF-8 table")
    try:
        if suffix == ".csv":
            header = next(csv.reader(io.StringIO(text)), [])
            _refuse_repeats(header, name, "header")
            df = pd.read_csv(io.StringIO(text))
        else:
            if suffix == ".json":
                records = json.loads(text, object_pairs_hook=_unique_keys)
            else:
                records = [
                    json.loads(line, object_pairs_hook=_unique_keys) for line in text.splitlines() if line.strip()
                ]
            if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                raise FeatureError(f"{name}: expected JSON records (objects, one per workload)")
            df = pd.DataFrame(records)
    except _RepeatedKey as exc:
        raise FeatureError(f"{name}: key {echo(exc.args[0], 40)} repeats in a record: give each column once") from None
    except (ValueError, csv.Error, pd.errors.ParserError) as exc:  # json.JSONDecodeError is a ValueError
        if isinstance(exc, FeatureError):
            raise
        reason = " ".join(str(exc).split())
        raise FeatureError(f"cannot parse {name}: {reason[:160]}") from None
    if df.empty:
        raise FeatureError(f"{name} holds no workloads")
    return df


class _RepeatedKey(Exception):
    pass


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _RepeatedKey(next(k for i, k in enumerate(keys) if k in keys[:i]))
    return dict(pairs)


def _refuse_repeats(names: list[str], where: str, what: str) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise FeatureError(f"{where}: column {echo(name, 40)} repeats in the {what}: give each column once")
        seen.add(name)


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise FeatureError(f"input file not found: {echo(str(path), 120)}")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FeatureError(f"cannot read {echo(str(path), 120)}: {exc.strerror or type(exc).__name__}") from None


def _decode(data: bytes, where: str, what: str) -> str:
    try:
        return data.decode("utf-8-sig")  # a leading byte-order mark (spreadsheet exports) is not text
    except UnicodeDecodeError as exc:
        raise FeatureError(
            f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): expected {what}"
        ) from None
