"""The pool options the placement model places.

Before: an `Instance` with every costed option. After: the options `PlacementModel`
(`compiler.place.ilp`) builds variables for: each option whose classes meet their
SLOs at different utilisations split into one option per class (`split_by_class`),
the option itself kept beside them as a replica that mixes its classes at the
strictest cap ([Note: class caps] in `compiler.place.ilp`), and then only the
options no other option dominates (`prune`, [Note: exact pruning]).

The pruning compares options exactly as the model counts them: a replica of o
serves class c at most at ``rate x strictest cap`` requests/s, its classes'
loads summed (``slo[o]`` in `compiler.place.ilp`).

[Note: pruning tolerance] Exact pruning keeps every option some mix could use, and many of them differ
by a hair: caps a few ten-thousandths apart give an option per class and per KV target set, and batch
sizes give near-twins. Each is an integer variable, and branch and bound spends its time telling the twins
apart (70B on the mixed fleet: 255 options and 15 s to prove the optimum, against 205 options and 5 s
with a tolerance of 1e-3). With a relative `tolerance` t > 0, caps within a factor 1 + t are one level
(for classes and for KV targets), and an option goes when a kept one does what it does to within 1 + t
(`prune`). Each of the three steps can cost a placement at most a factor 1 + t of any class's requests/s
(the replacement serves every class of the replaced at least 1/(1 + t) as fast, on no more devices, watts
or dollars), so scaling every flow of the unpruned optimum by (1 + t)^-3 gives a placement of the pruned
options: the unpruned optimum of requests/s, or of requests/s per watt or dollar, is at most
`bound_factor` (t) times the pruned one. Tighter still, each step's factor is the largest it actually gave up
(the widest cap ratio it merged, the largest shortfall of a stand-in; 1 where it merged or dropped nothing),
which `candidates_within` returns. `compiler.place.ilp.solve` prunes so for those objectives only and
widens the bound it reports by that product; an objective at a fixed arrival rate (power, cost) cannot scale
its flows down, and prunes exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from compiler.ir.placement import Instance
from compiler.ir.pool_option import PoolOption


#: Caps (utilisations) closer than this are one level: float noise, not a difference the optimum can use. Any
#: larger difference gets its own option: a 1% threshold here lost 0.3% of an optimum (70B chat at TPOT 50 ms on
#: 200 kW of `count: any` at chip power: 1140.65 req/s "optimal" against the B200-only baseline's 1144.17, whose
#: prefill pool hands only to B200 and so runs hotter; that copy was never offered).
CAP_EPS = 1e-9
#: The relative tolerance of pruning for objectives that maximise requests/s (or per watt, or per dollar):
#: [Note: pruning tolerance]. `bound_factor` of it is 1.003.
PRUNE_TOLERANCE = 1e-3


def candidates(inst: Instance, *, prune_them: bool = True, tolerance: float = 0.0) -> list[PoolOption]:
    """The options the model places ([Note: class caps]): each option whose classes meet their SLOs at different
    utilisations also as one option per class (`split_by_class`), beside the option itself as a mixing replica
    at its strictest class's cap; each prefill option whose KV targets differ in cap also as copies that hand
    to fewer types at a higher cap (`split_by_target`); then, unless `prune_them` is False, only those no other
    one dominates (`prune`, sorted by key). A `tolerance` above 0 merges caps and prunes to within it ([Note:
    pruning tolerance])."""
    return candidates_within(inst, prune_them=prune_them, tolerance=tolerance)[0]


def candidates_within(inst: Instance, *, prune_them: bool = True,
                      tolerance: float = 0.0) -> tuple[list[PoolOption], float]:
    """`candidates`, and how many times their optimum the unpruned model's may be ([Note: pruning tolerance]):
    the product of the largest factor each step gave up (at most `bound_factor` (`tolerance`); 1.0 when the
    tolerance merged and dropped nothing)."""
    mixed, by_class = mixed_caps(inst, tolerance)
    split = split_by_class(inst.options, mixed)
    every = [*split, *(o for o in inst.options if o.key in mixed)]
    copies, by_target = split_by_target(inst, every, tolerance)
    every += copies
    if not prune_them:
        return every, by_class * by_target if tolerance > 0 else 1.0  # within `CAP_EPS`: float noise, no loss
    kept, by_dominance = pruned(inst.with_options(every), tolerance)
    return list(kept), by_class * by_target * by_dominance if tolerance > 0 else 1.0


def bound_factor(tolerance: float) -> float:
    """The most `candidates_within` can give up at `tolerance` ([Note: pruning tolerance]): a factor 1 + t for
    class caps, KV-target caps and dominance each."""
    return (1.0 + tolerance) ** 3


def _apart(low: float, high: float, tolerance: float) -> bool:
    """Whether caps `low` <= `high` are two levels: more than `CAP_EPS` apart, and more than a factor 1 +
    `tolerance`."""
    return high - low > CAP_EPS and high > low * (1.0 + tolerance)


def mixed_caps(inst: Instance, tolerance: float = 0.0) -> tuple[set[str], float]:
    """Options whose classes meet their SLOs at different utilisations (`_apart`), and the largest ratio of caps
    an option not among them holds at its strictest (1.0: none)."""
    out, merged = set(), 1.0
    for o in inst.options:
        caps = [inst.cap(o, c) for c in inst.classes if o.service(c.name) is not None]
        if len(caps) > 1 and _apart(min(caps), max(caps), tolerance):
            out.add(o.key)
        elif len(caps) > 1 and min(caps) > 0:
            merged = max(merged, max(caps) / min(caps))
    return out, merged


def split_by_class(options: Sequence[PoolOption], keys: set[str]) -> list[PoolOption]:
    """`options` with each one named in `keys` replaced by one option per class it serves (``key|class``)."""
    out = []
    for o in options:
        if o.key in keys and len(o.classes) > 1:
            out += [replace(o, key=f"{o.key}|{s.name}", classes=(s,)) for s in o.classes]
        else:
            out.append(o)
    return sorted(out, key=lambda o: o.key)


def split_by_target(inst: Instance, options: Sequence[PoolOption],
                    tolerance: float = 0.0) -> tuple[list[PoolOption], float]:
    """For each prefill option whose KV targets' caps differ (`_apart`), one copy per higher cap
    that hands only to the types its classes reach at that cap or above (``key>t1+t2``): a prefill pool feeding
    a decode type over a fast link runs hotter than one that also feeds a type over a slow one, since every
    request waits in the same queue ([Note: KV targets] in `compiler.ir.placement`). The option itself, at the least
    of them, hands to all. Also returns the largest ratio of caps merged into one level (1.0: none)."""
    out, merged = [], 1.0
    for o in options:
        if o.kind != "prefill":
            continue
        per_type: dict[str, float] = {}
        for s in o.classes:
            for t, cap in inst.kv_targets(o, inst.target(s.name)).items():
                per_type[t] = min(cap, per_type.get(t, cap))
        levels: list[float] = []
        for cap in sorted(set(per_type.values())):
            if not levels or _apart(levels[-1], cap, tolerance):
                levels.append(cap)
            elif levels[-1] > 0:
                merged = max(merged, cap / levels[-1])
        for cap in levels[1:]:
            reached = tuple(sorted(t for t, u in per_type.items() if u >= cap - 1e-12))
            out.append(replace(o, key=f"{o.key}>{'+'.join(reached)}", hands_to=reached))
    return out, merged


#: [Note: exact pruning] An option is dropped only where another one (or m replicas of another) does at least
#: what it does in every constraint the model has, so the optimum of every objective but latency (which keeps
#: everything) is the same with and without it. Option A dominates B when, with m >= 1 replicas of A standing
#: in for one of B: both are of one kind (and hand KV from, or take it on, the same device type); m replicas of
#: A use no more devices of any type, provisioned watts or dollars than one of B; every class B
#: serves, A serves, m replicas of A serving at least as many requests/s of it as one of B (rate x strictest
#: cap, as `PlacementModel` counts it); a prefill option's KV reaches, within the class's TTFT
#: SLO, every decode type B's does; and A moves no more bytes per token over a link. Equal options keep the
#: smallest key. Keeping only the best option per class would be wrong for a mix: X serving 10 req/s of
#: each of two classes is best for neither against Y (11 and 1) and Z (1 and 11), yet one X replica serves a
#: 50/50 mix at 9.5 req/s where Y or Z serves 1.74 (the test of that name). The predicted mean draw is
#: reported, never optimised, so it is not compared; an objective that read it would have to be.


@dataclass(frozen=True, slots=True)
class _Profile:
    """What the model reads of one replica of an option."""

    uses: dict[str, int]  # devices per type
    spends: tuple[float, float]  # provisioned watts, dollars per hour (-1: no price)
    link: tuple[tuple[str, ...], float] | None  # device types and bytes per token moved between them
    classes: dict[str, tuple[float, frozenset[str]]]  # class -> requests/s one replica serves at most, KV reach


def prune(inst: Instance, tolerance: float = 0.0) -> tuple[PoolOption, ...]:
    """`pruned`'s options."""
    return pruned(inst, tolerance)[0]


