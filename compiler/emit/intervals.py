"""The plan's intervals: how far each pool's, class's, total's and baseline gain's predictions may be off.

Every option carries the 80% spreads of its device type and engine (`PoolOption.spreads`, [Note: prediction
intervals] in compiler/ir/prediction.py). From them:

- a latency on a pool is its value times its metric's spread (TTFT, TPOT); a disaggregated class's TTFT is its
  prefill's TTFT times the prefill pool's spread, plus the KV hand-off (link physics, not fitted), plus the
  wait for a decode slot times the decode pool's TPOT spread; a class's interval is the widest over its paths;
- [Note: one factor per device type] the throughput and the gains over baselines treat each device type's
  predictions as off by one common factor (they come from one derate and one engine), drawn log-normal with
  its spread's ends as its 10th and 90th percentiles, each type independent of the others (`draws`,
  seeded): each way requests are served (a colocated pool, a prefill pool's KV flow to its decode pools)
  sustains its tokens/s over the slowest factor on its way (`Solution.paths`), and a baseline's ways the
  same. The 10th to 90th percentile of the plan's total over the draws is its interval, and of the plan's
  gain over a baseline, the gain's (a baseline on the plan's own types shares their factors, so its gain's
  interval is narrow however wide theirs are). Each type's spread is the widest of the metrics its pools'
  roles rest on (prefill: TTFT, decode: TPOT, colocated: the whole request).

A gain whose interval holds 1 is within the model's error: neither side is known to be better.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from compiler.ir.placement import Baseline, Instance, Solution
from compiler.ir.prediction import COVERAGE, Z90, Interval, Spread
from cost_models.spreads import widest

#: The metric whose spread bounds what a pool of each role sustains.
ROLE_METRIC = {"colocated": "e2e", "prefill": "ttft", "decode": "tpot", "decode-af": "tpot"}


@dataclass(frozen=True, slots=True)
class PathInterval:
    """A class's latency intervals at its SLO percentile, the widest over its paths."""

    ttft: Interval
    tpot: Interval


def type_spreads(inst: Instance, sol: Solution) -> dict[str, Spread]:
    """Each device type's throughput spread: the widest of the metrics its used pools' roles rest on; a type the
    plan does not use, its options' whole-request spread."""
    roles: dict[str, list[Spread]] = {}
    for o, _n in sol.used():
        for t in o.device_types:
            roles.setdefault(t, []).append(o.spread(ROLE_METRIC[o.kind]))
    out = {t: widest(*s) for t, s in roles.items()}
    for o in inst.options:
        for t in o.device_types:
            out.setdefault(t, o.spread("e2e"))
    return out


def _slowest(types: tuple[str, ...], factors: dict[str, float]) -> float:
    return max((factors.get(t, 1.0) for t in types), default=1.0)


def path_throughput(paths: tuple[tuple[float, tuple[str, ...]], ...], factors: dict[str, float]) -> float:
    """Output tokens/s of `paths` (`Solution.paths`) with each type's predictions off by `factors` ([Note: one
    factor per device type]): each path at its slowest type's."""
    return sum(tokens / f if (f := _slowest(types, factors)) > 0 else math.inf for tokens, types in paths)


#: How many draws of the device types' factors the intervals of totals and gains rest on (seeded: the same plan
#: gets the same intervals, [Note: one factor per device type]).
DRAWS = 1000
SEED = 0


def draws(spreads: dict[str, Spread]) -> list[dict[str, float]] | None:
    """`DRAWS` draws of every type's factor: log-normal with its spread's 10th and 90th percentiles at the ends,
    each type independent of the others; None where some type's spread is unbounded."""
    if any(not s.bounded for s in spreads.values()):
        return None
    rng = random.Random(SEED)
    types = sorted(spreads)
    params = [((math.log(spreads[t].lo) + math.log(spreads[t].hi)) / 2,
               (math.log(spreads[t].hi) - math.log(spreads[t].lo)) / (2 * Z90)) for t in types]
    return [{t: math.exp(rng.gauss(mu, sigma)) for t, (mu, sigma) in zip(types, params)} for _ in range(DRAWS)]


def _percentiles(ratios: list[float]) -> Interval:
    """The 10th to 90th percentile of `ratios` to a central prediction, widened to hold it (ratio 1)."""
    ordered = sorted(ratios)
    n = len(ordered) - 1
    return Interval(min(ordered[round(n * (1 - COVERAGE) / 2)], 1.0), max(ordered[round(n * (1 + COVERAGE) / 2)], 1.0))


def throughput_interval(inst: Instance, sol: Solution, spreads: dict[str, Spread],
                        sampled: list[dict[str, float]] | None) -> Interval:
    """The 80% interval of the plan's output tokens/s over `sampled` factors (`draws`). A workload at a given
    arrival rate serves that rate whichever factors hold: its interval is the rate."""
    value = sol.output_tokens_per_s(inst.classes)
    if inst.arrival_rate_per_s is not None:
        return Interval(value, value)
    return paths_interval(sol.paths(inst.classes), sampled, value)


def paths_interval(paths: tuple[tuple[float, tuple[str, ...]], ...], sampled: list[dict[str, float]] | None,
                   value: float) -> Interval:
    """The 80% interval of `value`, the output tokens/s of `paths`, over `sampled` factors (None: unbounded)."""
    if sampled is None:
        return Interval(0.0, math.inf)
    central = path_throughput(paths, {})
    if central <= 0:
        return Interval(value, value)
    return _percentiles([path_throughput(paths, f) / central for f in sampled]).scaled(value)


def gain_interval(inst: Instance, sol: Solution, b: Baseline, sampled: list[dict[str, float]] | None,
                  gain: float | None) -> Interval | None:
    """The 80% interval of the plan's gain over baseline `b` over `sampled` factors ([Note: one factor per device
    type]); None where there is no gain to bound."""
    if gain is None or not b.feasible or not b.paths:
        return None
    if sampled is None:
        return Interval(0.0, math.inf)
    mine = sol.paths(inst.classes)
    plan_at_one, base_at_one = path_throughput(mine, {}), path_throughput(b.paths, {})
    if plan_at_one <= 0 or base_at_one <= 0:
        return None
    return _percentiles([(path_throughput(mine, f) / plan_at_one) / (path_throughput(b.paths, f) / base_at_one)
                         for f in sampled]).scaled(gain)


def within_error(interval: Interval | None) -> bool:
    """Whether a gain's interval holds 1: the model cannot tell the plan from the baseline."""
    return interval is not None and interval.lo < 1.0 < interval.hi
