"""What the placement stage reads (`Instance`) and returns (`Solution`). Standard library only.

An `Instance` is pure data (costed pool options, inventory, budget, links,
KV hand-off times), so tests build random ones without tracing a model. A
`Solution` names its objective with the unit of its value (`Objective`):
``requests_per_s`` when maximising throughput, ``provisioned_w`` when
minimising power, ``worst_tpot_ms`` for latency, ``requests_per_s_per_provisioned_w``
for tokens per watt.

>>> Objective("throughput", value=797.2, bound=797.2).quantity
'requests_per_s'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from compiler.ir.pool_option import PoolOption

#: What each objective optimises, with its unit in the name.
OBJECTIVE_QUANTITIES: dict[str, str] = {
    "throughput": "requests_per_s",
    "tokens-per-watt": "requests_per_s_per_provisioned_w",
    "power": "provisioned_w",
    "latency": "worst_tpot_ms",
}
OBJECTIVES: tuple[str, ...] = tuple(OBJECTIVE_QUANTITIES)
#: Constraint families; each sits behind an assumption literal so an infeasible instance names its binding ones.
FAMILIES: tuple[str, ...] = ("inventory", "power", "slo", "link", "demand")


@dataclass(frozen=True, slots=True)
class Instance:
    """Everything the solver reads."""

    options: tuple[PoolOption, ...]
    inventory: tuple[tuple[str, int], ...]
    power_budget_w: float | None
    kv_bytes_per_request: float
    link_bw_bytes_per_s: tuple[tuple[tuple[str, str], float], ...]  # per unordered pair of different types
    handoff_s: tuple[tuple[tuple[str, str], float], ...]  # KV hand-off time of one request, per (from, to)
    ttft_slo_s: float | None = None
    arrival_rate_per_s: float | None = None  # None: maximise

    def link_bw(self, a: str, b: str) -> float:
        table = dict(self.link_bw_bytes_per_s)
        return table.get((a, b), table.get((b, a), math.inf))

    def handoff(self, a: str, b: str) -> float:
        return dict(self.handoff_s).get((a, b), 0.0)

    def with_options(self, options: Sequence[PoolOption]) -> Instance:
        from dataclasses import replace

        return replace(self, options=tuple(options))


@dataclass(frozen=True, slots=True)
class Objective:
    """The first-stage objective: its name, the value reached and the proven bound, in `quantity` units."""

    name: str
    value: float
    bound: float

    @property
    def quantity(self) -> str:
        return OBJECTIVE_QUANTITIES[self.name]

    @property
    def gap(self) -> float:
        """Relative distance between value and bound (0 when proven optimal)."""
        return abs(self.bound - self.value) / max(abs(self.value), 1e-9) if self.value else 0.0


@dataclass(frozen=True, slots=True)
class Solution:
    """Replicas per option and KV flows; ``status`` is ``optimal``, ``feasible`` or ``infeasible``.

    ``binding`` names the constraint families (`FAMILIES`) of a minimal infeasible set.
    """

    status: str
    objective: Objective
    replicas: tuple[tuple[str, int], ...] = ()  # (option key, replicas), keys sorted
    flows: tuple[tuple[tuple[str, str], float], ...] = ()  # ((prefill option key, decode type), requests/s)
    requests_per_s: float = 0.0
    power_w: float = 0.0  # predicted mean draw
    provisioned_w: float = 0.0  # TDP reserved against the budget
    wall_s: float = 0.0
    variables: int = 0
    constraints: int = 0
    binding: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.status != "infeasible"

    def replica_count(self, key: str) -> int:
        return dict(self.replicas).get(key, 0)

    def used(self, options: Sequence[PoolOption]) -> list[tuple[PoolOption, int]]:
        """The options with replicas, in `options` order, with their counts."""
        counts = dict(self.replicas)
        return [(o, counts[o.key]) for o in options if counts.get(o.key)]


@dataclass(frozen=True, slots=True)
class Baseline:
    """A comparison placement solved under the same cost model (e.g. ``greedy``, ``homogeneous:<device>``)."""

    name: str
    requests_per_s: float
    power_w: float  # predicted mean draw
