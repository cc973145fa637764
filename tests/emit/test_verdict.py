"""What a plan's report and ``gimletc compile`` say about it: the verdict leads with the
gain over the fleet as it is run today, then what runs on public engines, then the buying advice; equal-power
baselines at the power the plan uses when its budget does not bind; pictures and tables that say what they show."""

from __future__ import annotations

import re

import pytest

from compiler.emit.report import build_report
from tests.conftest import REPO

MIXED = REPO / "examples" / "clusters" / "mixed.yaml"
CHAT = REPO / "examples" / "workloads" / "chat.yaml"
#: A DGX H100's 10.2 kW over its 8 GPUs: what one H100 counts against a budget on the node footing.
H100_NODE_W = 10_200 / 8


@pytest.fixture(scope="module")
def readme_plan():
    """The README's first command (llama-3.1-70b on examples/clusters/mixed.yaml, workload chat), compiled once."""
    from compiler.driver import compile

    result = compile("llama-3.1-70b", str(MIXED), str(CHAT), analyse=False)
    return result.plan, result.prepared.graph


@pytest.fixture(scope="module")
def h100_fleet(tmp_path_factory):
    """64 H100 under a 1,000 kW budget: the plan switches on all 64 (81.6 kW on the node footing) and the budget
    is nowhere near binding."""
    from compiler.driver import compile

    cluster = tmp_path_factory.mktemp("h100") / "cluster.yaml"
    cluster.write_text("name: h100-only\npower_budget_kw: 1000\ndevices:\n  - {device: nvidia-h100-sxm, count: 64}\n")
    result = compile("llama-3.1-70b", str(cluster), str(CHAT), analyse=False)
    return result.plan, result.prepared.graph


def _bullets(md: str) -> list[str]:
    """summary.md's verdict, one entry per bullet, without the bold marks."""
    section = md[md.index("## Verdict (predicted)"):md.index("## Pools")]
    return [line[2:].strip("*") for line in section.splitlines() if line.startswith("- ")]


def _cli_verdict(plan) -> list[str]:
    """The verdict lines ``gimletc compile`` prints, markup removed."""
    from compiler.cli.compile import baseline_verdicts

    return [re.sub(r"\[/?[a-z ]+\]", "", line) for line in baseline_verdicts(plan)]


def _gain(b) -> str:
    """A baseline's gain with its interval as the verdict writes it: ``1.12x (0.67-1.12)``, by hand."""
    lo, hi = b.plan_gain_interval
    return f"{b.plan_gain:.2f}x ({lo:.2f}-{hi:.2f})"


