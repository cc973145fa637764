"""What one window of engine metrics says about a running plan: each request class's arrivals and lengths, and
each pool's load and latencies. Measurements only; the cost model's side is `compiler.replan.correct`.

Before: a metrics `Window` (`compiler.replan.metrics`), the running `Plan` and the classes of the workload it
was compiled for. After: an `Observation`.

[Note: recognising classes] Engines do not label requests with the workload's classes, so a class is
recognised by its prompt length: a pool's prompt-length histogram (``vllm:request_prompt_tokens``) is fitted as a
mixture of the classes, each spread as `length_support` assumes (uniform over [2·mean − max, max], or over
[1, 2·mean − 1] when that would start below one token: the workload file gives only a mean and a longest), by
expectation-maximisation from the compiled shares: each bucket's requests go to the classes in proportion to
their share times the probability their prompts fall in that bucket, and the shares are re-estimated from
that, until they settle. A bucket no class reaches (prompts longer than any class's longest, say) goes to the
class whose mean prompt is nearest in log tokens. vLLM's buckets run 1, 2, 5, 10, 20, ... tokens: classes
whose prompt ranges are apart (chat of hundreds of tokens, documents of thousands) are recognised almost
exactly; classes whose ranges overlap are told apart only as well as the assumed spread matches the real one.

Lengths: a pool's prompt-token sum (the histogram's exact ``_sum``) over what its recognised requests would
sum to at the workload's class means gives one ratio per pool, and each class's mean prompt is the
workload's, scaled by the request-weighted ratio of the pools that served it: exact for a pool that serves one
class, a common scale for a pool that mixes them. Output lengths are read the same way from the pools that
decode (a prefill-only engine generates one token). Arrivals: the requests completed at the pools a request
enters (colocated and prefill), plus the growth of their queues (``vllm:num_requests_waiting`` and
``vllm:num_requests_running``) over the window, shared over the classes as their completions are.

Latencies ([Note: queue and service histograms] in `compiler.replan.metrics`): a pool's mean TTFT, its mean
queue wait, and its mean prefill: from the prefill histogram where the engine exports one (vLLM's, the
``prefill`` source), else TTFT less the queue where it exports the queue (SGLang's: ``ttft-queue``, with the
front end's latency in it, and a standard error that adds both in quadrature, the two means' covariance
unknown), else none: then only the TTFT, queueing included, is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.deploy.metrics import Histogram
from compiler.plan.schema import DECODE_ROLES, ENTRY_ROLES
from compiler.replan.metrics import Window



@dataclass(frozen=True, slots=True)
class ClassShape:
    """A request class as the running plan's workload describes it."""

    name: str
    input_mean: float
    input_max: int
    output_mean: float
    output_max: int


@dataclass(frozen=True, slots=True)
class ClassEstimate:
    """One class over the window: recognised arrivals, their share (with its binomial standard error) and mean
    lengths (measured)."""

    name: str
    requests: float
    requests_per_s: float
    share: float
    share_se: float
    input_mean: float
    output_mean: float


@dataclass(frozen=True, slots=True)
class Latency:
    """A measured mean latency (seconds), its standard error and the requests it was measured on."""

    mean_s: float
    se_s: float
    samples: float


@dataclass(frozen=True, slots=True)
class PoolMeasure:
    """One pool of the plan over the window (measured)."""

    pool: str
    option: str
    role: str
    device: str
    replicas: int
    completed: float  # requests finished in the window
    arrivals_per_s: tuple[tuple[str, float], ...]  # recognised per class, backlog growth included
    backlog_per_s: float  # requests/s the queue grew by (not served)
    ttft: Latency | None
    tpot: Latency | None
    queue: Latency | None = None  # the wait before the scheduler admits a request
    prefill: Latency | None = None  # admission to first token (module docstring: `prefill_source`)
    prefill_source: str = ""  # "prefill" (its own histogram), "ttft-queue" (TTFT less the queue), "" (none)

    @property
    def requests_per_s(self) -> float:
        return sum(r for _c, r in self.arrivals_per_s)


