"""Waiting under Poisson arrivals: the M/D/c approximation gimletc prices every pool's latency with.

[Note: queueing model] A pool replica has ``c`` slots that each hold one
request for a (nearly) deterministic service time ``S``: a prefill replica's
batch slots (S = one batched prefill), a decode replica's batch slots (S = a
request's whole decode), a colocated replica's concurrency slots. Requests
arrive as a Poisson stream at utilisation ``rho = lambda S / c``.

- Waiting probability: Erlang's C formula for M/M/c (Erlang 1917; Kleinrock,
  *Queueing Systems* vol. 1, 1975, sec. 3.5).
- Mean wait: M/D/c waits about half as long as M/M/c (the factor (1 + c_s^2) / 2
  with c_s = 0 for deterministic service, as in Kingman's G/G/1 formula,
  Kingman 1961), times Cosmetatos' correction for c > 1,
  ``1 + (1 - rho)(c - 1)(sqrt(4 + 5c) - 2) / (16 rho c)`` (Cosmetatos, "Some
  approximate equilibrium results for the multi-server queue M/G/r", 1976;
  Tijms, *A First Course in Stochastic Models*, 2003, sec. 5.5). Without it
  the wait at c = 8, rho = 0.5 is 20% short of a simulated queue.
- Percentiles: given a wait, it is exponential after a shift that keeps its
  mean: ``P(W > t) = P_wait * exp(-(t - t0) / theta)``, ``t0 = E[W] / P_wait - theta``.
  One slot (M/D/1): ``theta = 1 / gamma``, the exact decay rate of the tail
  (``gamma S = c ln(1 + gamma S / (c rho))``, M/D/c as one queue with Erlang-c
  interarrival times, Crommelin 1932), and the shift is the service under way
  a waiting request always waits out. Many slots: the plain exponential of the
  mean wait given a wait (``t0 = 0``), since a waiting request waits for the
  first of many to finish and the asymptotic tail lies beyond p99. Between,
  ``theta`` is weighted 1/c on the first and 1 - 1/c on the second (capped at
  the second), an interpolation checked against a simulated queue at c = 1 to
  64 and rho = 0.5 to 0.9 (within 12%; the plain exponential alone misses by
  23% at c = 1: ``tests/cost_models/test_queueing_simulation.py``).

Everything is per replica; the load balancer's pooling across replicas
(join-the-shortest-queue) only lowers waits, so the cap is conservative.

>>> round(erlang_c(1, 0.5), 3)          # M/M/1: P(wait) = rho
0.5
>>> round(mdc_mean_wait_s(1, 0.5, 1.0), 3)  # M/D/1: rho / (2 (1 - rho)) x S
0.5
>>> wait_percentile_s(1, 0.2, 1.0, 0.5)  # at 20% load the median request does not wait
0.0
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable

#: Utilisation no pool is planned above: Poisson queues grow without bound as it approaches 1.
MAX_UTILISATION = 0.95


@lru_cache(maxsize=1 << 16)  # costing asks for the same few (slots, load) pairs tens of thousands of times
def erlang_c(c: float, offered: float) -> float:
    """P(an arrival waits) in M/M/c with `offered` = lambda x S erlangs on `c` servers (offered < c).

    `c` may be fractional (a replica with a non-integer mean number of slots); it is rounded up.
    """
    servers = max(1, math.ceil(c))
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    # The stable recursion for Erlang B, then C from B.
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    rho = offered / servers
    return b / (1 - rho + rho * b)


def mdc_mean_wait_s(c: float, rho: float, service_s: float) -> float:
    """Mean wait in M/D/c at utilisation `rho`: half the M/M/c wait with Cosmetatos' correction for several
    servers ([Note: queueing model]); infinite at rho >= 1."""
    if rho >= 1.0:
        return math.inf
    if rho <= 0:
        return 0.0
    servers = max(1, math.ceil(c))
    p_wait = erlang_c(servers, rho * servers)
    correction = 1 + (1 - rho) * (servers - 1) * (math.sqrt(4 + 5 * servers) - 2) / (16 * rho * servers)
    return 0.5 * p_wait * service_s / (servers * (1 - rho)) * correction


@lru_cache(maxsize=1 << 16)
def _decay_per_arrival(rho: float) -> float:
    """The root y > 0 of ln(1 + y) = rho y: M/D/c's wait tail decays at gamma = c rho y / S per second.

    Newton from y = 1/rho^2 - 1, above the root (ln(1 + y) <= y / sqrt(1 + y)); the function is concave, so
    the steps fall monotonically onto it."""
    y = 1 / rho**2 - 1
    for _ in range(100):
        step = (math.log1p(y) - rho * y) / (1 / (1 + y) - rho)
        y -= step
        if abs(step) <= 1e-12 * y:
            break
    return y


def wait_percentile_s(c: float, rho: float, service_s: float, percentile: float) -> float:
    """The `percentile` (0-1) of the wait in M/D/c: zero when at least that share of arrivals does not wait."""
    if rho >= 1.0:
        return math.inf
    servers = max(1, math.ceil(c))
    p_wait = erlang_c(servers, rho * servers)
    tail = 1.0 - percentile
    if p_wait <= tail or p_wait <= 0:
        return 0.0
    waiting_mean_s = mdc_mean_wait_s(servers, rho, service_s) / p_wait  # E[W | W > 0]
    tail_s = service_s / (servers * rho * _decay_per_arrival(rho))  # 1 / gamma
    theta = min(waiting_mean_s, (tail_s + (servers - 1) * waiting_mean_s) / servers)  # [Note: queueing model]
    return waiting_mean_s - theta + theta * math.log(p_wait / tail)


def max_utilisation(latency_at: Callable[[float], float], target_s: float, *, ceiling: float = MAX_UTILISATION,
                    iterations: int = 30) -> float:
    """The highest utilisation in (0, `ceiling`] at which `latency_at(rho)` stays within `target_s`.

    `latency_at` must not decrease with rho (waits only grow with load). Returns 0.0 when even an
    almost idle replica misses the target.

    >>> round(max_utilisation(lambda rho: 1.0 + mdc_mean_wait_s(1, rho, 1.0), 1.5), 3)
    0.5
    """
    if latency_at(1e-6) > target_s:
        return 0.0
    if latency_at(ceiling) <= target_s:
        return ceiling
    lo, hi = 1e-6, ceiling
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if latency_at(mid) <= target_s else (lo, mid)
    return lo
