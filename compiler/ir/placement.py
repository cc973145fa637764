"""What the placement stage reads (`Instance`) and returns (`Solution`). Standard library only.

An `Instance` is pure data (costed pool options, inventory, budget, links,
KV hand-off times), so tests build random ones without tracing a model. A
`Solution` names its objective with the unit of its value (`Objective`):
``requests_per_s`` when maximising throughput, ``provisioned_w`` when
minimising power, ``worst_tpot_ms`` for latency, ``requests_per_s_per_provisioned_w``
for tokens per watt, ``dollars_per_hour`` when minimising cost and ``requests_per_s_per_dollar_per_hour`` for
tokens per dollar.

>>> Objective("throughput", value=797.2, bound=797.2).quantity
'requests_per_s'

Caps: a class may use a pool up to the utilisation at which its percentile
latency meets its SLO (`Instance.cap`, from the option's latency curve).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from compiler.ir.pool_option import PoolOption

#: What each objective optimises, with its unit in the name.
OBJECTIVE_QUANTITIES: dict[str, str] = {
    "throughput": "requests_per_s",
    "tokens-per-watt": "requests_per_s_per_provisioned_w",
    "power": "provisioned_w",
    "latency": "worst_tpot_ms",
    "cost": "dollars_per_hour",
    "tokens-per-dollar": "requests_per_s_per_dollar_per_hour",
}
OBJECTIVES: tuple[str, ...] = tuple(OBJECTIVE_QUANTITIES)
#: Whether each objective's value is better larger (``max``) or smaller (``min``).
OBJECTIVE_SENSE: dict[str, str] = {"throughput": "max", "tokens-per-watt": "max", "power": "min", "latency": "min",
                                   "cost": "min", "tokens-per-dollar": "max"}
#: Objectives that read prices: every device type the solver may use needs one.
PRICED_OBJECTIVES: tuple[str, ...] = ("cost", "tokens-per-dollar")
#: Constraint families; a solve may leave some out, so an infeasible instance names its binding ones.
#: ``cost`` is the budget in dollars per hour (only where one is set).
FAMILIES: tuple[str, ...] = ("inventory", "power", "cost", "slo", "link", "demand")


@dataclass(frozen=True, slots=True)
class ClassTarget:
    """A request class as the placement sees it: its share of requests, SLO targets and KV hand-off size."""

    name: str
    share: float  # of all requests; the shares of an instance sum to 1
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    kv_bytes: float  # KV one request of this class hands from prefill to decode
    output_len: float  # mean output tokens (tokens/s = requests/s x this)
    percentile: float = 0.9  # of requests the targets bind (0-1)


@dataclass(frozen=True, slots=True)
class ServiceGoal:
    """One service of a joint placement (`compiler.services`): its classes (their shares are of the service's own
    requests), the weight of its requests/s in the objective, and the requests/s it must be served at least."""

    name: str
    classes: tuple[str, ...]
    weight: float = 1.0
    floor_per_s: float = 1e-3  # its arrival rate or minimum rate; else one request per 1000 s: it is served at all


@dataclass(frozen=True, slots=True)
class Instance:
    """Everything the solver reads."""

    options: tuple[PoolOption, ...]
    inventory: tuple[tuple[str, int], ...]
    power_budget_w: float | None
    classes: tuple[ClassTarget, ...]
    link_bw_bytes_per_s: tuple[tuple[tuple[str, str], float], ...]  # per unordered pair; (t, t): t's own fabric
    handoff_s: tuple[tuple[tuple[str, str, str], float], ...]  # one request's KV hand-off at its link's cap, at the
    # class's percentile, per (class, from, to) ([Note: hand-offs] in `cost_models.comm`)
    arrival_rate_per_s: float | None = None  # None: maximise
    prices_per_hour: tuple[tuple[str, float], ...] = ()  # dollars per device-hour, per priced device type
    cost_budget_per_hour: float | None = None  # dollars per hour the placement may spend
    designed: tuple[str, ...] = ()  # device types whose count the solver chooses (``count: any``, [Note: fleet design])
    cross_type_kv: bool = True  # False: KV never leaves the device type that prefilled it (vendor islands)
    kv_pairs: tuple[tuple[str, str], ...] | None = None  # (prefill type, decode type) KV may move between; None: any
    link_caps: tuple[tuple[tuple[str, str], float], ...] = ()  # per unordered pair: the utilisation a link runs at
    # most at (absent: 1.0); `handoff_s` includes the percentile wait there
    link_servers: tuple[tuple[tuple[str, str], int], ...] = ()  # per unordered pair: transfers it carries at once
    transfer_s: tuple[tuple[tuple[str, str, str], float], ...] = ()  # `handoff_s` unloaded (absent: handoff_s)
    services: tuple[ServiceGoal, ...] = ()  # several models on one fleet ([Note: one placement of many services]
    # in `compiler.services`); empty: one model, whose class shares sum to 1
    # Lookup tables of the pair fields above, built once (the solver and pruning ask for them per option and class).
    _prices: dict = field(init=False, compare=False, repr=False)
    _links: dict = field(init=False, compare=False, repr=False)
    _handoffs: dict = field(init=False, compare=False, repr=False)
    _link_caps: dict = field(init=False, compare=False, repr=False)
    _transfers: dict = field(init=False, compare=False, repr=False)
    _servers: dict = field(init=False, compare=False, repr=False)
    _targets: dict = field(init=False, compare=False, repr=False)  # (option key, class) -> `kv_targets`
    _decoders: dict = field(init=False, compare=False, repr=False)  # class -> `decode_types_for`
    _service_of: dict = field(init=False, compare=False, repr=False)  # class -> its service's name

    def __post_init__(self) -> None:
        object.__setattr__(self, "_prices", dict(self.prices_per_hour))
        object.__setattr__(self, "_links", dict(self.link_bw_bytes_per_s))
        object.__setattr__(self, "_handoffs", dict(self.handoff_s))
        object.__setattr__(self, "_link_caps", dict(self.link_caps))
        object.__setattr__(self, "_transfers", dict(self.transfer_s))
        object.__setattr__(self, "_servers", dict(self.link_servers))
        object.__setattr__(self, "_targets", {})
        object.__setattr__(self, "_decoders", {})
        object.__setattr__(self, "_service_of", {c: s.name for s in self.services for c in s.classes})

    def price_per_hour(self, option: PoolOption) -> float | None:
        """Dollars per hour one replica of `option` costs; None when a device type it uses has no price."""
        prices = self._prices
        if any(d not in prices for d, _k in option.devices):
            return None
        return sum(prices[d] * k for d, k in option.devices)

    def link_bw(self, a: str, b: str) -> float:
        return self._links.get((a, b), self._links.get((b, a), math.inf))

    def link_cap(self, a: str, b: str) -> float:
        """The utilisation link a-b runs at most at ([Note: hand-offs] in `cost_models.comm`; absent: 1.0)."""
        return self._link_caps.get((a, b), self._link_caps.get((b, a), 1.0))

    def handoff(self, cls: str, a: str, b: str) -> float:
        """Class `cls`'s KV hand-off from type `a` to `b` at the link's cap, at the class's percentile."""
        return self._handoffs.get((cls, a, b), 0.0)

    def transfer(self, cls: str, a: str, b: str) -> float:
        """The same hand-off on an idle link."""
        return self._transfers.get((cls, a, b), self.handoff(cls, a, b))

    def servers(self, a: str, b: str) -> int:
        """Transfers link a-b carries at once at full speed ([Note: hand-offs] in `cost_models.comm`)."""
        return self._servers.get((a, b), self._servers.get((b, a), 1))

    def kv_reaches(self, a: str, b: str) -> bool:
        """Whether KV prefilled on type `a` may be decoded on type `b` (vendor islands; `kv_pairs`)."""
        if a != b and not self.cross_type_kv:
            return False
        return self.kv_pairs is None or (a, b) in self.kv_pairs

    def kv_may_go(self, option: PoolOption, t: str) -> bool:
        """Whether prefill option `option` may hand KV to decode type `t` at all, SLOs aside (`kv_reaches`, and
        the option's own `hands_to`)."""
        return self.kv_reaches(option.kv_device, t) and (not option.hands_to or t in option.hands_to)

    def decode_types_for(self, cls: ClassTarget) -> frozenset[str]:
        """Device types with a decode option that serves `cls` within its SLO."""
        if cls.name not in self._decoders:
            self._decoders[cls.name] = frozenset(
                o.kv_device for o in self.options if o.receives_kv and o.service(cls.name) is not None
                and self.cap(o, cls) > 0)
        return self._decoders[cls.name]

    def kv_targets(self, option: PoolOption, cls: ClassTarget) -> dict[str, float]:
        """[Note: KV targets] The one home of "class c's KV, prefilled on `option`, reaches decode type t": each
        type t it may go to (`kv_may_go`) where a decode option serves c, mapped to the utilisation at which
        `option`'s percentile TTFT leaves c's TTFT target room for the hand-off to t (`handoff`, at the link's
        cap) and the wait for a decode slot (`SLO_SHARE_ADMISSION`). A type whose hand-off leaves no room is
        absent. A prefill option's cap is the least of these (`cap`); `candidates` adds copies of it that hand
        to fewer types at a higher cap when they differ (`split_by_target`)."""
        key = (option.key, cls.name)
        if key not in self._targets:
            service = option.service(cls.name)
            out: dict[str, float] = {}
            if service is not None and option.kind == "prefill":
                for t in sorted(self.decode_types_for(cls)):
                    if not self.kv_may_go(option, t):
                        continue
                    budget = None if cls.ttft_slo_s is None else \
                        cls.ttft_slo_s * (1 - SLO_SHARE_ADMISSION) - self.handoff(cls.name, option.kv_device, t)
                    if budget is not None and budget <= 0:
                        continue
                    cap = service.max_utilisation(ttft_s=budget, tpot_s=None)
                    if cap > 0:
                        out[t] = cap
            self._targets[key] = out
        return self._targets[key]

    def service_of(self, option: PoolOption) -> str:
        """The service whose classes `option` serves ("" for an instance of one model)."""
        return next((self._service_of[c.name] for c in option.classes if c.name in self._service_of), "")

    def target(self, name: str) -> ClassTarget:
        return next(c for c in self.classes if c.name == name)

    def cap(self, option: PoolOption, cls: ClassTarget) -> float:
        """The utilisation at which `cls` meets its SLO on `option` (0.0: never; absent class: 0.0).

        A prefill option runs at the least of its KV targets' caps (`kv_targets`): its TTFT, the hand-off to
        the slowest type it hands to and the wait for a decode slot fit the TTFT target. Decode options keep
        that wait within `SLO_SHARE_ADMISSION` of the target.
        """
        service = option.service(cls.name)
        if service is None:
            return 0.0
        if option.kind == "prefill":
            return min(self.kv_targets(option, cls).values(), default=0.0)
        ttft = cls.ttft_slo_s
        if ttft is not None and option.receives_kv:
            ttft *= SLO_SHARE_ADMISSION
        return service.max_utilisation(ttft_s=ttft, tpot_s=cls.tpot_slo_s)

    def with_options(self, options: Sequence[PoolOption]) -> Instance:
        from dataclasses import replace

        return replace(self, options=tuple(options))

    def with_slo(self, *, ttft_s: float | None = None, tpot_s: float | None = None) -> Instance:
        """The same instance with every class's TTFT and/or TPOT target replaced (costs do not depend on them)."""
        from dataclasses import replace

        classes = tuple(replace(c, ttft_slo_s=ttft_s if ttft_s is not None else c.ttft_slo_s,
                                tpot_slo_s=tpot_s if tpot_s is not None else c.tpot_slo_s) for c in self.classes)
        return replace(self, classes=classes)


