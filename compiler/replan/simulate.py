"""A simulation of a running deployment that writes what its engines would expose: Prometheus text scrapes,
window by window, and its SLO attainment and power. What `gimletc replan` is tested on, and what
`tools/replay.py` replays a trace through.

Before: a `Plan` (its pools, replicas and each class's routing, from the pools' predicted per-class rates),
the pool options costed for the traffic's true lengths (by shape), the classes (`SimClass`) and, per window,
the requests/s of each class and how the deployment truly behaves against the cost model (`Truth`). After: a
`Deployment` whose `step` advances one window and whose `scrape` returns the engines' cumulative metrics.

The model, stated (a fluid model with sampled histograms, not a discrete-event simulation):
- Traffic: each class's requests split over the pools as the plan routes them (each pool's predicted share of
  the class, where it enters and where it decodes). Counts per window are Poisson.
- A pool's true service is the cost model's scaled by its device type's `Truth.service_scale` (the rescaled
  queue of [Note: correction as a service-time scale] in `compiler.replan.correct`): at utilisation u (of
  the true capacity) its latencies are the curve's at u times the scale; `Truth.latency_scale` multiplies a
  pool's latencies on top (at the modelled load: "TPOT measured 1.3x the prediction"); `Truth.noise` moves each
  pool's latencies and each class's rate by a uniform factor in [1 - noise, 1 + noise] per window.
- Past a utilisation of 1 a pool is overloaded: it completes what its capacity allows, its queue grows by
  the rest, its latencies are `OVERLOAD_LATENCY` times the curve's last point and none of its requests meet
  their SLO.
- Distributions (for histograms and SLO attainment): lengths uniform (`compiler.replan.observe.length_support`,
  the spread class recognition assumes); TTFT a shifted exponential through the curve's median
  and percentile ([Note: predicted means]); TPOT normal through the same two. Where the option carries the
  TTFT's parts ([Note: TTFT parts] in `cost_models.load`), the engines also export their queue wait
  (exponential, of the queue part's mean) and prefill (normal, of the prefill part's mean, sd a tenth of it),
  scaled as the TTFT is; ``service_histograms=False`` leaves both out (an engine that exports TTFT alone). A
  disaggregated request meets its TTFT target when its prefill does within the target less the decode pool's mean wait for a slot (the KV
  hand-off is left out).
- Power: each pool's predicted draw at its true load (`cost_models.power.drawn_w`).
Deterministic for a seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

from compiler.place.moves import base_key
from compiler.replan.correct import capacity_scale
from compiler.replan.routes import pool_routes
from compiler.replan.observe import length_support
from cost_models.power import drawn_w

#: Latency of an overloaded pool, as a multiple of its curve's last point (a queue that grows: any large number).
OVERLOAD_LATENCY = 10.0
PROMPT_BUCKETS = tuple(float(m * 10 ** e) for e in range(7) for m in (1, 2, 5))
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0)
METRICS = {  # quantity -> (vLLM metric name, buckets)
    "prompt_len": ("vllm:request_prompt_tokens", PROMPT_BUCKETS),
    "output_len": ("vllm:request_generation_tokens", PROMPT_BUCKETS),
    "ttft_s": ("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
    "tpot_s": ("vllm:inter_token_latency_seconds", TPOT_BUCKETS),
    "queue_s": ("vllm:request_queue_time_seconds", TTFT_BUCKETS),
    "prefill_s": ("vllm:request_prefill_time_seconds", TTFT_BUCKETS),
}
#: The spread of a simulated prefill around its mean (a share of it).
PREFILL_SPREAD = 0.1


@dataclass(frozen=True, slots=True)
class SimClass:
    """A request class as the traffic truly is: lengths and its SLO (seconds; None: no target)."""

    name: str
    input_mean: float
    input_max: int
    output_mean: float
    output_max: int
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    percentile: float = 0.9


@dataclass(frozen=True, slots=True)
class Truth:
    """How the deployment behaves against the cost model (see the module docstring)."""

    service_scale: tuple[tuple[str, float, float], ...] = ()  # (device type, TTFT scale, TPOT scale)
    latency_scale: tuple[tuple[str, float, float], ...] = ()  # (pool, TTFT multiple, TPOT multiple)
    noise: float = 0.0

    def scales(self, device: str) -> tuple[float, float]:
        return next(((t, d) for dev, t, d in self.service_scale if dev == device), (1.0, 1.0))

    def multiples(self, pool: str) -> tuple[float, float]:
        return next(((t, d) for p, t, d in self.latency_scale if p == pool), (1.0, 1.0))


@dataclass(frozen=True, slots=True)
class WindowStats:
    """One simulated window: per class, requests arrived and the share that met both SLO targets; the
    deployment's mean draw; the pools overloaded."""

    seconds: float
    arrived: tuple[tuple[str, float], ...]
    attainment: tuple[tuple[str, float], ...]
    power_w: float
    overloaded: tuple[str, ...]

    @property
    def slo_attainment(self) -> float:
        """Over all requests of the window."""
        total = sum(n for _c, n in self.arrived)
        att = dict(self.attainment)
        return sum(n * att[c] for c, n in self.arrived) / total if total else 1.0


