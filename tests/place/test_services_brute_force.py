"""One placement of several services (`compiler.services`) against exhaustive enumeration, by hand arithmetic
and against the single-model solve.

[Note: services brute force] The random instances are written as plain specs (`Spec`, `Goal`) that the brute
force reads; only `_instances` turns them into the solver's `Instance`s. Every latency curve is sampled from a
convex piecewise-linear function, the max of two lines, at points that include its kink, so that interpolating
the samples gives the function back and the utilisation where it crosses a target has a closed form: the least
of the lines' crossings (each line a + b*u reaches target T at (T - a) / b), none past the last sample, and 0 when
even the first sample misses. The effective targets follow what `Instance.cap` documents: a colocated option
meets the class's TTFT and TPOT targets; a prefill option meets (1 - SLO_SHARE_ADMISSION) of the TTFT target
(hand-offs take no time here); a decode option keeps its wait for a slot within SLO_SHARE_ADMISSION of the TTFT
target and meets the TPOT target. With one class per service and every prefill/decode pair on one device type
(no link bandwidth given: unlimited), each service's best rate for a vector of replica counts is its colocated
capacity plus min(prefill capacity, decode capacity), capacity being replicas x rate x cap.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, replace
from types import SimpleNamespace

import pytest

from compiler.ir.placement import SLO_SHARE_ADMISSION, ClassTarget, Instance, ServiceGoal
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.place.ilp import solve
from compiler.services import Part, proportional_slices, share_of, solve_joint

SEEDS = range(300)
TYPES = ("a", "b", "c")
NAMES = ("chat", "code", "docs")
#: The solver holds caps a factor 1 - 1e-7 below their value (`compiler.place.ilp.CAP_MARGIN`).
REL, ABS = 1e-6, 1e-6

Line = tuple[float, float]  # (a, b): a + b * utilisation, b > 0


@dataclass(frozen=True)
class Spec:
    """One pool option as the brute force reads it."""

    service: str
    key: str
    kind: str  # colocated, prefill, decode
    device: str
    per_replica: int  # devices of `device` per replica
    rate_per_s: float
    provisioned_w: float  # per replica
    grid: tuple[float, ...]  # utilisations sampled, increasing
    ttft: tuple[Line, Line]  # TTFT at the percentile (decode: the wait for a slot) = max of the two lines
    tpot: tuple[Line, Line] | None  # None: the option does not decode (TPOT sampled as 0)


@dataclass(frozen=True)
class Goal:
    name: str
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    weight: float
    floor_per_s: float


@dataclass(frozen=True)
class Case:
    inventory: dict
    power_budget_w: float | None
    goals: tuple[Goal, ...]
    specs: tuple[Spec, ...]


# --- random instances ---------------------------------------------------------------------------------------------

def _convex(rng: random.Random, u0: float, kink: float, level: float) -> tuple[Line, Line]:
    """Two lines whose max rises from `level` x (0.3 .. 1.05) at u0, bending upward at `kink`."""
    y0 = level * rng.uniform(0.3, 1.05)
    b1 = level * rng.uniform(0.05, 0.6)
    b2 = b1 * rng.uniform(1.5, 6.0)
    yk = y0 + b1 * (kink - u0)
    return (y0 - b1 * u0, b1), (yk - b2 * kink, b2)


def _spec(rng: random.Random, goal: Goal, kind: str, i: int, device: str, watts: dict) -> Spec:
    u0, last = 0.05, rng.choice((0.9, 0.95, 1.0))
    kinks = (rng.uniform(u0 + 0.05, last - 0.05), rng.uniform(u0 + 0.05, last - 0.05))
    grid = tuple(sorted({u0, *kinks, 0.5, last}))
    share = {"colocated": 1.0, "prefill": 1 - SLO_SHARE_ADMISSION, "decode": SLO_SHARE_ADMISSION}[kind]
    ttft_level = share * (goal.ttft_slo_s or 1.0)
    tpot_level = goal.tpot_slo_s or 0.05
    per = rng.choice((1, 2))
    rate = rng.uniform(0.5, 20.0) if kind == "colocated" else rng.uniform(1.0, 30.0)
    return Spec(goal.name, f"{kind}:{device}:{i}", kind, device, per, rate, watts[device] * per, grid,
                _convex(rng, u0, kinks[0], ttft_level),
                None if kind == "prefill" else _convex(rng, u0, kinks[1], tpot_level))


def random_case(seed: int) -> Case:
    rng = random.Random(seed)
    types = TYPES[:rng.choice((2, 3))]
    inventory = {t: rng.randint(1, 4) for t in types}
    watts = {t: rng.choice((300, 500, 700, 1000)) for t in types}
    full_w = sum(inventory[t] * watts[t] for t in types)
    budget = None if rng.random() < 0.3 else round(full_w * rng.uniform(0.3, 0.9))
    goals, specs = [], []
    for name in NAMES[:rng.choice((2, 3))]:
        goal = Goal(name, rng.choice((None, 1.0, 2.0)), rng.choice((None, 0.05)), rng.choice((0.5, 1.0, 2.0, 3.0)),
                    rng.choice((0.0, 1e-3, 1e-3, round(rng.uniform(0.3, 5.0), 3))))
        goals.append(goal)
        split = rng.random() < 0.5
        for i in range(rng.randint(0 if split else 1, 3)):
            specs.append(_spec(rng, goal, "colocated", i, rng.choice(types), watts))
        if split:
            t = rng.choice(types)
            specs += [_spec(rng, goal, "prefill", 0, t, watts), _spec(rng, goal, "decode", 0, t, watts)]
    return Case(inventory, budget, tuple(goals), tuple(specs))


def _value(lines: tuple[Line, Line] | None, u: float) -> float:
    return 0.0 if lines is None else max(a + b * u for a, b in lines)


def _option(s: Spec) -> PoolOption:
    curve = tuple((u, 0.6 * _value(s.ttft, u), _value(s.ttft, u), 0.6 * _value(s.tpot, u), _value(s.tpot, u))
                  for u in s.grid)
    return PoolOption(s.key, s.kind, ((s.device, s.per_replica),), power_w=0.8 * s.provisioned_w,
                      provisioned_w=s.provisioned_w, kv_device=s.device, tp=s.per_replica, pp=1, batch=8,
                      classes=(ClassService("c", s.rate_per_s, curve),))


def _instances(case: Case) -> list[tuple[Instance, ServiceGoal]]:
    """Each service's own instance (one class "c", share 1, no links given: unlimited) and its goal."""
    out = []
    for g in case.goals:
        cls = ClassTarget("c", 1.0, g.ttft_slo_s, g.tpot_slo_s, kv_bytes=1e6, output_len=100.0)
        inst = Instance(tuple(_option(s) for s in case.specs if s.service == g.name), tuple(case.inventory.items()),
                        case.power_budget_w, (cls,), link_bw_bytes_per_s=(), handoff_s=())
        out.append((inst, ServiceGoal(g.name, (f"{g.name}/c",), g.weight, g.floor_per_s)))
    return out