#: The share of a class's TTFT target a request may wait for a decode slot: decode pools are sized for it. The
#: rest is the prefill's and the KV hand-off's, split per flow: a prefill pool runs at the utilisation where its
#: TTFT leaves room for the hand-off to the decode type it hands to (`Instance.kv_targets`), so a 1 ms hand-off
#: leaves the prefill 89.9% of the target and a 50 ms one 85% of a 1 s target.
SLO_SHARE_ADMISSION = 0.1


#: [Note: fleet design] A fixed fleet gives each device type's count; fleet design (``count: any`` in the
#: cluster file) lets the solver choose it. Such a type's inventory is the most the budget could buy, the
#: power budget over one device's TDP and the cost budget over its price (whichever is smaller), so the
#: inventory never binds before the budget does and the solver deploys what pays. The claim that mixing
#: silicon beats one architecture at equal power is a fleet-design claim; the iso-power baselines are the
#: same question asked of one type at a time.


@dataclass(frozen=True, slots=True)
class Objective:
    """The first-stage objective: its name, the value reached and the proven bound, in `quantity` units."""

    name: str
    value: float
    bound: float
    #: How far the bound was widened for the options pruned as near-twins ([Note: pruning tolerance] in
    #: `compiler.place.candidates`): the unpruned optimum is at most a factor 1 + `pruning` above the optimum
    #: over the options kept, so a solve ``optimal`` over those reports a gap of about this much. 0: none.
    pruning: float = 0.0

    @property
    def quantity(self) -> str:
        return OBJECTIVE_QUANTITIES[self.name]

    @property
    def sense(self) -> str:
        """``max`` when a larger value is better, ``min`` otherwise."""
        return OBJECTIVE_SENSE[self.name]

    @property
    def gap(self) -> float:
        """Relative distance between value and bound (0 when proven optimal over every option)."""
        return abs(self.bound - self.value) / max(abs(self.value), 1e-9) if self.value else 0.0

    @property
    def solver_gap(self) -> float:
        """The gap over the options the solver was given (the pruned ones): 0 when it proved their optimum."""
        return abs(self.bound / (1.0 + self.pruning) - self.value) / max(abs(self.value), 1e-9) if self.value else 0.0


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
    cost_per_hour: float | None = None  # dollars per hour of the deployed devices (None: some type has no price)
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

    def devices(self) -> dict[str, int]:
        """Devices deployed per device type (what a fleet-design solve bought), types sorted."""
        out: dict[str, int] = {}
        for o, n in self.used():
            for d, k in o.devices:
                out[d] = out.get(d, 0) + n * k
        return dict(sorted(out.items()))

    def output_tokens_per_s(self, classes: Sequence[ClassTarget]) -> float:
        """Output tokens per second: each class's requests/s times its mean output length."""
        lengths = {c.name: c.output_len for c in classes}
        return sum(rate * lengths[c] for c, rate in self.class_requests_per_s)

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

    def paths(self, classes: Sequence[ClassTarget]) -> tuple[tuple[float, tuple[str, ...]], ...]:
        """Output tokens/s of each way requests are served, by the device types on the way (sorted): colocated
        pools, and each KV flow from a prefill option to the decode pools of its type that decode its class."""
        lengths = {c.name: c.output_len for c in classes}
        by_key = {o.key: o for o in self.options}
        out: dict[tuple[str, ...], float] = {}
        for (c, key), rate in self.served:
            o = by_key[key]
            if o.kind == "colocated" and rate > 0:
                out[o.device_types] = out.get(o.device_types, 0.0) + rate * lengths[c]
        for (c, p_key, t), rate in self.flows:
            if rate <= 0:
                continue
            decoders = {d for (cc, k), r in self.served if cc == c and r > 0 and by_key[k].receives_kv
                        and by_key[k].kv_device == t for d in by_key[k].device_types}
            types = tuple(sorted(set(by_key[p_key].device_types) | {t} | decoders))
            out[types] = out.get(types, 0.0) + rate * lengths[c]
        return tuple(sorted((tokens, types) for types, tokens in out.items()))



