"""What the placement stage reads (`Instance`) and returns (`Solution`). Standard library only.

An `Instance` is pure data (costed pool options, inventory, budget, links,
KV hand-off times), so tests build random ones without tracing a model. A
`Solution` names its objective with the unit of its value (`Objective`):
``requests_per_s`` when maximising throughput, ``provisioned_w`` when
minimising power, ``worst_tpot_ms`` for latency, ``requests_per_s_per_provisioned_w``
for tokens per watt.

>>> Objective("throughput", value=797.2, bound=797.2).quantity
'requests_per_s'

Caps: a class may use a pool up to the utilisation at which its percentile
latency meets its SLO (`Instance.cap`, from the option's latency curve).
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
class ClassTarget:
    """A request class as the placement sees it: its share of requests, SLO targets and KV hand-off size."""

    name: str
    share: float  # of all requests; the shares of an instance sum to 1
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    kv_bytes: float  # KV one request of this class hands from prefill to decode
    output_len: float  # mean output tokens (tokens/s = requests/s x this)


@dataclass(frozen=True, slots=True)
class Instance:
    """Everything the solver reads."""

    options: tuple[PoolOption, ...]
    inventory: tuple[tuple[str, int], ...]
    power_budget_w: float | None
    classes: tuple[ClassTarget, ...]
    link_bw_bytes_per_s: tuple[tuple[tuple[str, str], float], ...]  # per unordered pair of different types
    handoff_s: tuple[tuple[tuple[str, str, str], float], ...]  # KV hand-off of one request, per (class, from, to)
    arrival_rate_per_s: float | None = None  # None: maximise

    def link_bw(self, a: str, b: str) -> float:
        table = dict(self.link_bw_bytes_per_s)
        return table.get((a, b), table.get((b, a), math.inf))

    def handoff(self, cls: str, a: str, b: str) -> float:
        return dict(self.handoff_s).get((cls, a, b), 0.0)

    def target(self, name: str) -> ClassTarget:
        return next(c for c in self.classes if c.name == name)

    def cap(self, option: PoolOption, cls: ClassTarget) -> float:
        """The utilisation at which `cls` meets its SLO on `option` (0.0: never; absent class: 0.0).

        Prefill options meet `SLO_SHARE_PREFILL` of the TTFT target, leaving the rest for the KV
        hand-off and the wait for a decode slot; decode options keep that wait within
        `SLO_SHARE_ADMISSION` of it.
        """
        service = option.service(cls.name)
        if service is None:
            return 0.0
        ttft = cls.ttft_slo_s
        if ttft is not None and option.kind == "prefill":
            ttft *= SLO_SHARE_PREFILL
        elif ttft is not None and option.receives_kv:
            ttft *= SLO_SHARE_ADMISSION
        return service.max_utilisation(ttft_s=ttft, tpot_s=None if option.kind == "prefill" else cls.tpot_slo_s)

    def with_options(self, options: Sequence[PoolOption]) -> Instance:
        from dataclasses import replace

        return replace(self, options=tuple(options))

    def with_slo(self, *, ttft_s: float | None = None, tpot_s: float | None = None) -> Instance:
        """The same instance with every class's TTFT and/or TPOT target replaced (costs do not depend on them)."""
        from dataclasses import replace

        classes = tuple(replace(c, ttft_slo_s=ttft_s if ttft_s is not None else c.ttft_slo_s,
                                tpot_slo_s=tpot_s if tpot_s is not None else c.tpot_slo_s) for c in self.classes)
        return replace(self, classes=classes)


#: Shares of a class's TTFT target: what a prefill pool may spend, and what the wait for a decode slot may.
SLO_SHARE_PREFILL = 0.9
SLO_SHARE_ADMISSION = 0.1


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
    flows: tuple[tuple[tuple[str, str, str], float], ...] = ()  # ((class, prefill option, decode type), req/s)
    served: tuple[tuple[tuple[str, str], float], ...] = ()  # ((class, option key), req/s) on every option
    class_requests_per_s: tuple[tuple[str, float], ...] = ()
    requests_per_s: float = 0.0
    power_w: float = 0.0  # predicted mean draw
    provisioned_w: float = 0.0  # TDP reserved against the budget
    wall_s: float = 0.0
    variables: int = 0
    constraints: int = 0
    binding: tuple[str, ...] = ()
    options: tuple[PoolOption, ...] = ()  # the options the solver chose among (pruned; split by class)

    @property
    def feasible(self) -> bool:
        return self.status != "infeasible"

    def replica_count(self, key: str) -> int:
        return dict(self.replicas).get(key, 0)

    def used(self, options: Sequence[PoolOption] | None = None) -> list[tuple[PoolOption, int]]:
        """The options with replicas, in option order, with their counts."""
        counts = dict(self.replicas)
        return [(o, counts[o.key]) for o in (self.options if options is None else options) if counts.get(o.key)]

    def option(self, key: str) -> PoolOption:
        return next(o for o in self.options if o.key == key)

    def served_on(self, key: str) -> dict[str, float]:
        """Requests/s of each class that option `key` serves (prefill options: what they prefill)."""
        return {c: rate for (c, k), rate in self.served if k == key}

    def utilisation(self, option: PoolOption) -> float:
        """The share of `option`'s replicas' capacity its classes use: sum of class rate / class capacity."""
        n = self.replica_count(option.key)
        if not n:
            return 0.0
        return sum(rate / option.service(c).rate_per_s for c, rate in self.served_on(option.key).items()) / n



@dataclass(frozen=True, slots=True)
class Baseline:
    """A comparison placement solved under the same cost model (e.g. ``greedy``, ``homogeneous:<device>``)."""

    name: str
    requests_per_s: float
    power_w: float  # predicted mean draw


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """What moving one assumed efficiency factor does to the placement (`compiler.driver.sensitivity`).

    ``factor`` is ``<family>.<field>`` (e.g. ``amd.mem_eff``), ``change`` the relative move (+0.2 or -0.2);
    ``objective_change`` is the relative move of the objective's value; ``pools_added`` and ``pools_removed``
    name the pools (kind:device:tp:pp) that appear or disappear.
    """

    factor: str
    change: float
    objective_change: float
    pools_added: tuple[str, ...] = ()
    pools_removed: tuple[str, ...] = ()

    @property
    def changes_pools(self) -> bool:
        return bool(self.pools_added or self.pools_removed)
