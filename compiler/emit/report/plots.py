"""The report's pictures and ``gimletc pareto``'s (matplotlib, loaded only when a picture is drawn; Agg).

- `plot_frontier`: tokens/s per user (1000 / TPOT target) against what the sweep maximised (output tokens/s per
  MW provisioned, output tokens/s, or output tokens per dollar), each curve by name, only its non-dominated
  points ([Note: frontier points]), and the plan itself on the heterogeneous curve;
- `plot_roofline`: each device's ceilings (near-identical ones drawn once) and the plan's blocks on them,
  numbered, with a table naming each number ([Note: roofline labels]);
- `plot_power`: provisioned (on the plan's power basis) and drawn kW per pool against the budget.

All are titled as predictions; the same inputs give the same bytes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
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
    _write_png(fig, path)


def _write_png(fig, path: Path) -> None:
    """Write `fig` to `path` as a PNG with no version stamp (same inputs, same bytes), through a temporary file
    renamed when whole (a reader never sees half a picture), and close it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png", metadata={"Software": None})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        fig.clf()
        _pyplot().close(fig)


#: Room around a log-scale plot for its tick labels, axis labels and two-line title (fractions of the figure).
_LOG_MARGINS = {"left": 0.11, "right": 0.97, "bottom": 0.12, "top": 0.87}


#: What each frontier objective maximises, as a row key of `compiler.sweep.pareto` and its axis label. Per MW
#: throughout: ``gimletc pareto``'s help, the CSV's column and README say the same.
FRONTIER_METRICS = {
    "tokens-per-watt": ("output_tokens_per_s_per_mw", "output tokens/s per MW provisioned"),
    "throughput": ("output_tokens_per_s", "output tokens/s"),
    "tokens-per-dollar": ("output_tokens_per_dollar", "output tokens per dollar"),
}
SPEED = "tokens_per_s_per_user"
HETEROGENEOUS = "heterogeneous"


def curve_label(name: str) -> str:
    """A frontier curve's legend entry: its name and what it is.

    >>> curve_label("iso-power:nvidia-b200"), curve_label("greedy")
    ('iso-power:nvidia-b200 (nvidia-b200 alone, same power budget)', 'greedy (greedy heuristic, same inventory)')
    """
    if name == HETEROGENEOUS:
        return "heterogeneous (the gimletc plan's fleet)"
    kind, _, device = name.partition(":")
    words = {"iso-power": f"{device} alone, same power budget", "iso-cost": f"{device} alone, same cost budget",
             "vendor-islands": "each type alone, no traffic across", "no-disaggregation": "colocated pools only",
             "greedy": "greedy heuristic, same inventory"}.get(kind)
    return f"{name} ({words})" if words else name


def non_dominated(rows: Sequence[dict], key: str) -> list[dict]:
    """The rows no other row beats on both speed and `key`, fastest first.

    [Note: frontier points] A frontier is the best the fleet does at each speed: a point slower than another and
    no better in what the sweep maximises is not on it (a looser TPOT target solved for throughput can land
    below a tighter one in per-MW terms, and a solve stopped within its gap can land below its neighbour).
    Such rows stay in pareto.csv / pareto.json (``on_frontier`` false) and are not drawn. A row without a
    positive value of `key` is not a point.

    >>> pts = [{"tokens_per_s_per_user": x, "y": y} for x, y in ((10, 5.0), (20, 7.0), (40, 3.0), (30, 2.0))]
    >>> [(r["tokens_per_s_per_user"], r["y"]) for r in non_dominated(pts, "y")]
    [(40, 3.0), (20, 7.0)]
    """
    out, best = [], -math.inf
    for r in sorted((r for r in rows if (r.get(key) or 0) > 0), key=lambda r: (-r[SPEED], -r[key])):
        if r[key] > best:
            out.append(r)
            best = r[key]
    return out