@dataclass(frozen=True, slots=True)
class Observation:
    """What the window measured: its span, the classes and the pools."""

    start_s: float
    seconds: float
    classes: tuple[ClassEstimate, ...]
    pools: tuple[PoolMeasure, ...]

    @property
    def requests_per_s(self) -> float:
        return sum(c.requests_per_s for c in self.classes)

    def pool(self, name: str) -> PoolMeasure | None:
        return next((p for p in self.pools if p.pool == name), None)


def length_support(mean: float, longest: float) -> tuple[float, float]:
    """The range a class's lengths are taken to spread uniformly over ([Note: recognising classes]).

    >>> length_support(6000, 8000), length_support(512, 1024)   # both keep the mean
    ((4000.0, 8000.0), (1.0, 1023.0))
    """
    lo = 2.0 * mean - longest
    return (lo, float(longest)) if lo >= 1 else (1.0, max(2.0 * mean - 1, 1.0))


#: Expectation-maximisation rounds of `recognise` (the shares settle in a few dozen).
EM_ROUNDS = 200


def recognise(prompts: Histogram, classes: list[ClassShape], shares: dict[str, float]) -> dict[str, float]:
    """Requests of each class in a prompt-length histogram ([Note: recognising classes]), starting from `shares`.

    >>> h = Histogram(((100.0, 30.0), (1000.0, 50.0), (10000.0, 80.0), (math.inf, 80.0)), 0.0, 80.0)
    >>> a, b = ClassShape("a", 500, 1000, 10, 10), ClassShape("b", 5000, 9000, 10, 10)
    >>> {k: round(v, 3) for k, v in recognise(h, [a, b], {"a": 0.5, "b": 0.5}).items()}
    {'a': 50.0, 'b': 30.0}
    """
    support = {c.name: length_support(c.input_mean, c.input_max) for c in classes}
    buckets = [(lo, hi, n) for lo, hi, n in prompts.masses() if n > 0]
    mass = {}  # (bucket index, class) -> the class's probability of a prompt in that bucket
    nearest = {}
    for i, (lo, hi, _n) in enumerate(buckets):
        for c in classes:
            a, b = support[c.name]
            top = min(hi, b) if math.isfinite(hi) else b
            mass[(i, c.name)] = max(top - max(lo, a), 0.0) / (b - a) if b > a else float(lo < a <= hi)
        mid = math.sqrt(max(lo, 1.0) * (hi if math.isfinite(hi) else max(lo, 1.0) * 2))
        nearest[i] = min(classes, key=lambda c: (abs(math.log(mid / c.input_mean)), c.name)).name
    total = sum(n for _lo, _hi, n in buckets)
    pi = {c.name: max(shares.get(c.name, 0.0), 1e-6) for c in classes}
    counts = {c.name: 0.0 for c in classes}
    for _ in range(EM_ROUNDS):
        counts = {c.name: 0.0 for c in classes}
        for i, (_lo, _hi, n) in enumerate(buckets):
            weights = {c.name: pi[c.name] * mass[(i, c.name)] for c in classes}
            z = sum(weights.values())
            if z <= 0:
                counts[nearest[i]] += n
                continue
            for name, w_ in weights.items():
                counts[name] += n * w_ / z
        new = {k: max(v / total, 1e-12) for k, v in counts.items()} if total > 0 else pi
        settled = max(abs(new[k] - pi[k]) for k in pi) < 1e-12
        pi = new
        if settled:
            break
    return counts


def latency(h: Histogram | None, samples: float | None = None) -> Latency | None:
    """The mean of a latency histogram, its standard error (the spread of the bucket midpoints over the square
    root of `samples`, the requests: token latencies of one request are not independent) and `samples`."""
    if h is None or h.count <= 0 or h.mean is None:
        return None
    n = samples if samples is not None and samples > 0 else h.count
    spread = h.std() or 0.0
    return Latency(h.mean, spread / math.sqrt(n), n)