# --- the brute force: shares no code with the solver -----------------------------------------------------------------

def _crossing(lines: tuple[Line, Line] | None, target: float | None, grid: tuple[float, ...]) -> float:
    """The highest sampled-range utilisation where max(lines) <= target ([Note: services brute force])."""
    if lines is None or target is None:
        return grid[-1]
    if _value(lines, grid[0]) > target:
        return 0.0
    return min(grid[-1], *((target - a) / b for a, b in lines))


def brute_cap(s: Spec, g: Goal) -> float:
    ttft = g.ttft_slo_s
    if s.kind == "colocated":
        targets = (ttft, g.tpot_slo_s)
    elif s.kind == "prefill":
        targets = (None if ttft is None else (1 - SLO_SHARE_ADMISSION) * ttft, None)
    else:
        targets = (None if ttft is None else SLO_SHARE_ADMISSION * ttft, g.tpot_slo_s)
    return min(_crossing(s.ttft, targets[0], s.grid), _crossing(s.tpot, targets[1], s.grid))


def service_rates(case: Case, n: dict[str, int]) -> dict[str, float]:
    """Each service's best requests/s with `n` replicas per (service, key)."""
    goals = {g.name: g for g in case.goals}
    colocated = {g: 0.0 for g in goals}
    split = {g: {"prefill": 0.0, "decode": 0.0} for g in goals}
    for s in case.specs:
        capacity = n.get((s.service, s.key), 0) * s.rate_per_s * brute_cap(s, goals[s.service])
        if s.kind == "colocated":
            colocated[s.service] += capacity
        else:
            split[s.service][s.kind] += capacity
    return {g: colocated[g] + min(split[g].values()) for g in goals}