def on_frontier(rows: Sequence[dict], key: str) -> list[bool]:
    """For each row, whether it is on its curve's frontier in `key` (`non_dominated` within its curve)."""
    kept = set()
    for curve in {r.get("curve") for r in rows}:
        kept |= {id(r) for r in non_dominated([r for r in rows if r.get("curve") == curve], key)}
    return [id(r) in kept for r in rows]


def plot_frontier(rows: Sequence[dict], path: Path, title: str, objective: str = "tokens-per-watt", *,
                  plan: dict | None = None, dropouts: Sequence[dict] = ()) -> None:
    """`rows` as `compiler.sweep.pareto` returns them, solved for `objective`: one panel of what it maximises,
    and one of output tokens per dollar where every row has a price and that is not already it. `plan` is a row
    of the same keys for the compiled plan (``tokens_per_s_per_user`` at its TPOT target, and ``label``): drawn
    as a star and, when the sweep maximised what the plan did (``on_curve``), as a point of the heterogeneous
    curve. `dropouts` (``gimletc pareto``'s) mark where a baseline or device type leaves the sweep."""
    _write_png(frontier_figure(rows, title, objective, plan=plan, dropouts=dropouts), path)


def frontier_figure(rows: Sequence[dict], title: str, objective: str = "tokens-per-watt", *,
                    plan: dict | None = None, dropouts: Sequence[dict] = ()):
    """The frontier's matplotlib figure (`plot_frontier` saves it; tests read its lines)."""
    plt = _pyplot()
    key, label = FRONTIER_METRICS[objective]
    panels = [(key, label)]
    if objective != "tokens-per-dollar" and rows and all(r.get("output_tokens_per_dollar") for r in rows):
        panels.append(FRONTIER_METRICS["tokens-per-dollar"])
    names = sorted({r["curve"] for r in rows}, key=lambda n: (n != HETEROGENEOUS, n))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels) + 3.2, 4.6), dpi=120, squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (metric, axis_label) in zip(axes[0], panels):
        drawn: list[float] = []
        for i, name in enumerate(names):
            pts = [r for r in rows if r["curve"] == name]
            if name == HETEROGENEOUS and plan is not None and plan.get("on_curve") and metric == key:
                pts.append(plan)
            front = sorted(non_dominated(pts, metric), key=lambda r: r[SPEED])
            if not front:
                continue
            style = dict(marker="o", linewidth=2.2, color="black", zorder=3) if name == HETEROGENEOUS else \
                dict(marker="s" if name.startswith("iso-") else "^", linewidth=1, linestyle="--",
                     color=colours[i % len(colours)], alpha=0.85)
            ax.plot([r[SPEED] for r in front], [r[metric] for r in front], label=curve_label(name), **style)
            drawn += [r[metric] for r in front]
        if plan is not None and (plan.get(metric) or 0) > 0:
            ax.plot([plan[SPEED]], [plan[metric]], "*", markersize=15, color="gold", markeredgecolor="black",
                    zorder=4, label=plan.get("label", "this plan"))
            drawn.append(plan[metric])
        _dropout_marks(ax, dropouts)
        ax.set_xscale("log")
        _plain_ticks(ax.xaxis)
        if drawn and min(drawn) > 0 and max(drawn) / min(drawn) > 20:
            ax.set_yscale("log")  # a sweep can span orders of magnitude
        ax.set_xlabel("tokens/s per user (1000 / TPOT target ms)")
        ax.set_ylabel(axis_label)
        ax.grid(True, which="both", alpha=0.25)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    axes[0][-1].legend(handles, ["\n".join(_wrapped([text], 42)) for text in labels], fontsize=7, loc="upper left",
                       bbox_to_anchor=(1.03, 1.0), borderaxespad=0, labelspacing=0.8)
    fig.suptitle(f"Predicted Pareto frontier: each point maximises {label} at its TPOT target (dominated points "
                 f"not drawn)\n{title}", fontsize=9)
    right = 1 - 3.1 / (5.6 * len(panels) + 3.2)
    fig.subplots_adjust(left=0.09 / len(panels), right=right, bottom=0.13, top=0.85, wspace=0.3)
    return fig


