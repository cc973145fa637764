"""Bounds that answer a what-if re-solve (the sensitivity analysis's moves) without solving the whole MILP again.

Before: an `Instance` and the solution of its placement (value and proven bound), and the instance's options with
some of them costed again (a move). After: the evidence that brackets the moved instance's optimum: whether the move
made no option better (`no_better_options`), the options the solution's pools become under the move
(`restricted_to`), and one instance whose options include those of several moves (`union_of`).

[Note: what-if bounds] A move changes the options of one device type (or family); the placement of the plan is
the point every move starts from. Three facts bracket the moved optimum without the whole MILP:
- *Worse everywhere* (`no_better_options`): every moved option is an option the instance already had (same key,
  devices, kind, KV device and hand-off types) with no more requests/s for any class, latencies no lower at any
  utilisation of the same samples (so caps and KV targets no higher), and no fewer provisioned watts or link bytes
  per token; no new option, no new class. Then each placement of the moved instance is one of the instance, no
  better, so its optimum is no better than the plan's proven bound, for every objective that reads only those
  (all but ``latency``, which reads the TPOT at an option's cap, and a lower cap may lower it). A placement of the
  options the plan's pools become (`restricted_to`, a small MILP) is a placement of the moved instance: where its
  value is within the analysis gap of the plan's bound, it is the answer. The costing is not trusted to be
  monotone: the check reads the options it returns (the attention/FFN trim can offer an option that a
  slower device makes worth placing, amd-mi355x compute_eff -20% on the 70B mix).
- *Untouched plan*: a move of device types the plan does not use leaves the plan's options as they were, so the
  plan stays feasible at its value (a prefill pool whose KV targets change keeps a copy handing to the types it
  handed to, at its cap: `compiler.place.candidates.split_by_target`).
- *Union*: adding options to a MILP never makes its optimum worse. An instance holding the options of several moves
  side by side (`union_of`, each move's changed options under keys of their own) bounds the optimum of each: where
  that bound is within the analysis gap of the plan's value, no move of an unused type changes the plan.
Each of these answers within the analysis gap of the moved instance's own optimum, as a re-solve stopped at that
gap does; pruning near-twins (`compiler.place.candidates`) widens the bounds by the same factor it widens a
re-solve's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from compiler.ir.pool_option import ClassService, PoolOption
from compiler.place.moves import base_key

#: Curve columns the placement reads (`ClassService.max_utilisation`, the latency objective): TTFT and TPOT at the
#: SLO's percentile.
READ_LATENCIES = (2, 4)


def no_better(new: PoolOption, old: PoolOption | None) -> bool:
    """Whether `new` offers a placement nothing `old` (the option of the same key before the move) did not: the
    same shape, no class `old` did not serve, and per class no more requests/s and no lower latency at any sample
    of the same utilisations; no fewer provisioned watts or link bytes per token ([Note: what-if bounds])."""
    if old is None:
        return False
    if (new.kind, new.devices, new.kv_device, new.hands_to, new.tp, new.pp) != \
            (old.kind, old.devices, old.kv_device, old.hands_to, old.tp, old.pp):
        return False
    if new.provisioned_w < old.provisioned_w or new.link_bytes_per_token < old.link_bytes_per_token:
        return False
    before = {s.name: s for s in old.classes}
    return all(s.name in before and _service_no_better(s, before[s.name]) for s in new.classes)


def _service_no_better(new: ClassService, old: ClassService) -> bool:
    """No more requests/s, and on the same utilisation samples no lower latency the placement reads (so that
    every cap and KV target it derives is no higher: the curves are linear between samples)."""
    if new.rate_per_s > old.rate_per_s or len(new.curve) != len(old.curve):
        return False
    return all(a[0] == b[0] and all(a[i] >= b[i] for i in READ_LATENCIES) for a, b in zip(new.curve, old.curve))


def no_better_options(moved: Sequence[PoolOption], options: Sequence[PoolOption]) -> bool:
    """Whether every option of `moved` (an instance's `options` after a move) that differs from `options` is
    `no_better` than the option of its key there, and none is new."""
    before = {o.key: o for o in options}
    return all(before.get(o.key) == o or no_better(o, before.get(o.key)) for o in moved)


def restricted_to(moved: Sequence[PoolOption], replicas: Sequence[tuple[str, int]]) -> list[PoolOption]:
    """The options of `moved` whose replica shape (`base_key`) the placement `replicas` deploys: the plan's pools
    after a move, for a small MILP whose placements are placements of the moved instance."""
    shapes = {base_key(key) for key, n in replicas if n}
    return [o for o in moved if o.key in shapes]


def union_of(options: Sequence[PoolOption], versions: Sequence[Sequence[PoolOption]]) -> list[PoolOption]:
    """`options` and, beside them, each of `versions` (the options after one move) that differs from them, keyed
    ``<key>@<i>`` (i: the version's index): an instance whose optimum bounds each version's ([Note: what-if
    bounds])."""
    before = {o.key: o for o in options}
    out = list(options)
    for i, version in enumerate(versions):
        out += [replace(o, key=f"{o.key}@{i}") for o in version if before.get(o.key) != o]
    return out