def test_an_unbound_budget_is_compared_at_the_power_the_plan_provisions_and_one_type_is_no_mix(h100_fleet):
    """64 H100 under 1,000 kW: the plan provisions 64 x 1,275 W = 81.6 kW. H100s alone at that power are the same
    64 (floor(81,600 / 1,275)), so they serve what the plan serves, not the 12x that 784 H100 (the whole
    1,000 kW) would; the verdict says at which power it compares and why, and never calls one type a mix."""
    plan, graph = h100_fleet
    assert plan.devices_used == {"nvidia-h100-sxm": 64}
    assert plan.predicted.provisioned_power_w == pytest.approx(64 * H100_NODE_W)
    iso = next(b for b in plan.baselines if b.name == "iso-power:nvidia-h100-sxm")
    assert sum(iso.devices.values()) <= int(64 * H100_NODE_W // H100_NODE_W) == 64
    assert iso.provisioned_power_w <= 64 * H100_NODE_W + 1e-6
    assert not iso.beats_plan and iso.plan_gain == pytest.approx(1.0, rel=2e-3)
    assert iso.posed_power_w == pytest.approx(64 * H100_NODE_W)
    assert "81.6 kW" in iso.question
    for verdict in (" ".join(_bullets(build_report(plan, graph).summary_md)), " ".join(_cli_verdict(plan))):
        assert "mix" not in verdict
        assert "at equal power" in verdict and "81.6 kW" in verdict and "1,000 kW budget does not bind" in verdict


def test_the_verdict_leads_with_the_fleet_as_run_today_then_public_engines_then_buying_advice(readme_plan):
    """The README's plan: first its gain over vendor islands (the fleet as it is run today) and over no
    disaggregation, each with its 80% interval; then what the same question gives on public engines alone; only
    then a single device type at equal power. summary.md and the CLI say the same, in that order."""
    plan, graph = readme_plan
    named = {b.name: b for b in plan.baselines}
    islands, colocated = named["vendor-islands"], named["no-disaggregation"]
    for verdict in (_bullets(build_report(plan, graph).summary_md), _cli_verdict(plan)):
        assert "vendor-islands" in verdict[0] and "today" in verdict[0]
        assert _gain(islands) in verdict[0] and _gain(colocated) in verdict[0]
        engines = next(i for i, line in enumerate(verdict) if "public engines" in line)
        equal_power = next(i for i, line in enumerate(verdict) if "at equal power" in line)
        assert 0 < engines < equal_power


def test_a_plan_that_needs_the_reference_runtime_carries_a_deployable_baseline(readme_plan):
    """The README's plan hands KV between vendors in ways no public engine's connector does (plan.json lists them
    under needs_runtime): it carries the same question solved as ``compile --deployable`` solves it, and the
    headline says what that gives and what the rest adds. The deployable baseline serves what a compile with
    --deployable serves, a plan that needs no reference runtime."""
    from compiler.driver import compile

    plan, graph = readme_plan
    assert plan.needs_runtime, "the README's plan needs the reference runtime"
    dep = next(b for b in plan.baselines if b.name == "deployable")
    assert dep.status in ("optimal", "feasible") and dep.plan_gain_interval is not None
    alone = compile("llama-3.1-70b", str(MIXED), str(CHAT), analyse=False, baselines=False, deployable=True).plan
    assert not alone.needs_runtime
    tolerance = max(plan.solver.gap, alone.solver.gap) + 1e-6
    assert dep.requests_per_s == pytest.approx(alone.predicted.requests_per_s, rel=tolerance)
    for verdict in (_bullets(build_report(plan, graph).summary_md), _cli_verdict(plan)):
        line = next(line for line in verdict if "public engines" in line)
        assert f"{dep.output_tokens_per_s:,.0f} output tokens/s" in line and _gain(dep) in line
        for need in plan.needs_runtime:
            assert need.feature in line


def test_a_plan_that_runs_on_public_engines_carries_no_deployable_baseline():
    """A colocated plan on the tiny example fleet runs on public engines as it is: nothing to compare."""
    from compiler.driver import compile

    tiny = REPO / "examples" / "tiny_split"
    plan = compile("llama-tiny", str(tiny / "cluster.yaml"), str(tiny / "workload.yaml"), analyse=False).plan
    assert not plan.needs_runtime
    assert "deployable" not in {b.name for b in plan.baselines}


# ------------------------------------------------------------------------------------------- pictures and tables


@pytest.mark.parametrize("basis, pue, says, never", [("node", None, "node", "TDP"), ("chip", None, "TDP", "node"),
                                                     ("facility", 1.3, "PUE 1.3", "TDP")])
def test_the_power_legend_names_the_power_basis_in_force(monkeypatch, tmp_path, basis, pue, says, never):
    """power.png's provisioned bars count what the budget counts: node power on the node footing, not TDP."""
    from compiler.emit.report import plots
    from compiler.emit.report.power import PoolPower, PowerBreakdown

    power = PowerBreakdown((PoolPower("pool0", "colocated", "nvidia-h100-sxm", 8, 10_200.0, 6_000.0),), 20_000.0,
                           0.0, (), basis, pue)
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, margins=None: drawn.append(fig))
    plots.plot_power(power, tmp_path / "power.png", "t")
    (fig,) = drawn
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    provisioned = next(label for label in labels if label.startswith("provisioned"))
    assert says in provisioned and never not in provisioned
    assert never not in ax.get_title()
    import matplotlib.pyplot as plt

    plt.close(fig)


