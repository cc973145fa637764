"""Find backends and devices by name: built-in modules plus the ``gimletc.backends`` entry points.

>>> device("nvidia-h100-sxm").vendor
'NVIDIA'
"""

from __future__ import annotations

import difflib
import importlib
from functools import lru_cache

from backends.base import Backend, ReferencePrice
from backends.engines import serving_engines
from backends.plugins import with_plugins
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.errors import BadInput

BUILTIN = ("nvidia", "amd", "trainium", "cerebras", "dmatrix", "gaudi", "cpu")
ENTRY_POINT_GROUP = "gimletc.backends"


@lru_cache(maxsize=1)
def backends() -> tuple[Backend, ...]:
    found = with_plugins([importlib.import_module(f"backends.{name}").BACKEND for name in BUILTIN],
                         ENTRY_POINT_GROUP, "backend", lambda b: b.family)
    known = [e.name for e in serving_engines()]
    for b in found:
        for p in b.engines:
            if p.engine not in known:
                raise BadInput(f"backend {b.family} lists serving engine {p.engine!r}, which no module registers; "
                               f"use one of {', '.join(known)}, or install the engine's plugin")
    return tuple(found)


def all_devices() -> tuple[DeviceSpec, ...]:
    return tuple(d for b in backends() for d in b.devices)


def reference_price(device_id: str) -> ReferencePrice | None:
    """The catalog's labelled reference price of `device_id`, if its backend declares one."""
    return next((p for b in backends() for p in b.prices if p.device == device_id), None)


def backend_of(device_spec: DeviceSpec) -> Backend:
    return next(b for b in backends() if b.family == device_spec.family)


def device(device_id: str) -> DeviceSpec:
    """The device with this id; an unknown id lists the known ones. Backends are asked in order and the first
    match returned, so a catalog device never builds the host's (which reads its calibration record)."""
    for b in backends():
        for d in b.devices:
            if d.id == device_id:
                return d
    devices = {d.id: d for d in all_devices()}
    close = difflib.get_close_matches(device_id, list(devices), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise BadInput(f"device {device_id!r} is not known; {hint}known ids: {', '.join(sorted(devices))}")
