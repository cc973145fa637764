"""The value of heterogeneity, measured against baselines that can win: complementary devices at the margin hand
arithmetic predicts, islands never above the fixed fleet, iso-power baselines equal to a separate one-type solve,
fleet design (`count: any`), prices and the cost objectives."""

from __future__ import annotations

import json
import math

import pytest

from compiler.ir.placement import ClassTarget, Instance, gain
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.place.baselines import baselines, colocated_only, islands
from compiler.place.ilp import solve
from tests.conftest import REPO, assert_one_line_error, run_cli

CHAT = str(REPO / "examples" / "workloads" / "chat.yaml")


# ----------------------------------------------------------------- complementary devices, by hand
# Two device types, one device per replica, 1 kW each, no SLO (every pool may run at utilisation 1):
# "pf" prefills 10 req/s and decodes 1 req/s; "dc" prefills 1 req/s and decodes 10 req/s. A colocated replica
# does both, so it serves 1 / (1/10 + 1/1) = 10/11 req/s. Mixing: prefill on pf, decode on dc, 10 req/s per
# device of each, i.e. 5 req/s per device.
PF_RATE, DC_RATE, SLOW = 10.0, 10.0, 1.0
COLOCATED = 1 / (1 / 10 + 1 / 1)


def _service(rate: float) -> tuple[ClassService, ...]:
    flat = ((0.5, 0.1, 0.1, 0.01, 0.01), (1.0, 0.1, 0.1, 0.01, 0.01))
    return (ClassService("chat", rate, flat),)


def _option(kind: str, device: str, rate: float) -> PoolOption:
    return PoolOption(f"{kind}:{device}", kind, ((device, 1),), power_w=800.0, provisioned_w=1000.0,
                      kv_device=device, tp=1, pp=1, batch=8, classes=_service(rate))


def complementary(budget_w: float | None = 10_000.0, arrival: float | None = None, inventory: int = 10) -> Instance:
    options = (_option("prefill", "pf", PF_RATE), _option("decode", "pf", SLOW), _option("colocated", "pf", COLOCATED),
               _option("prefill", "dc", SLOW), _option("decode", "dc", DC_RATE), _option("colocated", "dc", COLOCATED))
    chat = ClassTarget("chat", 1.0, None, None, kv_bytes=1e6, output_len=100.0)
    return Instance(options, (("dc", inventory), ("pf", inventory)), budget_w, (chat,), (), (), arrival,
                    prices_per_hour=(("dc", 1.0), ("pf", 2.0)))


def test_complementary_devices_gain_what_hand_arithmetic_predicts_in_throughput():
    inst = complementary()
    # 10 kW buys 10 devices. Mixed: 5 prefill on pf + 5 decode on dc = 50 req/s. Alone (either type, any split
    # into colocated or its own prefill/decode): 10 devices x 10/11 req/s = 9.09 req/s. Gain 5.5x.
    mixed = solve(inst, "throughput")
    assert mixed.requests_per_s == pytest.approx(50.0, rel=2e-3)
    assert mixed.devices() == {"dc": 5, "pf": 5}
    alone = solve(islands(inst), "throughput")
    assert alone.requests_per_s == pytest.approx(10 * COLOCATED, rel=2e-3)
    assert gain("max", mixed.objective.value, alone.objective.value) == pytest.approx(5.5, rel=3e-3)
    by_name = {b.name: b for b in baselines(inst, "throughput", time_limit_s=10)}
    assert by_name["no-disaggregation"].requests_per_s == pytest.approx(10 * COLOCATED, rel=2e-3)
    assert by_name["greedy"].requests_per_s == pytest.approx(10 * COLOCATED, rel=1e-9)  # floats, no ILP rounding
    assert by_name["vendor-islands"].requests_per_s == pytest.approx(10 * COLOCATED, rel=2e-3)


