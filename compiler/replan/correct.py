"""Correction factors: each pool's measured latencies over the cost model's, fitted as a service-time scale, and
the pool options rescaled by them.

Before: an `Observation` (`compiler.replan.observe`) and the pool options costed for the measured workload.
After: a `PoolFactors` per pool of the plan, `Factors` per measured shape and per device type, the options of
each device type whose decode steps measured slow or fast costed again at the memory efficiency that explains
them (`at_measured_efficiency`), and options whose curves and capacities carry the factors (`corrected`).

[Note: correction as a service-time scale] A factor k is the scale of a pool's service time that reproduces
its measured mean latency at its measured load. If every step takes k times what the cost model says, a
replica serves 1/k of its modelled requests/s, so at the measured arrivals it runs at utilisation k·u (u: the
model's utilisation there), and a queue whose service times all scale by k has, at the same utilisation, every
wait and latency scaled by k (time rescaling). So the corrected latency at the measured load is k × L(k·u), and
k solves k × L(k·u) = measured: one bisection, the left side rising with k. L is a service time where the
engines measure one ([Note: service, not queue]). Prefill work sets TTFT and decode steps set TPOT: a TTFT
factor k_t scales the TTFT columns of a curve (and its TTFT parts), a TPOT factor k_d the TPOT columns, and a
replica's capacity scales by a request's service time: k_t for a prefill replica, k_d for a decode replica
(whose TTFT column, the wait for a decode slot, is decode service too), and p·k_t + (1 − p)·k_d for a colocated
one, p the prefill's share of an unloaded request (TTFT over TTFT + (output − 1) × TPOT, at the curve's first
point). For a colocated pool both factors are found together: one bisection on its capacity scale.

A measured shape (an option's key without its class or KV-target suffix: device, parallelism, batch) keeps
the factors its pools measured: what the cost model got wrong may be the shape's own (its batch, its
parallelism). Every other option on a measured device type takes the type's: its pools' factors combined in
log space, weighted by the inverse of their variance, TTFT from the pools that prefill and TPOT from those that
decode, after its decode error is carried to them as a memory efficiency ([Note: a TPOT factor carried as
memory efficiency]). A type with no measurement stays as modelled; an option spanning two types
(attention/FFN, a drafter elsewhere) takes no factor (only the re-costing). A pool whose queue grew over the
window, or whose modelled load is past its curve's end, is overloaded: its latencies measure a growing queue,
not its service, and give no factor; so is one whose load, scaled by the capacity its measured service times
imply, is past that end (the prediction there is the curve's last point, which no factor can match). A TTFT
factor fitted to the whole TTFT, queue included ([Note: service, not queue]), is kept and flagged instead.

[Note: a TPOT factor carried as memory efficiency] One service-time scale for every option of a device type
assumes that an error slows every shape's steps alike. It does not when the error is the device's memory
efficiency, the first suspect for a decode step: a step slows by its share of memory time, so a tp1 decode
step more than a tp2 or tp4 one (less weight per device, more fixed time), a colocated step less (its prompt
chunks are compute), and a long-context class (KV reads) more than a short one. With the engines' TPOT 1.3x
the prediction on the two H200 decode pools of the two-tier example (tests/replan/test_acceptance.py), the
H200's memory efficiency divided by 1.24 slows the tp1 decode shapes' steps 1.18-1.23x, the tp2 c256
colocated one's 1.07-1.11x and the tp4 shapes' 1.03-1.20x, where the type's factor charged every one 1.26x:
on the corrected costs the fresh optimum was 67.9 requests/s and is 73.6, the running placement 67.9 and
70.3 (a fresh compile at that efficiency: 73.6 and 70.4). So a device type whose decode side measured a TPOT
factor has its options costed again (`Recost`) with its memory efficiency divided by the number at which its
pools' TPOT factors, fitted against those options as above, are one (their inverse-variance-weighted log
mean zero; `at_measured_efficiency`; at most 1.0 as an efficiency). The factors are then fitted again against
the re-costed options and correct them as above: what is left (the TTFT's error, a shape's own) stays a
service-time scale. A pool that the re-costed model runs past its curve's end at the measured load is
overloaded there and gives no factor. The prefill's error stays a service-time scale: a prefill batch is
matmul time on every shape alike.

[Note: service, not queue] An engine's TTFT is its front end, its queue and its prefill. The queue grows
without bound as the utilisation nears one, so a small error in the modelled load, or a burst inside the
window, moves it far more than it moves the service: a factor fitted to the whole TTFT takes the queue's error
for slow service (on the CPU engines of examples/replan/cpu_replay.md: TTFT factors of 2.6-10x with standard
errors near 50%, and predicted gains of +124% to +737% that did not show). So the TTFT factor is fitted to the
prefill alone (the time-rescaling above holds for it: k × P(k·u)), against the model's prefill part ([Note: TTFT
parts] in `cost_models.load`), in the best form the snapshot has (`Estimate.basis`): ``prefill``, the prefill
histogram against the prefill part; ``ttft-queue``, TTFT less the queue (SGLang) against the mean TTFT less the
queue part; ``ttft``, the whole TTFT, when the snapshot has neither (or the options carry no parts): the old
fit, and the pool's note says it is queue-contaminated, with its standard error. TPOT is fitted to the
inter-token latency, which holds no queue. The queue is compared apart (`QueueCheck`): measured against the
queueing model's prediction at the measured load, as modelled and corrected; reported, never folded in.

[Note: predicted means] The engines' histograms give exact means (``_sum`` over ``_count``) but coarse
quantiles (vLLM's buckets are 1-2-5 per decade apart), so measured and predicted are compared as means. The
curves give the median and the SLO percentile N: a TPOT's mean is taken as its median (the step time at the
median occupancy; a Poisson occupancy's median sits at its mean), a TTFT's from a shifted exponential through
both (a fixed part plus an exponential wait): θ = (t_N − t_50) / (ln(1/(1 − N)) − ln 2), mean = t_50 + θ(1 − ln 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from compiler.ir.placement import ClassTarget
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.place.moves import base_key
from compiler.replan.observe import Latency, Observation, PoolMeasure

#: A queue that grew by more than this share of a pool's arrivals marks it overloaded.
OVERLOAD_BACKLOG_SHARE = 0.01
#: The range the bisection searches a scale in.
SCALE_RANGE = (1e-3, 1e3)


def ttft_mean_s(point, percentile: float) -> float:
    """A curve point's mean TTFT ([Note: predicted means]).

    >>> round(ttft_mean_s((0.5, 1.0, 1.0 + math.log(5), 0.0, 0.0), 0.9), 6)   # theta = 1: 1 + (1 - ln 2)
    1.306853
    """
    t50, tn = point[1], point[2]
    theta = max(tn - t50, 0.0) / (math.log(1 / (1 - percentile)) - math.log(2))
    return t50 + theta * (1 - math.log(2))


def tpot_mean_s(point, _percentile: float = 0.5) -> float:
    """A curve point's mean TPOT: its median ([Note: predicted means])."""
    return point[3]


