"""Scenario files for ``gimletc estimate --scenarios``: one deployment per CSV row.

Columns are named like the flags: ``model, device, count, tp, pp, dtype,
input_len, output_len`` and ``batch`` (a number or ``max``) or
``concurrency``; ``kv_dtype``, ``engine``, ``lengths`` (``fixed`` or
``vary``), ``calibration`` (a profile, ``calibrate --from``) and ``id`` are
optional. `read_rows` fails on the file as a whole
(unreadable, not UTF-8 text, empty, a column it does not know, no model or
device column); `scenario` turns one row into the keyword arguments of
`compiler.driver.estimate` or raises `BadInput` for that row alone, so one
bad row never stops the others.

>>> scenario({"model": "llama-tiny", "device": "cpu-host", "count": "2", "batch": "max"})["count"]
2
"""

from __future__ import annotations

import csv
import difflib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends import registry
from compiler.ir.errors import BadInput
from compiler.ir.precision import Precision

if TYPE_CHECKING:
    from cost_models.buckets import Buckets

INPUT_COLUMNS = ("id", "model", "device", "count", "tp", "pp", "dtype", "kv_dtype", "input_len", "output_len",
                 "batch", "concurrency", "engine", "lengths", "context_buckets", "token_buckets", "calibration")
#: Upper bounds that keep every later product finite: more than any fleet or context holds.
MAX_DEVICES = 1_000_000
MAX_TOKENS = 100_000_000


def read_rows(path: str | Path) -> list[dict[str, str]]:
    where = f"--scenarios {path}"
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except OSError as e:
        raise BadInput(f"{where}: cannot read ({e.strerror or e}); check the path") from None
    except UnicodeDecodeError as e:
        raise BadInput(f"{where}: not UTF-8 text (byte {e.start}); save the file as UTF-8 CSV") from None
    except csv.Error as e:
        raise BadInput(f"{where}: not a readable CSV ({e}); save it as comma-separated text") from None
    if not rows:
        raise BadInput(f"{where}: no rows; the first line must name columns like the flags "
                       f"({', '.join(INPUT_COLUMNS[1:])})")
    _check_header(where, header)
    return rows