def test_complementary_devices_gain_what_hand_arithmetic_predicts_in_power_and_cost():
    # At 9 req/s. Mixed: prefill 9/10 -> 1 pf replica, decode 9/10 -> 1 dc replica: 2 kW, $3/h.
    # Alone: 9 / (10/11) = 9.9 -> 10 colocated replicas (or 1 + 9 split replicas): 10 kW; cheapest on dc, $10/h.
    inst = complementary(arrival=9.0)
    power = solve(inst, "power")
    assert power.provisioned_w == 2000.0 and power.objective.value == 2000.0
    alone = solve(islands(inst), "power")
    assert alone.provisioned_w == 10_000.0
    assert gain("min", power.objective.value, alone.objective.value) == pytest.approx(5.0)
    cost = solve(inst, "cost")
    assert cost.cost_per_hour == pytest.approx(3.0) and cost.objective.value == pytest.approx(3.0)
    cheapest_alone = solve(islands(inst), "cost")
    assert cheapest_alone.cost_per_hour == pytest.approx(10.0)
    assert cheapest_alone.devices() == {"dc": 10}


def test_ratio_objectives_match_hand_arithmetic():
    # Tokens per watt: 50 req/s on 10 kW = 5 mreq/s per W (any mixed size gives the same ratio: 10 req/s per 2 kW).
    # Tokens per dollar: one pf ($2) + one dc ($1) serve 10 req/s: 3.33 req/s per $/h; pf is dear, so no better mix.
    inst = complementary()
    tpw = solve(inst, "tokens-per-watt")
    assert tpw.objective.value == pytest.approx(10 / 2000, rel=2e-3)
    tpd = solve(inst, "tokens-per-dollar")
    assert tpd.objective.value == pytest.approx(10 / 3, rel=2e-3)
    assert tpd.cost_per_hour == pytest.approx(sum({"pf": 2.0, "dc": 1.0}[d] * n for d, n in tpd.devices().items()))


@pytest.mark.parametrize("seed", range(12))
def test_the_fixed_fleet_is_never_below_vendor_islands_or_colocated_only(seed):
    """On random two-type instances, for every objective: the plan's gain over islands and over no
    disaggregation (options the plan could choose too) is at least 1, in the objective's own sense."""
    from tests.compiler.test_place import random_instance

    base = random_instance(seed)
    inst = Instance(base.options, base.inventory, base.power_budget_w, base.classes, base.link_bw_bytes_per_s,
                    base.handoff_s, None, prices_per_hour=(("a", 2.5), ("b", 1.0)))
    rated = Instance(*[getattr(inst, f) for f in ("options", "inventory", "power_budget_w", "classes",
                                                 "link_bw_bytes_per_s", "handoff_s")], 0.5,
                     prices_per_hour=inst.prices_per_hour)
    for objective, instance in (("throughput", inst), ("tokens-per-watt", inst), ("tokens-per-dollar", inst),
                                ("power", rated), ("cost", rated)):
        plan = solve(instance, objective, time_limit_s=20)
        for sub in (islands(instance), colocated_only(instance)):
            other = solve(sub, objective, time_limit_s=20)
            if not other.feasible:
                continue
            assert plan.feasible, (objective, seed)
            g = gain(plan.objective.sense, plan.objective.value, other.objective.value)
            assert g is None or g >= 1 - 2e-3, (objective, seed, plan.objective, other.objective)


def test_islands_route_no_kv_across_types():
    inst = complementary()
    sol = solve(islands(inst), "throughput")
    assert all(by_prefill.split(":")[1] == to for (_c, by_prefill, to), _r in sol.flows)
    assert not any(o.kind == "decode-af" for o in islands(inst).options)


# ----------------------------------------------------------------- fleet design and prices in cluster files
def _cluster(tmp_path, body: str):
    path = tmp_path / "cluster.yaml"
    path.write_text(body)
    return path