#: [Note: baselines] What a plan is compared against, each answering a user's question, each solved under the
#: same cost model and the plan's objective (`compiler.place.baselines`), to the gap the plan's own solve
#: reached (exactly when the plan is proven optimal: both sides of a comparison are as good as proven; vendor
#: islands and deployable, which never beat the plan, within the analysis gap: [Note: today's baselines within
#: the analysis gap] in `compiler.place.baselines`):
#: ``iso-power:<device>`` (``iso-cost:<device>``): only that device type, as many as the power (cost) budget
#: buys, its count chosen by the solver ([Note: fleet design]); ``vendor-islands``: the same inventory, each
#: type serving alone side by side, no KV or activations crossing types; ``no-disaggregation``: the same
#: inventory with colocated pools only; ``greedy``: the same inventory filled by `compiler.place.greedy`.
#: A fixed-fleet plan can lose to an iso-power baseline (it may own few of the best type); it never loses to
#: vendor islands, no-disaggregation or greedy, whose placements it could choose too.
#: Where the plan leaves its power budget unspent (what is left buys not one more device), equal power is the
#: power the plan provisions, not the budget (``Baseline.posed_power_w``): 64 GPUs switched on under a budget
#: for 784 are compared with what 64 of another type serve. ``deployable`` (only for a plan that needs the
#: reference runtime): the same instance held to what public engines run (``compile --deployable``).
BASELINE_QUESTIONS: dict[str, str] = {
    "iso-power": "only {device}, as many as the power budget buys",
    "iso-cost": "only {device}, as many as the cost budget buys",
    "vendor-islands": "the same inventory, each device type serving alone (no traffic across types)",
    "no-disaggregation": "the same inventory, colocated pools only (no prefill/decode or attention/FFN split)",
    "greedy": "the same inventory, filled by the greedy heuristic",
    "deployable": "the same inventory, held to what public engines run (compile --deployable: KV only where a "
                  "connector joins two engines, no attention/FFN split, no drafter pool)",
}


