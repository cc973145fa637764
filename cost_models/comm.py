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

from cost_models.queueing import erlang_c, max_utilisation


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


#: [Note: hand-offs] One request's KV moves from its prefill replica to its decode replica as one transfer, one
#: message per layer (`kv_handoff_s`), at the slowest of the sender's NIC, the receiver's NIC and the link
#: between the two pools (`transfer_bw`): H100 -> H100 and H100 -> H200 take the same time when the NICs bind.
#: Same-type KV crosses that type's own fabric (`Cluster.link(t, t)`), cross-type KV the link between the pools.
#: A link shares its bandwidth fairly among the transfers in flight, each at most at its NIC speed, so it
#: carries `link_servers` of them at full speed and slows them all beyond. By the insensitivity of such
#: processor-sharing queues, the number in flight is that of M/M/c with c = `link_servers`, and M/M/c's
#: percentile wait (Erlang C: ``P(W > t) = C e^{-c(1 - rho) t / S}``) plus the transfer matches a simulated
#: fair-share link within 15% at c = 1 to 12 and rho = 0.3 to 0.9 (`tests/compiler/test_handoffs.py`); M/D/c,
#: the pools' model, fell 30-45% short. A link runs at most at the utilisation where a transfer's percentile
#: wait equals the transfer itself (`link_cap`, `LINK_WAIT_TRANSFERS`): a hand-off there takes at most twice its
#: unloaded time, all of it charged to the class's TTFT (`Instance.kv_targets`). The plan reports each flow's
#: hand-off at its link's solved utilisation.
LINK_WAIT_TRANSFERS = 1.0


def transfer_bw(sender_nic_bytes_per_s: float, receiver_nic_bytes_per_s: float, link_bytes_per_s: float) -> float:
    """One transfer's bandwidth: the slowest of the two ends' NICs and the link between them."""
    return min(sender_nic_bytes_per_s, receiver_nic_bytes_per_s, link_bytes_per_s)


def link_servers(link_bytes_per_s: float, per_transfer_bytes_per_s: float) -> int:
    """How many transfers a link carries at once at full speed (at least one).

    >>> link_servers(300e9, 50e9), link_servers(30e9, 50e9)
    (6, 1)
    """
    return max(1, math.floor(link_bytes_per_s / per_transfer_bytes_per_s + 1e-9))


def link_wait_s(servers: int, utilisation: float, transfer_s: float, percentile: float) -> float:
    """The `percentile` of the time a transfer spends beyond `transfer_s` on a link of `servers` at `utilisation`
    ([Note: hand-offs]); infinite at utilisation >= 1.

    >>> round(link_wait_s(1, 0.5, 1.0, 0.9), 3)   # M/M/1: ln(0.5 / 0.1) / (1 - 0.5)
    3.219
    """
    if utilisation <= 0:
        return 0.0
    if utilisation >= 1:
        return math.inf
    waits = erlang_c(servers, servers * utilisation)
    if waits <= 1 - percentile:
        return 0.0
    return math.log(waits / (1 - percentile)) * transfer_s / (servers * (1 - utilisation))


def loaded_handoff_s(transfer_s: float, servers: int, utilisation: float, percentile: float) -> float:
    """A hand-off's `percentile` time on a link of `servers` at `utilisation`: the transfer plus its wait."""
    return transfer_s + link_wait_s(servers, utilisation, transfer_s, percentile)


def link_cap(servers: int, percentile: float) -> float:
    """The utilisation at which a link's `percentile` wait equals `LINK_WAIT_TRANSFERS` transfer times.

    >>> round(link_cap(1, 0.9), 2), round(link_cap(64, 0.9), 2)
    (0.22, 0.95)
    """
    return max_utilisation(lambda rho: link_wait_s(servers, rho, 1.0, percentile), LINK_WAIT_TRANSFERS)
