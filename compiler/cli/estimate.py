"""``gimletc estimate``: one deployment from flags, or many from a scenarios CSV (`compiler.inputs.scenarios`).

Each scenario row gives one output row with the input columns, the prediction
keys (`compiler.ir.estimate.KEYS`) and an ``error`` column: a bad row reports
its error and the others go on. BlockGraphs are traced once per model.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
from typing import Any

from compiler.cli import options
from compiler.cli.console import check_out_file, output
from compiler.ir.errors import BadInput, GimletError

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser(
        "estimate", help="predict TTFT, TPOT, throughput, memory and power of one deployment",
        description="Predict serving metrics of MODEL on COUNT devices of one type (tensor parallel TP, pipeline PP). "
                    "All numbers are predictions of the cost model (datasheet peaks x fitted derates), not "
                    "measurements. With --scenarios, evaluate every row of a CSV in one process.")
    options.add_model(p, optional=True)
    p.add_argument("--device", help="device id (see `gimletc backends`)")
    p.add_argument("--count", type=options.positive_int, default=1, help="devices in the deployment (default 1)")
    p.add_argument("--tp", type=options.positive_int, default=None, help="tensor-parallel degree (default: --count / --pp)")
    p.add_argument("--pp", type=options.positive_int, default=1, help="pipeline stages (default 1)")
    options.add_precision(p)
    p.add_argument("--input-len", type=options.positive_int, default=None, metavar="S",
                   help="prompt tokens (default 1024; scaled down with --output-len's to fit a shorter context)")
    p.add_argument("--output-len", type=options.positive_int, default=None, metavar="O",
                   help="output tokens (default 256, or what the model's context leaves)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--batch", metavar="B|max", help="static batch of B requests, or max: the largest that fits")
    mode.add_argument("--concurrency", type=options.positive_int, metavar="C",
                      help="C closed-loop clients, each sending its next request when the previous one ends (what "
                           "serving benchmarks measure)")
    p.add_argument("--engine", choices=("generic", "trtllm", "vllm", "sglang", "optimum-habana"), default="generic",
                   help="serving engine whose scheduler costs and KV memory rule apply (default generic)")
    p.add_argument("--lengths", choices=("fixed", "vary"), default="fixed",
                   help="with --concurrency: every request has the lengths given (fixed, the default, as "
                        "`vllm bench serve` sends them), or draws them from a range whose means they are (vary: "
                        "--random-range-ratio above 0), which keeps the clients from arriving in lock-step waves")
    p.add_argument("--context-buckets", metavar="L,L,...",
                   help="Neuron devices: the prompt lengths the launch compiled (NxD Inference's "
                        "context_encoding_buckets); a prompt runs padded to the smallest that holds it (default: "
                        "those gimletc's own launch writes, which add this request's lengths: no padding)")
    p.add_argument("--token-buckets", metavar="L,L,...",
                   help="Neuron devices: the sequence lengths the launch compiled for decoding "
                        "(token_generation_buckets); default as --context-buckets")
    options.add_calibration(p)
    p.add_argument("--scenarios", metavar="FILE.csv", help="evaluate every row of a CSV (columns named like the flags)")
    p.add_argument("--out", metavar="FILE.csv", help="with --scenarios: write predictions here (default: stdout)")
    options.add_json(p, "the prediction (with --scenarios: the rows)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from backends.registry import device
    from compiler.driver import estimate
    from compiler.inputs.scenarios import batch, launch_buckets

    if args.scenarios:
        return _scenarios(args.scenarios, str(check_out_file(args.out)) if args.out else None, args.json)
    if args.out:
        raise BadInput("--out FILE.csv goes with --scenarios; without it, use --json to capture the prediction")
    if not args.model or not args.device:
        raise BadInput("estimate: give MODEL and --device ID (or --scenarios FILE.csv); `gimletc backends` lists devices")
    device(args.device)  # an unknown id is the first thing to fix: named, with close matches, before a missing flag
    if args.batch is None and args.concurrency is None:
        raise BadInput("estimate: give --batch B, --batch max or --concurrency C")
    input_len, output_len = default_lengths(args.model, args.input_len, args.output_len)
    result = estimate(args.model, device=args.device, count=args.count, tp=args.tp, pp=args.pp,
                      precision=options.precision_of(args), input_len=input_len, output_len=output_len,
                      batch=batch(args.batch), concurrency=args.concurrency, engine=args.engine,
                      lengths=args.lengths, calibration=args.calibration,
                      buckets=launch_buckets(args.context_buckets, args.token_buckets, input_len, output_len))
    for warning in result.warnings:
        log.warning("%s", warning)
    return output(result.to_json(), args.json, render)


#: The request ``estimate`` costs when no length is given.
DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN = 1024, 256


def default_lengths(model: str, input_len: int | None, output_len: int | None) -> tuple[int, int]:
    """The lengths to cost: the flags given, the defaults for the others. Defaults fit the model's context: both
    scaled by the same factor when neither is given, else the output what the given prompt leaves (a length
    given beyond the context is `compiler.driver.check_lengths`' error)."""
    from compiler.driver import context_len

    limit = context_len(model) or 1 << 62
    if input_len is None and output_len is None:
        scale = min(1.0, limit / (DEFAULT_INPUT_LEN + DEFAULT_OUTPUT_LEN))
        return max(1, int(DEFAULT_INPUT_LEN * scale)), max(1, int(DEFAULT_OUTPUT_LEN * scale))
    if output_len is None:  # a prompt beyond the context keeps the default, for check_lengths to name
        room = limit - input_len
        return input_len, min(DEFAULT_OUTPUT_LEN, room) if room >= 1 else DEFAULT_OUTPUT_LEN
    if input_len is None:
        room = limit - output_len
        return (min(DEFAULT_INPUT_LEN, room) if room >= 1 else DEFAULT_INPUT_LEN), output_len
    return input_len, output_len


def _scenarios(path: str, out_path: str | None, as_json: bool) -> int:
    from compiler.driver import estimate
    from compiler.inputs.scenarios import INPUT_COLUMNS, read_rows, scenario
    from compiler.ir.estimate import KEYS

    rows = read_rows(path)
    graphs: dict = {}
    results = []
    for line, row in enumerate(rows, start=2):
        out = {k: row.get(k, "") for k in INPUT_COLUMNS if k in row}
        try:
            r = estimate(**scenario(row), graphs=graphs).to_json()
            out.update({k: (json.dumps(r[k], sort_keys=True) if isinstance(r[k], (dict, list)) else r[k])
                        for k in KEYS})
            out["error"] = ""
        except GimletError as e:
            out.update({k: "" for k in KEYS})
            out["error"] = f"line {line}: {e}"
        results.append(out)
    columns = [c for c in INPUT_COLUMNS if c in rows[0]] + list(KEYS) + ["error"]
    if as_json and not out_path:
        return output(results, True, None)
    sink = open(out_path, "w", newline="") if out_path else sys.stdout
    try:
        writer = csv.DictWriter(sink, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results)
    finally:
        if out_path:
            sink.close()
    return 0


def _shares(tiers: dict[str, float]) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in tiers.items())