def _plain_ticks(axis) -> None:
    """Tick labels of a log axis as plain numbers (300, not 3 x 10^2); minor ticks labelled only where they do not
    crowd: 2, 3 and 5 x 10^k over about a decade, 2 and 5 over two or three, none over more."""
    from matplotlib.ticker import FuncFormatter

    def minor(value: float, _pos) -> str:
        lo, hi = sorted(axis.get_view_interval())
        decades = math.log10(hi / lo) if lo > 0 else math.inf
        keep = {2, 3, 5} if decades < 1.3 else {2, 5} if decades < 2.6 else set()
        lead = round(value / 10 ** math.floor(math.log10(value))) if value > 0 else 0
        return f"{value:g}" if lead in keep else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def _dropout_marks(ax, dropouts: Sequence[dict]) -> None:
    """A dotted vertical line where baselines or device types leave the sweep, naming them."""
    marks: dict[float, list[str]] = {}
    for d in dropouts:
        if d.get("posed"):
            marks.setdefault(1e3 / d["tpot_target_ms"], []).append(d["where"])
    for x, names in sorted(marks.items()):
        ax.axvline(x, color="grey", linewidth=0.6, linestyle=":")
        out = "out: " + ", ".join(n.replace("iso-power:", "").replace("iso-cost:", "$") for n in names)
        ax.annotate(out if len(out) <= 70 else out[:69] + "…", (x, 0.02), xycoords=("data", "axes fraction"),
                    rotation=90, fontsize=5.5, color="grey", ha="right", va="bottom", annotation_clip=True)


@dataclass(frozen=True)
class RooflineMark:
    """One numbered marker of the roofline: the points drawn there (near-coinciding ones share it)."""

    number: int
    x: float
    y: float
    points: tuple[RooflinePoint, ...]
    colour: str
    shape: str

    def row(self) -> str:
        """Its line of the table beside the plot: number, pool, phase, blocks, device."""
        by_pool: dict[tuple[str, str, str], list[str]] = {}
        for p in self.points:
            by_pool.setdefault((p.pool, p.phase, p.device), []).append(f"{p.role}" + (f" x{p.count}" if p.count > 1
                                                                                      else ""))
        return "; ".join(f"{pool} {phase} {', '.join(roles)} ({device})" for (pool, phase, device), roles
                         in by_pool.items())


#: Every roofline marker fills a square this many points wide, whatever its shape ([Note: roofline labels]).
MARKER_PT = 12.0
#: A marker's edge in points (drawn half outside its square).
MARKER_EDGE_PT = 1.0
#: Pixels left clear between two markers.
MARK_GAP_PX = 2.0
#: The marker size of each shape that fills `MARKER_PT`: matplotlib draws a circle ("o") and a square ("s") as
#: wide as their size, a diamond ("D", a square turned 45 degrees) sqrt(2) times as wide.
MARKER_SIZES_PT = {"o": MARKER_PT, "s": MARKER_PT, "D": MARKER_PT / math.sqrt(2)}


def mark_px(dpi: float) -> float:
    """How far apart, in pixels along x or y, two markers' centres must be for them not to touch at `dpi`."""
    return (MARKER_PT + MARKER_EDGE_PT) * dpi / 72 + MARK_GAP_PX


#: `mark_px` at the roofline's 120 dpi.
MARK_PX = mark_px(120)


