"""The plan report (`compiler.emit.report`): summary, power, roofline, Chrome-trace timeline, pictures."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from compiler.emit.report import build_report, write_report
from compiler.emit.report.power import power_breakdown
from compiler.emit.report.roofline import ceilings, roofline_points
from compiler.emit.report.timeline import DECODE_STEPS, pipeline_trace
from tests.conftest import REPO

TINY = REPO / "examples" / "tiny_split"


@pytest.fixture(scope="module")
def compiled():
    """llama-tiny placed on the three-accelerator example fleet (colocated pools), with its BlockGraph."""
    from compiler.driver import compile

    result = compile("llama-tiny", str(TINY / "cluster.yaml"), str(TINY / "workload.yaml"), analyse=False)
    return result.plan, result.prepared.graph


@pytest.fixture(scope="module")
def split(tiny_graph):
    """A hand-made plan with every serving path: a colocated pool, and a 2-stage prefill pool handing KV to a
    decode pool split into attention (H200) and FFN (MI300X) halves."""
    from compiler.emit.handmade import PoolShape, handmade_plan

    shapes = [PoolShape("co", "colocated", device="nvidia-b200"),
              PoolShape("pre", "prefill", pp=2, device="nvidia-h100-sxm"),
              PoolShape("attn", "decode-attention", device="nvidia-h200-sxm", batch=64),
              PoolShape("ffn", "decode-ffn", device="amd-mi300x", batch=64)]
    plan = handmade_plan(tiny_graph("llama-tiny"), shapes)
    kv = [t.model_copy(update={"predicted_latency_ms": 0.5}) if t.kind == "kv" else t for t in plan.transfers]
    return plan.model_copy(update={"mean_input_len": 256.0, "mean_output_len": 64.0, "transfers": kv})


def test_power_breakdown_of_a_hand_made_plan_is_the_datasheet_arithmetic(tiny_graph):
    """On the chip footing, against datasheet TDPs (H100 SXM and H200 SXM 700 W, B200 1,000 W): one B200
    colocated replica, three 2-H100 prefill replicas and two H200 decode replicas provision 1,000 + 6 x 700 +
    2 x 700 = 6,600 W; of an inventory of 2 B200, 8 H100 and 2 H200, one B200 and two H100 stay dark (2,400 W);
    drawn watts are the pools' own predictions added up (600 + 2,500 + 900)."""
    from compiler.emit.handmade import PoolShape, handmade_plan

    shapes = [PoolShape("co", "colocated", device="nvidia-b200"),
              PoolShape("pre", "prefill", tp=2, replicas=3, device="nvidia-h100-sxm"),
              PoolShape("dec", "decode", replicas=2, device="nvidia-h200-sxm")]
    plan = handmade_plan(tiny_graph("llama-tiny"), shapes)
    drawn = {"co": 600.0, "pre": 2500.0, "dec": 900.0}
    plan = plan.model_copy(update={
        "pools": [p.model_copy(update={"predicted_power_w": drawn[p.name]}) for p in plan.pools],
        "inventory": {"nvidia-b200": 2, "nvidia-h100-sxm": 8, "nvidia-h200-sxm": 2}, "power_budget_w": 10_000.0})
    power = power_breakdown(plan)
    assert plan.power_basis == "chip"
    assert [(r.pool, r.devices, r.provisioned_w, r.drawn_w) for r in power.pools] == [
        ("co", 1, 1000.0, 600.0), ("pre", 6, 4200.0, 2500.0), ("dec", 2, 1400.0, 900.0)]
    assert power.provisioned_w == 6600.0 and power.drawn_w == 4000.0 and power.budget_w == 10_000.0
    assert power.dark_devices == (("nvidia-b200", 1), ("nvidia-h100-sxm", 2)) and power.dark_w == 2400.0


