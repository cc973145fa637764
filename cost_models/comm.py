"""Alpha-beta communication models: time = messages x latency + bytes / bandwidth.

Bandwidths are per device, one direction (`Link.bw_bytes_per_s`), scaled by the
family's ``link_eff``. Formulas are the standard ones (Thakur et al., "Optimization
of Collective Communication Operations in MPICH", 2005):

- point-to-point: ``a + n / B``
- ring all-reduce over p devices: ``2 (p-1) a + 2 (p-1)/p * n / B``
- tree all-reduce: ``2 log2(p) a + 2 log2(p) * n / B``
- one-shot all-reduce: ``2 a + (p-1) * n / B`` (each device reads every peer's buffer at once over a
  switch or full mesh; what NCCL's LL protocol and TensorRT-LLM's custom all-reduce do for small messages)
- all-to-all (pairwise exchange): ``(p-1) a + (p-1)/p * n / B`` with n the bytes each device holds

>>> round(allreduce_s(1e9, 4, bw_bytes_per_s=100e9, latency_s=5e-6) * 1e3, 3)   # ring: 6 x 5 us + 15 ms
15.03
>>> round(allreduce_s(1e6, 4, bw_bytes_per_s=100e9, latency_s=5e-6) * 1e6, 1)   # one-shot: 2 x 5 us + 30 us
40.0
>>> round(allreduce_s(16e3, 8, bw_bytes_per_s=100e9, latency_s=5e-6) * 1e6, 2)  # one-shot: 2 x 5 us + 1.12 us
11.12
"""

from __future__ import annotations

import math


def p2p_s(nbytes: float, *, bw_bytes_per_s: float, latency_s: float) -> float:
    return latency_s + nbytes / bw_bytes_per_s if nbytes > 0 else 0.0


def allreduce_s(nbytes: float, devices: int, *, bw_bytes_per_s: float, latency_s: float) -> float:
    """Best of ring, tree and one-shot all-reduce of `nbytes` (per device) over `devices`."""
    if devices <= 1 or nbytes <= 0:
        return 0.0
    p = devices
    ring = 2 * (p - 1) * latency_s + 2 * (p - 1) / p * nbytes / bw_bytes_per_s
    steps = math.ceil(math.log2(p))
    tree = 2 * steps * latency_s + 2 * steps * nbytes / bw_bytes_per_s
    one_shot = 2 * latency_s + (p - 1) * nbytes / bw_bytes_per_s
    return min(ring, tree, one_shot)


def all_to_all_s(nbytes: float, devices: int, *, bw_bytes_per_s: float, latency_s: float) -> float:
    """All-to-all where each device holds `nbytes` and keeps 1/p of it."""
    if devices <= 1 or nbytes <= 0:
        return 0.0
    p = devices
    return (p - 1) * latency_s + (p - 1) / p * nbytes / bw_bytes_per_s


def kv_handoff_s(nbytes: float, *, bw_bytes_per_s: float, latency_s: float, layers: int,
                 layout_conversion_bytes_per_s: float | None = None) -> float:
    """Move a prefill's KV cache to a decode pool: one message per layer, plus an optional
    re-layout pass (e.g. paged block size or head-major vs token-major) at the receiver's memory speed."""
    if nbytes <= 0:
        return 0.0
    convert = nbytes / layout_conversion_bytes_per_s if layout_conversion_bytes_per_s else 0.0
    return layers * latency_s + nbytes / bw_bytes_per_s + convert
