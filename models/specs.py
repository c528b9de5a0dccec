"""Hardware specs given at prediction time: a new GPU is data, not a model weight.

A served model carries the hardware registry it was trained with (``models.pyfunc``), and it predicts any GPU from
its spec numbers alone (every model sees hardware only through them: ``features.tabular``). So a GPU added after
training needs its spec sheet, not a retrained model:

* :func:`read_specs`: spec files (``conf/hardware/<id>.yaml``'s fields, ``conf/hardware/README.md``) or folders of
  them, e.g. ``costmodel predict --hardware-spec b200.yaml`` / ``--hardware-spec conf/hardware``;
* :func:`overlay`: a copy of a registry with those specs added (a spec with an id the registry has replaces it);
* :func:`column_specs`: a ``hardware_spec`` column in the input (a mapping, or its JSON / YAML text), one spec per
  row that names it, for a caller that cannot pass files (REST).

The served row's ``in_domain`` / ``domain_distance`` / ``domain_reason`` (``models.domain``) say how far the new
spec lies from the trained hardware's. Every problem is one line naming the file or row (``ValueError`` /
``FeatureError``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from data.hardware import NON_GPU_KINDS, HardwareRegistry, HardwareSpec

SPEC_COLUMN = "hardware_spec"
# the roofline numbers a GPU spec must give, each a finite number > 0 (l2_cache_mb may be 0)
POSITIVE = ("sm_count", "boost_clock_mhz", "memory_gb", "memory_bandwidth_gbs")


def spec_from_mapping(d, where: str) -> HardwareSpec:
    """A :class:`~data.hardware.HardwareSpec` from one spec's fields, checked: ``id`` / ``name`` / ``kind`` /
    ``vendor`` present, a GPU's roofline numbers finite and > 0, every ``peak_tflops`` rate a finite number > 0.
    ``ValueError`` naming ``where`` and the field otherwise."""
    if not isinstance(d, Mapping):
        raise ValueError(f"{where}: a hardware spec is a mapping of its fields, got {type(d).__name__}")
    d = dict(d)
    d.setdefault("name", d.get("id"))
    d.setdefault("kind", "gpu")
    d.setdefault("vendor", "unknown")
    if not isinstance(d.get("id"), str) or not d["id"].strip():
        raise ValueError(f"{where}: a hardware spec needs an id (a name such as B200)")
    try:
        spec = HardwareSpec.from_dict(d)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{where}: {' '.join(str(exc).split())}") from None
    if spec.kind not in NON_GPU_KINDS:
        for field in POSITIVE:
            _positive(getattr(spec, field), f"{where}: {field}")
        _positive(spec.l2_cache_mb, f"{where}: l2_cache_mb", zero_ok=True)
        for dtype, rate in spec.peak_tflops.items():
            _positive(rate, f"{where}: peak_tflops.{dtype}")
    return spec


def _positive(value, where: str, zero_ok: bool = False) -> None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (x == 0 and not zero_ok):
        raise ValueError(f"{where} must be a finite number {'>= 0' if zero_ok else '> 0'}, got {value!r}")


def read_spec_file(path: str | Path) -> HardwareSpec:
    """One spec file (YAML or JSON, the fields of ``conf/hardware/<id>.yaml``)."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"hardware spec file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read hardware spec {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"hardware spec {path}: not YAML ({' '.join(str(exc).split())[:200]})") from None
    return spec_from_mapping(doc, f"hardware spec {path.name}")


def read_specs(paths: Iterable[str | Path]) -> list[HardwareSpec]:
    """The specs of spec files and of the ``*.yaml`` files in folders, in order (a later one with the same id
    wins)."""
    specs = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(p.glob("*.yaml"))
            if not files:
                raise ValueError(f"no hardware spec (*.yaml) in folder {p}")
            specs.extend(read_spec_file(f) for f in files)
        else:
            specs.append(read_spec_file(p))
    return specs


def as_specs(items) -> list[HardwareSpec]:
    """Specs from a mix of :class:`HardwareSpec`, mappings of fields, and paths to files or folders."""
    out = []
    for item in [items] if isinstance(items, (str, Path, Mapping, HardwareSpec)) else list(items or ()):
        if isinstance(item, HardwareSpec):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(spec_from_mapping(item, f"hardware spec {item.get('id', '?')!r}"))
        else:
            out.extend(read_specs([item]))
    return out


def overlay(registry: HardwareRegistry, specs: Iterable[HardwareSpec]) -> HardwareRegistry:
    """A copy of ``registry`` with ``specs`` added (replacing a spec of the same id); ``registry`` is unchanged."""
    specs = list(specs)
    replaced = {s.id for s in specs}
    return HardwareRegistry([*(s for s in registry if s.id not in replaced), *specs])


def _parse_cell(cell, where: str) -> HardwareSpec:
    if isinstance(cell, (bytes, bytearray)):
        cell = cell.decode("utf-8", "replace")
    if isinstance(cell, str):
        try:
            doc = json.loads(cell)
        except ValueError:
            import yaml

            try:
                doc = yaml.safe_load(cell)
            except yaml.YAMLError:
                raise ValueError(f"{where}: {SPEC_COLUMN} is neither JSON nor YAML") from None
        cell = doc
    return spec_from_mapping(cell, f"{where}: {SPEC_COLUMN}")


def _empty(cell) -> bool:
    if cell is None:
        return True
    if isinstance(cell, float) and math.isnan(cell):
        return True
    return isinstance(cell, str) and not cell.strip()


def column_specs(df: pd.DataFrame) -> tuple[pd.DataFrame, list[HardwareSpec]]:
    """``(frame, specs)``: the ``hardware_spec`` column of ``df`` parsed (each distinct cell once) and dropped. A row
    with a spec and no ``hardware`` gets the spec's id; a row with both must name the spec (its id or an alias).
    Two different specs under one id are refused. ``ValueError`` naming the row otherwise."""
    cells = df[SPEC_COLUMN].to_numpy(object)
    out = df.drop(columns=[SPEC_COLUMN])
    keys = [None if _empty(c) else json.dumps(c, sort_keys=True, default=str) for c in cells]
    parsed: dict[str, HardwareSpec] = {}
    by_id: dict[str, HardwareSpec] = {}
    named = out["hardware"].to_numpy(object) if "hardware" in out.columns else np.full(len(out), None, object)
    hardware = named.copy()
    for i, key in enumerate(keys):
        if key is None:
            continue
        if key not in parsed:
            spec = _parse_cell(cells[i], f"row {i}")
            other = by_id.get(spec.id)
            if other is not None and other != spec:
                raise ValueError(f"row {i}: two different {SPEC_COLUMN} values name hardware {spec.id!r}")
            parsed[key] = by_id[spec.id] = spec
        spec = parsed[key]
        name = named[i]
        if _empty(name):
            hardware[i] = spec.id
        elif str(name).lower() not in {spec.id.lower(), *(a.lower() for a in spec.aliases)}:
            raise ValueError(
                f"row {i}: hardware {str(name)[:80]!r} is not the id or an alias of its {SPEC_COLUMN} ({spec.id!r})"
            )
    if parsed:
        out = out.assign(hardware=hardware)
    return out, list(by_id.values())
