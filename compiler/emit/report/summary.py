"""``summary.md``: a plan explained in Markdown. Every number in it is a prediction of the cost model, and says so.

Sections: the verdict (the plan, its gain over each baseline, and in words any baseline that beats it:
`compiler.emit.report.verdict`); what was placed where under which budget; the pools (shape, load, latencies at their utilisation,
power); device counts against the inventory; the predicted totals; each request class end to end and on each
pool; the transfers; the baselines and the plan's gain over each; the solver's status, bound and gap; the
sensitivity to assumed efficiencies; the power breakdown; and the report's other files.

>>> print(table(["a", "b"], [["1", "2"]]))
| a | b |
|---|---|
| 1 | 2 |
"""

from __future__ import annotations

from typing import Sequence

from compiler.emit.emit_plan import NEGLIGIBLE_REQUESTS_PER_S
from compiler.plan.schema import Plan, Pool, looser_baselines
from compiler.emit.report.figures import DECODE_TTFT_NOTE, INTERVAL_NOTE, gain_text, meets_text, with_interval
from compiler.emit.report.power import PowerBreakdown
from compiler.emit.report.verdict import verdict_lines

PREDICTION_NOTE = ("Every number below is a **prediction** of gimletc's cost model (datasheet peaks x efficiencies "
                   "fitted on published measurements, queueing at each pool's utilisation), not a measurement. "
                   + INTERVAL_NOTE)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (pipes in cells escaped)."""
    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return "\n".join([cells(headers), "|" + "|".join("---" for _ in headers) + "|", *(cells(r) for r in rows)])


def _ms(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _kw(watts: float | None) -> str:
    return "-" if watts is None else f"{watts / 1e3:.1f}"


def summary_markdown(plan: Plan, power: PowerBreakdown, *, files: Sequence[tuple[str, str]] = (),
                     frontier_note: str | None = None) -> str:
    """The whole ``summary.md``; `files` lists (file name, what it shows) of the report's other files."""
    budget = (f"{plan.power_budget_w / 1e3:.1f} kW of {basis_words(plan.power_basis, plan.pue)}"
              if plan.power_budget_w else "no power budget")
    parts = [f"# {plan.model} on {plan.cluster}: the plan",
             "## Verdict (predicted)", verdict(plan),
             f"Workload **{plan.workload}** (mean {plan.mean_input_len:.0f} prompt + {plan.mean_output_len:.0f} "
             f"output tokens), {budget}, weights {plan.dtype}, KV {plan.kv_dtype}, objective "
             f"**{plan.solver.objective}**. {PREDICTION_NOTE}",
             "## Pools (predicted, at their utilisation)", _pools(plan),
             "## Devices", _devices(plan, power),
             "## Predicted totals", _totals(plan)]
    if plan.classes:
        parts += ["## Request classes (predicted, end to end)", _classes(plan),
                  "### Per pool", _pool_classes(plan)]
    if _transfer_rows(plan):
        parts += ["## Transfers (predicted)", table(["kind", "from", "to", "req/s", "GB/s", "latency ms"],
                                                    _transfer_rows(plan))]
    parts += ["## Baselines and gains (same cost model)", _baselines(plan),
              "## Solver", _solver(plan),
              "## Sensitivity to assumed efficiencies", _sensitivity(plan),
              "## Power", _power(power)]
    if frontier_note:
        parts += ["## Frontier", frontier_note]
    if files:
        parts += ["## Files", "\n".join(f"- `{name}`: {what}" for name, what in files)]
    return "\n\n".join(parts) + "\n"


