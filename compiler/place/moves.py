"""Replanning from a running placement: the replicas moved against the current plan, as a family of the MILP.

`compiler.place.ilp.solve` takes a `Moves` (``moves=``) and then, beside its own families, models

- ``started[b]`` / ``stopped[b]``: replicas of shape b (an option's key before its class or KV-target suffix,
  ``|`` and ``>``: the engine replica a router sends any class to) started or stopped against ``current[b]``;
- ``moves`` >= both sums: one replica stopped and one started elsewhere (a change of role or device type) is one
  move, as is a replica added or removed;
- ``max_moves``: ``moves <= max_moves`` when given.

The objective's first stage is solved as before under ``max_moves``; its optimum is then relaxed by ``slack``
(a fraction) and the next stage minimises ``moves`` within it; with a slack the objective is solved once more at
that many moves, before the usual tie-breaks: within `slack` of the best placement reachable in `max_moves`,
the best of those that move least. Routing (which class goes where) is not
a move: the router's shares change for free. The options of the current plan stay candidates even where
pruning would drop them as dominated, so staying put is always a choice.

>>> base_key("prefill:x:tp1:pp1:c8|chat>x")
'prefill:x:tp1:pp1:c8'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Moves:
    """The current placement (``current``: replicas per shape, `base_key`) and how far a re-solve may move."""

    current: tuple[tuple[str, int], ...]
    max_moves: int | None = None
    slack: float = 0.0  # fraction of the first stage's optimum given up for fewer moves


def base_key(key: str) -> str:
    """The replica shape of an option key: the key without its class (``|c``) or KV-target (``>t``) suffix."""
    return key.split("|", 1)[0].split(">", 1)[0]


def add_moves(model, moves: Moves):
    """Add ``started``, ``stopped`` and ``moves`` (and ``max_moves``) to a `PlacementModel`; returns ``moves``.
    They are continuous: the replica counts they balance are integers, so the fewest moves are too."""
    m, mo, current = model.m, model.mo, dict(moves.current)
    shapes = sorted({base_key(o.key) for o in model.opts} | set(current))
    started, stopped = [], []
    for b in shapes:
        n = mo.fast_sum(model.n[o.key] for o in model.opts if base_key(o.key) == b)
        up = m.add_variable(lb=0.0, name=f"started[{b}]")
        down = m.add_variable(lb=0.0, name=f"stopped[{b}]")
        m.add_linear_constraint(up - down - n == -current.get(b, 0))
        started.append(up)
        stopped.append(down)
    count = m.add_variable(lb=0.0, name="moves")
    m.add_linear_constraint(count >= mo.fast_sum(started))
    m.add_linear_constraint(count >= mo.fast_sum(stopped))
    if moves.max_moves is not None:
        m.add_linear_constraint(count <= moves.max_moves, name="max_moves")
    return count


def kept(options, moves: Moves | None) -> list:
    """The options of the current plan (by shape), to keep as candidates beside the pruned ones."""
    if moves is None:
        return []
    shapes = {b for b, n in moves.current if n}
    return [o for o in options if base_key(o.key) in shapes]
