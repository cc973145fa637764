"""Power and energy: idle plus utilisation-weighted draw up to TDP, and watts on a budget's footing.

``power = idle + (tdp - idle) * (MEM_WEIGHT * memory_util + COMPUTE_WEIGHT * compute_util)``

where the utilisations are the fractions of a step's time the memory system and
the matmul units are busy (from the roofline). Streaming weights at full
bandwidth with idle tensor cores draws about half of TDP on GPUs; both busy
draws TDP. The weights are an assumption checked against the Argonne power
rows of measurements.csv (V065: H100, batch 1 decode, 363 W; V066: batch 64, 455 W).

>>> device_power_w(tdp_w=700, idle_w=70, memory_util=1.0, compute_util=0.0)
448.0

[Note: power basis] A power budget binds one footing (`POWER_BASES`): ``chip``
counts the accelerator's rated power alone (an H100 board at 700 W, a CS-3 at
its whole 23 kW); ``node`` (the default) counts the wall power of the unit one
deploys, per device (`DeviceSpec.node_w`: a DGX H100's 10.2 kW over 8 GPUs is
1,275 W); ``facility`` is node power times the site's PUE. On ``node`` and
``facility`` the host share (node minus chip) draws `HOST_IDLE_FRACTION` of
itself at idle and all of it at full load, linearly in between, like the chip.

>>> basis_w(700.0, 70.0, 1275.0, "node", 1.0)
(1275.0, 357.5)
>>> basis_w(700.0, 70.0, 1275.0, "facility", 1.2)
(1530.0, 429.0)

[Note: drawn power] A pool's predicted mean draw is linear in its load (the
requests/s it serves over what its replicas sustain at full load, so 0 at no
traffic and the replica count at saturation): ``idle x replicas + (full - idle)
x load``, where ``full`` is one replica's draw over its full-load step (the
decode step at full batch; for colocated pools the mixed step carrying the
prompts that arrive with it) and ``idle`` its devices' idle draw. Linear in
load is an assumption: a decode engine at part load runs smaller batches back
to back and may draw nearer ``full`` than this says.

>>> drawn_w(idle_w=100.0, full_w=500.0, replicas=2, load=0.5)
400.0
"""

from __future__ import annotations

from typing import Sequence

from compiler.ir.device_spec import DeviceSpec

MEM_WEIGHT = 0.6
COMPUTE_WEIGHT = 0.4
#: The footings a power budget may bind ([Note: power basis]); ``node`` is the default.
POWER_BASES = ("chip", "node", "facility")
#: assumption: no vendor publishes a server's idle wall power per part; host CPUs, memory and NICs stay powered
#: at idle while fans and CPUs slow, so half the host share is taken to draw at idle.
HOST_IDLE_FRACTION = 0.5


def device_power_w(*, tdp_w: float, idle_w: float, memory_util: float, compute_util: float) -> float:
    util = MEM_WEIGHT * min(memory_util, 1.0) + COMPUTE_WEIGHT * min(compute_util, 1.0)
    return idle_w + (tdp_w - idle_w) * min(util, 1.0)


def step_power_w(device: DeviceSpec, *, time_s: float, compute_s: float, memory_s: float) -> float:
    """Mean draw of one device over a step that keeps matmul units busy `compute_s` and memory `memory_s`
    of its `time_s`: the one rule from a step's utilisation to watts."""
    return device_power_w(tdp_w=device.tdp_w, idle_w=device.idle_w, memory_util=memory_s / time_s,
                          compute_util=compute_s / time_s)


def basis_w(tdp_w: float, idle_w: float, node_w: float, basis: str, pue: float = 1.0) -> tuple[float, float]:
    """``(full_w, idle_w)`` of one device on `basis` ([Note: power basis]): the rated and idle power of the chip,
    or those plus the host share of its node (times `pue` on ``facility``)."""
    if basis not in POWER_BASES:
        raise ValueError(f"power basis {basis!r} is not one of {', '.join(POWER_BASES)}")
    if basis == "chip":
        return tdp_w, idle_w
    host_w = max(node_w - tdp_w, 0.0)
    scale = pue if basis == "facility" else 1.0
    return (tdp_w + host_w) * scale, (idle_w + HOST_IDLE_FRACTION * host_w) * scale


def device_basis_w(device: DeviceSpec, basis: str, pue: float = 1.0) -> tuple[float, float]:
    """`basis_w` of a catalog device."""
    return basis_w(device.tdp_w, device.idle_w, device.node_w, basis, pue)


def draw_on_basis_w(chip_draw_w: float, devices: Sequence[tuple[DeviceSpec, int]], basis: str,
                    pue: float = 1.0) -> float:
    """A replica's full-load draw on `basis` when its chips (`devices`: spec and count) together draw
    `chip_draw_w`: plus each device's host share at full load on ``node``, all times `pue` on ``facility``."""
    scale = pue if basis == "facility" else 1.0
    host_w = sum(k * (device_basis_w(d, basis, pue)[0] - d.tdp_w * scale) for d, k in devices)
    return chip_draw_w * scale + host_w


def drawn_w(*, idle_w: float, full_w: float, replicas: float, load: float) -> float:
    """Mean draw of `replicas` replicas serving `load` replicas' worth of full-load work ([Note: drawn power])."""
    return idle_w * replicas + (full_w - idle_w) * load


def energy_per_token_j(power_w: float, seconds: float, tokens: float) -> float:
    return power_w * seconds / tokens if tokens else 0.0