#: What a factor's measured and predicted means are, by `Estimate.basis` ([Note: service, not queue]).
BASES = {"prefill": "prefill (admission to first token)", "ttft-queue": "TTFT less the queue wait",
         "ttft": "TTFT, queueing included", "tpot": "inter-token latency"}


@dataclass(frozen=True, slots=True)
class Estimate:
    """One latency of one pool at its measured load: measured mean, the model's prediction, the fitted factor
    (with its relative standard error and the requests it rests on), and the corrected prediction (the type's
    factors applied: `Factors`). Seconds; the two predictions are predictions. `basis` names the latency
    (`BASES`): a TTFT factor's is its service where the snapshot measured it ([Note: service, not queue])."""

    measured_s: float
    predicted_s: float
    factor: float
    rel_se: float
    samples: float
    corrected_s: float | None = None
    basis: str = "ttft"

    @property
    def ratio(self) -> float:
        """Measured over predicted, at the measured load (the factor before the utilisation feedback)."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else math.nan


@dataclass(frozen=True, slots=True)
class QueueCheck:
    """A pool's mean queue wait (the engine's queue histogram) against the queueing model's at the measured load:
    as modelled (`predicted_s`) and with the corrected service (`corrected_s`, at the corrected utilisation).
    Reported beside the factors, never folded into them ([Note: service, not queue]). Seconds; measured with its
    standard error and the requests it rests on; the two predictions are predictions."""

    measured_s: float
    se_s: float
    samples: float
    predicted_s: float
    corrected_s: float | None = None

    @property
    def ratio(self) -> float:
        """Measured over the corrected prediction (the modelled one before correction)."""
        reference = self.corrected_s if self.corrected_s is not None else self.predicted_s
        return self.measured_s / reference if reference > 0 else math.inf


@dataclass(frozen=True, slots=True)
class PoolFactors:
    """A pool's factors: TTFT, TPOT (None: not measured, or not fitted, `note` says why) and throughput
    (measured requests/s over the plan's share of the measured traffic: how the router's split compares); and
    its queue against the model's (`QueueCheck`; None where the snapshot has no queue histogram)."""

    pool: str
    shape: str
    device: str
    role: str
    utilisation: float  # the model's, at the measured load (prediction)
    ttft: Estimate | None
    tpot: Estimate | None
    throughput_ratio: float | None
    throughput_samples: float
    note: str = ""
    queue: QueueCheck | None = None