def verdict(plan: Plan) -> str:
    """The plan in one sentence, then `verdict_lines` as a list (the headline, warnings and a baseline that beats
    the plan in bold)."""
    pr, s = plan.predicted, plan.solver
    used = sorted(((n, d) for d, n in plan.devices_used.items() if n), key=lambda x: (-x[0], x[1]))
    solved = f"MILP {s.described}"
    head = (f"**The plan**: {len(plan.pools)} pools on {sum(n for n, _d in used)} devices "
            f"({', '.join(f'{n} {d}' for n, d in used)}), "
            f"{with_interval(pr.output_tokens_per_s, pr.intervals.get('output_tokens_per_s'), ',.0f')} output "
            f"tokens/s ({pr.requests_per_s:,.2f} req/s) at {_kw(pr.provisioned_power_w)} kW provisioned and "
            f"{_kw(pr.power_w)} kW drawn; {solved}.")
    lines = [f"- **{line.text}**" if line.kind in ("lead", "beaten", "warning") else f"- {line.text}"
             for line in verdict_lines(plan)]
    return head + ("\n\n" + "\n".join(lines) if lines else "\n\nNo baselines were solved.")


def _ttft(pool: Pool, value: float | None) -> str:
    """A pool's TTFT, or "-" for a pool that runs no prefill (decode pools: the TTFT belongs to the path)."""
    return _ms(value, 0) if "prefill" in pool.phases else "-"


def _live(rate: float) -> bool:
    """A row worth a line: its req/s does not print as 0.00 (`NEGLIGIBLE_REQUESTS_PER_S`)."""
    return rate >= NEGLIGIBLE_REQUESTS_PER_S


def _pools(plan: Plan) -> str:
    pct = f"p{plan.classes[0].slo_percentile:g} " if plan.classes else ""
    rows = [[p.name, p.role, p.device, f"{p.replicas} x {p.devices_per_replica}", str(p.tp), str(p.pp), str(p.batch),
             f"{p.predicted_requests_per_s:.2f}", f"{p.predicted_utilisation:.0%}",
             with_interval(p.predicted_ttft_ms, p.predicted_intervals.get("ttft_ms"), ".0f")
             if "prefill" in p.phases else "-",
             with_interval(p.predicted_tpot_ms, p.predicted_intervals.get("tpot_ms"), ".1f"),
             _kw(p.predicted_power_w), ", ".join(c.name for c in p.predicted_classes)]
            for p in plan.pools]
    note = f"\n\n{DECODE_TTFT_NOTE}" if any("prefill" not in p.phases for p in plan.pools) else ""
    return table(["pool", "role", "device", "replicas x devices", "tp", "pp", "batch", "req/s", "util",
                  f"{pct}TTFT ms", f"{pct}TPOT ms", "drawn kW", "classes"], rows) + note


def _devices(plan: Plan, power: PowerBreakdown) -> str:
    used: dict[str, int] = {}
    for p in power.pools:
        used[p.device] = used.get(p.device, 0) + p.devices
    rows = [[d, str(used.get(d, 0)), str(n), f"{used.get(d, 0) / n:.0%}" if n else "-"]
            for d, n in sorted(plan.inventory.items())]
    return table(["device", "used", "inventory", "share"], rows)


def _totals(plan: Plan) -> str:
    pr, iv = plan.predicted, plan.predicted.intervals
    return "\n".join([
        f"- requests: {with_interval(pr.requests_per_s, iv.get('requests_per_s'), '.2f')} req/s; output tokens: "
        f"{with_interval(pr.output_tokens_per_s, iv.get('output_tokens_per_s'), ',.0f')} tokens/s",
        f"- power: {_kw(pr.power_w)} kW drawn, {_kw(pr.provisioned_power_w)} kW provisioned (budget {budget_kw(plan)}; "
        f"{basis_words(plan.power_basis, plan.pue)})",
        f"- efficiency: {with_interval(pr.output_tokens_per_s_per_w, iv.get('output_tokens_per_s_per_w'), '.2f')} "
        "output tokens/s per W drawn",
        f"- worst TTFT {with_interval(pr.worst_ttft_ms, iv.get('worst_ttft_ms'), '.0f')} ms, worst TPOT "
        f"{with_interval(pr.worst_tpot_ms, iv.get('worst_tpot_ms'), '.1f')} ms (at the SLO percentile)"])