def roofline_marks(points: Sequence[tuple[RooflinePoint, str]], to_px, px: float = MARK_PX) -> list[RooflineMark]:
    """`points` (each with its colour) grouped into numbered marks, in reading order.

    [Note: roofline labels] Blocks of several pools and layers often sit on the same spot of the roofline (the
    same block on two pools of one device type, or attention and FFN at one intensity). Each point joins the
    first mark whose centre is less than `px` pixels from it along x or along y (`to_px` maps data to pixels),
    so any two marks are at least `px` apart along one axis. Every marker fills a square `MARKER_PT` wide
    whatever its shape (`MARKER_SIZES_PT`: a diamond is drawn smaller than a circle for it) and `px` is that
    square with its edge and a gap (`mark_px`), so no two markers, nor the numbers drawn inside them, overlap;
    the table beside the plot names every block of every mark. Points are taken left to right, so the numbers
    read along the intensity axis.
    """
    groups: list[list] = []
    for p, colour in sorted(points, key=lambda pc: (pc[0].intensity_flops_per_byte, -pc[0].achieved_flops_per_s,
                                                    pc[0].pool, pc[0].phase, pc[0].block)):
        at = to_px(p.intensity_flops_per_byte, p.achieved_flops_per_s)
        for g in groups:
            if max(abs(g[0][0] - at[0]), abs(g[0][1] - at[1])) < px:
                g[1].append((p, colour))
                break
        else:
            groups.append([at, [(p, colour)]])
    marks = []
    for n, (_, members) in enumerate(groups, start=1):
        first = members[0][0]
        colours = {c for _, c in members}
        phases = {p.phase for p, _ in members}
        shape = "s" if phases == {"prefill"} else "o" if phases == {"decode"} else "D"
        marks.append(RooflineMark(n, first.intensity_flops_per_byte, first.achieved_flops_per_s,
                                  tuple(p for p, _ in members), colours.pop() if len(colours) == 1 else "lightgrey",
                                  shape))
    return marks


def roofline_lines(ceilings: Sequence[Ceiling], tolerance: float = 0.03) -> list[tuple[list[str], Ceiling]]:
    """The ceilings to draw, each with the devices it stands for: devices whose peak, bandwidth and derates are
    within `tolerance` of an earlier one share its lines (six near-identical lines drawn as one)."""
    out: list[tuple[list[str], Ceiling]] = []

    def close(a: float, b: float) -> bool:
        return abs(a - b) <= tolerance * max(abs(a), abs(b))

    for c in ceilings:
        for devices, first in out:
            if all(close(getattr(c, f), getattr(first, f)) for f in ("peak_flops_per_s", "mem_bw_bytes_per_s",
                                                                      "compute_eff", "mem_eff")):
                devices.append(c.device)
                break
        else:
            out.append(([c.device], c))
    return out


def plot_roofline(ceilings: Sequence[Ceiling], points: Sequence[RooflinePoint], path: Path, title: str) -> None:
    """Log-log FLOP/s against FLOP/byte: each device's peak and bandwidth roof (datasheet, solid; derated,
    dotted), and each distinct block of each pool at its operating point, numbered and named in a table."""
    _write_png(roofline_figure(ceilings, points, title), path)


