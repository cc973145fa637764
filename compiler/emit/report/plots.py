"""The report's pictures (matplotlib, loaded only when a picture is drawn; Agg, no display needed).

- `plot_frontier`: tokens/s per user against output tokens/s per kW provisioned, the heterogeneous frontier, the
  best baseline curve at each TPOT target, and the plan itself;
- `plot_roofline`: each device's ceilings and the plan's blocks on them;
- `plot_power`: provisioned and drawn kW per pool against the budget.

All three are titled as predictions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from compiler.emit.report.power import PowerBreakdown
from compiler.emit.report.roofline import Ceiling, RooflinePoint


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, margins: dict | None = None) -> None:
    """Write `fig`; `margins` (subplots_adjust) instead of tight_layout, which on log axes costs a draw (0.3 s)."""
    if margins is None:
        fig.tight_layout()
    else:
        fig.subplots_adjust(**margins)
    fig.savefig(path, metadata={"Software": None})  # no version stamp: same inputs, same bytes
    fig.clf()
    _pyplot().close(fig)


#: Room around a log-scale plot for its tick labels, axis labels and two-line title (fractions of the figure).
_LOG_MARGINS = {"left": 0.11, "right": 0.97, "bottom": 0.12, "top": 0.87}


def plot_frontier(rows: Sequence[dict], path: Path, title: str, plan_point: tuple[float, float] | None) -> None:
    """`rows` as `compiler.driver.pareto` returns them; `plan_point` (tokens/s per user, tokens/s per MW)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    het = [r for r in rows if r.get("curve") == "heterogeneous"]
    best: dict[float, dict] = {}
    for r in rows:  # every other curve is a baseline (a single device type, islands, ...): the best per target
        if r.get("curve") != "heterogeneous":
            key = r.get("tpot_target_ms")
            if key not in best or r["output_tokens_per_s_per_mw"] > best[key]["output_tokens_per_s_per_mw"]:
                best[key] = r
    others = [best[k] for k in sorted(best)]
    for pts, label, style in ((het, "heterogeneous frontier", "o-"), (others, "best baseline", "s--")):
        pts = sorted(pts, key=lambda r: r["tokens_per_s_per_user"])
        if pts:
            ax.plot([r["tokens_per_s_per_user"] for r in pts], [r["output_tokens_per_s_per_mw"] / 1e3 for r in pts],
                    style, label=label)
    if plan_point is not None:
        ax.plot([plan_point[0]], [plan_point[1] / 1e3], "*", markersize=14, label="this plan")
    ax.set_xlabel("tokens/s per user (1000 / worst TPOT ms)")
    ax.set_ylabel("output tokens/s per kW provisioned")
    ax.set_title(f"Predicted Pareto frontier\n{title}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    _save(fig, path, _LOG_MARGINS)


def plot_roofline(ceilings: Sequence[Ceiling], points: Sequence[RooflinePoint], path: Path, title: str) -> None:
    """Log-log FLOP/s against FLOP/byte: each device's peak and bandwidth roof (datasheet, solid; derated,
    dotted), and each distinct block of each pool at its operating point."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    intensities = [p.intensity_flops_per_byte for p in points if p.intensity_flops_per_byte > 0] or [1.0]
    lo = min(min(intensities), min((c.ridge_flops_per_byte for c in ceilings), default=1.0)) / 4
    hi = max(max(intensities), max((c.ridge_flops_per_byte for c in ceilings), default=1.0)) * 4
    xs = [lo * (hi / lo) ** (i / 64) for i in range(65)]
    markers = {"prefill": "^", "decode": "o"}
    for i, c in enumerate(ceilings):
        colour = colours[i % len(colours)]
        ax.plot(xs, [min(c.peak_flops_per_s, c.mem_bw_bytes_per_s * x) for x in xs], "-", color=colour,
                label=f"{c.device} ({c.dtype} peak)")
        ax.plot(xs, [min(c.peak_flops_per_s * c.compute_eff, c.mem_bw_bytes_per_s * c.mem_eff * x) for x in xs], ":",
                color=colour)
        for p in (p for p in points if p.device == c.device and p.achieved_flops_per_s > 0):
            ax.plot([p.intensity_flops_per_byte], [p.achieved_flops_per_s], markers.get(p.phase, "o"), color=colour,
                    markersize=7, markeredgecolor="black")
            ax.annotate(f"{p.pool} {p.role}", (p.intensity_flops_per_byte, p.achieved_flops_per_s), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved, per shard)")
    ax.set_ylabel("FLOP/s (per device)")
    ax.set_title(f"Predicted roofline: the plan's blocks on their devices (^ prefill, o decode; dotted: derated)\n"
                 f"{title}", fontsize=9)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7)
    _save(fig, path, _LOG_MARGINS)


def plot_power(power: PowerBreakdown, path: Path, title: str) -> None:
    """Per pool, kW provisioned (TDP) and drawn (predicted), with the budget and the dark inventory."""
    plt = _pyplot()
    rows = list(power.pools)
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.45 * (len(rows) + 1)), dpi=120)
    labels = [f"{p.pool} {p.role} ({p.devices} x {p.device})" for p in rows] + ["total"]
    provisioned = [p.provisioned_w / 1e3 for p in rows] + [power.provisioned_w / 1e3]
    drawn = [p.drawn_w / 1e3 for p in rows] + [power.drawn_w / 1e3]
    ys = list(range(len(labels)))
    ax.barh([y + 0.2 for y in ys], provisioned, height=0.4, label="provisioned (TDP)")
    ax.barh([y - 0.2 for y in ys], drawn, height=0.4, label="drawn (predicted mean)")
    if power.budget_w is not None:
        ax.axvline(power.budget_w / 1e3, color="red", linestyle="--", label=f"budget {power.budget_w / 1e3:.1f} kW")
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("kW")
    ax.set_title(f"Predicted power by pool (dark inventory {power.dark_w / 1e3:.1f} kW at TDP)\n{title}", fontsize=9)
    ax.legend(fontsize=7)
    _save(fig, path)
