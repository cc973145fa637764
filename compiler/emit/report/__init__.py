"""The plan report (``DIR/report/``): what a compiled plan predicts and why, in words, numbers and pictures.

`build_report` computes everything from the plan, its BlockGraph and (optionally) a predicted frontier, and
returns a `Report` value; `write_report` writes it under a folder, only when asked (the CLI and the Python
API's ``Plan.save`` do): first what a user reads (`write_summary`: ``summary.md``, ``report.json``), then what
is drawn (`draw`: the timeline and the pictures), which ``gimletc compile`` leaves to a process of its own
([Note: the report in the background] in `compiler.cli.report`). Files:

- ``summary.md``: pools, counts, predicted totals, per-class latencies, transfers, baselines and gains, solver
  status, sensitivity, power (`compiler.emit.report.summary`);
- ``pareto.png``: the predicted frontier with this plan on it (when a frontier was computed);
- ``roofline.png``: the plan's blocks on the rooflines of their devices (`compiler.emit.report.roofline`);
- ``power.png``: provisioned and drawn power per pool against the budget (`compiler.emit.report.power`);
- ``timeline.json``: a predicted pipeline timeline in the Chrome trace format; open it in
  https://ui.perfetto.dev (`compiler.emit.report.timeline`);
- ``report.json``: the numbers behind the pictures (power, roofline points, frontier rows).

Every number is a prediction and is labelled so. matplotlib loads only in `draw`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from compiler.plan.schema import Plan
from compiler.emit.report.power import PowerBreakdown, power_breakdown
from compiler.emit.report.roofline import Ceiling, RooflinePoint, ceilings, roofline_points
from compiler.emit.report.roofline import to_json as roofline_json
from compiler.emit.report.summary import summary_markdown
from compiler.ir.block_graph import BlockGraph
from compiler.ir.files import atomic_write_text

#: The files `write_summary` writes: what a user reads first, written before anything is drawn.
SUMMARY, NUMBERS = "summary.md", "report.json"

#: The report's files and what each shows (summary.md lists them).
FILES = (("pareto.png", "the predicted speed-vs-efficiency frontier of this instance, with this plan marked"),
         ("roofline.png", "each distinct block of each pool on the roofline of its device, at the pool's operating "
                          "point"),
         ("power.png", "provisioned (rated power on the plan's power basis, as the budget counts it) and drawn "
                       "(predicted) power per pool against the budget"),
         ("timeline.json", "a predicted pipeline timeline of one mean request per serving path; open it in "
                           "https://ui.perfetto.dev"),
         ("report.json", "the numbers behind the pictures"))


@dataclass(frozen=True)
class Report:
    """Everything ``DIR/report/`` holds, computed; `write_report` writes it."""

    plan: Plan
    graph: BlockGraph  # the plan's blocks, for the timeline (`timeline`), computed only when drawn
    summary_md: str
    power: PowerBreakdown
    ceilings: tuple[Ceiling, ...]
    roofline: tuple[RooflinePoint, ...]
    frontier: tuple[dict, ...] | None  # rows of `compiler.sweep.pareto`, or None when not computed
    frontier_title: str = ""
    frontier_objective: str = "tokens-per-watt"  # what each frontier point maximised

    def timeline(self) -> dict:
        """The predicted pipeline timeline, Chrome trace JSON (`compiler.emit.report.timeline`)."""
        from compiler.emit.report.timeline import pipeline_trace

        return pipeline_trace(self.plan, self.graph)

    @property
    def title(self) -> str:
        return f"{self.plan.model} on {self.plan.cluster}, workload {self.plan.workload}"

    def plan_point(self) -> dict | None:
        """This plan as a frontier row (`compiler.emit.report.plots.plot_frontier`): tokens/s per user at its TPOT
        target (the strictest class's; its predicted worst TPOT where it has none), and what each frontier
        objective measures. ``on_curve`` when the frontier maximised what the plan's own solve did: the plan is
        then the heterogeneous curve's point at its target."""
        pr = self.plan.predicted
        targets = [c.slo_tpot_ms for c in self.plan.classes if c.slo_tpot_ms] or \
            ([self.plan.slo_tpot_ms] if self.plan.slo_tpot_ms else [])
        tpot_ms = min(targets) if targets else pr.worst_tpot_ms
        if not tpot_ms or not pr.provisioned_power_w:
            return None
        worst = f"; predicted worst {pr.worst_tpot_ms:.3g} ms" if pr.worst_tpot_ms else ""
        return {"curve": "plan", "tokens_per_s_per_user": 1e3 / tpot_ms, "tpot_target_ms": tpot_ms,
                "worst_tpot_ms": pr.worst_tpot_ms, "output_tokens_per_s": pr.output_tokens_per_s,
                "output_tokens_per_s_per_mw": pr.output_tokens_per_s / (pr.provisioned_power_w / 1e6),
                "output_tokens_per_dollar": pr.output_tokens_per_dollar,
                "on_curve": self.plan.solver.objective == self.frontier_objective,
                "label": f"this plan ({self.plan.solver.objective}; TPOT target {tpot_ms:.3g} ms{worst})",
                "prediction": True}

    def to_json(self) -> dict:
        return {"prediction": True, "power": self.power.to_json(),
                "roofline": roofline_json(list(self.ceilings), list(self.roofline)),
                "frontier": {"title": self.frontier_title, "objective": self.frontier_objective,
                             "points": list(self.frontier)}
                if self.frontier is not None else None,
                "plan_point": self.plan_point()}


def build_report(plan: Plan, graph: BlockGraph, *, frontier: Sequence[dict] | None = None, frontier_title: str = "",
                 frontier_note: str | None = None, frontier_objective: str = "tokens-per-watt") -> Report:
    """The report of `plan` (compiled from `graph`); `frontier` are `compiler.sweep.pareto` rows, if computed,
    each maximising `frontier_objective`, and `frontier_note` says why there are none."""
    power = power_breakdown(plan)
    files = [(name, what) for name, what in FILES if name != "pareto.png" or frontier]
    if frontier:
        others = sorted({r["curve"] for r in frontier} - {"heterogeneous"})
        frontier_note = frontier_note or (
            f"{sum(r.get('curve') == 'heterogeneous' for r in frontier)} heterogeneous points"
            + (f", beside {', '.join(others)}" if others else "") + "; this plan is the star in `pareto.png`. "
            "`gimletc pareto` sweeps every baseline.")
    md = summary_markdown(plan, power, files=files, frontier_note=frontier_note)
    return Report(plan, graph, md, power, tuple(ceilings(plan)), tuple(roofline_points(plan, graph)),
                  tuple(frontier) if frontier else None, frontier_title, frontier_objective)


def write_report(report: Report, folder: str | Path) -> list[Path]:
    """Write `report` under `folder` (created): `write_summary`, then `draw`; returns the files written."""
    return sorted(write_summary(report, folder) + draw(report, folder))


def write_summary(report: Report, folder: str | Path) -> list[Path]:
    """Write what a user reads first, ``summary.md`` and ``report.json`` (the numbers `draw` draws), under
    `folder` (created); returns the files written."""
    folder = Path(folder)
    for name, text in ((SUMMARY, report.summary_md),
                       (NUMBERS, json.dumps(report.to_json(), indent=1, sort_keys=True) + "\n")):
        atomic_write_text(folder / name, text)
    return [folder / SUMMARY, folder / NUMBERS]


def draw(report: Report, folder: str | Path) -> list[Path]:
    """Write `report`'s timeline and pictures under `folder` (created): ``timeline.json``, ``roofline.png``,
    ``power.png`` and, with a frontier, ``pareto.png``; returns the files written. Loads matplotlib."""
    from compiler.emit.report.plots import plot_frontier, plot_power, plot_roofline

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "timeline.json", json.dumps(report.timeline(), indent=1, sort_keys=True) + "\n")
    plot_roofline(report.ceilings, report.roofline, folder / "roofline.png", report.title)
    plot_power(report.power, folder / "power.png", report.title)
    out = [folder / "timeline.json", folder / "roofline.png", folder / "power.png"]
    if report.frontier:
        plot_frontier(report.frontier, folder / "pareto.png", report.frontier_title or report.title,
                      report.frontier_objective, plan=report.plan_point())
        out.append(folder / "pareto.png")
    return sorted(out)


__all__ = ["FILES", "NUMBERS", "SUMMARY", "Report", "build_report", "draw", "write_report", "write_summary"]