def _interval(v: list | None, unit: str = "") -> str:
    """``98-160 ms``, or ``no bound`` where nothing measured bounds it."""
    if not v:
        return ""
    lo, hi = v
    if hi is None:
        return "no bound"
    return f"{lo:.3g}-{hi:.3g}" + (f" {unit}" if unit else "")


def render(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{r['model']} on {r['count']} x {r['device']} (tp={r['tp']}, pp={r['pp']}, {r['replicas']} "
                        f"replica(s), {r['dtype']}), {r['input_len']} in / {r['output_len']} out, {r['mode']} "
                        f"{r['batch']} per replica — PREDICTED", title_justify="left")
    table.add_column("metric")
    table.add_column("predicted", justify="right")
    table.add_column("80% interval", justify="right")
    slow = f"  (reads {', '.join(r['slow_tiers'])}: slow tier)" if r.get("slow_tiers") else ""
    iv = r.get("intervals", {})
    rows = [
        ("TTFT", f"{r['ttft_ms']:.1f} ms{slow}", _interval(iv.get("ttft_ms"), "ms")),
        ("TPOT", f"{r['tpot_ms']:.2f} ms{slow}", _interval(iv.get("tpot_ms"), "ms")),
        ("end-to-end latency", f"{r['e2e_latency_s']:.2f} s", _interval(iv.get("e2e_latency_s"), "s")),
        ("output tokens/s (system)", f"{r['output_tokens_per_s']:.0f}", _interval(iv.get("output_tokens_per_s"))),
        ("total tokens/s (system)", f"{r['total_tokens_per_s']:.0f}", _interval(iv.get("total_tokens_per_s"))),
        ("tokens/s per user", f"{r['tokens_per_s_per_user']:.1f}", _interval(iv.get("tokens_per_s_per_user"))),
        ("batch per replica (max that fits)", f"{r['batch']} ({r['max_batch']})", ""),
        ("memory per device", f"{r['memory_bytes'] / 1e9:.1f} of {r['memory_capacity_bytes'] / 1e9:.0f} GB"
                              + ("" if r["fits"] else "  (does NOT fit)"), ""),
        ("weights / KV in", f"{_shares(r['weight_tiers'])} / {_shares(r['kv_tiers'])}"
                            + ("" if r["resident_devices"] <= r["tp"] * r["pp"] else
                               f"  ({r['fast_tier']}-resident from {r['resident_devices']} devices per replica)"), ""),
        ("power (all devices)", f"{r['power_w'] / 1e3:.2f}kW",
         _interval([v / 1e3 if v is not None else None for v in iv["power_w"]], "kW") if "power_w" in iv else ""),
        ("energy per output token", f"{r['energy_j_per_token']:.3f} J", _interval(iv.get("energy_j_per_token"), "J")),
        ("bound by", f"prefill: {r['bound']['prefill']}, decode: {r['bound']['decode']}", ""),
    ]
    if "interference" in r:
        rows.append(("prefill interference (step slowdown)", f"{r['interference']:.2f}x", ""))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for kind, basis in sorted(r.get("interval_basis", {}).items()):
        console.print(f"[dim]{kind} interval: {basis}[/dim]")
    console.print(f"[dim]derates: {r['derate']}[/dim]")
