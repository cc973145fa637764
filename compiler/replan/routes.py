"""How a running plan routes each request class over its pools: the shares its router was given, from the pools'
predicted per-class requests/s. Read by the cool-down's capacity check (`compiler.replan.replan`) and by the
simulation (`compiler.replan.simulate`), which routes as the plan says; and how two plans' routes differ, by
replica shape (`route_changes`, what a replan reports)."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.plan.schema import DECODE_ROLES, ENTRY_ROLES
from compiler.place.moves import base_key

#: The roles a request enters by (``entry``) and decodes on (``decode``).
SIDES = (("entry", ENTRY_ROLES), ("decode", DECODE_ROLES))


def pool_routes(plan) -> dict[tuple[str, str, str], float]:
    """(class, side, pool) -> the class's share there (side ``entry``: colocated and prefill pools; ``decode``:
    colocated and decode), from the pools' predicted per-class requests/s."""
    totals: dict[tuple[str, str], float] = {}
    out: dict[tuple[str, str, str], float] = {}
    for p in plan.pools:
        for side, roles in SIDES:
            if p.role not in roles:
                continue
            for c in p.predicted_classes:
                out[(c.name, side, p.name)] = c.requests_per_s
                totals[(c.name, side)] = totals.get((c.name, side), 0.0) + c.requests_per_s
    return {k: v / totals[(k[0], k[1])] for k, v in out.items() if totals[(k[0], k[1])] > 0}


def routed_utilisation(plan, options, rates: dict[str, float]) -> dict[str, float]:
    """Each pool's utilisation (requests/s over what its replicas serve, per class on `options`, by shape) when
    the classes arrive at `rates` and the plan routes them as it does now; pools of a shape missing from
    `options` are left out."""

    shapes: dict = {}
    for o in sorted(options, key=lambda o: (-len(o.classes), o.key)):  # the shape's option serving most classes
        shapes.setdefault(base_key(o.key), o)
    routes = pool_routes(plan)
    out = {}
    for p in plan.pools:
        o = shapes.get(base_key(p.option))
        if o is None:
            continue
        side = "entry" if p.role in SIDES[0][1] else "decode"
        load = 0.0
        for c, r in rates.items():
            share = routes.get((c, side, p.name), 0.0)
            if share and o.service(c) is not None:
                load += r * share / o.service(c).rate_per_s
        out[p.name] = load / max(p.replicas, 1)
    return out


@dataclass(frozen=True, slots=True)
class RouteChange:
    """A class's share of requests on one replica shape, where they enter (``entry``: colocated or prefill) or
    where they decode (``decode``), before and after (predicted routing)."""

    cls: str
    side: str
    shape: str
    before: float
    after: float


#: Routing shares that differ by less than this are the same route.
ROUTE_TOLERANCE = 0.005


def route_shares(plan) -> dict[tuple[str, str, str], float]:
    """(class, side, shape) -> the class's share of requests there: entry (colocated, prefill) and decode
    (colocated, decode) pools, from the pools' predicted per-class requests/s."""
    totals: dict[tuple[str, str], float] = {}
    out: dict[tuple[str, str, str], float] = {}
    for p in plan.pools:
        sides = [s for s, roles in SIDES if p.role in roles]
        for c in p.predicted_classes:
            for side in sides:
                key = (c.name, side, base_key(p.option))
                out[key] = out.get(key, 0.0) + c.requests_per_s
                totals[(c.name, side)] = totals.get((c.name, side), 0.0) + c.requests_per_s
    return {k: v / totals[(k[0], k[1])] for k, v in out.items() if totals[(k[0], k[1])] > 0}


def route_changes(old, new) -> tuple[RouteChange, ...]:
    a, b = route_shares(old), route_shares(new)
    out = []
    for key in sorted(set(a) | set(b)):
        if abs(a.get(key, 0.0) - b.get(key, 0.0)) >= ROUTE_TOLERANCE:
            out.append(RouteChange(key[0], key[1], key[2], round(a.get(key, 0.0), 6), round(b.get(key, 0.0), 6)))
    return tuple(out)
