"""Scenario files for ``gimletc estimate --scenarios``: one deployment per CSV row.

Columns are named like the flags: ``model, device, count, tp, pp, dtype,
input_len, output_len`` and ``batch`` (a number or ``max``) or
``concurrency``; ``kv_dtype`` and ``id`` are optional. `read_rows` fails on
the file as a whole (unreadable, empty, no model or device column); `scenario`
turns one row into the keyword arguments of `compiler.driver.estimate` or
raises `BadInput` for that row alone, so one bad row never stops the others.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from compiler.ir.errors import BadInput
from compiler.ir.precision import Precision

INPUT_COLUMNS = ("id", "model", "device", "count", "tp", "pp", "dtype", "kv_dtype", "input_len", "output_len",
                 "batch", "concurrency")


def read_rows(path: str | Path) -> list[dict[str, str]]:
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise BadInput(f"--scenarios {path}: cannot read ({e.strerror}); check the path") from None
    if not rows:
        raise BadInput(f"--scenarios {path}: no rows; the first line must name columns like the flags "
                       f"({', '.join(INPUT_COLUMNS[1:])})")
    missing = {"model", "device"} - set(rows[0])
    if missing:
        raise BadInput(f"--scenarios {path}: missing column(s) {', '.join(sorted(missing))}")
    return rows


def batch(value: str | int | None) -> int | str | None:
    """A ``batch`` value: a whole number >= 1, ``max``, or None when empty.

    >>> batch("max"), batch("8"), batch("")
    ('max', 8, None)
    """
    if value in (None, ""):
        return None
    if str(value).strip().lower() == "max":
        return "max"
    try:
        b = int(value)
    except ValueError:
        raise BadInput(f"batch {value!r}: expected a whole number or 'max'") from None
    if b < 1:
        raise BadInput(f"batch {value!r}: must be at least 1")
    return b


def scenario(row: dict[str, str]) -> dict[str, Any]:
    """The keyword arguments of `compiler.driver.estimate` for one row."""
    dtype = (row.get("dtype") or "bf16").strip()
    kv_dtype = (row.get("kv_dtype") or "").strip() or None
    try:
        precision = Precision.of(dtype, kv_dtype)
    except ValueError as e:
        raise BadInput(f"column 'dtype' or 'kv_dtype': {e}") from None
    return dict(model=row["model"].strip(), device=row["device"].strip(), count=_int(row, "count", 1),
                tp=_int(row, "tp"), pp=_int(row, "pp", 1), precision=precision,
                input_len=_int(row, "input_len", 1024), output_len=_int(row, "output_len", 256),
                batch=batch(row.get("batch") or None), concurrency=_int(row, "concurrency"))


def _int(row: dict[str, str], key: str, default: int | None = None) -> int | None:
    value = (row.get(key) or "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise BadInput(f"column {key!r}: expected a whole number, got {value!r}") from None
