"""An engine's Prometheus metrics as values: one scrape (`Snapshot`) of counters, gauges and histograms per
quantity and pool, read with prometheus_client's own text parser (`parse`). `gimletc bench` and
``calibrate --engine`` read the engines they measure with it; `compiler.replan.metrics` reads scrapes over time.

A snapshot is every sample of one scrape at one moment (the samples' own timestamps when they carry them, else
the file's modification time, else now for a URL).

Pools: a sample belongs to the plan's pool named by its ``pool`` label, else the one its ``pod`` or
``instance`` names (``gimletc-pool0-0...``, the manifests' names), else to the pool its source was given
for (``--metrics pool0=URL``); a source naming no pool with samples naming none is the whole deployment
(`WHOLE`).

Names (`NAMES`): vLLM's ``vllm:`` metrics as vLLM 0.32 exposes them (``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds``, ``vllm:request_time_per_output_token_seconds`` and its older name
``vllm:time_per_output_token_seconds``, ``vllm:request_queue_time_seconds``, ``vllm:request_prefill_time_seconds``,
``vllm:request_success_total``, ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
``vllm:kv_cache_usage_perc``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``) and SGLang's ``sglang:`` counterparts; the
first name present wins.

[Note: queue and service histograms] TTFT holds the wait in the engine's queue as well as the service. vLLM
(v1 engine, `vllm/v1/metrics/stats.py`) times a request's phases apart: ``vllm:request_queue_time_seconds``
from the engine core's queue to the scheduler admitting it, ``vllm:request_prefill_time_seconds`` from
admission to its first token; TTFT adds the front end (from the API server's arrival). The inter-token latency
is the time between a running request's tokens: service, the queue excluded. SGLang exports its queue wait
(``sglang:queue_time_seconds``) but its prefill only as ``sglang:per_stage_req_latency_seconds``, whose stage
labels vary between versions: not read; there the prefill is TTFT less the queue (`compiler.replan.observe`).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

from backends.engines import serving_engines
from compiler.ir.errors import BadInput

WHOLE = "*"  # samples of the whole deployment, no pool named

#: Quantity -> metric names (without a ``_total``/``_bucket`` suffix), in the order they are tried: each engine's
#: own (`ServingEngine.metrics`), engines in registry order.
NAMES: dict[str, tuple[str, ...]] = {
    key: tuple(n for e in serving_engines() for n in e.metrics.get(key, ()))
    for key in dict.fromkeys(k for e in serving_engines() for k in e.metrics)}

_POD = re.compile(r"gimletc-(pool[0-9a-z]+)")


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative bucket counts (upper bound -> count, +inf last), sum and count; a delta when from a window."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        if earlier is None or self.count < earlier.count:  # reset between the snapshots
            return self
        before = dict(earlier.buckets)
        return Histogram(tuple((le, c - before.get(le, 0.0)) for le, c in self.buckets), self.sum - earlier.sum,
                         self.count - earlier.count)

    def plus(self, other: Histogram) -> Histogram:
        theirs = dict(other.buckets)
        les = sorted(set(dict(self.buckets)) | set(theirs))
        mine = dict(self.buckets)
        return Histogram(tuple((le, mine.get(le, 0.0) + theirs.get(le, 0.0)) for le in les), self.sum + other.sum,
                         self.count + other.count)

    def scaled(self, factor: float) -> Histogram:
        """Every count and the sum times `factor` (one engine's delta read over the window's seconds); the mean
        and quantiles stay."""
        if factor == 1.0:
            return self
        return Histogram(tuple((le, c * factor) for le, c in self.buckets), self.sum * factor, self.count * factor)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def masses(self) -> list[tuple[float, float, float]]:
        """(lower, upper, count) of each bucket, not cumulative."""
        out, lo, below = [], 0.0, 0.0
        for le, c in self.buckets:
            out.append((lo, le, max(c - below, 0.0)))
            lo, below = le, c
        return out

    def quantile(self, q: float) -> float | None:
        """The `q` quantile as Prometheus's ``histogram_quantile`` reads it: linear inside the bucket that holds
        it (from 0 for the first bucket), the open top bucket's lower edge when it falls there; None when empty.

        >>> Histogram(((0.01, 2.0), (0.02, 6.0), (math.inf, 8.0)), 0.1, 8.0).quantile(0.5)
        0.015
        """
        total = self.buckets[-1][1] if self.buckets else 0.0
        if total <= 0:
            return None
        rank, lo, below = q * total, 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank and c > below:
                return lo if not math.isfinite(le) else lo + (le - lo) * (rank - below) / (c - below)
            lo, below = (le if math.isfinite(le) else lo), c
        return lo

    def std(self) -> float | None:
        """The spread of the samples, taken as uniform inside each bucket (the open top bucket at its lower edge):
        the bucket midpoints' variance plus each bucket's width squared over 12 (so one full bucket is not read as
        no spread at all)."""
        if self.count < 2:
            return None
        first = second = 0.0
        for lo, hi, n in self.masses():
            mid, width = ((lo + hi) / 2, hi - lo) if math.isfinite(hi) else (lo, 0.0)
            first += n * mid
            second += n * (mid ** 2 + width ** 2 / 12)
        total = sum(n for _lo, _hi, n in self.masses())
        if total <= 0:
            return None
        return math.sqrt(max(second / total - (first / total) ** 2, 0.0))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One engine's scrape, or a round of several engines' scrapes ([Note: rounds of scrapes]): counters, gauges
    and histograms per (quantity, pool), summed over its engines and over other labels. A round's time is its
    latest scrape's."""

    time_s: float
    source: str
    counters: tuple[tuple[tuple[str, str], float], ...]
    gauges: tuple[tuple[tuple[str, str], float], ...]
    histograms: tuple[tuple[tuple[str, str], Histogram], ...]
    engine: str = ""  # which engine scraped: the same in each of its scrapes (a round's own is "")
    parts: tuple[Snapshot, ...] = ()  # a round's scrapes, one per engine, each at its own time
    models: tuple[str, ...] = ()  # the models its samples name (vLLM's ``model_name`` label), sorted

    def pools(self) -> set[str]:
        return {p for (_q, p), _v in (*self.counters, *self.gauges, *self.histograms)}

    def scrapes(self) -> tuple[Snapshot, ...]:
        """The engines' own scrapes: a round's parts, else this snapshot alone."""
        return self.parts or (self,)