@dataclass
class _Hist:
    buckets: tuple[float, ...]
    counts: list = field(default_factory=list)  # per bucket (+inf last), not cumulative
    total: float = 0.0
    n: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0.0] * (len(self.buckets) + 1)

    def add(self, rng, n: int, cdf, mean: float, sd: float) -> None:
        if n <= 0:
            return
        edges = [cdf(b) for b in self.buckets]
        probs = [max(b - a, 0.0) for a, b in zip([0.0, *edges], [*edges, 1.0])]
        s = sum(probs)
        for i, k in enumerate(rng.multinomial(n, [p / s for p in probs])):
            self.counts[i] += int(k)
        self.total += n * mean + (rng.normal(0.0, sd * math.sqrt(n)) if sd > 0 else 0.0)
        self.total = max(self.total, 0.0)
        self.n += n


def _uniform_cdf(lo: float, hi: float):
    return lambda x: 0.0 if x < lo else 1.0 if x >= hi else (x - lo) / (hi - lo)


def _shifted_exp(point, percentile: float, scale: float) -> tuple[float, float]:
    """(fixed part, exponential mean) of a TTFT through the curve point's median and percentile, scaled."""
    t50, tn = point[1] * scale, point[2] * scale
    theta = max(tn - t50, 0.0) / (math.log(1 / (1 - percentile)) - math.log(2))
    a = t50 - theta * math.log(2)
    if a < 0:
        return 0.0, max(t50 / math.log(2), 1e-12)
    return a, theta


def _exp_cdf(a: float, theta: float):
    if theta <= 0:
        return lambda x: 1.0 if x >= a else 0.0
    return lambda x: 0.0 if x < a else 1.0 - math.exp(-(x - a) / theta)


def _normal(point, percentile: float, scale: float) -> tuple[float, float]:
    mid, high = point[3] * scale, point[4] * scale
    return mid, max(high - mid, 0.0) / NormalDist().inv_cdf(percentile)


def _normal_cdf(mu: float, sd: float):
    if sd <= 0:
        return lambda x: 1.0 if x >= mu else 0.0
    dist = NormalDist(mu, sd)
    return dist.cdf