def test_count_any_is_bounded_by_the_budget_by_hand(tmp_path):
    from compiler.inputs import load_cluster

    c = load_cluster(_cluster(tmp_path, "name: d\npower_budget_kw: 70\ncost_budget_per_hour: 100\ndevices:\n"
                                        "  - {device: nvidia-h100-sxm, count: any, price_per_hour: 3}\n"
                                        "  - {device: nvidia-b200, count: any, price_per_hour: 6}\n"
                                        "  - {device: amd-mi300x, count: 4, price_per_hour: 5}\n"))
    # H100: 70 kW / 700 W = 100, $100 / $3 = 33 -> 33. B200: 70 kW / 1000 W = 70, $100 / $6 = 16 -> 16.
    assert c.inventory() == {"nvidia-h100-sxm": 33, "nvidia-b200": 16, "amd-mi300x": 4}
    assert c.designed() == ("nvidia-h100-sxm", "nvidia-b200")
    assert c.alone("nvidia-b200", "power").inventory() == {"nvidia-b200": 70}
    assert c.alone("nvidia-b200", "cost").inventory() == {"nvidia-b200": 16}


def test_count_any_without_a_budget_is_bad_input_naming_the_field(tmp_path):
    path = _cluster(tmp_path, "name: d\ndevices:\n  - {device: nvidia-h100-sxm, count: any}\n")
    assert_one_line_error(run_cli("compile", "llama-tiny", "--cluster", str(path), "--workload", CHAT, "--out",
                                  str(tmp_path / "o")), "devices[0].count", "power_budget_kw")


def test_a_word_other_than_any_is_not_a_count(tmp_path):
    path = _cluster(tmp_path, "name: d\ndevices:\n  - {device: nvidia-h100-sxm, count: many}\n")
    assert_one_line_error(run_cli("compile", "llama-tiny", "--cluster", str(path), "--workload", CHAT, "--out",
                                  str(tmp_path / "o")), "devices[0].count", "any")


def test_cost_objective_without_a_price_names_the_device(tmp_path):
    path = _cluster(tmp_path, "name: d\ndevices:\n  - {device: amd-mi300x, count: 8}\n")
    work = tmp_path / "w.yaml"
    work.write_text("name: w\narrival_rate_per_s: 1\nclasses:\n  - {name: c, share: 1, input_len: 256, "
                    "output_len: 64}\n")
    assert_one_line_error(run_cli("compile", "llama-tiny", "--cluster", str(path), "--workload", str(work),
                                  "--objective", "cost", "--out", str(tmp_path / "o")), "amd-mi300x",
                          "price_per_hour")


def test_iso_power_baseline_equals_a_separate_solve_of_a_one_type_cluster_file(tmp_path):
    """The iso-power baseline of each type, recomputed as its own compile of a one-type cluster file holding as
    many devices as the budget buys (70 kW / TDP, by hand), gives the plan's numbers."""
    from compiler.driver import compile

    nvidia = str(REPO / "examples" / "clusters" / "nvidia.yaml")
    plan = compile("llama-3.1-8b", nvidia, CHAT, analyse=False).plan
    assert plan.power_budget_w == 70_000
    checked = 0
    for device, tdp_w in (("nvidia-h100-sxm", 700), ("nvidia-b200", 1000)):
        b = next(b for b in plan.baselines if b.name == f"iso-power:{device}")
        count = math.floor(70_000 / tdp_w)
        alone = _cluster(tmp_path, f"name: alone\npower_budget_kw: 70\ndevices:\n  - {{device: {device}, "
                                   f"count: {count}}}\n")
        own = compile("llama-3.1-8b", str(alone), CHAT, analyse=False, baselines=False).plan
        assert b.status == own.solver.status == "optimal"
        assert b.requests_per_s == pytest.approx(own.predicted.requests_per_s, rel=1e-9)
        assert b.output_tokens_per_s == pytest.approx(own.predicted.output_tokens_per_s, rel=1e-9)
        assert b.provisioned_power_w == pytest.approx(own.predicted.provisioned_power_w, rel=1e-9)
        assert b.plan_gain == pytest.approx(plan.solver.objective_value / own.solver.objective_value, rel=1e-9)
        checked += 1
    assert checked == 2