def parse(text: str, source: str, time_s: float | None = None, pool: str | None = None,
          engine: str | None = None) -> Snapshot:
    """A `Snapshot` of Prometheus text `text`; `pool` names the pool of samples that name none, `engine` the
    engine that was scraped (default: `pool`; [Note: rounds of scrapes])."""
    from prometheus_client.parser import text_string_to_metric_families

    counters: dict[tuple[str, str], float] = {}
    gauges: dict[tuple[str, str], float] = {}
    hist: dict[tuple[str, str], dict] = {}
    stamps: list[float] = []
    models: set[str] = set()
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError) as e:
        raise BadInput(f"--metrics {source}: not Prometheus text format ({e}); give an engine's /metrics URL or a "
                       "saved scrape of one") from None
    present = {fam.name for fam in families}
    chosen = {q: next(n for n in names if n in present) for q, names in NAMES.items() if present & set(names)}
    for fam, q in ((fam, q) for fam in families for q, name in chosen.items() if name == fam.name):
        for s in fam.samples:
            if s.timestamp is not None:
                stamps.append(float(s.timestamp))
            if s.labels.get("model_name"):
                models.add(s.labels["model_name"])
            key = (q, _pool_of(s.labels, pool))
            if fam.type == "histogram":
                h = hist.setdefault(key, {"buckets": {}, "sum": 0.0, "count": 0.0})
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    h["buckets"][le] = h["buckets"].get(le, 0.0) + s.value
                elif s.name.endswith("_sum"):
                    h["sum"] += s.value
                elif s.name.endswith("_count"):
                    h["count"] += s.value
            elif fam.type == "counter" and s.name.endswith("_total"):
                counters[key] = counters.get(key, 0.0) + s.value
            elif fam.type == "gauge":
                gauges[key] = gauges.get(key, 0.0) + s.value
    if not chosen:
        raise BadInput(f"--metrics {source}: no vllm: or sglang: metrics in it (looked for "
                       f"{', '.join(NAMES['requests'])}, ...); point it at an engine's /metrics")
    when = max(stamps) if stamps else time_s if time_s is not None else time.time()
    histograms = {k: Histogram(tuple(sorted(v["buckets"].items())), v["sum"], v["count"]) for k, v in hist.items()}
    return Snapshot(when, source, tuple(sorted(counters.items())), tuple(sorted(gauges.items())),
                    tuple(sorted(histograms.items())), engine if engine is not None else pool or "",
                    models=tuple(sorted(models)))


def _pool_of(labels: dict[str, str], default: str | None) -> str:
    if labels.get("pool"):
        return labels["pool"]
    for label in ("pod", "instance", "service"):
        m = _POD.search(labels.get(label, ""))
        if m:
            return m.group(1)
    return default or WHOLE