def service_to_first_token(prefill: Histogram | None, ttft: Latency | None, queue: Latency | None,
                           samples: float) -> tuple[Latency | None, str]:
    """The mean prefill (admission to first token) and where it came from (module docstring).

    >>> service_to_first_token(None, Latency(0.5, 0.03, 100), Latency(0.4, 0.04, 100), 100)
    (Latency(mean_s=0.09999999999999998, se_s=0.05, samples=100), 'ttft-queue')
    """
    measured = latency(prefill, samples)
    if measured is not None:
        return measured, "prefill"
    if ttft is not None and queue is not None and ttft.mean_s > queue.mean_s:
        return Latency(ttft.mean_s - queue.mean_s, math.hypot(ttft.se_s, queue.se_s), ttft.samples), "ttft-queue"
    return None, ""


def observe(w: Window, plan, classes: list[ClassShape], shares: dict[str, float] | None = None) -> Observation:
    """The `Observation` of window `w` of the running `plan` (a `compiler.plan.schema.Plan`) whose workload has
    `classes` in `shares` (where recognition starts; even when None)."""
    shapes = {c.name: c for c in classes}
    shares = {c.name: 1.0 / len(classes) for c in classes} if shares is None else shares
    pools, entry_counts, in_ratio, out_ratio = [], {}, {}, {}
    for p in plan.pools:
        prompts = w.histogram("prompt_len", p.name)
        counts = recognise(prompts, classes, shares) if prompts is not None else {}
        completed = w.counter("requests", p.name)
        if completed is None:
            completed = prompts.count if prompts is not None else 0.0
        total = sum(counts.values())
        backlog = w.grown("waiting", p.name) + w.grown("running", p.name)
        scale = (completed + backlog) / total if total > 0 else 0.0  # recognised counts -> arrivals
        arrivals = tuple(sorted((c, n * scale / w.seconds) for c, n in counts.items() if n > 0))
        if p.role in ENTRY_ROLES:
            for c, n in counts.items():
                entry_counts[c] = entry_counts.get(c, 0.0) + n * scale
            _ratio(in_ratio, prompts, counts, {c: s.input_mean for c, s in shapes.items()})
        if p.role in DECODE_ROLES:
            _ratio(out_ratio, w.histogram("output_len", p.name), counts, {c: s.output_mean for c, s in shapes.items()})
        entry = p.role in ENTRY_ROLES
        ttft = latency(w.histogram("ttft_s", p.name), completed) if entry else None
        queue = latency(w.histogram("queue_s", p.name), completed) if entry else None
        prefill, source = service_to_first_token(w.histogram("prefill_s", p.name) if entry else None, ttft, queue,
                                                 completed)
        pools.append(PoolMeasure(
            p.name, p.option, p.role, p.device, p.replicas, completed, arrivals, backlog / w.seconds, ttft,
            latency(w.histogram("tpot_s", p.name), completed) if p.role in DECODE_ROLES else None,
            queue, prefill, source))
    total = sum(entry_counts.values())
    estimates = []
    for c in classes:
        n = entry_counts.get(c.name, 0.0)
        share = n / total if total > 0 else 0.0
        se = math.sqrt(share * (1 - share) / total) if total > 0 else 1.0
        estimates.append(ClassEstimate(c.name, n, n / w.seconds, share, se, c.input_mean * _mean_ratio(in_ratio, c.name),
                                       c.output_mean * _mean_ratio(out_ratio, c.name)))
    return Observation(w.start_s, w.seconds, tuple(estimates), tuple(pools))


def _ratio(acc: dict, lengths: Histogram | None, counts: dict[str, float], means: dict[str, float]) -> None:
    """Add one pool's measured-over-expected length ratio to each class it served, weighted by its requests."""
    expected = sum(n * means[c] for c, n in counts.items())
    if lengths is None or lengths.count <= 0 or expected <= 0:
        return
    # per request: the histogram's count may differ from the recognised total (another scrape's timing)
    ratio = (lengths.sum / lengths.count) / (expected / sum(counts.values()))
    for c, n in counts.items():
        w, r = acc.get(c, (0.0, 0.0))
        acc[c] = (w + n, r + n * ratio)


def _mean_ratio(acc: dict, name: str) -> float:
    w, r = acc.get(name, (0.0, 0.0))
    return r / w if w > 0 else 1.0