def pruned(inst: Instance, tolerance: float = 0.0) -> tuple[tuple[PoolOption, ...], float]:
    """The options of `inst` that no other option dominates ([Note: exact pruning]), sorted by key; an option no
    class can use within its SLO is dropped too. A `tolerance` above 0 then drops each survivor that a kept one
    dominates to within a factor 1 + `tolerance` of every class's requests/s ([Note: pruning tolerance]): those
    that dominate most others are kept first (then by key), and every option dropped has a kept one that does
    its work, so the loss is one factor, not a chain of them. Returns the options kept and that factor at
    its largest (1.0 when the tolerance dropped none)."""
    profiles = {o.key: _profile(inst, o) for o in inst.options}
    alike: dict[tuple, list[PoolOption]] = {}
    worst = 1.0
    for o in sorted(inst.options, key=lambda o: o.key):
        if profiles[o.key].classes:
            # options of different services never stand in for each other: compared within a service only
            alike.setdefault((inst.service_of(o), o.kind, o.kv_device if o.kind != "colocated" else ""),
                             []).append(o)
    kept = []
    for members in alike.values():
        dominates = _dominance([profiles[o.key] for o in members])
        later = np.tri(len(members), k=-1, dtype=bool)  # [a, b]: b comes before a (the smaller key)
        # b goes when some a dominates it, unless they are equal and b has the smaller key
        gone = (dominates & ~(later & dominates.T)).any(axis=0)
        survivors = [o for o, g in zip(members, gone) if not g]
        if tolerance > 0:
            survivors, short = _within(survivors, [profiles[o.key] for o in survivors], tolerance)
            worst = max(worst, short)
        kept += survivors
    return tuple(sorted(kept, key=lambda o: o.key)), worst