@dataclass(frozen=True, slots=True)
class Factors:
    """Factors of one replica shape (``shape``) or of a whole device type (``shape`` empty), combined over the
    pools that measured them; 1.0 with no samples where none did. ``mem_eff_divisor``: the device type's memory
    efficiency was divided by it before the factors were fitted, and the options they correct are costed so
    ([Note: a TPOT factor carried as memory efficiency]); 1.0: as modelled."""

    device: str
    shape: str = ""
    ttft: float = 1.0
    ttft_rel_se: float = 0.0
    ttft_samples: float = 0.0
    tpot: float = 1.0
    tpot_rel_se: float = 0.0
    tpot_samples: float = 0.0
    mem_eff_divisor: float = 1.0

    def moved(self, sigmas: float) -> Factors:
        """Both factors moved by `sigmas` of their relative standard errors (the gain's uncertainty)."""
        return replace(self, ttft=self.ttft * math.exp(sigmas * self.ttft_rel_se),
                       tpot=self.tpot * math.exp(sigmas * self.tpot_rel_se))


def _prefill_share(service: ClassService, output_len: float) -> float:
    """p: the prefill's share of an unloaded request's time on a colocated replica."""
    first = service.curve[0]
    total = first[1] + max(output_len - 1, 0.0) * first[3]
    return first[1] / total if total > 0 else 0.5


def capacity_scale(o: PoolOption, cls: str, output_len: float, k_ttft: float, k_tpot: float) -> float:
    if o.kind == "prefill":
        return k_ttft
    if o.kind == "colocated":
        p = _prefill_share(o.service(cls), output_len)
        return p * k_ttft + (1 - p) * k_tpot
    return k_tpot


def _mean_s(s: ClassService, u: float, percentile: float, quantity: str) -> float:
    """One class's mean `quantity` at utilisation `u`: a `BASES` key or ``queue``."""
    if quantity == "tpot":
        return tpot_mean_s(s.at(u), percentile)
    if quantity == "ttft":
        return ttft_mean_s(s.at(u), percentile)
    queue_s, prefill_s = s.parts_at(u)
    if quantity == "queue":
        return queue_s
    if quantity == "prefill":
        return prefill_s
    return ttft_mean_s(s.at(u), percentile) - queue_s  # "ttft-queue"


