"""Request traces: one request per line, binned into request classes by prompt length.

A trace is CSV (with a header) or JSONL. Each request gives its prompt and
output tokens under any of these names (the Azure LLM inference traces use
the first pair), and optionally an arrival time:

- prompt: ``ContextTokens``, ``input_tokens``, ``input_len``, ``prompt_tokens``
- output: ``GeneratedTokens``, ``output_tokens``, ``output_len``, ``completion_tokens``
- arrival: ``TIMESTAMP``, ``timestamp``, ``arrival_time`` (seconds, or an ISO 8601 time)

`bin_trace` sorts requests by prompt length and cuts them into up to ``k``
classes of (nearly) equal count, so each class is a narrow length band with
its own mean and maximum; the arrival rate is requests over the span of the
timestamps. Deterministic: the same file gives the same classes.

>>> classes, rate = bin_trace([(100, 10, 0.0), (120, 12, 1.0), (4000, 50, 2.0), (5000, 40, 4.0)], 2)
>>> [(c["name"], c["share"], c["input_len"]["max"]) for c in classes], rate   # 3 arrivals after the first in 4 s
([('trace-1: prompts 100-120', 0.5, 120), ('trace-2: prompts 4000-5000', 0.5, 5000)], 0.75)
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path
from typing import Any

from compiler.inputs.yaml_file import MAX_NUMBER
from compiler.ir.errors import BadInput

PROMPT = ("ContextTokens", "input_tokens", "input_len", "prompt_tokens")
OUTPUT = ("GeneratedTokens", "output_tokens", "output_len", "completion_tokens")
ARRIVAL = ("TIMESTAMP", "timestamp", "arrival_time")

Request = tuple[int, int, float | None]


def read_trace(path: Path) -> list[Request]:
    """(prompt tokens, output tokens, arrival s or None) per request; `BadInput` naming the line for a bad one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"trace {path}: cannot read ({e}); give a readable CSV or JSONL file") from None
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        records = []
        for i, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    records.append((i, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise BadInput(f"trace {path}: line {i} is not JSON ({e.msg}); one JSON object per line") from None
    else:
        records = list(enumerate(csv.DictReader(text.splitlines()), start=2))
    requests = [_request(path, line, rec) for line, rec in records]
    if not requests:
        raise BadInput(f"trace {path}: no requests; give one request per line with prompt and output tokens")
    return requests


def _field(rec: dict, names: tuple[str, ...]) -> Any:
    return next((rec[n] for n in names if n in rec and rec[n] not in (None, "")), None)


def _request(path: Path, line: int, rec: Any) -> Request:
    if not isinstance(rec, dict):
        raise BadInput(f"trace {path}: line {line} is not an object with prompt and output tokens")
    values = []
    for names in (PROMPT, OUTPUT):
        raw = _field(rec, names)
        try:
            tokens = int(float(raw))
        except (TypeError, ValueError, OverflowError):  # OverflowError: inf, 1e400
            raise BadInput(f"trace {path}: line {line}: no whole number under any of {', '.join(names)}") from None
        if not 1 <= tokens <= MAX_NUMBER:
            raise BadInput(f"trace {path}: line {line}: {tokens:.3g} tokens; lengths must be from 1 to "
                           f"{MAX_NUMBER:.0e}")
        values.append(tokens)
    return values[0], values[1], _arrival(path, line, _field(rec, ARRIVAL))


def _arrival(path: Path, line: int, raw: Any) -> float | None:
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except (TypeError, ValueError, OverflowError):
        try:
            seconds = dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):
            raise BadInput(f"trace {path}: line {line}: arrival {str(raw)[:40]!r} is neither seconds nor an ISO 8601 "
                           "time") from None
    if not abs(seconds) <= MAX_NUMBER:  # also nan
        raise BadInput(f"trace {path}: line {line}: arrival {str(raw)[:40]!r} is not a finite time in seconds")
    return seconds


def bin_trace(requests: list[Request], k: int) -> tuple[list[dict[str, Any]], float | None]:
    """Up to `k` classes (workload-file dicts) of equal count by prompt length, and the arrival rate (or None)."""
    ordered = sorted(requests, key=lambda r: (r[0], r[1]))
    k = max(1, min(k, len(ordered)))
    classes = []
    for i in range(k):
        chunk = ordered[i * len(ordered) // k:(i + 1) * len(ordered) // k]
        if not chunk:
            continue
        ins, outs = [r[0] for r in chunk], [r[1] for r in chunk]
        classes.append({
            "name": f"trace-{i + 1}: prompts {min(ins)}-{max(ins)}", "share": len(chunk) / len(ordered),
            "input_len": {"mean": max(1.0, sum(ins) / len(ins)), "max": max(ins)},
            "output_len": {"mean": max(1.0, sum(outs) / len(outs)), "max": max(outs)},
        })
    times = sorted(r[2] for r in requests if r[2] is not None)
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) >= 2 and times[-1] > times[0] else None
    return classes, rate