def test_cost_objective_end_to_end_reports_dollars_and_gains_as_the_baseline_over_the_plan(tmp_path):
    path = _cluster(tmp_path, "name: priced\npower_budget_kw: 40\ncost_budget_per_hour: 200\ndevices:\n"
                              "  - {device: nvidia-h100-sxm, count: any, price_per_hour: 4.0}\n"
                              "  - {device: nvidia-l40s, count: any, price_per_hour: 1.5}\n")
    work = tmp_path / "w.yaml"
    work.write_text("name: w\narrival_rate_per_s: 20\nclasses:\n  - {name: c, share: 1, input_len: 512, "
                    "output_len: 128}\nslo: {ttft_ms: 2000, tpot_ms: 100}\n")
    out = tmp_path / "o"
    proc = run_cli("compile", "llama-3.1-8b", "--cluster", str(path), "--workload", str(work), "--objective", "cost",
                   "--out", str(out), "--no-sensitivity", "--no-onnx", "--manifests", "none")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((out / "plan.json").read_text())
    price = {"nvidia-h100-sxm": 4.0, "nvidia-l40s": 1.5}
    dollars = sum(price[d] * n for d, n in plan["devices_used"].items())
    assert plan["predicted"]["cost_per_hour"] == pytest.approx(dollars)
    assert plan["solver"]["objective_value"] == pytest.approx(dollars)
    assert plan["fleet_design"] == ["nvidia-h100-sxm", "nvidia-l40s"]
    names = {b["name"] for b in plan["baselines"]}
    assert {"iso-power:nvidia-h100-sxm", "iso-cost:nvidia-h100-sxm", "iso-cost:nvidia-l40s"} <= names
    for b in plan["baselines"]:
        if b["status"] in ("optimal", "feasible"):
            assert b["plan_gain"] == pytest.approx(b["cost_per_hour"] / dollars, rel=1e-9)  # cost: lower is better
            assert b["plan_gain"] >= 1 - 2e-3  # fleet design: each baseline is a placement the plan could choose
            assert b["requests_per_s"] >= 20 - 1e-6
    assert plan["prices_per_hour"] == price and plan["price_sources"]["nvidia-l40s"] == "cluster file"
    assert "$/h" in proc.stdout and "0.00x" not in proc.stdout


def test_reference_prices_carry_a_source():
    from backends import registry

    for b in registry.backends():
        for p in b.prices:
            assert p.per_hour > 0 and p.source.startswith(("http://", "https://", "assumption:")), p
            registry.device(p.device)  # names a catalog device
    assert registry.reference_price("nvidia-a10g") is not None


@pytest.mark.parametrize("device_id, key, expected", [
    # Typed from the datasheets cited in backends/nvidia.py (dense = sparse headline / 2).
    ("nvidia-l4", "memory.dram.capacity_bytes", 24e9),
    ("nvidia-l4", "memory.dram.bw_bytes_per_s", 300e9),
    ("nvidia-l4", "tdp_w", 72),
    ("nvidia-l4", "peak_flops_per_s.fp8", 242.5e12),
    ("nvidia-a10g", "memory.dram.capacity_bytes", 24e9),
    ("nvidia-a10g", "memory.dram.bw_bytes_per_s", 600e9),
    ("nvidia-h20", "memory.hbm.capacity_bytes", 96e9),
    ("nvidia-h20", "memory.hbm.bw_bytes_per_s", 4.0e12),
    ("nvidia-h20", "peak_flops_per_s.bf16", 148e12),
    ("nvidia-h20", "tdp_w", 400),
])
def test_new_catalog_devices(device_id, key, expected):
    from backends.registry import device

    assert device(device_id).numbers()[key] == pytest.approx(expected)


