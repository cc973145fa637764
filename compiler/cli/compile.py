"""``gimletc compile``: place a model on a fleet, write ``DIR/plan.json`` and ``DIR/k8s/``, print a summary.

``DIR`` is checked writable before any tracing; the previous run's outputs
are removed first, and ``DIR/status.json`` records how this run ended
(`compiler.cli.status`).

[Note: plan first] ``plan.json`` is written (atomically) as soon as the
placement is solved, before the baselines, the sensitivity analysis and the
report, which can take longer than the placement itself; the final
``plan.json`` replaces it atomically with the baselines and sensitivity
filled in. A run that fails or is interrupted after the placement keeps that
first ``plan.json`` (its status says so). ``status.json`` and the summary
give both times: when ``plan.json`` was first written, and when everything was.
The report's pictures and timeline are drawn after that, by a process of its
own ([Note: the report in the background] in `compiler.cli.report`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from compiler.cli import options, report
from compiler.cli import run as run_command
from compiler.cli.console import check_out_dir, fitted_tables, progress_for, seconds, timings_line
from compiler.ir.files import atomic_write_text
from compiler.ir.placement import OBJECTIVE_QUANTITIES, OBJECTIVES

#: What compile writes into DIR (removed before a run, so none of them outlives a failed one).
OUTPUTS = ("plan.json", "k8s", "stages", "weights", "onnx", "model", "manifest.json", "report")
#: `compiler.emit.k8s.TARGETS` and none (spelled out: importing the builders here would slow every command).
MANIFEST_CHOICES = ("engines", "dynamo", "llm-d", "kserve", "gimletc", "device-plugin", "dra", "none")
#: Display units of each objective's quantity (`compiler.ir.placement.OBJECTIVE_QUANTITIES`).
QUANTITY_UNITS = {"requests_per_s": "req/s", "requests_per_s_per_provisioned_w": "req/s per W provisioned",
                  "provisioned_w": "W provisioned", "worst_tpot_ms": "ms worst TPOT", "dollars_per_hour": "$/h",
                  "requests_per_s_per_dollar_per_hour": "req/s per $/h"}


def register(sub) -> None:
    p = sub.add_parser(
        "compile", help="place a model on a mixed fleet under a power budget and write plan.json",
        description="Trace MODEL, cost every candidate pool on every device type of the cluster, and solve "
                    "an exact placement, a mixed-integer program solved by HiGHS (counts, parallelism, batch, prefill/decode and "
                    "attention/FFN split) under power, inventory, memory, SLO and link constraints. Writes "
                    "DIR/plan.json, Kubernetes manifests in DIR/k8s/, DIR/report/summary.md and DIR/status.json; "
                    "the report's pictures and timeline are drawn into DIR/report/ in the background after it "
                    "returns (--wait-for-report waits; gimletc report DIR draws them again). Metrics are "
                    "predictions of the cost model.")
    options.add_placement_inputs(p, services=True)
    p.add_argument("--objective", choices=OBJECTIVES, default="throughput", help="what to optimise (default throughput)")
    p.add_argument("--slo-ttft-ms", type=options.positive_float, metavar="X", help="override the workload's TTFT SLO")
    p.add_argument("--slo-tpot-ms", type=options.positive_float, metavar="Y", help="override the workload's TPOT SLO")
    p.add_argument("--exact", action="store_true",
                   help="prove the optimum over every pool option: prune none as near-twins (within 0.1%% of a kept "
                        "one, which bounds the optimum within 0.3%%), and prove the vendor-islands and deployable "
                        "baselines too (otherwise within 2%%); slower on large fleets")
    p.add_argument("--no-sensitivity", action="store_true",
                   help="skip re-solving with each assumed efficiency (fewer than two measurements) moved +-20%%")
    p.add_argument("--manifests", choices=MANIFEST_CHOICES, default="engines",
                   help="Kubernetes manifests in DIR/k8s/: engines (default: each pool on its public engine, "
                        "vLLM/SGLang/TensorRT-LLM, and the router), dynamo (DynamoGraphDeployment), llm-d "
                        "(InferencePool and endpoint picker), kserve (LLMInferenceService), gimletc (the reference "
                        "runtime's workers; device-plugin is the same, dra requests devices by DRA claims), or none")
    run_command.add_artifact_options(p)
    report.add_options(p)
    p.add_argument("--deployable", action="store_true",
                   help="place only what the cluster file's serving engines run: no attention/FFN split, no "
                        "drafter pools, KV only between device types a public connector joins")
    p.add_argument("--json", action="store_true", help="print plan.json instead of the summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.cli.status import clear, recorded
    from compiler.driver import Timings, compile

    if args.services:
        from compiler.cli import services

        return services.run(args)
    missing = [x for x, given in (("MODEL", args.model), ("--workload", args.workload)) if not given]
    if missing:
        from compiler.ir.errors import BadInput

        raise BadInput(f"compile needs {' and '.join(missing)} (or --services FILE for several models); e.g. gimletc "
                       "compile llama-3.1-8b --cluster examples/clusters/mixed.yaml --workload "
                       "examples/workloads/chat.yaml --out plan/")
    out = check_out_dir(args.out)
    clear(out, OUTPUTS)
    timings, wrote, kept = Timings(), [], set()
    started = time.perf_counter()
    artifacts = []

    def placed(plan) -> None:  # [Note: plan first]
        from compiler.emit.background import Artifacts

        atomic_write_text(out / "plan.json", plan.dumps())
        timings.marks["plan.json written"] = time.perf_counter() - started
        kept.add("plan.json")
        # stage programs, shards, model/, ONNX: written while the baselines and the report are ([Note: artifacts in
        # the background] in compiler/emit/background.py)
        artifacts.append(Artifacts.start(plan, args.model, out, run_command.artifact_options(args)))

    with recorded(out, "compile", timings, wrote, OUTPUTS, keep=kept):
        try:
            result = compile(args.model, args.cluster, args.workload, power_budget_w=args.power_budget,
                             objective=args.objective, slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms,
                             precision=options.precision_of(args), time_limit_s=args.time_limit,
                             analyse=not args.no_sensitivity, cost_budget_per_hour=args.cost_budget,
                             progress=progress_for(args), timings=timings, deployable=args.deployable,
                             on_placed=placed, exact=args.exact, calibration=args.calibration)
            wrote += report.write(result.plan, result, args, out, timings, progress_for(args))  # reads no artifact
            with timings.step("write"):
                from compiler.emit.artifacts import finish_plan_dir  # plan.json and the manifest over the artifacts

                final = finish_plan_dir(result.plan, artifacts[0].result(result.plan), out)
                wrote.append("plan.json")
                wrote += write_manifests(final, result.prepared, out, args.manifests)
        finally:
            for job in artifacts:
                job.cancel()  # a no-op once its result is in; else the child stops before outputs are removed
        timings.marks["everything written"] = time.perf_counter() - started
    drawing = None if args.no_report else report.start(out)  # [Note: the report in the background]
    if args.json:
        sys.stdout.write(final.dumps())
    else:
        render(result, out, drawing=None if args.no_report else "wait" if args.wait_for_report else "background")
    if args.wait_for_report and not args.no_report:
        drew = report.wait(drawing, out)
        if not args.json:
            from rich.console import Console

            Console().print(f"[dim]drew {', '.join(str(out / f) for f in drew)}.[/dim]", soft_wrap=True)
    return 0


def write_manifests(plan, prepared, out: Path, target: str) -> list[str]:
    """The manifests of the plan as written (a failure here removes plan.json too: `recorded`)."""
    if target == "none":
        return []
    from compiler.emit.k8s import manifests, write_manifests

    objects = manifests(plan, prepared.cluster, target=target, workload=prepared.workload)
    paths = write_manifests(objects, out / "k8s")
    return [str(p.relative_to(out)) for p in paths]


def render(result, out: Path, drawing: str | None = None) -> None:
    """The plan's summary on the console, and where the report's pictures will appear when they are `drawing`
    (``background``, or ``wait``: the compile waits for them)."""
    from rich.console import Console

    from compiler.emit.report.figures import with_interval

    plan, sol = result.plan, result.solution
    console = Console()
    budget = f"{f'{plan.power_budget_w / 1e3:,.1f}'.removesuffix('.0')}kW budget" if plan.power_budget_w else \
        "no power budget"  # 1.5kW, 200kW
    if plan.cost_budget_per_hour:
        budget += f", ${plan.cost_budget_per_hour:,.0f}/h budget"
    console.print(f"[bold]{plan.model}[/bold] on [bold]{plan.cluster}[/bold] ({budget}) for workload "
                  f"[bold]{plan.workload}[/bold], objective {plan.solver.objective}")
    if plan.fleet_design:
        console.print("fleet design (count: any): the solver chose " + ", ".join(
            f"{plan.devices_used.get(t, 0)} of at most {plan.inventory.get(t, 0)} {t}" for t in plan.fleet_design))
    for table in pool_tables(plan, console.width):
        console.print(table)
    pr, iv = plan.predicted, plan.predicted.intervals
    console.print(
        f"predicted (80% intervals in brackets): {with_interval(pr.requests_per_s, iv.get('requests_per_s'), '.2f')} "
        f"req/s, {with_interval(pr.output_tokens_per_s, iv.get('output_tokens_per_s'), ',.0f')} output tokens/s, "
        f"{pr.power_w / 1e3:.1f}kW drawn ({pr.provisioned_power_w / 1e3:.1f}kW provisioned), "
        f"{pr.output_tokens_per_s_per_w:.2f} output tokens/s per W drawn "
        f"({pr.output_tokens_per_s_per_provisioned_w:.2f} per W provisioned), "
        + (f"${pr.cost_per_hour:,.2f}/h, {pr.output_tokens_per_dollar:,.0f} output tokens per $, "
           if pr.cost_per_hour else "") + "worst TTFT "
        f"{with_interval(pr.worst_ttft_ms, iv.get('worst_ttft_ms'), '.0f')} ms, worst TPOT "
        f"{with_interval(pr.worst_tpot_ms, iv.get('worst_tpot_ms'), '.1f')} ms")
    if plan.classes:
        for table in _class_tables(plan, console.width):
            console.print(table)
    for line in verdict_warnings(plan):  # what the plan cannot claim, before anything it compares
        console.print(line)
    kv = [t for t in plan.transfers if t.kind == "kv"]
    if kv:
        total = sum(t.predicted_bytes_per_s for t in kv)
        console.print(f"KV hand-offs: {len(kv)} pool pairs, {total / 1e9:.2f} GB/s in all")
    _print_sensitivity(plan, console)
    if plan.baselines:
        for table in _baseline_tables(plan, console.width):
            console.print(table)
        for line in baseline_verdicts(plan):
            console.print(line)
    s = plan.solver
    unit = QUANTITY_UNITS.get(OBJECTIVE_QUANTITIES.get(s.objective, ""), "")
    console.print(f"solver: MILP (HiGHS) {s.described}, objective {s.objective_value:.4g} {unit}, bound {s.bound:.4g} {unit}, "
                  f"gap {100 * s.gap:.3f}%, {s.variables} variables, {s.constraints} constraints, {s.options} pool "
                  f"options, {seconds(sol.wall_s)}")
    wrote = f"wrote {out / 'plan.json'}" + (f", {out / 'k8s'}/" if (out / "k8s").is_dir() else "") + (
        f", {out / 'report' / 'summary.md'}" if (out / "report").is_dir() else "")
    marks = result.timings.marks
    first = (f"; plan.json first written after {seconds(marks['plan.json written'])}, everything"
             f"{' but the pictures' if drawing else ''} after {seconds(marks['everything written'])}"
             if "everything written" in marks else "")
    console.print(f"[dim]{timings_line(result.timings.as_dict())}{first}. {wrote}. All metrics are "
                  "predictions.[/dim]", soft_wrap=False)
    if drawing:
        later = " in the background, in a few seconds" if drawing == "background" else ""
        again = f" (`gimletc report {out}` draws them now)" if drawing == "background" else ""
        console.print(f"[dim]drawing {out / 'report'}/ ({', '.join(report.DRAWN)}){later}; errors go to "
                      f"{out / 'report' / report.DRAWING_LOG}{again}.[/dim]",
                      soft_wrap=True)  # paths unbroken: copied as they are


def pool_tables(plan, width: int) -> list:
    """The pools, one row each: shape first, then predictions; split in two tables on a narrow terminal."""
    from compiler.emit.report.figures import DECODE_TTFT_NOTE, with_interval

    pct = f"p{plan.classes[0].slo_percentile:g} " if plan.classes else ""
    columns = [("pool", "left"), ("role", "left"), ("device", "left"), ("replicas x devices", "right"),
               ("tp", "right"), ("pp", "right"), ("batch req", "right"), ("req/s", "right"), ("util", "right"),
               (f"{pct}TTFT ms", "right"), (f"{pct}TPOT ms", "right"), ("power kW", "right"), ("classes", "left"),
               ("blocks", "left")]
    rows = []
    for p in plan.pools:
        blocks = p.stages[0].blocks
        span = f"{blocks[0]} .. {p.stages[-1].blocks[-1]}" if blocks else "-"
        rows.append([p.name, p.role, p.device, f"{p.replicas} x {p.devices_per_replica}", str(p.tp), str(p.pp),
                     str(p.batch), f"{p.predicted_requests_per_s:.2f}", f"{p.predicted_utilisation:.0%}",
                     with_interval(p.predicted_ttft_ms, p.predicted_intervals.get("ttft_ms"), ".0f")
                     if "prefill" in p.phases else "-",
                     with_interval(p.predicted_tpot_ms, p.predicted_intervals.get("tpot_ms"), ".1f"),
                     f"{p.predicted_power_w / 1e3:.1f}", ", ".join(c.name for c in p.predicted_classes), span])
    tables = fitted_tables("pools (predicted, at their utilisation)", columns, rows, width)
    if any("prefill" not in p.phases for p in plan.pools):
        tables[-1].caption, tables[-1].caption_justify = DECODE_TTFT_NOTE, "left"
    return tables


def _class_tables(plan, width: int) -> list:
    """Each request class end to end: its rate, its SLO and its predicted median and percentile latencies."""
    from compiler.emit.report.figures import meets_text, with_interval

    columns = [("class", "left"), ("share", "right"), ("req/s", "right"), ("TTFT p50 / pN ms", "right"),
               ("TTFT SLO", "right"), ("TPOT p50 / pN ms", "right"), ("TPOT SLO", "right"), ("meets", "left"),
               ("pools", "left")]
    def pair(a, b, bounds, digits):  # noqa: E306
        return "-" if a is None else f"{a:.{digits}f} / {with_interval(b, bounds, f'.{digits}f')}"
    rows = [[c.name, f"{c.share:.0%}", f"{c.requests_per_s:.2f}",
             pair(c.ttft_p50_ms, c.ttft_slo_percentile_ms, c.ttft_slo_percentile_interval_ms, 0),
             "-" if c.slo_ttft_ms is None else f"{c.slo_ttft_ms:g} @p{c.slo_percentile:g}",
             pair(c.tpot_p50_ms, c.tpot_slo_percentile_ms, c.tpot_slo_percentile_interval_ms, 1),
             "-" if c.slo_tpot_ms is None else f"{c.slo_tpot_ms:g} @p{c.slo_percentile:g}",
             meets_text(c.meets_slo, c.meets_slo_at_estimate), ", ".join(c.pools)] for c in plan.classes]
    return fitted_tables("request classes (predicted)", columns, rows, width)


def _print_sensitivity(plan, console) -> None:
    """The assumed efficiencies (fewer than two measurements) whose +-20% would change the plan."""
    if not plan.sensitivity:
        return
    flips = [m for m in plan.sensitivity if m.changes_pools]
    tested = sorted({m.factor for m in plan.sensitivity})
    if not flips:
        worst = max(plan.sensitivity, key=lambda m: abs(m.objective_change))
        console.print(f"assumptions ({', '.join(tested)}; fewer than two measurements each, or another reading of "
                      f"a family's measurements): none changes these pools; the objective moves at most "
                      f"{abs(worst.objective_change):.1%}")
        return
    for m in flips:
        moved = f"{m.change:+.0%}" if m.change else "(another reading of its measurements)"
        console.print(f"[yellow]assumption {m.factor} {moved} would change the pools (objective "
                      f"{m.objective_change:+.1%}): adds {', '.join(m.pools_added) or '-'}, drops "
                      f"{', '.join(m.pools_removed) or '-'}. This plan flips on a guess.[/yellow]")


def _baseline_tables(plan, width: int) -> list:
    """Each baseline's status, fleet and predicted numbers, and the plan's gain in the objective's terms."""
    from compiler.plan.schema import looser_baselines
    from compiler.emit.report.figures import gain_text

    def num(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    columns = [("baseline", "left"), ("status", "left"), ("devices", "right"), ("output tok/s", "right"),
               ("kW drawn / prov.", "right"), ("tok/s per kW prov.", "right"), ("$/h", "right"),
               ("tok per $", "right"), (f"plan gain ({plan.solver.objective}; 80%)", "right")]
    rows = [[b.name, f"within {100 * b.gap:.1f}%" if b.status == "feasible" and b.gap else b.status,
             str(sum(b.devices.values())) if b.devices else "-",
             num(b.output_tokens_per_s if b.status in ("optimal", "feasible") else None, ",.0f"),
             f"{b.power_w / 1e3:.1f} / {b.provisioned_power_w / 1e3:.1f}" if b.provisioned_power_w else "-",
             num(None if b.output_tokens_per_s_per_provisioned_w is None
                 else b.output_tokens_per_s_per_provisioned_w * 1e3, ",.0f"),
             num(b.cost_per_hour, ",.2f"), num(b.output_tokens_per_dollar, ",.0f"),
             gain_text(b.plan_gain, b.plan_gain_interval) + (" within error" if b.within_error else "")]
            for b in plan.baselines]
    standard = f"to the plan's {100 * plan.solver.gap:.2f}% gap" if plan.solver.status == "feasible" else \
        "as the plan" if plan.solver.pruning else "exactly"
    standard += looser_baselines(plan.baselines, plan.solver)
    return fitted_tables(f"baselines (same cost model, same objective, solved {standard}; predictions)", columns, rows,
                         width)


def baseline_verdicts(plan) -> list[str]:
    """The verdict of ``summary.md`` (`compiler.emit.report.verdict`), styled: the headline (the fleet as run today,
    public engines) in bold, a baseline that beats the plan in yellow, one with no number dimmed."""
    from rich.markup import escape

    from compiler.emit.report.verdict import verdict_lines

    style = {"lead": "[bold]{}[/bold]", "beaten": "[yellow]{}[/yellow]", "missing": "[dim]{}[/dim]", "fine": "{}"}
    return [style[line.kind].format(escape(line.text)) for line in verdict_lines(plan) if line.kind != "warning"]


def verdict_warnings(plan) -> list[str]:
    """The verdict's warnings (an uncalibrated device, an SLO met only at the central estimate), styled."""
    from rich.markup import escape

    from compiler.emit.report.verdict import verdict_lines

    return [f"[bold yellow]{escape(line.text)}[/bold yellow]" for line in verdict_lines(plan) if line.kind == "warning"]
