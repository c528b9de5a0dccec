"""Run a backend over a list of workloads with a progress bar; returns validated measurement rows."""
from __future__ import annotations

import pandas as pd
from tqdm.auto import tqdm

from data.schema import validate


def collect(backend, workloads: list[dict], desc: str | None = None, progress: bool = True) -> pd.DataFrame:
    """In memory, in order; anything a backend raises becomes an error row (``data.engine.safe_measure``).

    For long or resumable sweeps use ``data.engine.run_sweep`` (sharded, crash-safe dataset directory).
    """
    from data.engine import safe_measure

    rows = [safe_measure(backend, w) for w in tqdm(workloads, desc=desc or backend.name, disable=not progress,
                                             unit="cfg", dynamic_ncols=True)]
    return validate(pd.DataFrame(rows))


def collect_from_config(cfg, registry, progress: bool = True):
    """The collection stage of the main job: one seeded shape sweep, measured on this CPU and simulated
    on the configured GPUs. Returns ``(rows, cpu_spec)``; ``cpu_spec`` is None when the CPU is disabled."""
    from data.backends.cpu import CpuBackend
    from data.backends.sim_roofline import SimRooflineBackend
    from data.sweep import random_sweep

    from omegaconf import OmegaConf

    sweep = cfg.sweep
    ops = OmegaConf.to_container(sweep.ops, resolve=True)
    frames, cpu_spec = [], None
    if cfg.cpu.enabled:
        backend = CpuBackend(num_threads=cfg.cpu.num_threads, min_run_time=cfg.cpu.min_run_time, warmup=cfg.cpu.warmup,
                             measure_memory=cfg.cpu.get("measure_memory", True), energy=cfg.cpu.get("energy", True))
        workloads = random_sweep(ops, list(cfg.cpu.dtypes), cfg.seed, sweep.max_flops, sweep.max_bytes)
        cpu_spec = backend.hardware
        frames.append(collect(backend, workloads, desc=f"measure {cpu_spec.id}", progress=progress))
    if cfg.sim.enabled:
        workloads = random_sweep(ops, list(cfg.sim.dtypes), cfg.seed, sweep.max_flops, sweep.max_bytes)
        for hw in cfg.sim.hardware:
            backend = SimRooflineBackend(registry.get(hw), compute_efficiency=cfg.sim.compute_efficiency,
                                         memory_efficiency=cfg.sim.memory_efficiency,
                                         launch_overhead_us=cfg.sim.launch_overhead_us,
                                         tile_m=cfg.sim.tile_m, tile_n=cfg.sim.tile_n)
            frames.append(collect(backend, workloads, desc=f"simulate {backend.hardware.id}", progress=progress))
    if not frames:
        raise ValueError("collect: both cpu and sim are disabled; nothing to measure")
    return pd.concat(frames, ignore_index=True), cpu_spec