# ----------------------------------------------------------------- wafer decode at a few ms, HBM decode when relaxed
def test_decode_runs_on_the_wafer_at_5_ms_and_moves_to_hbm_devices_at_50_ms():
    """A fleet of Trainium2, CS-3 and H100 serving Llama-3.1-70B, most tokens per watt: at TPOT <= 5 ms only the
    wafer's SRAM decodes fast enough; at 50 ms decode moves to HBM devices, which serve more per watt there."""
    from backends.registry import device
    from compiler.driver import prepare

    scenario = REPO / "examples" / "scenarios" / "trainium_cerebras"
    prep = prepare("llama-3.1-70b", str(scenario / "cluster.yaml"), str(scenario / "fast.yaml"))
    assert prep.instance.classes[0].tpot_slo_s == 0.005

    def decoders(tpot_s: float) -> set[str]:
        sol = solve(prep.instance.with_slo(tpot_s=tpot_s), "tokens-per-watt")
        assert sol.feasible, tpot_s
        return {o.kv_device for o, _n in sol.used() if o.kind in ("colocated", "decode", "decode-af")}

    assert decoders(0.005) == {"cerebras-cs3"}
    relaxed = decoders(0.050)
    assert relaxed and "cerebras-cs3" not in relaxed
    assert all(device(d).memory[0].name == "hbm" for d in relaxed)


def test_every_scenario_file_loads():
    from compiler.inputs import load_cluster, load_workload

    files = sorted((REPO / "examples" / "scenarios").rglob("*.yaml"))
    clusters = [f for f in files if f.name == "cluster.yaml"]
    assert len(clusters) == 4 and len(files) == 4 + 8
    for f in files:
        (load_cluster if f.name == "cluster.yaml" else load_workload)(f)


def test_the_sweep_ends_at_the_fastest_tpot_a_placement_within_the_budget_reaches(tmp_path):
    """The fastest TPOT is the wafer's, and the wafer (23 kW) does not fit the 10 kW budget: the sweep ends at
    the fastest target the H100s reach within it instead of failing on targets no placement can meet."""
    cluster = _cluster(tmp_path, "name: wafer-out-of-budget\npower_budget_kw: 10\ndevices:\n"
                                 "  - {device: nvidia-h100-sxm, count: 8}\n  - {device: cerebras-cs3, count: 1}\n")
    out = tmp_path / "out"
    proc = run_cli("pareto", "llama-3.1-8b", "--cluster", str(cluster), "--workload", CHAT, "--points", "3",
                   "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in json.loads(proc.stdout)["points"] if r["curve"] == "heterogeneous"]
    assert len(rows) == 3 and all("cerebras" not in r["devices"] for r in rows)
    fastest = min(r["tpot_target_ms"] for r in rows)
    alone = run_cli("estimate", "llama-3.1-8b", "--device", "cerebras-cs3", "--count", "1", "--batch", "1", "--json")
    assert alone.returncode == 0, alone.stderr
    assert fastest > 2 * json.loads(alone.stdout)["tpot_ms"]  # the wafer's own TPOT is out of reach


def test_a_sweep_with_a_failing_point_exits_3_naming_it_and_writes_no_frontier(tmp_path, monkeypatch, capsys):
    """A point that fails (here: a target below what any placement reaches, as if the search for the fastest
    one had erred) is named with what binds there; the command exits 3 and leaves no frontier file behind."""
    from compiler import driver
    from compiler.cli.main import main

    cluster = _cluster(tmp_path, "name: h100\npower_budget_kw: 10\ndevices:\n  - {device: nvidia-h100-sxm, count: 8}\n")
    monkeypatch.setattr(driver, "fastest_tpot", lambda _inst: 1e-4)
    out = tmp_path / "out"
    code = main(["pareto", "llama-3.1-8b", "--cluster", str(cluster), "--workload", CHAT, "--points", "3",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "points of the frontier failed" in err and "TPOT 0.10 ms" in err and "SLO" in err
    assert not any((out / f).exists() for f in ("pareto.csv", "pareto.json", "pareto.png"))
    assert json.loads((out / "status.json").read_text())["exit_code"] == 3
