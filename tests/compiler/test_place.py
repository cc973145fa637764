"""The placement ILP against exhaustive enumeration on small random instances."""

from __future__ import annotations

import itertools
import math
import random

import networkx as nx
import pytest

from compiler.ir.placement import Instance
from compiler.ir.pool_option import PoolOption
from compiler.place.greedy import greedy, greedy_rate
from compiler.place.ilp import RATE_SCALE, scaled, solve

TYPES = ("a", "b")


def _option(rng: random.Random, i: int) -> PoolOption:
    kind = rng.choice(("colocated", "prefill", "decode"))
    dev = rng.choice(TYPES)
    per = rng.choice((1, 2))
    return PoolOption(
        key=f"{kind}:{dev}:{i}", kind=kind, devices=((dev, per),), power_w=rng.uniform(100, 900),
        provisioned_w=rng.choice((300, 500, 700, 1000)) * per, rate_per_s=rng.uniform(0.5, 20),
        ttft_s=rng.uniform(0.1, 2.0) if kind != "decode" else None,
        tpot_s=rng.uniform(0.01, 0.1) if kind != "prefill" else None, kv_device=dev, tp=per, pp=1, batch=8,
        slo_ok=rng.random() > 0.15)


def random_instance(seed: int) -> Instance:
    rng = random.Random(seed)
    options = tuple(_option(rng, i) for i in range(rng.randint(2, 4)))
    inventory = tuple((t, rng.randint(1, 4)) for t in TYPES)
    handoff = tuple(((x, y), rng.uniform(0.0, 0.8)) for x in TYPES for y in TYPES)
    return Instance(options, inventory, rng.choice((None, 1500.0, 3000.0)), kv_bytes_per_request=1e6,
                    link_bw_bytes_per_s=((("a", "b"), rng.choice((5e6, 2e7, 1e9))),), handoff_s=handoff,
                    ttft_slo_s=rng.choice((None, 1.5)))


def brute_force(inst: Instance) -> int:
    """Best served rate (scaled) over every replica vector, KV flows by max-flow."""
    inv = dict(inst.inventory)
    ranges = [range(min(inv[d] // k for d, k in o.devices) + 1) for o in inst.options]
    best = -1
    for n in itertools.product(*ranges):
        if any(sum(c * o.uses(t) for c, o in zip(n, inst.options)) > inv[t] for t in inv):
            continue
        if inst.power_budget_w is not None and sum(
                c * scaled(o.provisioned_w, 1) for c, o in zip(n, inst.options)) > scaled(inst.power_budget_w, 1):
            continue
        if any(c and not o.slo_ok for c, o in zip(n, inst.options)):
            continue
        served = sum(c * scaled(o.rate_per_s) for c, o in zip(n, inst.options) if o.kind == "colocated")
        g = nx.DiGraph()
        for c, o in zip(n, inst.options):
            if o.kind == "prefill" and c:
                g.add_edge("src", o.key, capacity=c * scaled(o.rate_per_s))
                for t in TYPES:
                    if inst.ttft_slo_s is not None and o.ttft_s + inst.handoff(o.kv_device, t) > inst.ttft_slo_s:
                        continue
                    if o.kv_device != t:
                        cap = scaled(inst.link_bw(o.kv_device, t) / inst.kv_bytes_per_request)
                        g.add_edge(o.key, ("link", o.kv_device, t))
                        g.add_edge(("link", o.kv_device, t), ("dec", t), capacity=cap)
                    else:
                        g.add_edge(o.key, ("dec", t))
            if o.kind == "decode" and c:
                prev = g.edges[("dec", o.kv_device), "sink"]["capacity"] if g.has_edge(("dec", o.kv_device), "sink") else 0
                g.add_edge(("dec", o.kv_device), "sink", capacity=prev + c * scaled(o.rate_per_s))
        flow = nx.maximum_flow_value(g, "src", "sink") if g.has_node("src") and g.has_node("sink") else 0
        best = max(best, served + flow)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_ilp_optimum_matches_exhaustive_enumeration(seed):
    inst = random_instance(seed)
    want = brute_force(inst)
    sol = solve(inst, "throughput", time_limit_s=20, workers=1)
    if want < 1:  # nothing can be served: the ILP must say infeasible (demand binds)
        assert sol.status == "infeasible" and "demand" in sol.binding or sol.binding
        return
    assert sol.status == "optimal"
    assert round(sol.requests_per_s * RATE_SCALE) == want


def test_infeasible_names_the_power_budget():
    opt = PoolOption("colocated:a:0", "colocated", (("a", 4),), 2000.0, 2800.0, 5.0, 0.5, 0.03, "a", 4, 1, 8)
    inst = Instance((opt,), (("a", 8),), 1000.0, 1e6, (), ())
    sol = solve(inst)
    assert sol.status == "infeasible" and "power" in sol.binding and "inventory" not in sol.binding


def test_greedy_is_feasible_and_never_beats_the_optimum():
    for seed in range(20):
        inst = random_instance(seed)
        hint = greedy(inst)
        sol = solve(inst, time_limit_s=20, workers=1)
        if sol.status == "optimal":
            # the ILP floors each replica's rate to whole milli-requests/s
            assert greedy_rate(inst, hint) <= sol.requests_per_s + sum(hint.values()) / RATE_SCALE + 1e-9


def test_solution_is_deterministic():
    inst = random_instance(7)
    a, b = solve(inst), solve(inst)
    assert (a.replicas, a.flows, a.requests_per_s) == (b.replicas, b.flows, b.requests_per_s)


def test_objectives_need_what_they_need():
    from compiler.ir.errors import BadInput

    with pytest.raises(BadInput, match="needs a target"):
        solve(random_instance(1), "power")
    assert math.isfinite(solve(random_instance(3), "tokens-per-watt", workers=1).requests_per_s)
