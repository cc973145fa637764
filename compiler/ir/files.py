"""Where gimletc keeps files between runs, and the one way it writes them. Standard library only.

Everything gimletc saves (trace cache entries, calibrations, plans) goes
through `atomic_write_text`: a reader never sees half a file, and a failed
write leaves the previous file in place.
"""

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


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and an atomic rename.

    Creates missing parent folders. Raises `OSError` (the caller decides whether that is fatal).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "a" / "b.json"
    >>> atomic_write_text(p, "{}")
    >>> p.read_text()
    '{}'
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
