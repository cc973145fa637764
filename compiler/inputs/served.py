"""A device type as the cost code reads it, resolved once at the boundary: its spec, the engine that serves it
(with that engine's costs as measured there, where they were), its host calibration, and what its backend says
the costing needs. The registries (`backends.registry`, `backends.engines`) and the calibration store
(`compiler.ir.calibration`) are read here; the pool-option code (`compiler.cost`) and the arithmetic
(`cost_models`) compute from the values.

>>> h100 = served("nvidia-h100-sxm", "vllm")
>>> h100.spec.vendor, h100.engine.name, h100.static_shapes
('NVIDIA', 'vllm', False)
>>> served("dmatrix-corsair").unsupported_reasons("bf16")[0][:60]
'dmatrix-corsair has no published bf16 throughput, nor a wide'
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from backends.engines import engine_costs
from backends.registry import backend_of, device
from compiler.ir.calibration import (Calibration, Profile, cached_profile, engine_record_path, load_calibration,
                                     load_engine_record, profile_path)
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.errors import BadInput
from compiler.ir.files import calibration_path
from compiler.ir.precision import DTYPE_BYTES
from cost_models import engines
from cost_models.engines import Engine


@dataclass(frozen=True, slots=True)
class ServedDevice:
    """One device type under one engine (see the module docstring)."""

    spec: DeviceSpec
    engine: Engine  # its step costs, as a profile or `gimletc calibrate --engine` measured them on this device
    calibration: Calibration | None  # the device's own measured calibration (`gimletc calibrate --device`)
    static_shapes: bool  # its engine runs programs compiled per bucket of lengths ([Note: buckets])
    unsupported: tuple[tuple[str, tuple[str, ...]], ...]  # weight dtype -> why it cannot store it (none: it can)

    def unsupported_reasons(self, dtype: str) -> list[str]:
        """Why this device cannot run weights stored at `dtype` (empty when it can)."""
        return list(dict(self.unsupported).get(dtype, ()))


def served(device_id: str, engine: str = "generic", calibration: str | None = None) -> ServedDevice:
    """`device_id` served by `engine` (``generic``: the engine-neutral costs). `calibration`: a profile (name or
    file, ``gimletc calibrate --from``) whose entry for this device and engine, where it has one, replaces the
    shipped engine costs and kernel efficiencies (and bounds the predictions' intervals); else the engine as
    ``calibrate --engine`` measured it on this device, where it did. Raises `BadInput` naming the engine or the
    profile that is wrong. Resolved once per version of the calibration files it reads."""
    files = [calibration_path(device_id), engine_record_path(device_id, engine)]
    files += [profile_path(calibration)] if calibration else []
    return _served(device_id, engine, calibration, tuple(_stamp(f) for f in files))


def _stamp(path: Path) -> tuple[str, int, int] | tuple[str]:
    """What tells one version of a file from another: its path, modification time and size (the path alone
    where there is no file)."""
    try:
        st = path.stat()
    except OSError:
        return (str(path),)
    return str(path), st.st_mtime_ns, st.st_size


@lru_cache(maxsize=256)
def _served(device_id: str, engine: str, calibration: str | None, _stamps: tuple) -> ServedDevice:
    spec = device(device_id)
    backend = backend_of(spec)
    host = load_calibration(spec.id)
    entry = profile(calibration).entry(spec.id, engine) if calibration else None
    try:  # as the profile or `gimletc calibrate --engine` measured it on this device ([Note: engine records])
        base = engine_costs(engine)
        if entry is not None:
            served_by = engines.calibrated_engine(base, entry.to_json(), spec, host,
                                                  refresh=f"gimletc calibrate --from ... --name {calibration}")
        else:
            served_by = engines.calibrated_engine(base, load_engine_record(spec.id, engine), spec, host) or base
            if engine == "generic" and host is not None and host.spreads and served_by.calibrated_on is None:
                # the reference runtime on a calibrated host: bounded by the calibration's held-out steps
                served_by = replace(served_by, calibrated_on=spec.id, spreads=host.spreads)
    except (ValueError, BadInput) as e:
        raise BadInput(f"engine: {e}") from None
    reasons = tuple((d, tuple(backend.unsupported_reasons(spec, d))) for d in DTYPE_BYTES)
    return ServedDevice(spec, served_by, host, runs_static_shapes(device_id),
                        tuple((d, r) for d, r in reasons if r))


def profile(ref: str) -> Profile:
    """The calibration profile `ref` (a name or a file), read once per version of its file. Raises `BadInput`."""
    try:
        return cached_profile(ref)
    except ValueError as e:
        raise BadInput(str(e)) from None


def runs_static_shapes(device_id: str) -> bool:
    """Whether `device_id`'s engine runs programs compiled per bucket of lengths ([Note: buckets])."""
    return any(p.static_shapes for p in backend_of(device(device_id)).engines[:1])
