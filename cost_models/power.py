"""Power and energy: idle plus utilisation-weighted draw up to TDP.

``power = idle + (tdp - idle) * (MEM_WEIGHT * memory_util + COMPUTE_WEIGHT * compute_util)``

where the utilisations are the fractions of a step's time the memory system and
the matmul units are busy (from the roofline). Streaming weights at full
bandwidth with idle tensor cores draws about half of TDP on GPUs; both busy
draws TDP. The weights are an assumption checked against the Argonne power
rows of measurements.csv (V065: H100, batch 1 decode, 363 W; V066: batch 64, 455 W).

>>> device_power_w(tdp_w=700, idle_w=70, memory_util=1.0, compute_util=0.0)
448.0
"""

from __future__ import annotations

from compiler.ir.device_spec import DeviceSpec

MEM_WEIGHT = 0.6
COMPUTE_WEIGHT = 0.4


def device_power_w(*, tdp_w: float, idle_w: float, memory_util: float, compute_util: float) -> float:
    util = MEM_WEIGHT * min(memory_util, 1.0) + COMPUTE_WEIGHT * min(compute_util, 1.0)
    return idle_w + (tdp_w - idle_w) * min(util, 1.0)


def step_power_w(device: DeviceSpec, *, time_s: float, compute_s: float, memory_s: float) -> float:
    """Mean draw of one device over a step that keeps matmul units busy `compute_s` and memory `memory_s`
    of its `time_s`: the one rule from a step's utilisation to watts."""
    return device_power_w(tdp_w=device.tdp_w, idle_w=device.idle_w, memory_util=memory_s / time_s,
                          compute_util=compute_s / time_s)


def energy_per_token_j(power_w: float, seconds: float, tokens: float) -> float:
    return power_w * seconds / tokens if tokens else 0.0
