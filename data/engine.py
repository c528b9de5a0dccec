"""Engines run a backend over a sweep; :func:`run_sweep` streams their rows into a sharded dataset.

* :class:`LocalEngine` (``collect.engine=local``): in this process, in sweep order.
* :class:`RayEngine` (``collect.engine=ray``): chunks of workloads as Ray tasks. ``address=None``
  starts a local Ray (``ray.init(num_cpus=...)``); on a cluster pass ``address="auto"`` (on a node of
  a running cluster) or ``address="ray://head:10001"`` (Ray client). Every worker needs this project
  importable (same image, or ``runtime_env={"working_dir": "."}``). Each task reserves as many Ray CPUs
  as the backend pins threads, so CPU measurements do not share cores with each other; other load on
  the node still adds noise (the CV column shows it).

Both engines turn any exception a backend lets escape (and, on Ray, a task or worker that dies) into
error rows, so one bad configuration never stops a sweep. Resume: :func:`run_sweep` skips workloads
whose row key is already committed, shows a progress bar with ETA, and commits a shard every
``shard_rows`` rows, so a killed run loses at most one shard's worth of work.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator

from tqdm.auto import tqdm

from data.backends import base_row, environment
from data.schema import row_key
from data.store import ShardedDataset
from data.workloads import OPS, count_cost

log = logging.getLogger(__name__)


def _hardware_id(backend) -> str:
    return backend.hardware.id


def error_row(backend, workload: dict, exc: BaseException) -> dict:
    """A schema row recording that ``workload`` failed on ``backend`` with ``exc``."""
    row = base_row(
        workload,
        _hardware_id(backend),
        backend.name,
        getattr(backend, "source", backend.name),
        environment(engine_error=True),
    )
    try:
        row["flops"], row["bytes"] = count_cost(workload["op"], workload["params"], workload["dtype"])
    except Exception:  # the shape itself is invalid: no cost to report
        row["flops"], row["bytes"] = 0.0, 1.0
    row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500], runtime_ms=None)
    return row


def safe_measure(backend, workload: dict) -> dict:
    """``backend.measure(workload)``, with anything it raises turned into an error row."""
    try:
        row = backend.measure(workload)
    except Exception as exc:  # noqa: BLE001 - a failing config is data, not a crash
        row = error_row(backend, workload, exc)
    if workload.get("config") and not row.get("config"):
        row["config"] = json.dumps(workload["config"], sort_keys=True)
    return row


def workload_key(backend, workload: dict) -> str:
    """The row key the measured row will have (see :func:`data.schema.row_key`)."""
    return row_key({**workload, "hardware": _hardware_id(backend), "backend": backend.name})


def _measure_chunk(backend, workloads: list[dict]) -> list[dict]:
    return [safe_measure(backend, w) for w in workloads]


class LocalEngine:
    """In-process, one workload at a time, in sweep order."""

    name = "local"

    def map(self, backend, workloads: list[dict]) -> Iterator[list[dict]]:
        for w in workloads:
            yield [safe_measure(backend, w)]


class RayEngine:
    """Ray tasks over chunks of ``chunk_size`` workloads; results stream back as tasks finish.

    ``max_in_flight`` bounds the tasks submitted but not yet collected (memory and resume granularity).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        chunk_size: int = 8,
        max_in_flight: int = 64,
        runtime_env: dict | None = None,
        shutdown: bool = False,
    ):
        self.address = address
        self.num_cpus = num_cpus
        self.chunk_size = max(1, int(chunk_size))
        self.max_in_flight = max(1, int(max_in_flight))
        self.runtime_env = runtime_env
        self.shutdown = shutdown

    def _init(self):
        import ray

        if not ray.is_initialized():
            kwargs = {
                "address": self.address,
                "runtime_env": self.runtime_env,
                "log_to_driver": False,
                "include_dashboard": False,
            }
            if self.address is None and self.num_cpus is not None:
                kwargs["num_cpus"] = int(self.num_cpus)
            ray.init(**{k: v for k, v in kwargs.items() if v is not None or k == "address"})
        return ray

    def map(self, backend, workloads: list[dict]) -> Iterator[list[dict]]:
        ray = self._init()
        task = ray.remote(_measure_chunk).options(num_cpus=int(getattr(backend, "num_threads", 1) or 1), max_retries=0)
        backend_ref = ray.put(backend)
        chunks = [workloads[i : i + self.chunk_size] for i in range(0, len(workloads), self.chunk_size)]
        pending: dict = {}
        next_chunk = 0
        try:
            while next_chunk < len(chunks) or pending:
                while next_chunk < len(chunks) and len(pending) < self.max_in_flight:
                    pending[task.remote(backend_ref, chunks[next_chunk])] = chunks[next_chunk]
                    next_chunk += 1
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    chunk = pending.pop(ref)
                    try:
                        yield ray.get(ref)
                    except Exception as exc:  # the task or its worker died: record, go on
                        yield [error_row(backend, w, exc) for w in chunk]
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            if self.shutdown:
                ray.shutdown()


ENGINES = {"local": LocalEngine, "ray": RayEngine}


def make_engine(name: str, **kwargs):
    if name not in ENGINES:
        raise ValueError(f"unknown collect engine {name!r}; known: {', '.join(ENGINES)}")
    return ENGINES[name](**kwargs) if name != "local" else LocalEngine()


def run_sweep(
    backend,
    workloads: Iterable[dict],
    dataset: ShardedDataset | str,
    engine=None,
    shard_rows: int = 64,
    progress: bool = True,
    desc: str | None = None,
) -> dict:
    """Measure every workload not yet in ``dataset`` and commit the rows in shards of ``shard_rows``.

    Returns counts: ``total`` workloads, ``skipped`` (already committed), ``measured``, ``committed``
    (rows new to the dataset; lower than measured only when a concurrent writer got there first),
    ``errors`` (error rows among the measured) and ``seconds``.
    """
    dataset = dataset if isinstance(dataset, ShardedDataset) else ShardedDataset(dataset)
    engine = engine or LocalEngine()
    workloads = list(workloads)
    unknown = sorted({w["op"] for w in workloads} - set(OPS))
    if unknown:
        raise ValueError(f"sweep holds unknown ops: {', '.join(unknown)}")
    done = dataset.keys()
    todo, seen = [], set(done)
    for w in workloads:
        key = workload_key(backend, w)
        if key not in seen:
            seen.add(key)
            todo.append(w)
    stats = {"total": len(workloads), "skipped": len(workloads) - len(todo), "measured": 0, "committed": 0, "errors": 0}
    t0 = time.perf_counter()
    buffer: list[dict] = []
    bar = tqdm(
        total=len(todo),
        desc=desc or f"{backend.name} {_hardware_id(backend)}",
        unit="cfg",
        disable=not progress,
        dynamic_ncols=True,
        smoothing=0.1,
    )
    try:
        for rows in engine.map(backend, todo):
            buffer.extend(rows)
            stats["measured"] += len(rows)
            stats["errors"] += sum(r.get("status") == "error" for r in rows)
            bar.update(len(rows))
            if len(buffer) >= shard_rows:
                stats["committed"] += dataset.append(buffer)
                buffer = []
        if buffer:
            stats["committed"] += dataset.append(buffer)
    finally:
        bar.close()
    stats["seconds"] = time.perf_counter() - t0
    return stats