@dataclass(frozen=True, slots=True)
class Baseline:
    """A comparison placement (`BASELINE_QUESTIONS`): its status and what it serves, draws and costs.

    ``status`` is ``optimal``, ``feasible``, ``infeasible`` or ``skipped`` (``note`` says why: the binding
    constraint families, or what is missing to pose the question). ``objective`` is the plan's objective
    solved on the baseline, in the same units.
    """

    name: str
    status: str
    requests_per_s: float = 0.0
    output_tokens_per_s: float = 0.0
    power_w: float = 0.0  # predicted mean draw
    provisioned_w: float = 0.0
    cost_per_hour: float | None = None
    objective: Objective | None = None
    devices: tuple[tuple[str, int], ...] = ()
    note: str = ""
    paths: tuple[tuple[float, tuple[str, ...]], ...] = ()  # output tokens/s by device types (`Solution.paths`)
    posed_power_w: float | None = None  # iso-power posed at the plan's provisioned power ([Note: baselines])

    @property
    def kind(self) -> str:
        """``iso-power``, ``iso-cost``, ``vendor-islands``, ``no-disaggregation``, ``greedy`` or ``deployable``."""
        return self.name.split(":", 1)[0]

    @property
    def question(self) -> str:
        device = self.name.split(":", 1)[1] if ":" in self.name else ""
        if self.posed_power_w is not None:
            return (f"only {device}, as many as the plan's provisioned {self.posed_power_w / 1e3:,.1f} kW buys (the "
                    "power budget does not bind)")
        return BASELINE_QUESTIONS[self.kind].format(device=device)

    @property
    def feasible(self) -> bool:
        return self.status in ("optimal", "feasible")


