"""Parquet storage for measurement rows: validated on write and on read, written atomically.

Two forms:

* one file (:func:`write_dataset` / :func:`read_dataset`): temp file + rename, used by the main job;
* a **sharded dataset directory** (:class:`ShardedDataset`) for long, resumable, possibly concurrent
  collections::

      <dir>/manifest.jsonl            one JSON line per committed shard: name, rows, sha256, row keys
      <dir>/shards/part-*.parquet     append-only shards, never rewritten
      <dir>/.lock                     writer lock (filelock; advisory, works across processes)

Crash safety. A shard is written to a temp file in ``shards/``, fsynced, renamed to its final name
(rename is atomic on POSIX) and the directory fsynced; only then is its manifest line appended and
fsynced. Readers trust the manifest alone, so a ``kill -9`` at any point leaves either a committed
shard or an orphan file nobody reads (removed by the next writer); a torn last manifest line (the
process died mid-write) is ignored, and the next writer starts a fresh line after it.

Resume and concurrency. Every row has a key (:func:`data.schema.row_key`); the manifest lists the
keys of every committed row. Commits happen under the lock, and a commit drops rows whose key is
already committed, so rerunning a sweep, or two collectors writing the same sweep into the same
directory, never duplicates a row.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from filelock import FileLock

from data.schema import COLUMNS, row_key, validate

MANIFEST = "manifest.jsonl"
SHARDS = "shards"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_parquet_durably(df: pd.DataFrame, path: Path) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory: never a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            df.to_parquet(fh, index=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_dataset(df: pd.DataFrame, path: str | Path) -> Path:
    """Validate then write ``df`` to ``path`` atomically (temp file + rename: never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_durably(validate(df), path)
    return path


def read_dataset(path: str | Path) -> pd.DataFrame:
    """Read one parquet file, or a sharded dataset directory (committed shards only)."""
    path = Path(path)
    if path.is_dir():
        return ShardedDataset(path).read()
    return validate(pd.read_parquet(path))


class ShardedDataset:
    """An append-only, crash-safe, multi-writer dataset directory (see the module docstring)."""

    def __init__(self, path: str | Path, lock_timeout_s: float = 600.0):
        self.path = Path(path)
        self.shard_dir = self.path / SHARDS
        self.manifest_path = self.path / MANIFEST
        self.lock_timeout_s = float(lock_timeout_s)
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(self.path / ".lock"), timeout=self.lock_timeout_s)

    # ------------------------------------------------------------------ reading
    def entries(self) -> list[dict]:
        """Committed shards, in commit order. A torn (unparseable) line is a crashed write: skipped."""
        if not self.manifest_path.exists():
            return []
        out = []
        for line in self.manifest_path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and "shard" in entry:
                out.append(entry)
        return out

    def keys(self) -> set[str]:
        """Row keys of every committed row."""
        return {k for e in self.entries() for k in e["keys"]}

    def __len__(self) -> int:
        return sum(int(e["rows"]) for e in self.entries())

    def read(self, verify: bool = True) -> pd.DataFrame:
        """All committed rows, validated; ``verify`` checks each shard's sha256 against the manifest."""
        frames = []
        for e in self.entries():
            f = self.shard_dir / e["shard"]
            if verify and _sha256(f) != e["sha256"]:
                raise OSError(f"{f}: content does not match its manifest checksum (corrupted shard)")
            frames.append(pd.read_parquet(f))
        if not frames:
            return validate(pd.DataFrame({c: [] for c in COLUMNS}))
        return validate(pd.concat(frames, ignore_index=True))

    # ------------------------------------------------------------------ writing
    def append(self, rows: pd.DataFrame | list[dict], meta: dict | None = None) -> int:
        """Validate and commit ``rows`` as one new shard; rows already committed (same key) are dropped.

        Returns the number of rows committed (0 when every row was already there).
        """
        df = validate(pd.DataFrame(rows) if not isinstance(rows, pd.DataFrame) else rows)
        if df.empty:
            return 0
        keys = [row_key(r) for r in df.to_dict("records")]
        df = df.assign(_key=keys).drop_duplicates("_key", keep="first")
        with self.lock:
            self._repair()
            done = self.keys()
            df = df[~df["_key"].isin(done)]
            if df.empty:
                return 0
            name = f"part-{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:8]}.parquet"
            shard = self.shard_dir / name
            write_parquet_durably(df.drop(columns="_key").reset_index(drop=True), shard)
            entry = {
                "shard": name,
                "rows": int(len(df)),
                "sha256": _sha256(shard),
                "keys": df["_key"].tolist(),
                "written_at": datetime.now(UTC).isoformat(),
                "pid": os.getpid(),
                **({"meta": meta} if meta else {}),
            }
            with open(self.manifest_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, separators=(",", ":")) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            _fsync_dir(self.path)
            return int(len(df))

    def _repair(self) -> None:
        """Under the lock: end a torn manifest line, delete orphan temp files and uncommitted shards.

        Safe because every writer creates and commits its shard while holding the lock, so anything not
        in the manifest at this point was left by a writer that died.
        """
        if self.manifest_path.exists() and self.manifest_path.stat().st_size:
            with open(self.manifest_path, "rb+") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
                    fh.flush()
                    os.fsync(fh.fileno())
        committed = {e["shard"] for e in self.entries()}
        for f in self.shard_dir.iterdir():
            if f.name not in committed:
                f.unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