def _within(options: list[PoolOption], ps: list[_Profile], tolerance: float) -> tuple[list[PoolOption], float]:
    """Of `options` (one group, none dominating another exactly), those `prune` keeps at `tolerance`, and the
    largest factor by which a dropped one's work exceeds its stand-in's (1.0: none dropped)."""
    short = _dominance(ps, near=True)
    near = short <= 1.0 + tolerance
    order = sorted(range(len(options)), key=lambda i: (-int(near[i].sum()), options[i].key))
    kept: list[int] = []
    worst = 1.0
    for b in order:
        stand_in = min((short[a, b] for a in kept if near[a, b]), default=None)
        if stand_in is None:
            kept.append(b)
        else:
            worst = max(worst, float(stand_in))
    return [options[i] for i in sorted(kept)], worst


def _profile(inst: Instance, o: PoolOption) -> _Profile:
    caps = {c.name: inst.cap(o, c) for c in inst.classes if o.service(c.name) is not None}
    usable = {name: cap for name, cap in caps.items() if cap > 0}
    strictest = min(usable.values(), default=0.0)
    classes = {}
    for c in inst.classes:
        if c.name not in usable:
            continue
        reach = frozenset(inst.kv_targets(o, c))  # empty but for prefill options, whose cap > 0 needs one
        classes[c.name] = (o.service(c.name).rate_per_s * strictest, reach)
    price = inst.price_per_hour(o)
    link = (o.device_types, o.link_bytes_per_token) if o.link_bytes_per_token and len(o.device_types) == 2 \
        else None
    return _Profile({t: o.uses(t) for t in o.device_types},
                    (o.provisioned_w, price if price is not None else -1.0), link,
                    classes)