def gain(sense: str, plan: float | None, baseline: float | None) -> float | None:
    """How many times better the plan is than a baseline on one quantity: above 1 the plan is better, below 1
    the baseline is. None when either is missing or not positive (nothing to compare).

    >>> gain("max", 300.0, 200.0), gain("min", 100.0, 150.0), gain("max", 1.0, 0.0)
    (1.5, 1.5, None)
    """
    if plan is None or baseline is None or plan <= 0 or baseline <= 0:
        return None
    return plan / baseline if sense == "max" else baseline / plan


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """What moving one assumed efficiency factor does to the placement (`compiler.sensitivity`).

    ``factor`` is ``<family>.<field>`` (e.g. ``amd.mem_eff``), ``change`` the relative move (+0.2 or -0.2);
    ``objective_change`` is the relative move of the objective's value; ``pools_added`` and ``pools_removed``
    name the pools (kind:device:tp:pp) that appear or disappear; ``solve_gap`` is the relative gap the answer stands
    within (how far its objective may sit below the moved fleet's best): a re-solve's own, or that of the bound that
    answered the move without one ([Note: what-if bounds] in `compiler.place.what_if`).
    """

    factor: str
    change: float
    objective_change: float
    pools_added: tuple[str, ...] = ()
    pools_removed: tuple[str, ...] = ()
    solve_gap: float = 0.0

    @property
    def changes_pools(self) -> bool:
        return bool(self.pools_added or self.pools_removed)
