"""``gimletc estimate``: one deployment from flags, or many from a scenarios CSV.

Scenario CSV columns are named like the flags: ``model, device, count, tp, pp,
dtype, input_len, output_len`` and ``batch`` (a number or ``max``) or
``concurrency``; ``kv_dtype`` and ``id`` are optional. Each input row gives one
output row with the input columns, the prediction keys of `compiler.estimate`
and an ``error`` column: a bad row reports its error and the others go on.
BlockGraphs are traced once per model and reused across rows.
"""

from __future__ import annotations

import csv
import json
import sys
from typing import Any

from compiler.estimate import KEYS, deployment, estimate
from compiler.ir.errors import BadInput, GimletError
from compiler.pipeline import block_graph

INPUT_COLUMNS = ("id", "model", "device", "count", "tp", "pp", "dtype", "kv_dtype", "input_len", "output_len",
                 "batch", "concurrency")


def _batch(value: str | int | None) -> int | str | None:
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


def estimate_one(*, model: str, device: str, count: int, tp: int | None, pp: int, dtype: str, kv_dtype: str | None,
                 input_len: int, output_len: int, batch: str | int | None, concurrency: int | None,
                 graphs: dict | None = None) -> dict[str, Any]:
    graphs = graphs if graphs is not None else {}
    if model not in graphs:
        graphs[model] = block_graph(model)
    tp = tp or max(1, count // pp)
    dep = deployment(device, count, tp, pp, dtype, kv_dtype)
    return estimate(graphs[model], dep, input_len=input_len, output_len=output_len, batch=_batch(batch),
                    concurrency=concurrency)


def _int(row: dict, key: str, default: int | None = None) -> int | None:
    value = (row.get(key) or "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise BadInput(f"column {key!r}: expected a whole number, got {value!r}") from None


def estimate_scenarios(path: str, out_path: str | None) -> int:
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
    graphs: dict = {}
    results = []
    for i, row in enumerate(rows, start=2):
        out = {k: row.get(k, "") for k in INPUT_COLUMNS if k in row}
        try:
            r = estimate_one(model=row["model"].strip(), device=row["device"].strip(), count=_int(row, "count", 1),
                             tp=_int(row, "tp"), pp=_int(row, "pp", 1), dtype=(row.get("dtype") or "bf16").strip(),
                             kv_dtype=(row.get("kv_dtype") or "").strip() or None,
                             input_len=_int(row, "input_len", 1024), output_len=_int(row, "output_len", 256),
                             batch=row.get("batch") or None, concurrency=_int(row, "concurrency"), graphs=graphs)
            out.update({k: (json.dumps(r[k], sort_keys=True) if isinstance(r[k], dict) else r[k]) for k in KEYS})
            out["error"] = ""
        except GimletError as e:
            out.update({k: "" for k in KEYS})
            out["error"] = f"line {i}: {e}"
        results.append(out)
    columns = [c for c in INPUT_COLUMNS if c in rows[0]] + list(KEYS) + ["error"]
    sink = open(out_path, "w", newline="") if out_path else sys.stdout
    try:
        writer = csv.DictWriter(sink, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results)
    finally:
        if out_path:
            sink.close()
    return 0


def print_estimate(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{r['model']} on {r['count']} x {r['device']} (tp={r['tp']}, pp={r['pp']}, {r['replicas']} "
                        f"replica(s), {r['dtype']}), {r['input_len']} in / {r['output_len']} out, {r['mode']} "
                        f"{r['batch']} per replica — PREDICTED", title_justify="left")
    table.add_column("metric")
    table.add_column("predicted", justify="right")
    rows = [
        ("TTFT", f"{r['ttft_ms']:.1f} ms"), ("TPOT", f"{r['tpot_ms']:.2f} ms"),
        ("end-to-end latency", f"{r['e2e_latency_s']:.2f} s"),
        ("output tokens/s (system)", f"{r['output_tokens_per_s']:.0f}"),
        ("total tokens/s (system)", f"{r['total_tokens_per_s']:.0f}"),
        ("tokens/s per user", f"{r['tokens_per_s_per_user']:.1f}"),
        ("batch per replica (max that fits)", f"{r['batch']} ({r['max_batch']})"),
        ("memory per device", f"{r['memory_bytes'] / 1e9:.1f} of {r['memory_capacity_bytes'] / 1e9:.0f} GB"
                              + ("" if r["fits"] else "  (does NOT fit)")),
        ("power (all devices)", f"{r['power_w'] / 1e3:.2f} kW"),
        ("energy per output token", f"{r['energy_j_per_token']:.3f} J"),
        ("bound by", f"prefill: {r['bound']['prefill']}, decode: {r['bound']['decode']}"),
    ]
    if "interference" in r:
        rows.append(("prefill interference (step slowdown)", f"{r['interference']:.2f}x"))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"[dim]derates: {r['derate']}[/dim]")