def _predicted(o: PoolOption, arrivals: dict[str, float], targets: dict[str, ClassTarget], u: float,
               quantity: str) -> float:
    """The mean latency the model predicts at utilisation `u`: TTFT and its parts per request, TPOT per output
    token after the first (the engines' inter-token latency histogram counts tokens), so each class weighs by
    its arrivals, times its output tokens less one for TPOT."""
    weights = {c: r * (max(targets[c].output_len - 1, 1.0) if quantity == "tpot" else 1.0)
               for c, r in arrivals.items()}
    total = sum(weights.values())
    return sum(w * _mean_s(o.service(c), u, targets[c].percentile, quantity) for c, w in weights.items()) / total


def ttft_basis(m: PoolMeasure, o: PoolOption, arrivals: dict[str, float], targets: dict[str, ClassTarget],
               u: float) -> tuple[str, Latency | None]:
    """What the TTFT factor is fitted to, and its measurement ([Note: service, not queue]): the pool's measured
    prefill where its snapshot has one and the options carry the model's parts (positive at `u`), else TTFT."""
    if m.prefill is not None and all(o.service(c).parts for c in arrivals):
        basis = m.prefill_source
        if _predicted(o, arrivals, targets, u, basis) > 0:
            return basis, m.prefill
    return "ttft", m.ttft


def _utilisation(o: PoolOption, arrivals: dict[str, float], replicas: int) -> float:
    return sum(r / o.service(c).rate_per_s for c, r in arrivals.items()) / max(replicas, 1)


def fit_pool(m: PoolMeasure, o: PoolOption, targets: dict[str, ClassTarget], share_of_traffic: float | None,
             total_per_s: float) -> PoolFactors:
    """The factors of one pool ([Note: correction as a service-time scale])."""
    arrivals = {c: r for c, r in m.arrivals_per_s if o.service(c) is not None and c in targets}
    ratio = None
    if share_of_traffic:
        ratio = m.requests_per_s / (share_of_traffic * total_per_s) if total_per_s > 0 else None
    base = dict(pool=m.pool, shape=base_key(m.option), device=m.device, role=m.role, throughput_ratio=ratio,
                throughput_samples=m.completed)
    if not arrivals:
        return PoolFactors(utilisation=0.0, ttft=None, tpot=None, note="no requests recognised", **base)
    u = _utilisation(o, arrivals, m.replicas)
    end = min(o.service(c).curve[-1][0] for c in arrivals)
    if m.backlog_per_s > OVERLOAD_BACKLOG_SHARE * m.requests_per_s or u >= end:
        return PoolFactors(utilisation=u, ttft=None, tpot=None, note=(
            f"overloaded (queue grew {m.backlog_per_s:.3g} req/s; modelled utilisation {u:.2f}): its latencies "
            "measure the queue, not the service; no factor"), **base)
    basis, first = ttft_basis(m, o, arrivals, targets, u)
    kinds = {"ttft": basis, "tpot": "tpot"}
    measured = {"ttft": first if o.kind != "decode" else None, "tpot": m.tpot if o.kind != "prefill" else None}
    measured = {q: v for q, v in measured.items() if v is not None and v.mean_s > 0}
    queue = None
    if m.queue is not None and o.kind != "decode" and all(o.service(c).parts for c in arrivals):
        queue = QueueCheck(m.queue.mean_s, m.queue.se_s, m.queue.samples, _predicted(o, arrivals, targets, u, "queue"))
    base["queue"] = queue
    if not measured:
        return PoolFactors(utilisation=u, ttft=None, tpot=None, note="no latency histograms", **base)
    weights = {c: r / o.service(c).rate_per_s for c, r in arrivals.items()}  # each class's share of the load
    load = sum(weights.values())

    def factors_at(s: float) -> dict[str, float]:
        k = {q: v.mean_s / _predicted(o, arrivals, targets, s * u, kinds[q]) for q, v in measured.items()}
        one = next(iter(k.values()))  # a colocated pool measured on one side only: one scale for both
        return {"ttft": k.get("ttft", one), "tpot": k.get("tpot", one)}

    def excess(s: float) -> float:  # s minus the capacity scale its factors imply: rises with s
        k = factors_at(s)
        implied = sum(w * capacity_scale(o, c, targets[c].output_len, k["ttft"], k["tpot"])
                      for c, w in weights.items()) / load
        return math.log(s) - math.log(implied)

    s = _bisect(excess)
    contaminated = "ttft" in measured and basis == "ttft"  # a factor that holds the queue: its note says so
    if s * u >= end and not contaminated:  # at the speed it measured, its load is past the curve's end
        return PoolFactors(utilisation=u, ttft=None, tpot=None, note=(
            f"overloaded at the speed it measured (modelled utilisation {u:.2f} x capacity scale {s:.2f} is past "
            f"the curve's end, {end:.2f}): its latencies measure the queue, not the service; no factor"), **base)
    k = factors_at(s)
    out = {q: Estimate(v.mean_s, _predicted(o, arrivals, targets, u, kinds[q]), k[q], v.se_s / v.mean_s, v.samples,
                       basis=kinds[q]) for q, v in measured.items()}
    note = ""
    if contaminated:
        missing = "no prefill histogram" + ("" if m.queue is not None else " nor queue histogram") \
            if m.prefill is None else "no TTFT parts in the cost model's options"
        note = (f"TTFT factor fitted to TTFT, queueing included ({missing}): queue-contaminated, "
                f"s.e. {out['ttft'].rel_se:.0%}")
    return PoolFactors(utilisation=u, ttft=out.get("ttft"), tpot=out.get("tpot"), note=note, **base)


