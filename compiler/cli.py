"""The ``gimletc`` command line. It owns the terminal: tables, progress, ``--json``.

Imports stay light so ``gimletc --help`` answers at once: torch and
transformers load only when a command traces a model.

Exit codes: 0 success, 2 bad input, 3 infeasible, 4 runtime failure, 1 other errors.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Sequence

from compiler.ir.block_graph import DTYPE_BYTES
from compiler.ir.errors import BadInput, GimletError

DTYPES = ("bf16", "fp16", "fp8", "fp4")


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


_positive_int = _int_at_least(1)
_nonneg_int = _int_at_least(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gimletc",
        description="Heterogeneous multi-silicon placement compiler for LLM inference.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what each step does")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser(
        "inspect", help="trace a model and report its blocks' FLOPs, bytes, weights and KV cache",
        description="Trace MODEL (preset, config.json path or module:callable) on the meta device, split it "
                    "into blocks (embed, per-layer attention and FFN/MoE, head) for prefill and decode, and "
                    "report each block's FLOPs and bytes at one shape and dtype. Costs are counted from the "
                    "traced aten graph: predictions of work, not measurements of time.",
    )
    p.add_argument("model", nargs="?", help="preset name, path to a Hugging Face config.json or folder, "
                                            "or module:callable")
    p.add_argument("--list", action="store_true", help="list the preset models and exit")
    p.add_argument("--phase", choices=("prefill", "decode", "both"), default="both", help="phases to report")
    p.add_argument("--batch", type=_positive_int, default=1, metavar="B", help="sequences per step (default 1)")
    p.add_argument("--prompt-len", type=_positive_int, default=1024, metavar="S",
                   help="prompt tokens of a prefill step (default 1024)")
    p.add_argument("--context-len", type=_nonneg_int, default=None, metavar="L",
                   help="cached tokens seen by a decode step (default: the prompt length)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="weight dtype (default bf16)")
    p.add_argument("--kv-dtype", choices=tuple(DTYPE_BYTES), default=None,
                   help="KV-cache dtype (default: the weight dtype; fp8 under fp4 weights)")
    p.add_argument("--layers", action="store_true", help="one row per block instead of per role")
    p.add_argument("--json", action="store_true", help="print the documented JSON object instead of tables")
    p.add_argument("--no-cache", action="store_true", help="re-trace even if a cached trace exists")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("backends", help="list the device catalog (datasheet numbers with sources)",
                       description="List every device of every backend: dense peak FLOP/s per dtype, memory tiers, "
                                   "power, links, Kubernetes resource and how a stage executes on this host.")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p.set_defaults(func=_cmd_backends)

    p = sub.add_parser(
        "estimate", help="predict TTFT, TPOT, throughput, memory and power of one deployment",
        description="Predict serving metrics of MODEL on COUNT devices of one type (tensor parallel TP, pipeline PP). "
                    "All numbers are predictions of the cost model (datasheet peaks x fitted derates), not "
                    "measurements. With --scenarios, evaluate every row of a CSV in one process.")
    p.add_argument("model", nargs="?", help="preset, config.json path or module:callable")
    p.add_argument("--device", help="device id (see `gimletc backends`)")
    p.add_argument("--count", type=_positive_int, default=1, help="devices in the deployment (default 1)")
    p.add_argument("--tp", type=_positive_int, default=None, help="tensor-parallel degree (default: --count / --pp)")
    p.add_argument("--pp", type=_positive_int, default=1, help="pipeline stages (default 1)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="weight dtype (default bf16)")
    p.add_argument("--kv-dtype", choices=tuple(DTYPE_BYTES), default=None, help="KV dtype (default: --dtype; fp8 under fp4)")
    p.add_argument("--input-len", type=_positive_int, default=1024, metavar="S", help="prompt tokens (default 1024)")
    p.add_argument("--output-len", type=_positive_int, default=256, metavar="O", help="output tokens (default 256)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--batch", metavar="B|max", help="static batch of B requests, or max: the largest that fits")
    mode.add_argument("--concurrency", type=_positive_int, metavar="C", help="continuous batching, C requests in flight")
    p.add_argument("--scenarios", metavar="FILE.csv", help="evaluate every row of a CSV (columns named like the flags)")
    p.add_argument("--out", metavar="FILE.csv", help="with --scenarios: write predictions here (default: stdout)")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.set_defaults(func=_cmd_estimate)

    p = sub.add_parser("calibrate", help="measure this host and fit its cost-model efficiencies",
                       description="Measure real matmuls, attention and memory copies with torch on this machine, fit "
                                   "the device's efficiencies, save them (used by every later estimate), and report "
                                   "predicted vs measured stage times of a tiny model. Only cpu-host can be measured "
                                   "here.")
    p.add_argument("--device", default="cpu-host", help="device to calibrate (default cpu-host)")
    p.add_argument("--json", action="store_true", help="print the calibration report as JSON")
    p.set_defaults(func=_cmd_calibrate)

    for name in ("compile", "pareto"):
        if name == "compile":
            p = sub.add_parser(
                "compile", help="place a model on a mixed fleet under a power budget and write plan.json",
                description="Trace MODEL, cost every candidate pool on every device type of the cluster, and solve "
                            "an exact CP-SAT placement (counts, parallelism, batch, prefill/decode and "
                            "attention/FFN split) under power, inventory, memory, SLO and link constraints. Writes "
                            "DIR/plan.json. Metrics are predictions of the cost model.")
        else:
            p = sub.add_parser(
                "pareto", help="sweep TPOT targets: tokens/s per user vs tokens/s per MW, heterogeneous and "
                               "homogeneous",
                description="Solve the placement for a sweep of TPOT targets and write the frontier of tokens/s per "
                            "user against tokens/s per MW (heterogeneous fleet and best single device type) as "
                            "DIR/pareto.png, .csv and .json. Predictions of the cost model.")
        p.add_argument("model", help="preset, config.json path or module:callable")
        p.add_argument("--cluster", required=True, metavar="FILE", help="cluster YAML (examples/clusters/)")
        p.add_argument("--workload", required=True, metavar="FILE", help="workload YAML (examples/workloads/)")
        p.add_argument("--power-budget", metavar="W", help="override the cluster's budget, e.g. 200kW or 1.5MW")
        p.add_argument("--dtype", choices=DTYPES, default="bf16", help="weight dtype (default bf16)")
        p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="solver time limit (default 60 s)")
        p.add_argument("--out", required=True, metavar="DIR", help="output directory")
        if name == "compile":
            p.add_argument("--objective", choices=("throughput", "tokens-per-watt", "power", "latency"),
                           default="throughput", help="what to optimise (default throughput)")
            p.add_argument("--slo-ttft-ms", type=float, metavar="X", help="override the workload's TTFT SLO")
            p.add_argument("--slo-tpot-ms", type=float, metavar="Y", help="override the workload's TPOT SLO")
            p.add_argument("--json", action="store_true", help="print plan.json instead of the summary")
            p.set_defaults(func=_cmd_compile)
        else:
            p.add_argument("--points", type=int, default=8, help="TPOT targets in the sweep (default 8)")
            p.set_defaults(func=_cmd_pareto)

    p = sub.add_parser("schema", help="print the JSON Schemas of the cluster, workload and plan files")
    p.set_defaults(func=_cmd_schema)
    return parser


def _progress_printer(enabled: bool):
    if not enabled:
        return None
    from rich.console import Console

    console = Console(stderr=True)
    return lambda msg: console.print(f"[dim]… {msg}[/dim]")


def _cmd_inspect(args: argparse.Namespace) -> int:
    from compiler.model_spec import preset_names

    if args.list:
        print("\n".join(preset_names()))
        return 0
    if not args.model:
        raise BadInput("inspect: give a MODEL (a preset such as llama-3.1-70b, a config.json path or "
                       "module:callable); `gimletc inspect --list` lists the presets")
    from compiler.inspect_report import summarize
    from compiler.pipeline import Timings, block_graph

    phases = ("prefill", "decode") if args.phase == "both" else (args.phase,)
    timings = Timings()
    graph = block_graph(args.model, phases=("prefill", "decode"), use_cache=not args.no_cache, timings=timings,
                        progress=_progress_printer(sys.stderr.isatty() and not args.json))
    report = summarize(graph, dtype=args.dtype, kv_dtype=args.kv_dtype, batch=args.batch,
                       prompt_len=args.prompt_len, context_len=args.context_len, phases=phases)
    report["timings_s"] = timings.as_dict()
    return _output(report, args.json, lambda r: _print_inspect(r, phases, args.layers))


def _output(value: Any, as_json: bool, render) -> int:
    """Print `value` as JSON or through its renderer; every command ends here."""
    if as_json:
        json.dump(value, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        render(value)
    return 0


def _cmd_backends(args: argparse.Namespace) -> int:
    from backends.registry import all_devices
    from compiler.catalog_report import catalog_rows, print_catalog

    return _output(catalog_rows(all_devices()), args.json, print_catalog)


def _cmd_estimate(args: argparse.Namespace) -> int:
    from compiler.estimate_cli import estimate_one, estimate_scenarios, print_estimate

    if args.scenarios:
        return estimate_scenarios(args.scenarios, args.out)
    if not args.model or not args.device:
        raise BadInput("estimate: give MODEL and --device ID (or --scenarios FILE.csv); `gimletc backends` lists devices")
    if args.batch is None and args.concurrency is None:
        raise BadInput("estimate: give --batch B, --batch max or --concurrency C")
    result = estimate_one(model=args.model, device=args.device, count=args.count, tp=args.tp, pp=args.pp,
                          dtype=args.dtype, kv_dtype=args.kv_dtype, input_len=args.input_len,
                          output_len=args.output_len, batch=args.batch, concurrency=args.concurrency)
    return _output(result, args.json, print_estimate)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from compiler.calibrate import calibrate
    from compiler.calibrate_report import print_calibration

    report = calibrate(args.device, progress=_progress_printer(not args.json))
    return _output(report, args.json, print_calibration)


def _cmd_compile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from compiler.compile import compile_plan, parse_power
    from compiler.compile_report import print_compile_summary

    budget = parse_power(args.power_budget) if args.power_budget else None
    result = compile_plan(args.model, args.cluster, args.workload, power_budget_w=budget, objective=args.objective,
                          slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms, dtype=args.dtype,
                          time_limit_s=args.time_limit, progress=_progress_printer(not args.json))
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.json").write_text(result.plan.dumps())
    except OSError as e:
        raise BadInput(f"--out {out}: cannot write plan.json ({e.strerror}); choose a writable directory") from None
    if args.json:
        sys.stdout.write(result.plan.dumps())
    else:
        print_compile_summary(result, out / "plan.json")
    return 0


def _cmd_pareto(args: argparse.Namespace) -> int:
    from compiler.compile import parse_power
    from compiler.pareto import pareto

    budget = parse_power(args.power_budget) if args.power_budget else None
    pareto(args.model, args.cluster, args.workload, out_dir=args.out, power_budget_w=budget, dtype=args.dtype,
           points=args.points, time_limit_s=args.time_limit, progress=_progress_printer(True))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from compiler.fleet import schemas
    from compiler.plan import Plan

    return _output({**schemas(), "plan": Plan.model_json_schema()}, True, None)


def _si(value: float, unit: str = "") -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}{unit}"
    return f"{value:.3g}{unit}"


def _print_inspect(r: dict[str, Any], phases: Sequence[str], per_block: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{r['model']}[/bold]  {r['layers']} layers  params {_si(r['params_total'])} total, "
        f"{_si(r['params_active'])} active  weights {_si(r['weight_bytes'], 'B')} ({r['dtype']})  "
        f"KV {_si(r['kv_bytes_per_token'], 'B')}/token ({r['kv_dtype']}), "
        f"{_si(r['kv_bytes_at_context'], 'B')} at batch {r['batch']} x {r['context_len']} tokens"
    )
    for phase in phases:
        if phase not in r:
            continue
        ph = r[phase]
        shape = f"B={r['batch']}, S={r['prompt_len']}" if phase == "prefill" else f"B={r['batch']}, L={r['context_len']}"
        table = Table(title=f"{phase} ({shape}): {_si(ph['flops'], 'FLOP')}, {_si(ph['bytes'], 'B')} moved, "
                            f"{_si(ph['flops_per_token'], 'FLOP')}/token, intensity {ph['arithmetic_intensity']:.1f} FLOP/B",
                      title_justify="left")
        first = "block" if per_block else "role"
        for col in (first, "n" if not per_block else "kind", "weights", "FLOPs", "moved", "w.read", "KV", "act",
                    "FLOP/B"):
            table.add_column(col, justify="left" if col in (first, "kind") else "right")
        for row in (ph["blocks"] if per_block else ph["roles"]):
            label = row["name"] if per_block else row["role"]
            second = (row.get("attention") or row["role"]) if per_block else str(row["blocks"])
            table.add_row(label, second, _si(row["weight_bytes"], "B"), _si(row["flops"]), _si(row["bytes"], "B"),
                          _si(row["weight_read_bytes"], "B"), _si(row["kv_bytes"], "B"), _si(row["act_bytes"], "B"),
                          f"{row['arithmetic_intensity']:.1f}")
        console.print(table)
    if r["unaccounted"]:
        ops = sorted({f"{u['op']} ({u['phase']})" for u in r["unaccounted"]})
        console.print(f"[yellow]unaccounted ops (no cost rule, not counted): {', '.join(ops)}[/yellow]")
    else:
        console.print("every traced op has a cost rule (no unaccounted ops)")
    console.print(f"[dim]trace: {r['trace'].get('tool', '?')}, torch {r['trace'].get('torch', '?')}; "
                  f"times (s): {r['timings_s']}. Counts are predictions from the traced graph, not measurements.[/dim]")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except GimletError as e:
        print(f"gimletc: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("gimletc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `gimletc ... | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
