"""Where gimletc keeps files between runs (trace cache, calibrations). Standard library only."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$GIMLETC_CACHE_DIR``, else ``$XDG_CACHE_HOME/gimletc``, else ``~/.cache/gimletc``."""
    if os.environ.get("GIMLETC_CACHE_DIR"):
        return Path(os.environ["GIMLETC_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gimletc"


def calibration_path(device_id: str) -> Path:
    """Where `gimletc calibrate` saves a device's measured peaks and fitted derates."""
    return cache_dir() / "calibration" / f"{device_id}.json"