class Deployment:
    """A simulated deployment of `plan`: `step` one window, `scrape` its metrics (module docstring)."""

    def __init__(self, plan, options: dict, classes: list[SimClass], *, seed: int = 0, start_s: float = 1.0e6,
                 service_histograms: bool = True):
        import numpy as np

        self.rng = np.random.default_rng(seed)
        self.service_histograms = service_histograms
        self.classes = {c.name: c for c in classes}
        self.options = options  # shape (`base_key`) -> PoolOption costed for the true lengths
        self.time_s = start_s
        self.hist: dict[tuple[str, str], _Hist] = {}
        self.counters: dict[tuple[str, str], float] = {}
        self.gauges: dict[tuple[str, str], float] = {}
        self.use(plan)

    def use(self, plan) -> None:
        """Run `plan` from now on (a replan applied); its pools' metrics start afresh."""
        missing = sorted({base_key(p.option) for p in plan.pools} - set(self.options))
        if missing:
            raise ValueError(f"no costed option for shapes {missing}: cost the simulation's options for this plan")
        self.plan = plan
        # the model its engines serve, which vLLM puts on every metric as ``model_name`` (a service's name)
        launched = [p.launch.served_model_name for p in plan.pools if p.launch is not None]
        self.model = launched[0] if launched else plan.model
        self.hist = {(q, p.name): _Hist(buckets) for q, (_name, buckets) in METRICS.items() for p in plan.pools
                     if self.service_histograms or q not in ("queue_s", "prefill_s")}
        self.counters = {("requests", p.name): 0.0 for p in plan.pools}
        self.gauges = {(q, p.name): 0.0 for q in ("waiting", "running") for p in plan.pools}
        self.routes = pool_routes(plan)

    def step(self, rates: dict[str, float], seconds: float, truth: Truth = Truth()) -> WindowStats:
        """Advance `seconds` with each class arriving at `rates` (requests/s)."""
        rng, noise = self.rng, truth.noise
        rates = {c: r * (1 + rng.uniform(-noise, noise)) if noise else r for c, r in sorted(rates.items())}
        entries: dict[str, list[tuple[float, float, float, bool, str]]] = {}  # class -> (rate, a, theta, over, role)
        decodes: dict[str, list[tuple[float, float, float]]] = {}  # class -> (rate, P(TPOT ok), wait for a slot)
        power, overloaded = 0.0, []
        for p in self.plan.pools:
            o = self.options[base_key(p.option)]
            entry, decode = p.role in ("colocated", "prefill"), p.role in ("colocated", "decode")
            side = "entry" if entry else "decode"
            arrivals = {c: rates.get(c, 0.0) * self.routes.get((c, side, p.name), 0.0) for c in rates
                        if o.service(c) is not None}
            arrivals = {c: r for c, r in arrivals.items() if r > 0}
            k_ttft, k_tpot = truth.scales(p.device)
            m_ttft, m_tpot = truth.multiples(p.name)
            if noise:
                m_ttft *= 1 + rng.uniform(-noise, noise)
                m_tpot *= 1 + rng.uniform(-noise, noise)
            k_first = k_tpot if p.role == "decode" else k_ttft
            scale = {c: capacity_scale(o, c, self.classes[c].output_mean, k_ttft, k_tpot) for c in arrivals}
            u = sum(r * scale[c] / o.service(c).rate_per_s for c, r in arrivals.items()) / max(p.replicas, 1)
            over = u >= 1.0
            if over:
                overloaded.append(p.name)
            power += drawn_w(idle_w=o.idle_w, full_w=o.power_w, replicas=p.replicas, load=min(u, 1.0) * p.replicas)
            served, running, backlog = 0, 0.0, 0.0
            for c, r in arrivals.items():
                cls = self.classes[c]
                done = r / u if over else r
                n = int(rng.poisson(done * seconds))
                served += n
                backlog += (r - done) * seconds
                point = o.service(c).at(min(u, 1.0))
                lat = OVERLOAD_LATENCY if over else 1.0
                a, theta = _shifted_exp(point, cls.percentile, k_first * m_ttft * lat)
                mu, sd = _normal(point, cls.percentile, k_tpot * m_tpot * lat)
                running += done * (a + theta + (max(cls.output_mean - 1, 0.0) * mu if decode else 0.0))
                self._lengths(p.name, "prompt_len", n, cls.input_mean, cls.input_max)
                if p.role == "prefill":
                    self._add(p.name, "output_len", n, lambda x: 1.0 if x >= 1 else 0.0, 1.0, 0.0)
                else:
                    self._lengths(p.name, "output_len", n, cls.output_mean, cls.output_max)
                if entry:
                    self._add(p.name, "ttft_s", n, _exp_cdf(a, theta), a + theta, theta)
                    entries.setdefault(c, []).append((r, a, theta, over, p.role))
                    parts = o.service(c).parts_at(min(u, 1.0))
                    if parts is not None and self.service_histograms:
                        queue_s, prefill_s = (x * k_first * m_ttft * lat for x in parts)
                        self._add(p.name, "queue_s", n, _exp_cdf(0.0, queue_s), queue_s, queue_s)
                        self._add(p.name, "prefill_s", n, _normal_cdf(prefill_s, PREFILL_SPREAD * prefill_s),
                                  prefill_s, PREFILL_SPREAD * prefill_s)
                if decode:
                    self._add(p.name, "tpot_s", int(n * max(cls.output_mean - 1, 0.0)), _normal_cdf(mu, sd), mu, sd)
                    ok = 0.0 if over else 1.0 if cls.tpot_slo_s is None else _normal_cdf(mu, sd)(cls.tpot_slo_s)
                    decodes.setdefault(c, []).append((r, ok, a + theta if p.role == "decode" else 0.0))
            key = ("requests", p.name)
            self.counters[key] = self.counters.get(key, 0.0) + served
            self.gauges[("waiting", p.name)] = self.gauges.get(("waiting", p.name), 0.0) + backlog
            self.gauges[("running", p.name)] = min(running, p.replicas * p.batch) if not over else p.replicas * p.batch
        self.time_s += seconds
        met = {c: self._attainment(self.classes[c], r, entries.get(c, []), decodes.get(c, [])) for c, r in rates.items()}
        return WindowStats(seconds, tuple((c, r * seconds) for c, r in rates.items()), tuple(sorted(met.items())),
                           power, tuple(overloaded))

    @staticmethod
    def _attainment(cls: SimClass, rate: float, entries: list, decodes: list) -> float:
        """The share of a class's requests that meet both targets (module docstring)."""
        if rate <= 0:
            return 1.0
        rate_in = sum(e[0] for e in entries)
        if not rate_in:
            return 0.0
        total = sum(d[0] for d in decodes)
        tpot_ok = sum(d[0] * d[1] for d in decodes) / total if total else 1.0
        wait = sum(d[0] * d[2] for d in decodes) / total if total else 0.0
        ttft_ok = 0.0
        for r, a, theta, over, role in entries:
            target = None if cls.ttft_slo_s is None else cls.ttft_slo_s - (wait if role == "prefill" else 0.0)
            ttft_ok += r * (0.0 if over else 1.0 if target is None else _exp_cdf(a, theta)(target))
        return ttft_ok / rate_in * tpot_ok * min(rate_in / rate, 1.0)

    def _lengths(self, pool: str, quantity: str, n: int, mean: float, longest: float) -> None:
        lo, hi = length_support(mean, longest)
        self._add(pool, quantity, n, _uniform_cdf(lo, hi), (lo + hi) / 2, (hi - lo) / math.sqrt(12))

    def _add(self, pool: str, quantity: str, n: int, cdf, mean: float, sd: float) -> None:
        h = self.hist.setdefault((quantity, pool), _Hist(METRICS[quantity][1]))
        h.add(self.rng, n, cdf, mean, sd)

    def scrape(self) -> str:
        """The engines' metrics now, in the Prometheus text format (cumulative; millisecond timestamps)."""
        t = int(round(self.time_s * 1000))
        lines = []
        for quantity, (name, buckets) in sorted(METRICS.items()):
            if not any(q == quantity for q, _pool in self.hist):
                continue
            lines.append(f"# TYPE {name} histogram")
            for (q, pool), h in sorted(self.hist.items()):
                if q != quantity:
                    continue
                label = f'pod="gimletc-{pool}-0",model_name="{self.model}"'
                running = 0.0
                for le, k in zip([*buckets, math.inf], h.counts):
                    running += k
                    le_text = "+Inf" if math.isinf(le) else repr(float(le))
                    lines.append(f'{name}_bucket{{{label},le="{le_text}"}} {running:.0f} {t}')
                lines.append(f"{name}_sum{{{label}}} {h.total!r} {t}")
                lines.append(f"{name}_count{{{label}}} {h.n:.0f} {t}")
        lines.append("# TYPE vllm:request_success_total counter")  # as prometheus_client (vLLM) writes a counter
        for (_q, pool), v in sorted(self.counters.items()):
            lines.append(f'vllm:request_success_total{{pod="gimletc-{pool}-0",model_name="{self.model}",'
                         f'finished_reason="stop"}} {v:.0f} {t}')
        for quantity, name in (("waiting", "vllm:num_requests_waiting"), ("running", "vllm:num_requests_running")):
            lines.append(f"# TYPE {name} gauge")
            for (q, pool), v in sorted(self.gauges.items()):
                if q == quantity:
                    lines.append(f'{name}{{pod="gimletc-{pool}-0",model_name="{self.model}"}} {v!r} {t}')
        return "\n".join(lines) + "\n"