def test_every_block_sits_under_its_devices_roofline(compiled, split, tiny_graph):
    """Roofline invariant: a block reaches at most min(peak FLOP/s, fastest-tier bandwidth x intensity)."""
    for plan, graph in (compiled, (split, tiny_graph("llama-tiny"))):
        roofs = {c.device: c for c in ceilings(plan)}
        points = roofline_points(plan, graph)
        assert {(p.pool, p.phase) for p in points} == {(pool.name, ph) for pool in plan.pools for ph in pool.phases
                                                       if pool.role != "drafter"}
        for p in points:
            c = roofs[p.device]
            assert 0 < p.achieved_flops_per_s <= min(c.peak_flops_per_s,
                                                     c.mem_bw_bytes_per_s * p.intensity_flops_per_byte) * (1 + 1e-9)


def test_a_pool_is_drawn_at_its_devices_efficiencies_whatever_its_engine(split):
    """One efficiency per device: the H100 pool is drawn at the H100's own fitted efficiency under vLLM and under no
    engine alike, the B200 (no serving rows of its own) at the NVIDIA family's."""
    from cost_models.derates import DEVICE_EFFS, derate_for

    for engine in ("vllm", "generic"):
        pools = [p.model_copy(update={"engine": engine}) if p.name == "pre" else p for p in split.pools]
        roofs = {c.device: c for c in ceilings(split.model_copy(update={"pools": pools}))}
        assert roofs["nvidia-h100-sxm"].mem_eff == DEVICE_EFFS["nvidia-h100-sxm"]["mem_eff"]
        assert roofs["nvidia-b200"].mem_eff == derate_for("nvidia").mem_eff


def test_decode_attention_counts_each_layer_once(split, tiny_graph):
    """The attention pool runs the model's attention blocks (2 layers of llama-tiny), grouped as one point."""
    points = [p for p in roofline_points(split, tiny_graph("llama-tiny")) if p.pool == "attn"]
    assert [(p.role, p.count) for p in points] == [("attn", 2)]


