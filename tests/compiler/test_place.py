"""The placement MILP against exhaustive enumeration on small random instances, and its class routing."""

from __future__ import annotations

import itertools
import math
import random

import networkx as nx
import pytest

from compiler.ir.placement import SLO_SHARE_ADMISSION, ClassTarget, Instance
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.place.greedy import greedy, greedy_rate
from compiler.place.ilp import solve

TYPES = ("a", "b")


def _curve(rng: random.Random, kind: str) -> tuple:
    """A latency curve that rises with utilisation: TTFT for colocated/prefill (admission wait for decode)."""
    ttft0 = rng.uniform(0.1, 1.2) if kind != "decode" else 0.0
    tpot0 = rng.uniform(0.01, 0.06) if kind != "prefill" else 0.0
    return tuple((u, ttft0 * (1 + u), ttft0 * (1 + 2 * u), tpot0 * (1 + u / 2), tpot0 * (1 + u))
                 for u in (0.05, 0.5, 0.95))


def _option(rng: random.Random, i: int, cls: str = "c") -> PoolOption:
    kind = rng.choice(("colocated", "prefill", "decode"))
    dev = rng.choice(TYPES)
    per = rng.choice((1, 2))
    return PoolOption(
        key=f"{kind}:{dev}:{i}", kind=kind, devices=((dev, per),), power_w=rng.uniform(100, 900),
        provisioned_w=rng.choice((300, 500, 700, 1000)) * per, kv_device=dev, tp=per, pp=1, batch=8,
        classes=(ClassService(cls, rng.uniform(0.5, 20), _curve(rng, kind)),))


def random_instance(seed: int) -> Instance:
    rng = random.Random(seed)
    options = tuple(_option(rng, i) for i in range(rng.randint(2, 4)))
    inventory = tuple((t, rng.randint(1, 4)) for t in TYPES)
    target = ClassTarget("c", 1.0, rng.choice((None, 1.5, 2.5)), rng.choice((None, 0.05)), 1e6, 100.0)
    handoff = tuple((("c", x, y), rng.uniform(0.0, 0.8)) for x in TYPES for y in TYPES)
    return Instance(options, inventory, rng.choice((None, 1500.0, 3000.0)), (target,),
                    link_bw_bytes_per_s=((("a", "b"), rng.choice((5e6, 2e7, 1e9))),), handoff_s=handoff)


def _bisected_cap(curve: tuple, ttft_s: float | None, tpot_s: float | None) -> float:
    """The utilisation cap as `ClassService.max_utilisation`'s docstring states it, worked out here without its
    code: the highest utilisation, from the first sample to the last, at which the percentile TTFT (column 2) and
    TPOT (column 4), linear between samples, meet both targets; 0.0 where the first sample misses. The curves
    rise, so meeting is a prefix: bisected to 1e-9."""
    def meets(u: float) -> bool:
        for lo, hi in zip(curve, curve[1:]):
            if lo[0] <= u <= hi[0]:
                w = (u - lo[0]) / (hi[0] - lo[0])
                ttft, tpot = lo[2] + w * (hi[2] - lo[2]), lo[4] + w * (hi[4] - lo[4])
                return (ttft_s is None or ttft <= ttft_s) and (tpot_s is None or tpot <= tpot_s)
        raise AssertionError(u)

    first, last = curve[0][0], curve[-1][0]
    if not meets(first):
        return 0.0
    if meets(last):
        return last
    good, bad = first, last
    while bad - good > 1e-9:
        mid = (good + bad) / 2
        good, bad = (mid, bad) if meets(mid) else (good, mid)
    return good


def test_a_class_caps_where_its_interpolated_percentiles_cross_the_targets():
    """`ClassService.max_utilisation` (the cap every placement, greedy and brute force below read) against the
    bisection above, on 300 random rising curves with targets below, inside and past their range: a cap read from
    the mean columns, or not interpolated between samples, fails."""
    rng = random.Random(7)
    for _ in range(300):
        kind = rng.choice(("colocated", "prefill", "decode"))
        curve = _curve(rng, kind)
        ttft = rng.choice((None, rng.uniform(0.5, 1.5) * max(curve[-1][2], 1e-3)))
        tpot = rng.choice((None, rng.uniform(0.5, 1.5) * max(curve[-1][4], 1e-3)))
        got = ClassService("c", 1.0, curve).max_utilisation(ttft_s=ttft, tpot_s=tpot)
        assert got == pytest.approx(_bisected_cap(curve, ttft, tpot), abs=1e-6), (curve, ttft, tpot)


