"""The cluster's power footing (``power_basis``, ``pue``) and the solver's drawn power at its operating point:
baseline device counts by hand arithmetic from the sourced node powers, and a pool's draw from idle to full."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.cost.costing import on_basis, with_node_power
from compiler.inputs import Cluster, load_cluster
from compiler.ir.errors import BadInput
from compiler.ir.placement import ClassTarget, Instance
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.place.ilp import solve

REPO = Path(__file__).resolve().parents[2]


def _cluster(**kw) -> Cluster:
    return Cluster(name="t", devices=[{"device": "nvidia-h100-sxm", "count": "any"},
                                      {"device": "cerebras-cs3", "count": "any"}], power_budget_kw=200, **kw)


def test_default_footing_is_node_and_the_iso_power_counts_follow_from_node_power():
    """200 kW / (10.2 kW / 8) = 156.9 -> 156 H100 (285 on the chip footing); 200 / 23 = 8.7 -> 8 CS-3."""
    mixed = load_cluster(REPO / "examples" / "clusters" / "mixed.yaml")
    assert mixed.power_basis == "node" and mixed.pue is None
    alone = mixed.alone("nvidia-h100-sxm", "power")
    assert alone.power_basis == "node"
    assert alone.inventory() == {"nvidia-h100-sxm": 156}
    assert mixed.alone("cerebras-cs3", "power").inventory() == {"cerebras-cs3": 8}
    chip = mixed.model_copy(update={"power_basis": "chip"})
    assert chip.alone("nvidia-h100-sxm", "power").inventory() == {"nvidia-h100-sxm": 285}
    # MI300X (no published platform power): 750 W + DGX H100's 575 W host share = 1,325 W -> 150.
    assert mixed.alone("amd-mi300x", "power").inventory() == {"amd-mi300x": 150}


def test_facility_footing_needs_a_pue_and_scales_every_device():
    with pytest.raises(ValueError, match="give pue"):
        _cluster(power_basis="facility")
    facility = _cluster(power_basis="facility", pue=1.25)
    # 200 kW / (1,275 W x 1.25) = 125.5; 200 kW / (23 kW x 1.25) = 6.96.
    assert facility.inventory() == {"nvidia-h100-sxm": 125, "cerebras-cs3": 6}
    assert _cluster(power_basis="chip").inventory() == {"nvidia-h100-sxm": 285, "cerebras-cs3": 8}


def test_a_bad_footing_is_one_line_naming_the_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\npower_budget_kw: 10\npower_basis: rack\ndevices:\n  - {device: nvidia-h100-sxm, count: 8}\n")
    with pytest.raises(BadInput, match="power_basis"):
        load_cluster(path)


def test_options_move_onto_the_footing():
    """One replica of 8 H100 costed on chip (TDP 5.6 kW, draws 4 kW at full load, idle 8 x 70 W)."""
    o = PoolOption("decode:nvidia-h100-sxm:tp8:pp1:b64", "decode", (("nvidia-h100-sxm", 8),), power_w=4000.0,
                   provisioned_w=5600.0, kv_device="nvidia-h100-sxm", tp=8, pp=1, batch=64)
    on_chip, on_node = _cluster(power_basis="chip"), _cluster(power_basis="node")
    chip = on_basis(o, on_chip)
    assert (chip.provisioned_w, chip.power_w, chip.idle_w) == (5600.0, 4000.0, 560.0)
    node = on_basis(o, on_node)
    assert node.provisioned_w == 10_200.0  # one DGX H100
    assert node.power_w == 4000.0 + 8 * 575  # the host share draws in full at full load
    assert node.idle_w == 560.0 + 8 * 575 / 2  # and half of it at idle
    facility = on_basis(o, _cluster(power_basis="facility", pue=1.2))
    assert facility.provisioned_w == pytest.approx(1.2 * 10_200.0)
    # A sensitivity move of the node power by +20% moves what the replica provisions and draws by 2,040 W.
    moved = with_node_power(node, {"nvidia-h100-sxm"}, 0.2, on_node)
    assert moved.provisioned_w == pytest.approx(12_240.0) and moved.power_w == pytest.approx(node.power_w + 2040.0)
    assert with_node_power(chip, {"nvidia-h100-sxm"}, 0.2, on_chip) == chip


def _instance(tpot_slo_s: float | None, budget_w: float) -> Instance:
    """One colocated option: 10 req/s per replica at full load, 900 W full, 300 W idle, 1 kW provisioned; its TPOT
    at the percentile rises with utilisation (20 ms at 50%, 40 ms at 95%)."""
    curve = tuple((u, 0.2, 0.3, 0.01, tpot) for u, tpot in ((0.05, 0.01), (0.5, 0.02), (0.95, 0.04)))
    option = PoolOption("colocated:a:0", "colocated", (("a", 1),), power_w=900.0, provisioned_w=1000.0,
                        kv_device="a", tp=1, pp=1, batch=8, classes=(ClassService("c", 10.0, curve),), idle_w=300.0)
    return Instance((option,), (("a", 4),), budget_w, (ClassTarget("c", 1.0, None, tpot_slo_s, 1e6, 100.0),), (),
                    ((("c", "a", "a"), 0.0),))


@pytest.mark.parametrize("tpot_slo_s, budget_w, replicas", [(0.02, 1000.0, 1), (0.04, 1000.0, 1), (0.02, 2000.0, 2),
                                                            (None, 3000.0, 3)])
def test_a_pools_draw_follows_its_solved_utilisation(tpot_slo_s, budget_w, replicas):
    """Most throughput within the budget; the SLO caps the utilisation (50% at a 20 ms TPOT, 95% at 40 ms or
    none). Draw = 300 W x n + (900 - 300) W x load, load = served / 10 req/s."""
    sol = solve(_instance(tpot_slo_s, budget_w), "throughput")
    assert dict(sol.replicas) == {"colocated:a:0": replicas}
    util = sol.utilisation(sol.options[0])
    assert util == pytest.approx(0.5 if tpot_slo_s == 0.02 else 0.95, abs=1e-3)
    assert sol.power_w == pytest.approx(300.0 * replicas + 600.0 * sol.requests_per_s / 10.0, abs=0.01)
    assert sol.power_w == pytest.approx(replicas * (300.0 + 600.0 * util), abs=0.01)
    assert sol.provisioned_w == 1000.0 * replicas


def test_draw_rises_with_utilisation_at_a_fixed_fleet():
    """One replica: 600 W at 50% (idle 300 W + 600 W x 0.5), 870 W at 95%, never its full 900 W."""
    low, high = (solve(_instance(slo, 1000.0), "throughput") for slo in (0.02, 0.04))
    assert low.power_w == pytest.approx(600.0, abs=0.01)
    assert high.power_w == pytest.approx(870.0, abs=0.1)  # the cap floors to the milli-request
