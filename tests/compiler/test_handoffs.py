"""KV hand-offs as they happen ([Note: hand-offs] in `cost_models.comm`): per-transfer bandwidth from the NICs
and the link, a link's wait at its load against a simulated fair-share link, same-type KV on its fabric, and a
prefill pool that runs hotter when it hands only over a fast link ([Note: KV targets])."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.cost.instance import LinkQueue, link_queues
from compiler.inputs import Cluster
from compiler.ir.placement import ClassTarget, Instance
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.place.ilp import solve
from cost_models.comm import link_cap, link_servers, link_wait_s

KV_BYTES = 0.34e9  # 70B's KV of a 1K-token prompt
LAYERS = 80


def _cluster(**extra) -> Cluster:
    return Cluster.model_validate({
        "name": "handoffs",
        "devices": [{"device": "nvidia-h100-sxm", "count": 16}, {"device": "nvidia-h200-sxm", "count": 8},
                    {"device": "dmatrix-corsair", "count": 8}],
        "links": [{"between": ["nvidia-h100-sxm", "nvidia-h200-sxm"], "bandwidth_gb_per_s": 300, "latency_us": 10},
                  {"between": ["nvidia-h100-sxm", "dmatrix-corsair"], "bandwidth_gb_per_s": 100, "latency_us": 10},
                  *extra.get("links", [])],
    })


def test_nic_bound_hand_offs_take_the_same_time_on_a_fast_link_and_within_one_type():
    """Both ends have one 400 Gb/s NIC (50 GB/s): the 300 GB/s H100-H200 link does not make one request's KV
    move faster than H100 -> H100 does (before: 300 GB/s against 50, 6x). A Corsair card's NIC is a quarter of
    a 400G port (12.5 GB/s), and binds the transfer to it."""
    queues = link_queues(_cluster(), (ClassTarget("c", 1.0, 1.0, None, KV_BYTES, 100.0),))
    by_hand = KV_BYTES / 50e9 + LAYERS * 10e-6  # 6.8 ms + 0.8 ms
    h100 = queues[("nvidia-h100-sxm", "nvidia-h100-sxm")].transfer_s(KV_BYTES, LAYERS)
    h200 = queues[("nvidia-h100-sxm", "nvidia-h200-sxm")].transfer_s(KV_BYTES, LAYERS)
    assert h100 == pytest.approx(by_hand, rel=1e-9) and h200 == pytest.approx(by_hand, rel=1e-9)
    corsair = queues[("nvidia-h100-sxm", "dmatrix-corsair")]
    assert corsair.transfer_s(KV_BYTES, LAYERS) == pytest.approx(KV_BYTES / 12.5e9 + LAYERS * 10e-6, rel=1e-9)
    assert corsair.servers == 8  # 100 GB/s carries eight 12.5 GB/s transfers at once


def test_same_type_kv_crosses_its_fabric_half_the_nics_unless_the_file_says():
    """16 H100s: 8 send, 8 receive at 50 GB/s each, 400 GB/s; a [t, t] entry replaces it."""
    assert _cluster().link("nvidia-h100-sxm", "nvidia-h100-sxm") == (8 * 50e9, 10e-6)
    given = _cluster(links=[{"between": ["nvidia-h100-sxm", "nvidia-h100-sxm"], "bandwidth_gb_per_s": 100,
                             "latency_us": 5}])
    assert given.link("nvidia-h100-sxm", "nvidia-h100-sxm") == (100e9, 5e-6)


def _fair_share_p90_s(link_bps: float, nic_bps: float, nbytes: float, rho: float, transfers: int,
                      seed: int) -> float:
    """The 90th percentile time a transfer spends on a simulated link that shares `link_bps` equally among the
    transfers in flight, each at most at `nic_bps`, under Poisson arrivals at utilisation `rho`. Knows nothing
    of the model."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(nbytes / (rho * link_bps), transfers)).tolist()
    active: list[list[float]] = []  # [bytes left, arrival time]
    now, i, times = 0.0, 0, []
    while i < transfers or active:
        rate = min(nic_bps, link_bps / len(active)) if active else 0.0
        finish = now + min(a[0] for a in active) / rate if active else math.inf
        arrive = arrivals[i] if i < transfers else math.inf
        step_to = min(arrive, finish)
        for a in active:
            a[0] -= rate * (step_to - now)
        now = step_to
        if arrive <= finish:
            active.append([nbytes, arrive])
            i += 1
        else:
            for a in [a for a in active if a[0] <= 1e-6 * nbytes]:
                times.append(now - a[1])
                active.remove(a)
    return float(np.quantile(times[transfers // 50:], 0.9))


@pytest.mark.parametrize(("link_gbps", "rho"), [(50, 0.3), (50, 0.8), (150, 0.6), (300, 0.5), (300, 0.9),
                                                 (600, 0.8)])
def test_a_links_hand_off_at_load_matches_a_simulated_fair_share_link(link_gbps, rho):
    """Transfer plus percentile wait within 15% of the simulation, at 1, 3, 6 and 12 transfers at once."""
    nic = 50e9
    servers = link_servers(link_gbps * 1e9, nic)
    queue = LinkQueue(link_gbps * 1e9, nic, 0.0, servers, link_cap(servers, 0.9))
    simulated = _fair_share_p90_s(link_gbps * 1e9, nic, KV_BYTES, rho, 30_000, seed=1)
    assert queue.handoff_s(KV_BYTES, 1, rho, 0.9) == pytest.approx(simulated, rel=0.15)


def test_a_link_at_high_load_adds_a_wait_and_at_its_cap_doubles_a_transfer():
    """One 50 GB/s transfer at a time: idle, the hand-off is the transfer; at 90% load M/M/1's p90 wait is
    ln(0.9 / 0.1) / (1 - 0.9) = 22 transfers; at the link's cap the wait is one transfer."""
    transfer = KV_BYTES / 50e9
    assert link_wait_s(1, 0.0, transfer, 0.9) == 0.0
    assert link_wait_s(1, 0.9, transfer, 0.9) == pytest.approx(math.log(9) / 0.1 * transfer, rel=1e-9)
    assert link_wait_s(1, link_cap(1, 0.9), transfer, 0.9) == pytest.approx(transfer, rel=1e-6)


def _curve(ttft_at_zero: float) -> tuple:
    """TTFT (p50 and percentile) = ttft_at_zero + u; no TPOT (a prefill pool)."""
    return tuple((u, ttft_at_zero + u, ttft_at_zero + u, 0.0, 0.0) for u in (0.05, 0.5, 1.0))


def test_a_prefill_pool_that_hands_only_over_the_fast_link_runs_hotter():
    """A 1 s TTFT target, 10% of it for a decode slot: a prefill replica whose TTFT is 0.1 s + its utilisation
    may run at 0.8 when its KV goes to type a (hand-off 0) and at 0.4 when any goes to b (hand-off 0.4 s).
    One prefill replica (10 req/s at full load) and decode room on both types: it serves 0.8 x 10 = 8 req/s by
    handing only to a; handing to both it would serve 4."""
    decode = tuple((u, 0.0, 0.0, 0.01, 0.01) for u in (0.05, 0.5, 0.95))
    options = (PoolOption("prefill:a", "prefill", (("a", 1),), 500.0, 700.0, "a", 1, 1, 8,
                          (ClassService("c", 10.0, _curve(0.1)),)),
               PoolOption("decode:a", "decode", (("a", 1),), 500.0, 700.0, "a", 1, 1, 8,
                          (ClassService("c", 100.0, decode),)),
               PoolOption("decode:b", "decode", (("b", 1),), 500.0, 700.0, "b", 1, 1, 8,
                          (ClassService("c", 100.0, decode),)))
    handoff = ((("c", "a", "a"), 0.0), (("c", "a", "b"), 0.4))
    inst = Instance(options, (("a", 2), ("b", 1)), None, (ClassTarget("c", 1.0, 1.0, None, 1e3, 100.0),), (),
                    handoff)
    assert inst.kv_targets(options[0], inst.classes[0]) == pytest.approx({"a": 0.8, "b": 0.4})
    sol = solve(inst, "throughput", time_limit_s=20)
    assert sol.status == "optimal" and sol.requests_per_s == pytest.approx(8.0, abs=2e-3)
    assert {t for (_c, _p, t), rate in sol.flows if rate > 0} == {"a"}
