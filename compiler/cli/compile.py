"""``gimletc compile``: place a model on a fleet, write ``DIR/plan.json``, print a readable summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compiler.cli import options
from compiler.cli.console import progress_printer
from compiler.ir.errors import BadInput
from compiler.ir.placement import OBJECTIVES


def register(sub) -> None:
    p = sub.add_parser(
        "compile", help="place a model on a mixed fleet under a power budget and write plan.json",
        description="Trace MODEL, cost every candidate pool on every device type of the cluster, and solve "
                    "an exact CP-SAT placement (counts, parallelism, batch, prefill/decode and "
                    "attention/FFN split) under power, inventory, memory, SLO and link constraints. Writes "
                    "DIR/plan.json. Metrics are predictions of the cost model.")
    options.add_placement_inputs(p)
    p.add_argument("--objective", choices=OBJECTIVES, default="throughput", help="what to optimise (default throughput)")
    p.add_argument("--slo-ttft-ms", type=float, metavar="X", help="override the workload's TTFT SLO")
    p.add_argument("--slo-tpot-ms", type=float, metavar="Y", help="override the workload's TPOT SLO")
    p.add_argument("--json", action="store_true", help="print plan.json instead of the summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.driver import compile
    from compiler.ir.files import atomic_write_text

    result = compile(args.model, args.cluster, args.workload, power_budget_w=args.power_budget,
                     objective=args.objective, slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms,
                     precision=options.precision_of(args), time_limit_s=args.time_limit,
                     progress=progress_printer(not args.json))
    path = Path(args.out) / "plan.json"
    try:
        atomic_write_text(path, result.plan.dumps())
    except OSError as e:
        raise BadInput(f"--out {args.out}: cannot write plan.json ({e.strerror}); choose a writable directory") from None
    if args.json:
        sys.stdout.write(result.plan.dumps())
    else:
        render(result, path)
    return 0


def render(result, plan_path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    plan, sol = result.plan, result.solution
    console = Console(width=max(Console().width, 120))
    budget = f"{plan.power_budget_w / 1e3:.0f} kW" if plan.power_budget_w else "no budget"
    console.print(f"[bold]{plan.model}[/bold] on [bold]{plan.cluster}[/bold] ({budget}) for workload "
                  f"[bold]{plan.workload}[/bold] — objective {plan.solver.objective}")
    table = Table(title="pools (predicted)", title_justify="left")
    for col in ("pool", "role", "device", "replicas x devices", "tp", "pp", "batch", "req/s", "TTFT ms", "TPOT ms",
                "power kW", "blocks"):
        table.add_column(col, justify="left" if col in ("pool", "role", "device", "blocks") else "right")
    for p in plan.pools:
        blocks = p.stages[0].blocks
        span = f"{blocks[0]} .. {p.stages[-1].blocks[-1]}" if blocks else "-"
        table.add_row(p.name, p.role, p.device, f"{p.replicas} x {p.devices_per_replica}", str(p.tp), str(p.pp),
                      str(p.batch), f"{p.predicted_requests_per_s:.2f}",
                      "-" if p.predicted_ttft_ms is None else f"{p.predicted_ttft_ms:.0f}",
                      "-" if p.predicted_tpot_ms is None else f"{p.predicted_tpot_ms:.1f}",
                      f"{p.predicted_power_w / 1e3:.1f}", span)
    console.print(table)
    pr = plan.predicted
    console.print(
        f"predicted: {pr.requests_per_s:.2f} req/s, {pr.output_tokens_per_s:,.0f} output tokens/s, "
        f"{pr.power_w / 1e3:.1f} kW drawn ({pr.provisioned_power_w / 1e3:.1f} kW provisioned), "
        f"{pr.output_tokens_per_s_per_w:.2f} tokens/s per W, worst TTFT "
        f"{'-' if pr.worst_ttft_ms is None else f'{pr.worst_ttft_ms:.0f} ms'}, worst TPOT "
        f"{'-' if pr.worst_tpot_ms is None else f'{pr.worst_tpot_ms:.1f} ms'}")
    kv = [t for t in plan.transfers if t.kind == "kv"]
    if kv:
        total = sum(t.predicted_bytes_per_s for t in kv)
        console.print(f"KV hand-offs: {len(kv)} pool pairs, {total / 1e9:.2f} GB/s in all")
    if plan.baselines:
        bt = Table(title="baselines (same cost model)", title_justify="left")
        for col in ("baseline", "output tokens/s", "power kW", "plan gain"):
            bt.add_column(col, justify="left" if col == "baseline" else "right")
        for b in sorted(plan.baselines, key=lambda b: -b.output_tokens_per_s):
            bt.add_row(b.name, f"{b.output_tokens_per_s:,.0f}", f"{b.power_w / 1e3:.1f}", f"{b.plan_ratio:.2f}x")
        console.print(bt)
    s = plan.solver
    console.print(f"solver: CP-SAT {s.status}, objective {s.objective_value:.4g}, bound {s.bound:.4g}, gap "
                  f"{100 * s.gap:.3f}%, {s.variables} variables, {s.constraints} constraints, {s.options} pool options, "
                  f"{sol.wall_s:.1f} s")
    console.print(f"[dim]times (s): {result.timings.as_dict()}. Wrote {plan_path}. All metrics are predictions.[/dim]")