#: What each power footing counts ([Note: power basis] in cost_models/power.py), as the summary says it.
BASIS_WORDS = {"chip": "chip power (accelerators' rated power alone, no host, NICs, switches or fans)",
               "node": "node power (each device's share of its node's wall power: host, NICs, switches, fans)",
               "facility": "facility power (node power x PUE {pue:g})"}


def basis_words(basis: str, pue: float | None) -> str:
    """The footing a plan's watts count (``Plan.power_basis``, ``Plan.pue``), in words."""
    return BASIS_WORDS[basis].format(pue=pue or 1.0)


def budget_kw(plan: Plan) -> str:
    return "none" if plan.power_budget_w is None else f"{plan.power_budget_w / 1e3:.1f} kW"


def _classes(plan: Plan) -> str:
    def slo(target: float | None, pct: float) -> str:
        return "-" if target is None else f"{target:g} @p{pct:g}"

    rows = [[c.name, f"{c.share:.0%}", f"{c.requests_per_s:.2f}",
             f"{_ms(c.ttft_p50_ms, 0)} / {with_interval(c.ttft_slo_percentile_ms, c.ttft_slo_percentile_interval_ms, '.0f')}",
             slo(c.slo_ttft_ms, c.slo_percentile),
             f"{_ms(c.tpot_p50_ms)} / {with_interval(c.tpot_slo_percentile_ms, c.tpot_slo_percentile_interval_ms, '.1f')}",
             slo(c.slo_tpot_ms, c.slo_percentile),
             meets_text(c.meets_slo, c.meets_slo_at_estimate), ", ".join(c.pools)] for c in plan.classes]
    return table(["class", "share", "req/s", "TTFT p50 / pN ms", "TTFT SLO", "TPOT p50 / pN ms", "TPOT SLO", "meets",
                  "pools"], rows)


def _pool_classes(plan: Plan) -> str:
    rows = [[p.name, c.name, f"{c.requests_per_s:.2f}", f"{p.predicted_utilisation:.0%}",
             f"{_ms(c.ttft_p50_ms, 0)} / {with_interval(c.ttft_slo_percentile_ms, c.ttft_slo_percentile_interval_ms, '.0f')}"
             if "prefill" in p.phases else "-",
             f"{_ms(c.tpot_p50_ms)} / {with_interval(c.tpot_slo_percentile_ms, c.tpot_slo_percentile_interval_ms, '.1f')}"
             if "decode" in p.phases else "-"]
            for p in plan.pools for c in p.predicted_classes if _live(c.requests_per_s)]
    return table(["pool", "class", "req/s", "pool util", "TTFT p50 / pN ms", "TPOT p50 / pN ms"], rows) if rows \
        else "No pool serves a class."


def _transfer_rows(plan: Plan) -> list[list[str]]:
    """The transfers that carry something (none that prints as 0.00 req/s)."""
    return [[t.kind, t.src_pool, t.dst_pool, f"{t.predicted_requests_per_s:.2f}",
             f"{t.predicted_bytes_per_s / 1e9:.3g}", f"{t.predicted_latency_ms:.2f}"] for t in plan.transfers
            if _live(t.predicted_requests_per_s) and t.predicted_bytes_per_s > 0]


#: Baseline fields shown when the plan has them (the baseline schema grows; absent fields are skipped).
_BASELINE_FIELDS = (("status", "status", str), ("output_tokens_per_s", "output tokens/s", lambda v: f"{v:,.0f}"),
                    ("power_w", "drawn kW", _kw), ("provisioned_power_w", "provisioned kW", _kw),
                    ("gap", "own gap", lambda v: f"{100 * v:.3f}%"),
                    ("plan_gain", "plan gain (80%)", None),
                    ("plan_ratio", "plan gain", lambda v: f"{v:.2f}x"), ("note", "note", str))