def _bisect(excess) -> float:
    """The root of an increasing `excess` in `SCALE_RANGE`, in log space (clamped at the range's ends)."""
    lo, hi = (math.log(v) for v in SCALE_RANGE)
    if excess(math.exp(lo)) >= 0:
        return math.exp(lo)
    if excess(math.exp(hi)) <= 0:
        return math.exp(hi)
    for _ in range(100):
        mid = (lo + hi) / 2
        if excess(math.exp(mid)) > 0:
            hi = mid
        else:
            lo = mid
    return math.exp((lo + hi) / 2)


def fit(obs: Observation, plan, options: list[PoolOption], classes: tuple[ClassTarget, ...]
        ) -> tuple[tuple[PoolFactors, ...], tuple[Factors, ...]]:
    """Every pool's factors and every measured device type's, combined ([Note: correction as a service-time
    scale]); `options` are costed for the measured workload, `plan` is the running `Plan`."""
    by_shape = {base_key(o.key): o for o in options}
    targets = {c.name: c for c in classes}
    planned = plan.predicted.requests_per_s
    out = []
    for m in obs.pools:
        o = by_shape.get(base_key(m.option))
        if o is None or len(o.device_types) != 1:
            out.append(PoolFactors(m.pool, base_key(m.option), m.device, m.role, 0.0, None, None, None, m.completed,
                                   note="its shape spans two device types: not corrected" if o is not None else
                                   "no option of its shape for the measured workload (its batch no longer fits): "
                                   "not corrected"))
            continue
        share = next((p.predicted_requests_per_s for p in plan.pools if p.name == m.pool), 0.0) / planned \
            if planned > 0 else None
        out.append(fit_pool(m, o, targets, share, obs.requests_per_s))
    return tuple(out), combine(out)


def combine(pools) -> tuple[Factors, ...]:
    """Per measured shape, then per device type: the pools' factors in log space, weighted by the inverse of
    their variance."""
    out = []
    groups = sorted({(p.device, p.shape) for p in pools}) + sorted({(p.device, "") for p in pools})
    for t, shape in groups:
        fields = {}
        for q in ("ttft", "tpot"):
            est = [getattr(p, q) for p in pools if p.device == t and shape in ("", p.shape) and getattr(p, q)]
            if not est:
                continue
            w = [1 / max(e.rel_se, MIN_REL_SE) ** 2 for e in est]
            fields[q] = math.exp(sum(wi * math.log(e.factor) for wi, e in zip(w, est)) / sum(w))
            fields[f"{q}_rel_se"] = 1 / math.sqrt(sum(w))
            fields[f"{q}_samples"] = sum(e.samples for e in est)
        if fields:
            out.append(Factors(t, shape, **fields))
    return tuple(out)