def _capacity(inst: Instance, o: PoolOption, replicas: int) -> float:
    """The most requests/s `replicas` of `o` serve within the class's cap: rate x cap per replica (worked from
    the curve by `Instance.cap`, a replica never past its capacity; the cap it reads off a curve is checked
    against an independent bisection in `test_a_class_caps_where_its_interpolated_percentiles_cross_the_targets`)."""
    cap = inst.cap(o, inst.classes[0])
    return replicas * o.classes[0].rate_per_s * min(cap, 1.0) if cap > 0 else 0.0


def brute_force(inst: Instance) -> float:
    """Best served requests/s over every replica vector, KV flows by max-flow, caps from the curves."""
    inv = dict(inst.inventory)
    c = inst.classes[0]
    ranges = [range(min(inv[d] // k for d, k in o.devices) + 1) for o in inst.options]
    best = 0.0
    for n in itertools.product(*ranges):
        if any(sum(k * o.uses(t) for k, o in zip(n, inst.options)) > inv[t] for t in inv):
            continue
        if inst.power_budget_w is not None and sum(
                k * o.provisioned_w for k, o in zip(n, inst.options)) > inst.power_budget_w:
            continue
        served = sum(_capacity(inst, o, k) for k, o in zip(n, inst.options) if o.kind == "colocated")
        g = nx.DiGraph()
        for k, o in zip(n, inst.options):
            if o.kind == "prefill" and _capacity(inst, o, k):
                g.add_edge("src", o.key, capacity=_capacity(inst, o, k))
                ttft = o.classes[0].at(inst.cap(o, c))[2]
                for t in TYPES:
                    if c.ttft_slo_s is not None and ttft + inst.handoff("c", o.kv_device, t) + \
                            SLO_SHARE_ADMISSION * c.ttft_slo_s > c.ttft_slo_s:
                        continue
                    if o.kv_device != t:  # the link carries link_bw / KV bytes requests/s
                        g.add_edge(o.key, ("link", o.kv_device, t))
                        g.add_edge(("link", o.kv_device, t), ("dec", t),
                                   capacity=inst.link_bw(o.kv_device, t) / c.kv_bytes)
                    else:
                        g.add_edge(o.key, ("dec", t))
            if o.kind == "decode" and _capacity(inst, o, k):
                prev = g.edges[("dec", o.kv_device), "sink"]["capacity"] if g.has_edge(("dec", o.kv_device), "sink") else 0
                g.add_edge(("dec", o.kv_device), "sink", capacity=prev + _capacity(inst, o, k))
        flow = nx.maximum_flow_value(g, "src", "sink") if g.has_node("src") and g.has_node("sink") else 0
        best = max(best, served + flow)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_ilp_optimum_matches_exhaustive_enumeration(seed):
    inst = random_instance(seed)
    want = brute_force(inst)
    sol = solve(inst, "throughput", time_limit_s=20, exact=True)
    if want < 1e-3:  # nothing can be served (the model asks at least a request per 1000 s): infeasible
        assert sol.status == "infeasible" and sol.binding
        return
    assert sol.status == "optimal"
    assert sol.requests_per_s == pytest.approx(want, rel=1e-6)


def test_no_pool_runs_above_the_cap_of_a_class_it_serves():
    for seed in range(20):
        inst = random_instance(seed)
        sol = solve(inst, time_limit_s=20)
        for o, _n in sol.used():
            for c in sol.served_on(o.key):
                assert sol.utilisation(o) <= inst.cap(o, inst.target(c)) + 1e-3 < 1


def test_two_classes_with_different_caps_never_share_a_replica_above_the_stricter_cap():
    """Chat has a tight TTFT SLO, documents a loose one: a replica serving both must stay under chat's cap."""
    curve = tuple((u, 0.2 + u, 0.2 + 2 * u, 0.01, 0.01) for u in (0.05, 0.3, 0.6, 0.95))  # TTFT p90 = 0.2 + 2u
    pool = PoolOption("colocated:a:0", "colocated", (("a", 1),), 500.0, 700.0, "a", 1, 1, 8,
                      (ClassService("chat", 10.0, curve), ClassService("docs", 10.0, curve)))
    chat = ClassTarget("chat", 0.5, 0.8, None, 1e6, 100.0)  # cap where 0.2 + 2u = 0.8: u = 0.3
    docs = ClassTarget("docs", 0.5, 5.0, None, 1e6, 100.0)  # cap 0.95
    inst = Instance((pool,), (("a", 4),), None, (chat, docs), (), ())
    sol = solve(inst, time_limit_s=20)
    assert sol.status == "optimal"
    for o, _n in sol.used():
        for c in sol.served_on(o.key):
            assert sol.utilisation(o) <= inst.cap(o, inst.target(c)) + 1e-3
    # four replicas: chat's half of the requests may use at most 0.3 of the replicas it runs on
    rates = dict(sol.class_requests_per_s)
    assert rates["chat"] == pytest.approx(rates["docs"], rel=1e-3)
    assert sol.requests_per_s < 4 * 10 * 0.95


def test_one_replica_serves_every_class_when_the_fleet_holds_only_one():
    """Room for a single replica of the only pool, whose classes have different caps: one replica mixes both at
    the stricter cap (a placement with a replica per class would need two and find none)."""
    curve = tuple((u, 0.2 + u, 0.2 + 2 * u, 0.01, 0.01) for u in (0.05, 0.3, 0.6, 0.95))  # TTFT p90 = 0.2 + 2u
    pool = PoolOption("colocated:a:0", "colocated", (("a", 4),), 2000.0, 2800.0, "a", 4, 1, 8,
                      (ClassService("chat", 10.0, curve), ClassService("docs", 10.0, curve)))
    chat = ClassTarget("chat", 0.5, 0.8, None, 1e6, 100.0)  # cap 0.3
    docs = ClassTarget("docs", 0.5, 5.0, None, 1e6, 100.0)  # cap 0.95
    sol = solve(Instance((pool,), (("a", 4),), None, (chat, docs), (), ()), time_limit_s=20)
    assert sol.status == "optimal" and sol.replicas == (("colocated:a:0", 1),)
    assert sol.requests_per_s == pytest.approx(10.0 * 0.3, rel=1e-3)  # both classes at the stricter cap
    assert dict(sol.class_requests_per_s)["docs"] == pytest.approx(dict(sol.class_requests_per_s)["chat"], rel=1e-3)


def test_infeasible_names_the_power_budget():
    curve = ((0.05, 0.5, 0.5, 0.03, 0.03), (0.95, 0.6, 0.7, 0.03, 0.04))
    opt = PoolOption("colocated:a:0", "colocated", (("a", 4),), 2000.0, 2800.0, "a", 4, 1, 8,
                     (ClassService("c", 5.0, curve),))
    inst = Instance((opt,), (("a", 8),), 1000.0, (ClassTarget("c", 1.0, None, None, 1e6, 100.0),), (), ())
    sol = solve(inst)
    assert sol.status == "infeasible" and "power" in sol.binding and "inventory" not in sol.binding


def test_greedy_is_feasible_and_never_beats_the_optimum():
    """The greedy start (what the solver is handed first) fits the fleet, checked from the instance alone: no
    device type past its inventory, no more provisioned watts than the budget; and it never serves more than
    the proven optimum."""
    for seed in range(20):
        inst = random_instance(seed)
        hint = greedy(inst)
        by_key = {o.key: o for o in inst.options}
        used: dict[str, int] = {}
        for key, n in hint.items():
            for dev, per in by_key[key].devices:
                used[dev] = used.get(dev, 0) + per * n
        assert all(n <= dict(inst.inventory)[dev] for dev, n in used.items()), (seed, hint, inst.inventory)
        watts = sum(by_key[key].provisioned_w * n for key, n in hint.items())
        assert inst.power_budget_w is None or watts <= inst.power_budget_w + 1e-6, (seed, watts)
        sol = solve(inst, time_limit_s=20)
        if sol.status == "optimal":  # nothing is rounded: greedy may tie the optimum, within its tolerance only
            assert greedy_rate(inst, hint) <= sol.requests_per_s * (1 + 1e-6)


def test_solution_is_deterministic():
    inst = random_instance(7)
    a, b = solve(inst), solve(inst)
    assert (a.replicas, a.flows, a.served, a.requests_per_s) == (b.replicas, b.flows, b.served, b.requests_per_s)


def test_objectives_need_what_they_need():
    from compiler.ir.errors import BadInput

    with pytest.raises(BadInput, match="needs a target"):
        solve(random_instance(1), "power")
    assert math.isfinite(solve(random_instance(3), "tokens-per-watt").requests_per_s)


def test_hidden_states_between_two_types_are_charged_to_their_link():
    """An attention/FFN option across types a and b moves 1 MB per output token, half each way; a link of
    50 MB/s (each direction) between the pools carries 100 tokens/s = 1 request/s of 100 tokens, though its
    replicas could serve 40."""
    curve = tuple((u, 0.0, 0.0, 0.01, 0.01) for u in (0.05, 0.5, 0.95))
    af = PoolOption("decode-af:a+b", "decode-af", (("a", 1), ("b", 1)), power_w=100.0, provisioned_w=100.0,
                    kv_device="a", tp=1, pp=1, batch=8, classes=(ClassService("c", 10.0, curve),),
                    link_bytes_per_token=1e6)
    prefill = PoolOption("prefill:a", "prefill", (("a", 1),), power_w=100.0, provisioned_w=100.0, kv_device="a",
                         tp=1, pp=1, batch=8, classes=(ClassService("c", 100.0, tuple(
                             (u, 0.1, 0.1, 0.0, 0.0) for u in (0.05, 0.5, 0.95))),))
    target = ClassTarget("c", 1.0, None, None, 1e3, 100.0)
    handoff = tuple((("c", x, y), 0.0) for x in TYPES for y in TYPES)
    inst = Instance((af, prefill), (("a", 4), ("b", 4)), None, (target,),
                    link_bw_bytes_per_s=((("a", "b"), 50e6),), handoff_s=handoff)
    sol = solve(inst, "throughput", time_limit_s=10)
    assert sol.requests_per_s == pytest.approx(1.0, abs=0.002)
    wide = solve(Instance((af, prefill), (("a", 4), ("b", 4)), None, (target,),
                          link_bw_bytes_per_s=((("a", "b"), 50e9),), handoff_s=handoff), "throughput", time_limit_s=10)
    assert wide.requests_per_s > 10 * sol.requests_per_s


def test_greedy_runs_a_mixed_replica_at_its_strictest_class_cap():
    """One replica serves both classes, so it waits in one queue at the long class's cap (0.35): the greedy
    mix rate must not count the short class at its own, looser cap (what a wrong rate gives: 5.1 req/s)."""
    rising = ((0.05, 0.5, 0.5, 0.01, 0.01), (0.95, 2.0, 2.0, 0.01, 0.01))  # TTFT p90 crosses 1 s at 0.35
    flat = ((0.05, 0.5, 0.5, 0.01, 0.01), (0.95, 0.5, 0.5, 0.01, 0.01))
    opt = PoolOption("colocated:a:0", "colocated", (("a", 4),), 2000.0, 2800.0, "a", 4, 1, 8,
                     (ClassService("long", 10.0, rising), ClassService("short", 10.0, flat)))
    classes = (ClassTarget("long", 0.5, 1.0, None, 1e6, 100.0), ClassTarget("short", 0.5, 1.0, None, 1e6, 100.0))
    inst = Instance((opt,), (("a", 4),), None, classes, (), ())
    sol = solve(inst)
    assert sol.status == "optimal"
    assert greedy_rate(inst, greedy(inst)) == pytest.approx(3.5, rel=1e-6)
    assert sol.requests_per_s == pytest.approx(3.5, rel=1e-3)


def test_kv_moves_only_between_the_types_kv_pairs_allow():
    """Prefill only on a, decode only on b: 10 req/s through a -> b (the slower half binds), nothing once the
    pair a -> b is not allowed (`compile --deployable` with no connector between the two platforms)."""
    flat = tuple((u, 0.1, 0.1, 0.01, 0.01) for u in (0.05, 0.5, 0.95))
    prefill = PoolOption(key="prefill:a", kind="prefill", devices=(("a", 1),), power_w=100, provisioned_w=100,
                         kv_device="a", tp=1, pp=1, batch=8, classes=(ClassService("c", 10.0, flat),))
    decode = PoolOption(key="decode:b", kind="decode", devices=(("b", 1),), power_w=100, provisioned_w=100,
                        kv_device="b", tp=1, pp=1, batch=8, classes=(ClassService("c", 20.0, flat),))
    inst = Instance((prefill, decode), (("a", 1), ("b", 1)), None, (ClassTarget("c", 1.0, None, None, 1e6, 10.0),),
                    link_bw_bytes_per_s=((("a", "b"), 1e12),), handoff_s=(), arrival_rate_per_s=None)
    from dataclasses import replace

    joined = solve(inst, "throughput", time_limit_s=10)
    assert joined.requests_per_s == pytest.approx(10.0 * 0.95, rel=1e-3)  # one prefill replica at its top point
    cut = solve(replace(inst, kv_pairs=(("a", "a"), ("b", "b"))), "throughput", time_limit_s=10)
    assert not cut.feasible or cut.requests_per_s == 0.0