def _fills(specs: list[Spec], room: int):
    """Every vector of replica counts of `specs` (all on one device type) within `room` devices."""
    if not specs:
        yield ()
        return
    first, rest = specs[0], specs[1:]
    for k in range(room // first.per_replica + 1):
        for tail in _fills(rest, room - k * first.per_replica):
            yield (k, *tail)


def brute_force(case: Case) -> tuple[float | None, int]:
    """The best weighted requests/s over every replica vector within inventory and power that serves every floor
    (None: no vector does), and how many vectors were enumerated."""
    by_type = {t: [s for s in case.specs if s.device == t] for t in case.inventory}
    weight = {g.name: g.weight for g in case.goals}
    best, count = None, 0
    for parts in itertools.product(*(list(_fills(by_type[t], case.inventory[t])) for t in case.inventory)):
        count += 1
        n = {(s.service, s.key): k for t, ks in zip(case.inventory, parts) for s, k in zip(by_type[t], ks)}
        if case.power_budget_w is not None and sum(
                k * s.provisioned_w for t, ks in zip(case.inventory, parts) for s, k in zip(by_type[t], ks)) \
                > case.power_budget_w:
            continue
        rates = service_rates(case, n)
        if any(rates[g.name] < g.floor_per_s for g in case.goals):
            continue
        value = sum(weight[g] * r for g, r in rates.items())
        best = value if best is None else max(best, value)
    return best, count


def test_brute_force_caps_cover_zero_partial_and_full():
    """The random instances exercise every kind of cap: none within the SLO, one below the last sample, the last."""
    seen = set()
    for seed in SEEDS:
        case = random_case(seed)
        goals = {g.name: g for g in case.goals}
        for s in case.specs:
            cap = brute_cap(s, goals[s.service])
            seen.add((s.kind, "zero" if cap == 0 else "full" if cap == s.grid[-1] else "partial"))
    assert {(k, c) for k in ("colocated", "prefill", "decode") for c in ("zero", "partial", "full")} <= seen


@pytest.mark.parametrize("seed", SEEDS)
def test_joint_optimum_matches_exhaustive_enumeration(seed):
    case = random_case(seed)
    want, _count = brute_force(case)
    joint_inst, sol = solve_joint(_instances(case), "throughput", time_limit_s=20, explain=False)
    if want is None:
        assert sol.status == "infeasible"
        return
    assert sol.status == "optimal"
    assert sol.objective.value == pytest.approx(want, rel=REL, abs=ABS)
    # its replicas fit, and each service's share is within what they serve and at least its floor
    n = {}
    for key, k in sol.replicas:
        name, own = key.split("/", 1)
        n[(name, own)] = k
    specs = {(s.service, s.key): s for s in case.specs}
    for t, have in case.inventory.items():
        assert sum(k * specs[sk].per_replica for sk, k in n.items() if specs[sk].device == t) <= have
    if case.power_budget_w is not None:
        assert sum(k * specs[sk].provisioned_w for sk, k in n.items()) <= case.power_budget_w + 1e-6
    rates = service_rates(case, n)
    for g in case.goals:
        got = share_of(sol, joint_inst, g.name).requests_per_s
        assert got <= rates[g.name] * (1 + REL) + ABS
        assert got >= g.floor_per_s * (1 - REL) - 1e-9


def test_the_random_instances_are_varied():
    """Of the enumerated instances some are infeasible (some only because the services share the fleet: each
    alone meets its floor), some have a binding power budget, some split prefill and decode, and none is too big
    to enumerate."""
    infeasible = jointly = binding = split = 0
    for seed in SEEDS:
        case = random_case(seed)
        want, count = brute_force(case)
        assert count <= 50_000
        split += any(s.kind == "prefill" for s in case.specs)
        if want is None:
            infeasible += 1
            jointly += all(brute_force(Case(case.inventory, case.power_budget_w, (g,), tuple(
                s for s in case.specs if s.service == g.name)))[0] is not None for g in case.goals)
        elif case.power_budget_w is not None:
            binding += brute_force(Case(case.inventory, None, case.goals, case.specs))[0] > want * (1 + 1e-6)
    assert len(SEEDS) >= 100 and 10 <= infeasible <= len(SEEDS) // 2
    assert jointly >= 10 and binding >= 10 and split >= 20


# --- joint placement against proportional slices, by hand ---------------------------------------------------------

FLAT = ((0.05, 0.1, 0.1, 0.01, 0.01), (1.0, 0.1, 0.1, 0.01, 0.01))  # meets any SLO below; cap 1.0


def _one_option(rate_per_s: float) -> Instance:
    """One service on 5 devices of type x at 1 kW each, a 5 kW budget: one colocated 1-device option."""
    opt = PoolOption("colocated:x", "colocated", (("x", 1),), power_w=1000.0, provisioned_w=1000.0, kv_device="x",
                     tp=1, pp=1, batch=8, classes=(ClassService("c", rate_per_s, FLAT),))
    return Instance((opt,), (("x", 5),), 5000.0, (ClassTarget("c", 1.0, 1.0, 0.05, 1e6, 100.0),), (), ())


def test_joint_placement_beats_proportional_slices_by_hand():
    """A serves 10 req/s per device, no floor; B 1 req/s per device, floor 1 req/s; weights 1.

    Joint: B takes the 1 device its floor needs, A the other 4: 4 x 10 + 1 x 1 = 41 weighted req/s.
    Proportional slices ([Note: service baselines]): A asks 0 W (no floor), B 1000 W (one device for 1 req/s);
    the 4000 W the floors leave go half to each: A 2000 W, B 3000 W of 5000 W, fractions 0.4 and 0.6, which
    are exactly 2 and 3 of the 5 devices (no rounding down). A on 2 devices: 20; B on 3: 3. Total 23, so the
    joint placement is ahead by 41 - 23 = 18 weighted req/s, with every device used on both sides.
    """
    a, b = _one_option(10.0), _one_option(1.0)
    goal_a, goal_b = ServiceGoal("A", ("A/c",), 1.0, 1e-3), ServiceGoal("B", ("B/c",), 1.0, 1.0)
    inst, sol = solve_joint([(a, goal_a), (b, goal_b)], "throughput", time_limit_s=20)
    assert sol.status == "optimal" and sol.objective.value == pytest.approx(41.0, rel=1e-6)
    assert dict(sol.replicas) == {"A/colocated:x": 4, "B/colocated:x": 1}

    # each hand-computed slice (devices, watts) solved alone, as the baseline does
    sliced = []
    for one, goal, devices in ((a, goal_a, 2), (b, goal_b, 3)):
        part = replace(one, inventory=(("x", devices),), power_budget_w=1000.0 * devices)
        _i, alone = solve_joint([(part, goal)], "throughput", time_limit_s=20)
        sliced.append(alone.objective.value)
    assert sliced == [pytest.approx(20.0, rel=1e-6), pytest.approx(3.0, rel=1e-6)]
    assert sol.objective.value - sum(sliced) == pytest.approx(18.0, rel=1e-6)

    # and the baseline itself (its parts need only their instance: stand-ins for the prepared compile)
    parts = [Part(SimpleNamespace(name=g.name, weight=g.weight), SimpleNamespace(instance=i), g.floor_per_s)
             for i, g in ((a, goal_a), (b, goal_b))]
    base = proportional_slices(parts, "throughput", time_limit_s=20)
    assert base.status == "optimal" and base.objective == pytest.approx(23.0, rel=1e-6)
    assert dict(base.requests_per_s) == {"A": pytest.approx(20.0, rel=1e-6), "B": pytest.approx(3.0, rel=1e-6)}


# --- a joint instance of one service is the single-model compile -------------------------------------------------

def _single_model(seed: int) -> Instance:
    """A random one-model instance with everything the joint one must carry over: colocated, prefill and decode
    options on two types, finite links between them, KV hand-off times, a power budget that may bind."""
    rng = random.Random(1000 + seed)
    opts = []
    for i in range(rng.randint(2, 5)):
        kind, dev, per = rng.choice(("colocated", "prefill", "decode")), rng.choice(("a", "b")), rng.choice((1, 2))
        t0 = rng.uniform(0.1, 1.2) if kind != "decode" else rng.uniform(0.0, 0.1)
        p0 = rng.uniform(0.01, 0.06) if kind != "prefill" else 0.0
        curve = tuple((u, t0 * (1 + u), t0 * (1 + 2 * u), p0 * (1 + u / 2), p0 * (1 + u)) for u in (0.05, 0.5, 0.95))
        opts.append(PoolOption(f"{kind}:{dev}:{i}", kind, ((dev, per),), rng.uniform(100, 900),
                               rng.choice((300, 500, 700, 1000)) * per, dev, per, 1, 8,
                               (ClassService("c", rng.uniform(0.5, 20), curve),)))
    cls = ClassTarget("c", 1.0, rng.choice((None, 1.5, 2.5)), rng.choice((None, 0.05)), 1e6, 100.0)
    handoff = tuple((("c", x, y), rng.uniform(0.0, 0.8)) for x in "ab" for y in "ab")
    return Instance(tuple(opts), (("a", rng.randint(1, 4)), ("b", rng.randint(1, 4))),
                    rng.choice((None, 1500.0, 3000.0)), (cls,),
                    link_bw_bytes_per_s=((("a", "b"), rng.choice((5e6, 2e7, 1e9))),), handoff_s=handoff)


@pytest.mark.parametrize("seed", range(15))
def test_a_joint_instance_of_one_service_is_the_single_model_solve(seed):
    inst = _single_model(seed)
    single = solve(inst, "throughput", time_limit_s=20, exact=True, explain=False)
    joint_inst, sol = solve_joint([(inst, ServiceGoal("only", ("only/c",), 1.0, 1e-3))], "throughput",
                                  time_limit_s=20, explain=False)
    assert sol.status == single.status
    if single.feasible:
        assert sol.objective.value == pytest.approx(single.objective.value, rel=REL, abs=ABS)
        assert share_of(sol, joint_inst, "only").requests_per_s == pytest.approx(single.requests_per_s, rel=REL,
                                                                                 abs=ABS)


@pytest.mark.parametrize("seed", range(0, 300, 7))
def test_the_greedy_start_of_a_joint_solve_fits_the_fleet_and_serves_the_first_floor(seed):
    """The joint solve starts from `greedy` (compiler.place.greedy): its replicas fit the inventory and the power
    budget (the test's own arithmetic), and the first service, placed first on the whole fleet, gets its floor
    from colocated pools whenever they can give it (the colocated capacity of the whole fleet, enumerated here)."""
    from compiler.place.greedy import greedy
    from compiler.services import joint

    case = random_case(seed)
    chosen = greedy(joint(_instances(case)), "throughput")
    specs = {(s.service, s.key): s for s in case.specs}
    n = {tuple(key.split("/", 1)): k for key, k in chosen.items()}
    for t, have in case.inventory.items():
        assert sum(k * specs[sk].per_replica for sk, k in n.items() if specs[sk].device == t) <= have
    if case.power_budget_w is not None:
        assert sum(k * specs[sk].provisioned_w for sk, k in n.items()) <= case.power_budget_w + 1e-6
    first = case.goals[0]
    goals = {g.name: g for g in case.goals}
    mine = [s for s in case.specs if s.service == first.name and s.kind == "colocated"]
    best = 0.0  # the most the first service's colocated pools serve on the whole fleet, by enumeration
    groups = [[s for s in mine if s.device == t] for t in sorted(case.inventory)]
    for fills in itertools.product(*(_fills(g, case.inventory[g[0].device]) for g in groups if g)):
        counts = {s.key: k for g, fill in zip([g for g in groups if g], fills) for s, k in zip(g, fill)}
        if case.power_budget_w is not None and sum(counts[s.key] * s.provisioned_w for s in mine) > \
                case.power_budget_w:
            continue
        best = max(best, sum(counts[s.key] * s.rate_per_s * brute_cap(s, goals[first.name]) for s in mine))
    got = sum(k * specs[sk].rate_per_s * brute_cap(specs[sk], first) for sk, k in n.items()
              if sk[0] == first.name and specs[sk].kind == "colocated")
    if best >= first.floor_per_s * (1 + 1e-6):
        assert got >= first.floor_per_s * (1 - 1e-6), (got, first.floor_per_s, best)