#: The least relative standard error a factor is given: a histogram's buckets bound what its mean can tell.
MIN_REL_SE = 1e-3
#: The range the memory efficiency's divisor is searched in (what lies beyond stays in the factors), and how
#: close to one the re-costed TPOT factor must come (or the search's steps, at most).
DIVISOR_RANGE = (0.25, 4.0)
DIVISOR_TOLERANCE = 1e-3
DIVISOR_STEPS = 16

#: A device type's options costed again with its memory efficiency divided by a number (at most 1.0 as an
#: efficiency): what the replan binds to its prepared compile (`compiler.replan.replan`).
Recost = Callable[[str, float], Sequence[PoolOption]]


def at_measured_efficiency(obs: Observation, plan, options: Sequence[PoolOption], classes: tuple[ClassTarget, ...],
                           factors: tuple[Factors, ...], recost: Recost
                           ) -> tuple[list[PoolOption], tuple[Factors, ...]]:
    """`options` with each device type whose decode side measured a TPOT factor (`factors`, fitted against
    `options`) costed again at the memory efficiency that leaves its pools none, and the shapes' and types'
    factors fitted again against them ([Note: a TPOT factor carried as memory efficiency]).

    The options keep their order; a re-costed key takes its old place, a new one comes last."""
    out = list(options)
    divisors: dict[str, float] = {}
    for t in sorted(f.device for f in factors if not f.shape and f.tpot_samples):
        memo: dict[float, list[PoolOption]] = {}

        def costed(divisor: float, t: str = t) -> list[PoolOption]:
            if divisor not in memo:
                memo[divisor] = _replaced(out, t, recost(t, divisor))
            return memo[divisor]

        def log_factor(log_divisor: float, t: str = t) -> float | None:
            _pools, refit = fit(obs, plan, costed(math.exp(log_divisor)), classes)
            f = next((f for f in refit if f.device == t and not f.shape and f.tpot_samples), None)
            return math.log(f.tpot) if f is not None else None

        k = next(f.tpot for f in factors if f.device == t and not f.shape)
        divisor = math.exp(_root(log_factor, math.log(k)))
        if divisor != 1.0:
            divisors[t] = divisor
            out = costed(divisor)
    _pools, refit = fit(obs, plan, out, classes)
    return out, tuple(replace(f, mem_eff_divisor=divisors.get(f.device, 1.0)) for f in refit)


def _replaced(options: Sequence[PoolOption], device: str, recosted: Sequence[PoolOption]) -> list[PoolOption]:
    """`options` with those on `device` replaced by `recosted` (by key, in place; new keys last)."""
    fresh = {o.key: o for o in recosted}
    out = [fresh.pop(o.key, None) if device in o.device_types else o for o in options]
    return [o for o in out if o is not None] + list(fresh.values())


def _root(log_factor, at_one: float) -> float:
    """The log divisor in `DIVISOR_RANGE` at which `log_factor`, decreasing, is zero; None counts as below zero
    (every pool overloaded: the model there too slow). `at_one` is its value at a divisor of one (the factors as
    fitted). False position with the Illinois step, bisection while the slow side is None; the range's end
    where the root lies beyond it."""
    if abs(at_one) <= DIVISOR_TOLERANCE:
        return 0.0
    lo, hi = (math.log(v) for v in DIVISOR_RANGE)
    end = hi if at_one > 0 else lo
    at_end = log_factor(end)
    if (at_end is None or at_end < 0) == (at_one < 0):
        return end
    (fast, f_fast), (slow, f_slow) = ((0.0, at_one), (end, at_end)) if at_one > 0 else ((end, at_end), (0.0, at_one))
    last = 0
    for _ in range(DIVISOR_STEPS):
        x = (fast + slow) / 2 if f_slow is None else (fast * f_slow - slow * f_fast) / (f_slow - f_fast)
        fx = log_factor(x)
        if fx is not None and abs(fx) <= DIVISOR_TOLERANCE:
            return x
        if fx is not None and fx > 0:
            fast, f_fast = x, fx
            if last == 1 and f_slow is not None:
                f_slow /= 2
            last = 1
        else:
            slow, f_slow = x, fx
            if last == -1:
                f_fast /= 2
            last = -1
    return (fast + slow) / 2 if f_slow is None else (fast * f_slow - slow * f_fast) / (f_slow - f_fast)