def _marker_boxes(fig, renderer) -> list:
    """Each numbered marker's drawn extent in pixels: its marker path at its size, with half its edge around it
    (matplotlib's own marker geometry, so a diamond is as wide as it is drawn)."""
    from matplotlib.markers import MarkerStyle
    from matplotlib.transforms import Affine2D

    ax = fig.axes[0]
    boxes = []
    for line in ax.get_lines():
        if line.get_marker() in ("None", "", " ", None) or len(line.get_xdata()) != 1:
            continue
        style = MarkerStyle(line.get_marker())
        size_px = renderer.points_to_pixels(line.get_markersize())
        x, y = ax.transData.transform((line.get_xdata()[0], line.get_ydata()[0]))
        path = style.get_path().transformed(style.get_transform() + Affine2D().scale(size_px).translate(x, y))
        boxes.append(path.get_extents().padded(renderer.points_to_pixels(line.get_markeredgewidth()) / 2))
    return boxes


def test_the_roofline_markers_of_the_readme_plan_never_overlap(readme_plan):
    """The README's plan (its markers 10 and 11, diamonds, once overlapped): no two numbered markers, nor two of
    their numbers, share a pixel."""
    from compiler.emit.report.plots import roofline_figure

    plan, graph = readme_plan
    report = build_report(plan, graph)
    fig = roofline_figure(report.ceilings, report.roofline, report.title)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    numbers = [t for t in fig.axes[0].texts if t.get_text().isdigit()]
    markers = _marker_boxes(fig, renderer)
    assert len(markers) == len(numbers) >= 10
    for boxes in (markers, [t.get_window_extent(renderer) for t in numbers]):
        for i, a in enumerate(boxes):
            for j, b in enumerate(boxes[i + 1:], start=i + 1):
                assert not a.overlaps(b), (numbers[i].get_text(), numbers[j].get_text())
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_decode_pools_have_no_ttft_in_plan_json_the_cli_and_the_summary(readme_plan):
    """A decode pool does not produce the first token of a split request: plan.json, the CLI's pool table and
    summary.md all leave its TTFT empty and say why; a pool that prefills shows the same TTFT in all three."""
    from rich.console import Console

    from compiler.cli.compile import pool_tables
    from compiler.emit.report.figures import with_interval

    plan, graph = readme_plan
    decode = [p for p in plan.pools if "prefill" not in p.phases]
    prefill = [p for p in plan.pools if "prefill" in p.phases]
    assert decode and prefill
    for p in decode:
        assert p.predicted_ttft_ms is None and "ttft_ms" not in p.predicted_intervals
        assert all(c.ttft_p50_ms is None and c.ttft_slo_percentile_ms is None for c in p.predicted_classes)
        assert p.predicted_slot_wait_ms is not None  # the wait for a decode slot, under its own name
    for p in prefill:
        assert p.predicted_ttft_ms is not None
    console = Console(record=True, width=400)
    for table in pool_tables(plan, 400):
        console.print(table)
    cli = console.export_text()
    md = build_report(plan, graph).summary_md
    pools_md = md[md.index("## Pools"):md.index("## Devices")]
    for p in plan.pools:
        cli_row = next(line for line in cli.splitlines() if re.match(rf"\W*{p.name}\W", line))
        md_row = next(line for line in pools_md.splitlines() if line.startswith(f"| {p.name} |"))
        cli_ttft = [c.strip() for c in re.split(r"[│┃|]", cli_row) if c.strip()][9]
        md_ttft = md_row.split(" | ")[9]
        expected = "-" if p in decode else with_interval(p.predicted_ttft_ms, p.predicted_intervals.get("ttft_ms"),
                                                         ".0f")
        assert cli_ttft == md_ttft == expected, (p.name, cli_ttft, md_ttft)
    for text in (cli, pools_md):
        assert "decode pools do not produce the first token" in " ".join(text.split())
