"""Power on one footing ([Note: power basis], [Note: power footing]) and drawn power at the operating point
([Note: drawn power]): expectations by hand arithmetic from the system datasheets the catalog cites."""

from __future__ import annotations

import pytest

from backends.registry import all_devices, device
from cost_models.power import HOST_IDLE_FRACTION, POWER_BASES, basis_w, device_basis_w, draw_on_basis_w, drawn_w

LABELS = ("measured", "specified", "assumed")


@pytest.mark.parametrize("spec", all_devices(), ids=lambda d: d.id)
def test_every_device_carries_a_labelled_sourced_node_power(spec):
    assert spec.node_w_per_device is not None, f"{spec.id}: no node_w_per_device"
    assert spec.node_w_label in LABELS
    assert spec.node_w_per_device >= spec.tdp_w  # a node never draws less than its accelerators
    source = spec.source("node_w_per_device")
    assert source, f"{spec.id}: node_w_per_device has no source"
    # An assumed number says so; a specified or measured one names where it is specified or measured.
    assert source.startswith("assumption:") == (spec.node_w_label == "assumed"), (spec.id, source)


def test_system_datasheets_by_hand():
    # DGX H100/H200: 10.2 kW max for 8 GPUs; DGX B200: 14.3 kW; DGX A100: 6.5 kW.
    assert device("nvidia-h100-sxm").node_w == 10_200 / 8 == 1275.0
    assert device("nvidia-h200-sxm").node_w == 1275.0
    assert device("nvidia-b200").node_w == 14_300 / 8
    assert device("nvidia-a100-sxm-80gb").node_w == 6_500 / 8
    for d in ("nvidia-h100-sxm", "nvidia-b200", "nvidia-a100-sxm-80gb"):
        assert device(d).node_w_label == "specified"
    # The CS-3 is its own deployable unit: chip and node footings agree.
    cs3 = device("cerebras-cs3")
    assert cs3.tdp_w == cs3.node_w == 23_000
    # An 8-way baseboard without a published system power takes DGX H100's host share, 575 W per device.
    assert device("amd-mi300x").node_w == 750 + (10_200 - 8 * 700) / 8 == 1325.0


def test_a_wafer_and_an_8_gpu_node_on_one_footing():
    """At 200 kW: on the chip footing an H100 board counts 700 W, so 285 of them against 8 CS-3 (35.6 per
    wafer); on the node footing a DGX H100 counts 10.2 kW per 8, so 156 (19.6 per wafer, 1.82x fewer)."""
    budget = 200_000
    h100, cs3 = device("nvidia-h100-sxm"), device("cerebras-cs3")
    chip = {d.id: int(budget // device_basis_w(d, "chip")[0]) for d in (h100, cs3)}
    node = {d.id: int(budget // device_basis_w(d, "node")[0]) for d in (h100, cs3)}
    assert chip == {"nvidia-h100-sxm": 285, "cerebras-cs3": 8}
    assert node == {"nvidia-h100-sxm": 156, "cerebras-cs3": 8}
    assert 8 * device_basis_w(h100, "node")[0] == 10_200  # one DGX H100 = 0.44 of a CS-3's 23 kW
    assert chip["nvidia-h100-sxm"] / node["nvidia-h100-sxm"] == pytest.approx(1.83, abs=0.01)


def test_basis_arithmetic():
    # node: the host share (575 W) draws half itself at idle; facility scales everything by the PUE.
    host = 1275 - 700
    assert basis_w(700, 70, 1275, "chip") == (700, 70)
    assert basis_w(700, 70, 1275, "node") == (1275, 70 + HOST_IDLE_FRACTION * host)
    assert basis_w(700, 70, 1275, "facility", 1.3) == pytest.approx((1275 * 1.3, (70 + 0.5 * host) * 1.3))
    assert POWER_BASES == ("chip", "node", "facility")
    with pytest.raises(ValueError, match="power basis"):
        basis_w(700, 70, 1275, "rack")
    # A replica of 8 H100 whose chips draw 4 kW at full load draws 4 kW + 8 x 575 W at the wall.
    h100 = device("nvidia-h100-sxm")
    assert draw_on_basis_w(4000.0, [(h100, 8)], "chip") == 4000.0
    assert draw_on_basis_w(4000.0, [(h100, 8)], "node") == 4000.0 + 8 * 575
    assert draw_on_basis_w(4000.0, [(h100, 8)], "facility", 1.5) == pytest.approx(1.5 * (4000.0 + 8 * 575))


def test_drawn_power_is_idle_at_no_load_and_rises_linearly_to_full():
    idle, full = 2000.0, 9000.0
    assert drawn_w(idle_w=idle, full_w=full, replicas=3, load=0.0) == 3 * idle
    assert drawn_w(idle_w=idle, full_w=full, replicas=3, load=3.0) == 3 * full
    draws = [drawn_w(idle_w=idle, full_w=full, replicas=3, load=x) for x in (0.0, 0.5, 1.5, 2.7)]
    assert draws == sorted(draws) and len(set(draws)) == 4
    assert draws[2] == 3 * idle + (full - idle) * 1.5