def corrected_option(o: PoolOption, f: Factors, output_lens: dict[str, float]) -> PoolOption:
    """`o` with `f`'s factors: its TTFT and TPOT columns and its capacity scaled ([Note: correction as a
    service-time scale])."""
    k_ttft = f.tpot if o.kind == "decode" else f.ttft  # a decode replica's TTFT is the wait for decode service
    services = []
    for s in o.classes:
        scale = capacity_scale(o, s.name, output_lens.get(s.name, 1.0), f.ttft, f.tpot)
        curve = tuple((u, t50 * k_ttft, tn * k_ttft, p50 * f.tpot, pn * f.tpot) for u, t50, tn, p50, pn in s.curve)
        parts = tuple((q * k_ttft, pf * k_ttft) for q, pf in s.parts)
        services.append(ClassService(s.name, s.rate_per_s / scale, curve, parts))
    return replace(o, classes=tuple(services))


def corrected(options, factors: tuple[Factors, ...], classes: tuple[ClassTarget, ...]) -> list[PoolOption]:
    """Every option of a measured shape corrected by its own factors, every other option on one measured device
    type by the type's; the rest as they are."""
    by_type = {f.device: f for f in factors if not f.shape}
    by_shape = {f.shape: f for f in factors if f.shape}
    lens = {c.name: c.output_len for c in classes}
    out = []
    for o in options:
        f = by_shape.get(base_key(o.key)) or (by_type.get(o.device_types[0]) if len(o.device_types) == 1 else None)
        out.append(corrected_option(o, _filled(f, by_type.get(f.device)) if f is not None and f.shape else f, lens)
                   if f is not None and len(o.device_types) == 1 else o)
    return out


def _filled(shape: Factors, device: Factors | None) -> Factors:
    """A shape's factors, with its type's where the shape measured one side only."""
    if device is None:
        return shape
    return replace(shape, **{f"{q}{x}": getattr(device, f"{q}{x}") for q in ("ttft", "tpot") if not
                             getattr(shape, f"{q}_samples") for x in ("", "_rel_se", "_samples")})


def with_corrected_predictions(pools: tuple[PoolFactors, ...], obs: Observation, options: list[PoolOption],
                               plan, classes: tuple[ClassTarget, ...]) -> tuple[PoolFactors, ...]:
    """Each pool's estimates with the corrected prediction at its measured load: the corrected option's mean
    latency at its corrected utilisation (what the re-solve believes the pool does now)."""
    targets = {c.name: c for c in classes}
    shapes = {base_key(o.key): o for o in options}
    out = []
    for f in pools:
        m = obs.pool(f.pool)
        o = shapes.get(base_key(m.option)) if m is not None else None
        if o is None:
            out.append(f)
            continue
        arrivals = {c: r for c, r in m.arrivals_per_s if o.service(c) is not None and c in targets}
        if not arrivals:
            out.append(f)
            continue
        u = _utilisation(o, arrivals, m.replicas)
        updates = {q: replace(getattr(f, q), corrected_s=_predicted(o, arrivals, targets, u, getattr(f, q).basis))
                   for q in ("ttft", "tpot") if getattr(f, q) is not None}
        if f.queue is not None and all(o.service(c).parts for c in arrivals):
            updates["queue"] = replace(f.queue, corrected_s=_predicted(o, arrivals, targets, u, "queue"))
        out.append(replace(f, **updates))
    return tuple(out)