def _check_header(where: str, header: list[str]) -> None:
    """Every column known and named once, and the two required ones present."""
    for column in header:
        if column not in INPUT_COLUMNS:
            close = difflib.get_close_matches(column.strip().lower(), INPUT_COLUMNS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise BadInput(f"{where}: unknown column {column!r}; {hint}columns are {', '.join(INPUT_COLUMNS)}")
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise BadInput(f"{where}: column {repeated[0]!r} appears twice; keep one")
    missing = {"model", "device"} - set(header)
    if missing:
        raise BadInput(f"{where}: missing column(s) {', '.join(sorted(missing))}")


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
    if not 1 <= b <= MAX_TOKENS:
        raise BadInput(f"batch {value!r}: must be between 1 and {MAX_TOKENS:,}")
    return b


def scenario(row: dict[str | None, Any]) -> dict[str, Any]:
    """The keyword arguments of `compiler.driver.estimate` for one row."""
    if row.get(None):
        raise BadInput(f"{len(row[None])} more value(s) than columns; quote values that contain commas")
    missing = [k for k, v in row.items() if v is None]
    if missing:
        raise BadInput(f"column {missing[0]!r}: no value (the row has fewer values than the header has columns)")
    dtype = (row.get("dtype") or "bf16").strip()
    kv_dtype = (row.get("kv_dtype") or "").strip() or None
    try:
        precision = Precision.of(dtype, kv_dtype)
    except ValueError as e:
        raise BadInput(f"column 'dtype' or 'kv_dtype': {e}") from None
    model, device = (row.get("model") or "").strip(), (row.get("device") or "").strip()
    if not model or not device:
        raise BadInput(f"column {'model' if not model else 'device'!r}: empty; name a preset and a device id")
    try:
        registry.device(device)
    except BadInput as e:
        raise BadInput(f"column 'device': {e}") from None
    b, concurrency = batch((row.get("batch") or "").strip() or None), _int(row, "concurrency", None, MAX_TOKENS)
    if b is not None and concurrency is not None:
        raise BadInput("columns 'batch' and 'concurrency': give one of them, not both")
    input_len, output_len = _int(row, "input_len", 1024, MAX_TOKENS), _int(row, "output_len", 256, MAX_TOKENS)
    buckets = launch_buckets(row.get("context_buckets"), row.get("token_buckets"), input_len, output_len,
                             names=("column 'context_buckets'", "column 'token_buckets'"))
    return dict(model=model, device=device, count=_int(row, "count", 1, MAX_DEVICES),
                tp=_int(row, "tp", None, MAX_DEVICES), pp=_int(row, "pp", 1, MAX_DEVICES), precision=precision,
                input_len=input_len, output_len=output_len, batch=b, concurrency=concurrency, engine=_engine(row),
                lengths=_lengths(row), buckets=buckets, calibration=(row.get("calibration") or "").strip() or None)


def launch_buckets(context: str | None, token: str | None, input_len: int, output_len: int,
                   names: tuple[str, str] = ("--context-buckets", "--token-buckets")) -> Buckets | None:
    """The buckets of a Neuron launch from lengths separated by commas or spaces (``--context-buckets``,
    ``--token-buckets``; `names` say where they came from), either missing one as gimletc's own launch writes it
    for this request (`Buckets.for_classes`: not padded); None where neither is given. A list whose largest bucket cannot hold the request is
    refused, as NxD Inference refuses the request ([Note: buckets])."""
    from cost_models.buckets import Buckets

    context, token = (v if v and v.strip() else None for v in (context, token))
    if context is None and token is None:
        return None
    auto = Buckets.for_classes(input_len + output_len, [input_len], [input_len + output_len])
    lists = []
    for flag, text, default, need in ((names[0], context, auto.context, input_len),
                                      (names[1], token, auto.token, input_len + output_len)):
        if text is None:
            lists.append(default)
            continue
        try:
            lengths = tuple(sorted({int(v) for v in re.split(r"[,\s]+", text.strip()) if v}))
        except ValueError:
            raise BadInput(f"{flag} {text!r}: give token counts separated by commas or spaces, e.g. 2048,4096,8192"
                           ) from None
        if not lengths or not 1 <= lengths[0] <= lengths[-1] <= MAX_TOKENS:
            raise BadInput(f"{flag} {text!r}: give token counts from 1 to {MAX_TOKENS:,} separated by commas or "
                           "spaces, e.g. 2048,4096,8192")
        if lengths[-1] < need:
            raise BadInput(f"{flag} {text}: the largest, {lengths[-1]}, cannot hold {need} tokens, so the engine "
                           f"would refuse the request; add a bucket of at least {need}")
        lists.append(lengths)
    return Buckets(*lists)


def _int(row: dict[str | None, Any], key: str, default: int | None, high: int) -> int | None:
    value = (row.get(key) or "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadInput(f"column {key!r}: expected a whole number, got {value!r}") from None
    if not 1 <= number <= high:
        raise BadInput(f"column {key!r}: {number} is out of range; give a whole number from 1 to {high:,}")
    return number


def _lengths(row: dict[str | None, Any]) -> str:
    from cost_models.load import LENGTHS

    value = (row.get("lengths") or "fixed").strip()
    if value not in LENGTHS:
        raise BadInput(f"column 'lengths': {value!r}; use {' or '.join(LENGTHS)} (empty: fixed)")
    return value


def _engine(row: dict[str | None, Any]) -> str:
    from backends.engines import costed_names

    name = (row.get("engine") or "generic").strip()
    if name not in costed_names():
        raise BadInput(f"column 'engine': {name!r} is not a serving engine; use one of {', '.join(costed_names())}")
    return name