def _dominance(ps: Sequence[_Profile], near: bool = False):
    """``D[a, b]``: whether m >= 1 replicas of option a do what one of option b does on no more devices, watts or
    dollars, for every pair of one group at once (numpy; `prune` reads it). With `near`, instead the factor
    by which a's requests/s fall short of b's in the class where they fall shortest (at most 1: a dominates b;
    inf: a cannot stand in for b at any rate)."""
    g = len(ps)
    types = sorted({t for p in ps for t in p.uses})
    uses = np.array([[p.uses.get(t, 0) for t in types] for p in ps], dtype=float)  # options x types
    with np.errstate(divide="ignore", invalid="ignore"):
        per_type = np.where(uses[:, None, :] > 0, np.floor(uses[None, :, :] / uses[:, None, :]), np.inf)
    m = per_type.min(axis=2)  # [a, b]: replicas of a that b's devices hold
    m[np.isinf(m)] = 0.0
    spends = np.array([p.spends for p in ps], dtype=float)
    for k in range(spends.shape[1]):  # an unpriced option (-1) leaves the model without dollars: not compared
        sa, sb = spends[:, k][:, None], spends[:, k][None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            m = np.where((sa > 0) & (sb >= 0), np.minimum(m, np.floor(sb / sa + 1e-12)), m)
    ok = m >= 1
    links = sorted({p.link[0] for p in ps if p.link is not None})
    link_id = np.array([links.index(p.link[0]) if p.link is not None else -1 for p in ps])
    link_bytes = np.array([p.link[1] if p.link is not None else 0.0 for p in ps])
    ok &= (link_id[:, None] == -1) | ((link_id[:, None] == link_id[None, :]) & (link_bytes[:, None] <= link_bytes[None, :]))
    names = sorted({n for p in ps for n in p.classes})
    targets = sorted({t for p in ps for _r, reach in p.classes.values() for t in reach})
    short = np.zeros((g, g))
    for name in names:
        serves = np.array([name in p.classes for p in ps])
        rate = np.array([p.classes[name][0] if name in p.classes else 0.0 for p in ps])
        reach = np.array([sum(1 << targets.index(t) for t in p.classes[name][1]) if name in p.classes else 0
                          for p in ps], dtype=np.int64)
        able = serves[:, None] & ((reach[None, :] & ~reach[:, None]) == 0)
        if near:
            with np.errstate(divide="ignore", invalid="ignore"):
                factor = np.where(able, rate[None, :] / (m * rate[:, None]), np.inf)
            short = np.maximum(short, np.where(serves[None, :], factor, 0.0))  # a class b does not serve: nothing
            continue
        covers = able & (m * rate[:, None] >= rate[None, :])
        ok &= covers | ~serves[None, :]  # a class b does not serve asks nothing of a
    if near:
        short = np.where(ok, short, np.inf)
        np.fill_diagonal(short, np.inf)
        return short
    np.fill_diagonal(ok, False)
    return ok
