"""``compile``'s report: its options and the step that writes ``DIR/report/`` (`compiler.api.write_report`).

Not a command of its own: ``gimletc compile`` writes the report after the plan directory (``--no-report``
skips it, ``--report-points`` sizes its frontier), and ``gimletc explain`` reads the compile inputs it records.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compiler.cli import options

#: TPOT targets of the report's frontier (`compiler.api.REPORT_POINTS`, repeated so --help loads nothing).
REPORT_POINTS = 3


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-report", action="store_true",
                   help="skip DIR/report/ (summary.md, pareto.png, roofline.png, power.png, timeline.json)")
    p.add_argument("--report-points", type=options.nonneg_int, default=REPORT_POINTS, metavar="N",
                   help=f"TPOT targets of the report's frontier, pareto.png (default {REPORT_POINTS}; 0 skips it)")


def inputs_of(args: argparse.Namespace):
    """The compile's inputs as `compiler.api.CompileInputs` (absolute paths), from its flags."""
    from compiler.api import CompileInputs

    return CompileInputs.of(args.model, args.cluster, args.workload, power_budget_w=args.power_budget,
                            objective=args.objective, slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms,
                            dtype=args.dtype, kv_dtype=args.kv_dtype, time_limit_s=args.time_limit,
                            cost_budget_per_hour=getattr(args, "cost_budget", None),
                            deployable=getattr(args, "deployable", False),
                            calibration=getattr(args, "calibration", None))


def write(plan, result, args: argparse.Namespace, out: Path, timings, progress=None) -> list[str]:
    """Write ``out/report/`` for the plan as written; returns its files relative to `out`."""
    if args.no_report:
        return []
    from compiler.api import write_report

    with timings.step("report"):
        paths = write_report(plan, out, graph=result.prepared.graph, inputs=inputs_of(args),
                             points=args.report_points, progress=progress, compilation=result)
    return [str(p.relative_to(out)) for p in paths]