def roofline_figure(ceilings: Sequence[Ceiling], points: Sequence[RooflinePoint], title: str):
    """The roofline's matplotlib figure (`plot_roofline` saves it; tests read its texts)."""
    plt = _pyplot()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines = roofline_lines(ceilings)
    colour_of = {d: colours[i % len(colours)] for i, (devices, _) in enumerate(lines) for d in devices}
    shown = [p for p in points if p.achieved_flops_per_s > 0 and p.intensity_flops_per_byte > 0]
    intensities = [p.intensity_flops_per_byte for p in shown] or [1.0]
    lo = min(min(intensities), min((c.ridge_flops_per_byte for c in ceilings), default=1.0)) / 4
    hi = max(max(intensities), max((c.ridge_flops_per_byte for c in ceilings), default=1.0)) * 4
    tops = [c.peak_flops_per_s for c in ceilings] + [p.achieved_flops_per_s for p in shown] or [1.0]
    bottoms = [p.achieved_flops_per_s for p in shown] + [min(c.peak_flops_per_s, c.mem_bw_bytes_per_s * lo) * 0.5
                                                         for c in ceilings] or [1.0]
    rows_guess = max(1, len(shown))
    height = max(5.0, 1.6 + 0.16 * rows_guess)
    fig = plt.figure(figsize=(12, height), dpi=120)
    ax = fig.add_axes((0.07, 0.6 / height, 0.5, 1 - 1.5 / height))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(bottoms) / 3, max(tops) * 3)
    xs = [lo * (hi / lo) ** (i / 64) for i in range(65)]
    for devices, c in lines:
        colour = colour_of[devices[0]]
        ax.plot(xs, [min(c.peak_flops_per_s, c.mem_bw_bytes_per_s * x) for x in xs], "-", color=colour,
                label=f"{', '.join(devices)} ({c.dtype} peak)")
        ax.plot(xs, [min(c.peak_flops_per_s * c.compute_eff, c.mem_bw_bytes_per_s * c.mem_eff * x) for x in xs], ":",
                color=colour)
    to_px = lambda x, y: tuple(ax.transData.transform((x, y)))  # noqa: E731 (limits and position are final)
    marks = roofline_marks([(p, colour_of.get(p.device, "grey")) for p in shown], to_px, mark_px(fig.dpi))
    for m in marks:
        ax.plot([m.x], [m.y], m.shape, color=m.colour, markersize=MARKER_SIZES_PT[m.shape], markeredgecolor="black",
                markeredgewidth=MARKER_EDGE_PT, zorder=3)
        ax.annotate(str(m.number), (m.x, m.y), ha="center", va="center", fontsize=6, zorder=4,
                    fontweight="bold")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved, per shard)")
    ax.set_ylabel("FLOP/s (per device)")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Predicted roofline: the plan's blocks at their pools' operating points\n"
                 f"(square prefill, circle decode, diamond both; solid datasheet, dotted derated)\n{title}",
                 fontsize=8)
    table = ["#   pool, phase: blocks (device)"] + [f"{m.number:<3} {m.row()}" for m in marks]
    fig.text(0.6, 1 - 0.9 / height, "\n".join(_wrapped(table, 78)), fontsize=6.5, family="monospace", va="top")
    return fig


def _wrapped(lines: list[str], width: int) -> list[str]:
    """Table lines cut at `width` characters onto indented continuation lines."""
    import textwrap

    out = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="    ") or [""]
    return out


#: What the provisioned bars of power.png count, per power basis ([Note: power basis] in cost_models/power.py).
PROVISIONED_WORDS = {"chip": "chip TDP", "node": "node power share", "facility": "node power x PUE {pue:g}"}


def provisioned_words(basis: str, pue: float | None) -> str:
    """What a provisioned watt counts on `basis`, in a few words: ``chip TDP``, ``node power share``, ...

    >>> provisioned_words("node", None), provisioned_words("facility", 1.3)
    ('node power share', 'node power x PUE 1.3')
    """
    return PROVISIONED_WORDS[basis].format(pue=pue or 1.0)


def plot_power(power: PowerBreakdown, path: Path, title: str) -> None:
    """Per pool, kW provisioned (rated power on the plan's power basis: what the budget counts) and drawn
    (predicted), with the budget and the dark inventory."""
    plt = _pyplot()
    rows = list(power.pools)
    basis = provisioned_words(power.basis, power.pue)
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.45 * (len(rows) + 1)), dpi=120)
    labels = [f"{p.pool} {p.role} ({p.devices} x {p.device})" for p in rows] + ["total"]
    provisioned = [p.provisioned_w / 1e3 for p in rows] + [power.provisioned_w / 1e3]
    drawn = [p.drawn_w / 1e3 for p in rows] + [power.drawn_w / 1e3]
    ys = list(range(len(labels)))
    ax.barh([y + 0.2 for y in ys], provisioned, height=0.4, label=f"provisioned ({basis})")
    ax.barh([y - 0.2 for y in ys], drawn, height=0.4, label="drawn (predicted mean)")
    if power.budget_w is not None:
        ax.axvline(power.budget_w / 1e3, color="red", linestyle="--",
                   label=f"budget {power.budget_w / 1e3:.1f} kW ({basis})")
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("kW")
    ax.set_title(f"Predicted power by pool (dark inventory {power.dark_w / 1e3:.1f} kW, {basis})\n{title}",
                 fontsize=9)
    ax.legend(fontsize=7)
    _save(fig, path)
