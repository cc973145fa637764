"""`Calibration`: what ``gimletc calibrate`` measured on a device, with its one writer and one reader.

Standard library only. The record is the part of a calibration the compiler
uses: measured peak FLOP/s per dtype, memory bandwidth, and the fitted
efficiency fields of the device family's derate. `save_calibration` writes it
(with the full report beside it, for people) to `calibration_path`;
`load_calibration` reads it back. The catalog (`backends.cpu.host_device`)
and the deployment builder (`compiler.cost.deployment`) both go through
`load_calibration`; nothing else opens the file.

>>> c = Calibration("cpu-host", "cpu", "box", "2026-01-01T00:00:00+00:00", (("fp32", 1e11),), 3e10,
...                 (("compute_eff", 0.5),))
>>> Calibration.from_json(c.to_json()) == c
True
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.ir.files import atomic_write_text, calibration_path
from compiler.ir.prediction import Spread


@dataclass(frozen=True, slots=True)
class Calibration:
    device_id: str
    family: str
    host: str
    measured_at: str
    peak_flops_per_s: tuple[tuple[str, float], ...]
    mem_bw_bytes_per_s: float
    derate: tuple[tuple[str, float], ...]  # fitted `Derate` fields by name
    # How far its held-out whole steps landed, per metric: the intervals of the reference runtime's predictions here
    spreads: tuple[tuple[str, Spread], ...] = ()

    @property
    def provenance(self) -> str:
        return f"measured: gimletc calibrate on {self.host} at {self.measured_at}"

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device_id, "family": self.family, "host": self.host, "measured_at": self.measured_at,
                "peak_flops_per_s": dict(self.peak_flops_per_s), "mem_bw_bytes_per_s": self.mem_bw_bytes_per_s,
                "derate": dict(self.derate), "spreads": {m: s.to_json() for m, s in self.spreads}}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Calibration:
        return Calibration(
            device_id=str(d["device"]), family=str(d.get("family", "")), host=str(d.get("host", "this host")),
            measured_at=str(d.get("measured_at", "?")),
            peak_flops_per_s=tuple(sorted((str(k), float(v)) for k, v in d["peak_flops_per_s"].items())),
            mem_bw_bytes_per_s=float(d["mem_bw_bytes_per_s"]),
            derate=tuple(sorted((str(k), float(v)) for k, v in d["derate"].items())),
            spreads=tuple(sorted((str(m), Spread.from_json(s)) for m, s in (d.get("spreads") or {}).items())))


def load_calibration(device_id: str) -> Calibration | None:
    """The saved calibration of `device_id`, or None if there is none or it is unreadable."""
    try:
        return Calibration.from_json(json.loads(calibration_path(device_id).read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def save_calibration(calibration: Calibration, report: dict[str, Any]) -> Path:
    """Write `calibration` and the report it came from; returns the path. Raises `OSError`."""
    path = calibration_path(calibration.device_id)
    atomic_write_text(path, json.dumps({**report, **calibration.to_json()}, indent=1, sort_keys=True))
    return path


def engine_record_path(device_id: str, engine: str) -> Path:
    """Where ``gimletc calibrate --device D --engine E`` keeps engine E's record: beside D's calibration."""
    return calibration_path(device_id).with_name(f"{device_id}.{engine}.json")


def load_engine_record(device_id: str, engine: str) -> dict[str, Any] | None:
    """The saved engine record (`cost_models.engines.engine_record`), or None if there is none or it is unreadable."""
    try:
        record = json.loads(engine_record_path(device_id, engine).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def save_engine_record(device_id: str, engine: str, record: dict[str, Any]) -> Path:
    """Write an engine record (with its report); returns the path. Raises `OSError`."""
    path = engine_record_path(device_id, engine)
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


# ---------------------------------------------------------------- calibration profiles


@dataclass(frozen=True, slots=True)
class ProfileEntry:
    """One device under one engine as a user's own benchmark runs calibrated it (``gimletc calibrate --from``).

    ``fields`` are the `cost_models.engines.Engine` fields fitted (`RECORD_FIELDS`, kernel efficiencies among
    them), ``fitted_against`` the device numbers they are relative to ([Note: engine records]), ``spreads`` the
    80% spread of each metric from the points predicted by fits that left them out ([Note: prediction
    intervals] in compiler/ir/prediction.py)."""

    device: str
    engine: str
    fields: dict[str, Any]
    fitted_against: dict[str, Any]
    spreads: dict[str, dict[str, Any]]  # metric -> `Spread.to_json`
    pinned: tuple[str, ...] = ()  # the fields the points pin down; the others kept the shipped values
    points: int = 0
    engine_version: str | None = None
    source: str = ""  # what was measured, where, in words

    @property
    def key(self) -> str:
        return f"{self.device}/{self.engine}"

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "engine": self.engine, "engine_version": self.engine_version,
                "fields": self.fields, "fitted_against": self.fitted_against, "spreads": self.spreads,
                "pinned": list(self.pinned), "points": self.points, "source": self.source}

    @staticmethod
    def from_json(d: dict[str, Any]) -> ProfileEntry:
        return ProfileEntry(str(d["device"]), str(d["engine"]), dict(d["fields"]), dict(d["fitted_against"]),
                            dict(d.get("spreads", {})), tuple(d.get("pinned", ())), int(d.get("points", 0)),
                            d.get("engine_version"), str(d.get("source", "")))


@dataclass(frozen=True, slots=True)
class Profile:
    """A named calibration: one `ProfileEntry` per device and engine, read from ``path`` (whose bytes hash to
    ``sha256``); a plan records which profile made it."""

    name: str
    entries: tuple[ProfileEntry, ...]
    path: str = ""
    sha256: str = ""

    def entry(self, device: str, engine: str) -> ProfileEntry | None:
        return next((e for e in self.entries if e.device == device and e.engine == engine), None)


def profiles_dir() -> Path:
    """Where named calibration profiles live: ``$GIMLETC_CACHE_DIR/calibration/profiles``."""
    return calibration_path("x").parent / "profiles"


def profile_path(ref: str) -> Path:
    """The file of profile `ref`: a path to an existing file, else the named profile in `profiles_dir`."""
    as_path = Path(ref).expanduser()
    if as_path.suffix == ".json" or "/" in ref or as_path.is_file():
        return as_path
    return profiles_dir() / f"{ref}.json"


def load_profile(ref: str) -> Profile:
    """The profile `ref` (a name or a file), read and hashed. Raises `ValueError` naming the fix."""
    import hashlib

    path = profile_path(ref)
    try:
        data = path.read_bytes()
    except OSError:
        raise ValueError(f"calibration {ref!r}: no profile at {path}; make one with `gimletc calibrate --from "
                         f"RESULT.json ... --name {Path(ref).stem}`, or give the path of a profile file") from None
    try:
        d = json.loads(data)
        entries = tuple(ProfileEntry.from_json(e) for e in d["entries"])
        name = str(d.get("name") or path.stem)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"calibration {ref!r}: {path} is not a gimletc calibration profile ({e}); make it with "
                         "`gimletc calibrate --from`") from None
    return Profile(name, entries, str(path), hashlib.sha256(data).hexdigest())


def cached_profile(ref: str) -> Profile:
    """`load_profile`, read once per version of its file (a compile costs thousands of deployments)."""
    path = profile_path(ref)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = 0
    return _cached(str(path), stamp, ref)


@functools.lru_cache(maxsize=8)
def _cached(path: str, _stamp: int, ref: str) -> Profile:
    try:
        return load_profile(path)
    except ValueError as e:
        raise ValueError(str(e).replace(repr(path), repr(ref), 1)) from None


def save_profile(name: str, entries: list[ProfileEntry], report: dict[str, Any], path: Path | None = None) -> Path:
    """Write profile `name` (with the report it came from, for people) to `path` or the named location."""
    path = path or profiles_dir() / f"{name}.json"
    atomic_write_text(path, json.dumps({**report, "name": name, "entries": [e.to_json() for e in entries]},
                                       indent=1, sort_keys=True) + "\n")
    return path