def _baselines(plan: Plan) -> str:
    if not plan.baselines:
        return "No baselines were solved."
    present = [(f, h, fmt) for f, h, fmt in _BASELINE_FIELDS
               if any(f in type(b).model_fields for b in plan.baselines)]
    seen, fields = set(), []
    for f, h, fmt in present:
        if h not in seen:
            seen.add(h)
            fields.append((f, h, fmt))
    def cell(b, f: str, fmt) -> str:
        if f in ("status", "note"):
            return fmt(getattr(b, f))
        if b.status not in ("optimal", "feasible"):  # no placement: no numbers, the note says why
            return "-"
        if f == "plan_gain":
            return gain_text(b.plan_gain, b.plan_gain_interval) + (" within error" if b.within_error else "")
        return fmt(getattr(b, f)) if getattr(b, f, None) is not None else "-"

    rows = [[b.name] + [cell(b, f, fmt) for f, _h, fmt in fields] for b in plan.baselines]
    return (f"Each baseline is solved under the same cost model and constraints, {plan.solver.standard}"
            f"{looser_baselines(plan.baselines, plan.solver)}; the gain is the "
            "plan's output tokens/s (or objective) over the baseline's, with its 80% interval when each device type's "
            "predictions are off by one factor within its own interval; \"within error\" where that interval holds "
            "1x: the model cannot tell which is better.\n\n"
            + table(["baseline"] + [h for _f, h, _ in fields], rows))


def _solver(plan: Plan) -> str:
    s = plan.solver
    pruned = (f" The bound is every option's: the solve pruned options within a factor {1 + s.pruning:.4f} of a "
              "kept one, and proved its optimum over the rest (`compile --exact` prunes none)." if s.pruning else "")
    return (f"MILP (HiGHS) **{s.status}**: objective {s.objective} = {s.objective_value:.4g}, bound {s.bound:.4g}, gap "
            f"{100 * s.gap:.3f}%; {s.variables} variables, {s.constraints} constraints, {s.options} pool options."
            + pruned)


def _sensitivity(plan: Plan) -> str:
    if not plan.sensitivity:
        return ("Not analysed (every device used has at least two published measurements of its own and no factor "
                "at a bound of its fit, or the compile ran with --no-sensitivity).")
    rows = [[m.factor, f"{m.change:+.0%}" if m.change else "another reading", f"{m.objective_change:+.1%}",
             f"{m.solve_gap:.1%}",
             "yes" if m.changes_pools else "no", ", ".join(m.pools_added) or "-", ", ".join(m.pools_removed) or "-"]
            for m in plan.sensitivity]
    flips = [m for m in plan.sensitivity if m.changes_pools]
    head = (f"{len(flips)} of {len(plan.sensitivity)} moves change the chosen pools: this plan flips on a guess."
            if flips else "No move (an assumed efficiency +-20%, or another reading of a family's measurements) "
                          "changes the chosen pools.")
    head += (" A move that only makes a device type the plan does not use worse cannot change it, and is not "
             "re-solved (re-solve gap 0.0%).")
    return head + "\n\n" + table(["assumed factor", "moved", "objective", "re-solve gap", "changes pools", "adds",
                                   "drops"], rows)


def _power(power: PowerBreakdown) -> str:
    rows = [[p.pool, p.role, p.device, str(p.devices), _kw(p.provisioned_w), _kw(p.drawn_w)] for p in power.pools]
    rows.append(["total", "", "", str(sum(p.devices for p in power.pools)), _kw(power.provisioned_w),
                 _kw(power.drawn_w)])
    dark = ", ".join(f"{n} {d}" for d, n in power.dark_devices) or "none"
    budget = "none" if power.budget_w is None else f"{_kw(power.budget_w)} kW"
    basis = basis_words(power.basis, power.pue)
    return (f"All watts count {basis}. Provisioned = devices x their rated power on that footing (catalog), held "
            f"under the budget ({budget}); drawn = predicted mean at each pool's solved utilisation (idle plus "
            f"full-load minus idle, times utilisation). Left dark: {dark} ({_kw(power.dark_w)} kW rated).\n\n"
            + table(["pool", "role", "device", "devices", "provisioned kW", "drawn kW"], rows))