def _x_events(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_timeline_is_a_chrome_trace_perfetto_can_open(split, tiny_graph):
    """The Trace Event Format: complete events with numeric µs times and integer pid/tid, every process named;
    no track runs two things at once."""
    trace = json.loads(json.dumps(pipeline_trace(split, tiny_graph("llama-tiny"))))  # JSON-clean
    assert trace["displayTimeUnit"] == "ms"
    named = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    tracks = defaultdict(list)
    for e in _x_events(trace):
        assert isinstance(e["name"], str) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["ts"] >= 0 and e["dur"] >= 0 and e["pid"] in named and e["args"]["prediction"] is True
        tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        assert all(a_end <= b_start + 1e-6 for (_a, a_end), (b_start, _b) in zip(spans, spans[1:]))


def test_timeline_follows_each_request_through_its_path(split, tiny_graph):
    """Colocated: prefill then decode on one pool. Disaggregated: two prefill stages in order, the KV hand-off,
    then decode steps alternating attention and FFN layer by layer, each event starting as the previous ends."""
    trace = pipeline_trace(split, tiny_graph("llama-tiny"))
    pid = {e["args"]["name"].split(" ")[0]: e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    events = sorted(_x_events(trace), key=lambda e: e["ts"])
    second = [e for e in events if e["name"].startswith("request 1 ")]
    assert [e["tid"] for e in second[:2]] == [0, 1] and {e["pid"] for e in second[:2]} == {pid["pre"]}
    assert second[2]["cat"] == "kv" and second[2]["dur"] == pytest.approx(500.0)  # 0.5 ms, in µs
    decode = second[3:]
    assert all(b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=1e-3) for a, b in zip(second, second[1:]))
    # per step: embed, then (attention, FFN) per layer, then head: 2 + 2 x 2 events on the attn/ffn pools
    assert len(decode) == DECODE_STEPS * (2 + 2 * 2)
    assert [e["pid"] for e in decode[:6]] == [pid["ffn"], pid["attn"], pid["ffn"], pid["attn"], pid["ffn"], pid["ffn"]]
    first = [e for e in events if e["name"].startswith("request 0 ")]
    assert {e["pid"] for e in first} == {pid["co"]} and len(first) == 1 + DECODE_STEPS


def test_summary_names_every_pool_class_and_baseline_and_says_prediction(compiled):
    plan, graph = compiled
    md = build_report(plan, graph).summary_md
    assert "**prediction**" in md and "## Solver" in md and "## Sensitivity" in md and "## Power" in md
    for pool in plan.pools:
        assert f"| {pool.name} | {pool.role} | {pool.device} |" in md
    for c in plan.classes:
        assert f"| {c.name} |" in md
    for b in plan.baselines:
        assert f"| {b.name} |" in md
    assert f"{plan.solver.status}" in md


def test_write_report_writes_every_file(compiled, tmp_path):
    plan, graph = compiled
    rows = [{"curve": "heterogeneous", "tpot_target_ms": t, "tokens_per_s_per_user": 1e3 / t,
             "output_tokens_per_s_per_mw": 1e6 / t} for t in (5.0, 10.0, 20.0)]
    files = write_report(build_report(plan, graph, frontier=rows, frontier_title="t"), tmp_path)
    assert sorted(p.name for p in files) == ["pareto.png", "power.png", "report.json", "roofline.png", "summary.md",
                                             "timeline.json"]
    for name in ("pareto.png", "power.png", "roofline.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / name).stat().st_size > 10_000
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["prediction"] is True and data["frontier"]["points"] == rows
    assert not (tmp_path / "x").exists()
    without = write_report(build_report(plan, graph), tmp_path / "none")
    assert "pareto.png" not in {p.name for p in without}


def test_the_plan_records_each_pools_engine(tmp_path):
    """The cluster file's ``engine:`` reaches plan.json, so the report draws what the placement costed."""
    from compiler.driver import compile

    cluster = (TINY / "cluster.yaml").read_text().replace("{device: nvidia-h100-sxm, count: 1}",
                                                          "{device: nvidia-h100-sxm, count: 1, engine: vllm}")
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster)
    plan = compile("llama-tiny", str(path), str(TINY / "workload.yaml"), analyse=False, baselines=False).plan
    assert {p.device: p.engine for p in plan.pools} == {p.device: "vllm" if p.device == "nvidia-h100-sxm" else
                                                          "generic" for p in plan.pools}
    assert "nvidia-h100-sxm" in {p.device for p in plan.pools}


def _verdict(md: str) -> str:
    """summary.md's verdict section: what comes before its first other section."""
    assert md.index("## Verdict (predicted)") < md.index("## Pools"), "summary.md opens with the verdict"
    return md[md.index("## Verdict (predicted)"):md.index("## Pools")]


def test_the_summary_opens_with_a_single_type_at_equal_power_and_how_sure_that_is(tmp_path):
    """One H100 and one MI300X under a budget of their two nodes' power (1,275 + 1,325 W on the node footing):
    H100s alone, as many as the budget buys (floor(2,600 / 1,275) = 2), serve two of the plan's H100 replicas'
    requests, more than its H100 plus the slower MI300X. The verdict says so, with the ratio and its 80% interval,
    before the pools; the baselines with no placement say why, with no zeros.

    The interval by hand ([Note: one factor per device type]): with each type's predictions off by a factor f, the
    baseline serves iso / f_h and the plan a / f_h + b / f_m (a, b: its tokens/s on each type), so the baseline is
    iso / (a + b r) times the plan at r = f_h / f_m, falling in r. Each f is log-normal with its spread's ends as
    10th and 90th percentiles, independent, so r is log-normal too: mu = mu_h - mu_m, sigma^2 = sigma_h^2 +
    sigma_m^2, and the interval is iso / (a + b r90) .. iso / (a + b r10) (widened to hold the central ratio)."""
    import math

    from compiler.driver import compile
    from compiler.emit.report.power import device_w
    from compiler.ir.prediction import Z90

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((TINY / "cluster.yaml").read_text() + "power_budget_kw: 2.6\n")
    plan = compile("llama-tiny", str(cluster), str(TINY / "workload.yaml"), analyse=False).plan
    h100 = next(p for p in plan.pools if p.device == "nvidia-h100-sxm")
    iso = next(b for b in plan.baselines if b.name == "iso-power:nvidia-h100-sxm")
    buys = int(2600 // device_w("nvidia-h100-sxm", plan.power_basis))
    assert buys == 2 and iso.devices == {"nvidia-h100-sxm": buys}
    # the same H100 replica at the same load, twice: hand arithmetic on the plan's own pool
    assert iso.requests_per_s == pytest.approx(buys * h100.predicted_requests_per_s / h100.replicas, rel=1e-3)
    ratio = iso.output_tokens_per_s / plan.predicted.output_tokens_per_s
    assert ratio > 1.2 and iso.beats_plan
    tokens = {d: sum(p.predicted_requests_per_s for p in plan.pools if p.device == d) * plan.mean_output_len
              for d in ("nvidia-h100-sxm", "amd-mi300x")}
    a, b = tokens["nvidia-h100-sxm"], tokens["amd-mi300x"]
    assert a + b == pytest.approx(plan.predicted.output_tokens_per_s, rel=1e-6)
    spread = {p.device: p.interval_basis for p in plan.pools}
    from cost_models.spreads import spread_for

    sh = spread_for("nvidia-h100-sxm", "nvidia", "generic", "tpot")
    sm = spread_for("amd-mi300x", "amd", "generic", "tpot")
    assert all("published" in v["tpot"] for v in spread.values())
    params = [((math.log(s.lo) + math.log(s.hi)) / 2, (math.log(s.hi) - math.log(s.lo)) / (2 * Z90)) for s in (sh, sm)]
    mu, sigma = params[0][0] - params[1][0], math.hypot(params[0][1], params[1][1])
    r10, r90 = math.exp(mu - Z90 * sigma), math.exp(mu + Z90 * sigma)
    lo, hi = min(iso.output_tokens_per_s / (a + b * r90), ratio), max(iso.output_tokens_per_s / (a + b * r10), ratio)
    gain_lo, gain_hi = iso.plan_gain_interval
    assert 1 / gain_hi == pytest.approx(lo, rel=0.05) and 1 / gain_lo == pytest.approx(hi, rel=0.05)
    md = build_report(plan, _graph_of(plan)).summary_md
    verdict = _verdict(md)
    if lo > 1:
        assert not iso.within_error
        assert (f"A single device type beats this mix at equal power: {buys} x nvidia-h100-sxm alone would serve "
                f"{ratio:.2f}x (") in verdict
    else:
        assert iso.within_error
        assert (f"{buys} x nvidia-h100-sxm alone at equal power would serve {ratio:.2f}x (") in verdict
        assert "within the model's error" in verdict
    assert "No baseline beats" not in verdict
    skipped = [b for b in plan.baselines if b.status in ("skipped", "infeasible")]
    assert skipped, "dmatrix-corsair cannot run bf16: its iso-power baseline is skipped"
    for b in skipped:
        row = next(line for line in md.splitlines() if line.startswith(f"| {b.name} |"))
        assert f"| {b.status} | - | - | - |" in row and b.note.split(":")[0] in row and "| 0 |" not in row
        assert f"{b.name}: {b.status}, no placement to compare ({b.note}" in verdict


def _graph_of(plan):
    from compiler.driver import block_graph

    return block_graph(plan.model)


def test_no_heuristic_scores_above_an_optimal_plan_beyond_the_solvers_tolerance(compiled):
    """Greedy, vendor islands and no disaggregation run on the plan's own inventory with placements the solver
    could choose: against a plan proven optimal none may score above it by more than the solver's floating-point
    tolerance (the integer model this replaced let greedy win by 0.05-1% through its rounding), and the verdict
    and the CLI then say "no baseline beats" or call the difference a tie."""
    from compiler.cli.compile import baseline_verdicts
    from compiler.emit.emit_plan import BEATS_TOLERANCE

    plan, graph = compiled
    assert plan.solver.status == "optimal"
    verdict = _verdict(build_report(plan, graph).summary_md)
    cli = " ".join(baseline_verdicts(plan))
    same_inventory = [b for b in plan.baselines if b.name in ("greedy", "vendor-islands", "no-disaggregation")
                      and b.plan_gain is not None]
    assert same_inventory
    for b in same_inventory:
        assert 1 / b.plan_gain - 1 <= BEATS_TOLERANCE, b
        assert not b.beats_plan
        if b.plan_gain < 1:
            for text in (verdict, cli):
                assert f"{b.name} ({b.question}) scores" in text and "a tie, within the solver's" in text


def test_zero_rate_rows_are_left_out_and_decode_pools_show_no_ttft(split, tiny_graph):
    """A KV hand-off at 0.001 req/s (a trickle an optimum may route either way) prints as 0.00: it is
    not listed; a decode pool's TTFT column is empty, a prefill pool's is its own."""
    from compiler.emit.emit_plan import NEGLIGIBLE_REQUESTS_PER_S

    kv = [t for t in split.transfers if t.kind == "kv"]
    assert kv
    tiny = kv[0].model_copy(update={"predicted_requests_per_s": 0.001, "predicted_bytes_per_s": 3.4e5})
    live = kv[0].model_copy(update={"predicted_requests_per_s": 2.0, "predicted_bytes_per_s": 1e9})
    pools = [p.model_copy(update={"predicted_ttft_ms": 99.0, "predicted_requests_per_s": 1.0}) for p in split.pools]
    plan = split.model_copy(update={"transfers": [tiny, live], "pools": pools})
    md = build_report(plan, tiny_graph("llama-tiny")).summary_md
    section = md[md.index("## Transfers"):md.index("## Baselines")]
    assert 0.001 < NEGLIGIBLE_REQUESTS_PER_S and "| 0.00 |" not in section and "| 2.00 | 1 |" in section
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in md[md.index("## Pools"):md.index("## Devices")]
            .splitlines() if line.startswith("| ") and not line.startswith("| pool |")}
    for p in plan.pools:
        assert (rows[p.name][9] == "99") == ("prefill" in p.phases), (p.name, p.phases, rows[p.name])


# -------------------------------------------------------------------------------------------- pictures


def _roofline_point(i: int, intensity: float, flops: float, device: str = "nvidia-h100-sxm", phase: str = "decode"):
    from compiler.emit.report.roofline import RooflinePoint

    return RooflinePoint(f"pool{i % 4}", device, phase, f"L{i}.attn", "attn", 1, (("B", 8.0),), flops,
                         flops / intensity, 1.0, "memory")


def test_roofline_numbers_never_overlap_and_the_table_names_every_block():
    """40 blocks crowded onto two spots and a diagonal (as many pools of one model land): every marker number is
    drawn apart from every other, and each block is named in exactly one table row."""
    import random

    from compiler.emit.report.plots import roofline_figure
    from compiler.emit.report.roofline import Ceiling

    rng = random.Random(7)
    points = [_roofline_point(i, 10 * (1 + 0.01 * rng.random()), 1e13 * (1 + 0.01 * rng.random())) for i in range(15)]
    points += [_roofline_point(15 + i, 0.5 * (1.3 ** i), 3e11 * (1.25 ** i), "amd-mi300x", "prefill")
               for i in range(25)]
    ceils = [Ceiling("nvidia-h100-sxm", "bf16", 989e12, 3.35e12, 0.7, 0.9),
             Ceiling("nvidia-h200-sxm", "bf16", 989e12, 3.36e12, 0.7, 0.9),  # within 3%: drawn once
             Ceiling("amd-mi300x", "bf16", 1307e12, 5.3e12, 0.3, 0.48)]
    fig = roofline_figure(ceils, points, "t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    numbers = [t for t in ax.texts if t.get_text().isdigit()]
    boxes = [t.get_window_extent(renderer) for t in numbers]
    assert len(numbers) >= 2
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)
    rows: list[str] = []
    for line in "\n".join(t.get_text() for t in fig.texts).splitlines()[1:]:  # a long row continues indented
        rows.append(line) if line[:1].isdigit() else rows.__setitem__(-1, rows[-1] + " " + line.strip())
    assert len(rows) == len(numbers)
    for p in points:  # each block's pool and device are in its mark's row; the 15 crowded ones share one row
        assert any(f"{p.pool} {p.phase}" in row for row in rows)
    assert [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")] == \
        ["nvidia-h100-sxm, nvidia-h200-sxm (bf16 peak)", "amd-mi300x (bf16 peak)"]
    import matplotlib.pyplot as plt

    plt.close(fig)


def _front(curve: str, target_ms: float, per_mw: float, tokens_per_s: float) -> dict:
    return {"curve": curve, "tpot_target_ms": target_ms, "tokens_per_s_per_user": 1e3 / target_ms,
            "output_tokens_per_s_per_mw": per_mw, "output_tokens_per_s": tokens_per_s}


def test_frontier_draws_only_non_dominated_points_names_each_baseline_and_puts_the_plan_on_its_curve():
    """Solved for throughput: at 20 ms the plan's 1,000 tokens/s beats the 40 ms point's 900, which is dominated
    (slower and no better) and not drawn; the iso-power curve is named, not "best baseline"."""
    from compiler.emit.report.plots import frontier_figure

    rows = [_front("heterogeneous", 40.0, 5e5, 900.0), _front("heterogeneous", 10.0, 6e5, 800.0),
            _front("heterogeneous", 5.0, 1e5, 100.0), _front("iso-power:nvidia-b200", 10.0, 7e5, 700.0),
            _front("iso-power:nvidia-b200", 20.0, 6e5, 600.0)]
    plan = {**_front("plan", 20.0, 4e5, 1000.0), "on_curve": True, "label": "this plan"}
    fig = frontier_figure(rows, "t", "throughput", plan=plan)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    het = lines["heterogeneous (the gimletc plan's fleet)"]
    assert list(het.get_xdata()) == [50.0, 100.0, 200.0] and list(het.get_ydata()) == [1000.0, 800.0, 100.0]
    iso = lines["iso-power:nvidia-b200 (nvidia-b200 alone, same power budget)"]
    assert list(iso.get_xdata()) == [100.0]  # its 20 ms point (600) is below its 10 ms point (700)
    assert "this plan" in lines and not any("best baseline" in label for label in lines)
    assert ax.get_ylabel() == "output tokens/s"
    per_mw = frontier_figure(rows, "t", "tokens-per-watt")
    assert per_mw.axes[0].get_ylabel() == "output tokens/s per MW provisioned"
    import matplotlib.pyplot as plt

    plt.close(fig)
    plt.close(per_mw)


def test_frontier_units_agree_in_help_plot_and_docs():
    """Per MW provisioned everywhere (the CSV column is output_tokens_per_s_per_mw); the axis once said per kW."""
    from compiler.cli.main import build_parser
    from compiler.emit.report.plots import FRONTIER_METRICS

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    help_text = sub.choices["pareto"].format_help()
    section = (REPO / "docs" / "cli" / "pareto.md").read_text()
    assert FRONTIER_METRICS["tokens-per-watt"][1] == "output tokens/s per MW provisioned"
    for text in (" ".join(help_text.split()), " ".join(section.split())):
        assert "per MW" in text and "per kW" not in text


def test_the_plan_point_is_at_its_tpot_target(compiled):
    plan, graph = compiled
    point = build_report(plan, graph, frontier_objective=plan.solver.objective).plan_point()
    target = min(c.slo_tpot_ms for c in plan.classes if c.slo_tpot_ms)
    assert point["tokens_per_s_per_user"] == pytest.approx(1e3 / target) and point["on_curve"]
    assert point["output_tokens_per_s"] == plan.predicted.output_tokens_per_s
