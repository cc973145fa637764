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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.ir.files import atomic_write_text, calibration_path


@dataclass(frozen=True, slots=True)
class Calibration:
    device_id: str
    family: str
    host: str
    measured_at: str
    peak_flops_per_s: tuple[tuple[str, float], ...]
    mem_bw_bytes_per_s: float
    derate: tuple[tuple[str, float], ...]  # fitted `Derate` fields by name

    @property
    def provenance(self) -> str:
        return f"measured: gimletc calibrate on {self.host} at {self.measured_at}"

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device_id, "family": self.family, "host": self.host, "measured_at": self.measured_at,
                "peak_flops_per_s": dict(self.peak_flops_per_s), "mem_bw_bytes_per_s": self.mem_bw_bytes_per_s,
                "derate": dict(self.derate)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Calibration:
        return Calibration(
            device_id=str(d["device"]), family=str(d.get("family", "")), host=str(d.get("host", "this host")),
            measured_at=str(d.get("measured_at", "?")),
            peak_flops_per_s=tuple(sorted((str(k), float(v)) for k, v in d["peak_flops_per_s"].items())),
            mem_bw_bytes_per_s=float(d["mem_bw_bytes_per_s"]),
            derate=tuple(sorted((str(k), float(v)) for k, v in d["derate"].items())))


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
