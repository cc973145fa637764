"""[Note: queueing model] against a simulated queue: M/D/c waits, percentiles and means, at c = 1, 8 and 64.

The simulation knows nothing of `cost_models.queueing`: Poisson arrivals, `c` identical servers that each hold a
request for exactly S seconds, first come first served. `event_waits` is the plain event simulation: a request
starts on the server that frees first, at its arrival or when that server frees, whichever is later.
`lindley_waits` computes the same waits for millions of requests at once: with equal service times requests
start and finish in arrival order, so request n takes the server request n - c used, and each of the c
interleaved streams is a one-server queue (Lindley's recursion, W_n = max(0, W_{n-c} + S - (a_n - a_{n-c}))); a
test holds the two equal on the same arrivals. Seeded; 4,000,000 requests a point (the first 2% dropped as
warm-up) hold the simulated p99 within about 1% from one seed to another, where 400,000 move it by 17% at
c = 64, rho = 0.8.

How a predicted percentile is compared depends on where it falls:

- at or beyond the share of requests that wait at all: the prediction must be zero, as the simulation's is;
- in the first quarter of the waiting requests' distribution, next to the atom of requests that do not wait, a
  wait of a few hundredths of S is the answer and its relative error means nothing: there the share of simulated
  requests that wait longer than predicted must be within 15% of the percentile's tail (1 - p);
- elsewhere: the predicted wait within 15% of the simulated one.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest

from cost_models.queueing import mdc_mean_wait_s, wait_percentile_s

SERVICE_S = 2.0
REQUESTS = 4_000_000
PERCENTILES = (0.5, 0.9, 0.99)


def poisson_arrivals_s(rate_per_s: float, requests: int, seed: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate_per_s, requests))


def event_waits(arrivals_s: np.ndarray, servers: int, service_s: float) -> np.ndarray:
    """First come first served on `servers` servers of fixed service time: each request's wait."""
    free_at = [0.0] * servers  # a heap: when each server next frees
    waits = np.empty(len(arrivals_s))
    for i, now in enumerate(arrivals_s.tolist()):
        start = max(now, free_at[0])
        heapq.heapreplace(free_at, start + service_s)
        waits[i] = start - now
    return waits


def lindley_waits(arrivals_s: np.ndarray, servers: int, service_s: float) -> np.ndarray:
    """`event_waits` for `len(arrivals_s)` a multiple of `servers`, by Lindley's recursion on each interleaved
    stream: W = X - min(0, min of X so far), X the running sum of S - (a_n - a_{n-c})."""
    a = arrivals_s.reshape(-1, servers)
    steps = np.zeros_like(a)
    steps[1:] = service_s - np.diff(a, axis=0)
    x = np.cumsum(steps, axis=0)
    return (x - np.minimum(np.minimum.accumulate(x, axis=0), 0.0)).ravel()


def simulated_waits(servers: int, rho: float, service_s: float, requests: int, seed: int) -> np.ndarray:
    """Sorted waits at utilisation `rho`, warm-up dropped."""
    arrivals = poisson_arrivals_s(rho * servers / service_s, requests - requests % servers, seed)
    waits = lindley_waits(arrivals, servers, service_s)
    return np.sort(waits[len(waits) // 50:])


def _quantile(waits: np.ndarray, p: float) -> float:
    return float(waits[min(len(waits) - 1, int(p * len(waits)))])


def _share_longer(waits: np.ndarray, t: float) -> float:
    return 1.0 - np.searchsorted(waits, t, side="right") / len(waits)


@pytest.fixture(scope="module")
def simulate():
    memo: dict = {}

    def get(servers: int, rho: float) -> list[float]:
        if (servers, rho) not in memo:
            seed = 1000 * servers + round(100 * rho)
            memo[servers, rho] = simulated_waits(servers, rho, SERVICE_S, REQUESTS, seed)
        return memo[servers, rho]

    return get


GRID = [(c, rho) for c in (1, 8, 64) for rho in (0.5, 0.6, 0.7, 0.8, 0.9)]


@pytest.mark.parametrize("servers,rho", GRID)
def test_md_c_wait_percentiles_are_within_15_percent_of_a_simulated_queue(simulate, servers, rho):
    waits = simulate(servers, rho)
    waiting = _share_longer(waits, 0.0)
    for p in PERCENTILES:
        tail = 1 - p
        predicted = wait_percentile_s(servers, rho, SERVICE_S, p)
        if waiting <= tail:  # the percentile request does not wait
            assert predicted == 0.0, (p, waiting)
        elif (waiting - tail) / waiting < 0.25:  # next to the atom: compare in probability
            assert _share_longer(waits, predicted) == pytest.approx(tail, rel=0.15), (p, predicted)
        else:
            assert predicted == pytest.approx(_quantile(waits, p), rel=0.15), (p, waiting)


@pytest.mark.parametrize("servers,rho", GRID)
def test_md_c_mean_wait_is_within_10_percent_of_a_simulated_queue(simulate, servers, rho):
    """The mean the percentiles are built on; half the M/M/c wait without Cosmetatos' correction is 20% short at
    c = 8, rho = 0.5 and 15% short at c = 64, rho = 0.8."""
    waits = simulate(servers, rho)
    if _share_longer(waits, 0.0) < 0.01:  # too few waits to estimate their mean
        assert mdc_mean_wait_s(servers, rho, SERVICE_S) < 1e-3 * SERVICE_S
        return
    assert mdc_mean_wait_s(servers, rho, SERVICE_S) == pytest.approx(float(waits.mean()), rel=0.10)


@pytest.mark.parametrize("servers,rho", [(1, 0.8), (8, 0.9), (64, 0.9)])
def test_the_fast_simulation_gives_the_event_simulations_waits(servers, rho):
    arrivals = poisson_arrivals_s(rho * servers / SERVICE_S, 200 * servers, seed=3)
    assert np.allclose(lindley_waits(arrivals, servers, SERVICE_S), event_waits(arrivals, servers, SERVICE_S),
                       rtol=0, atol=1e-9)


def test_the_simulation_reproduces_md1_closed_forms():
    """The simulator itself, on what is known exactly for one server: P(wait) = rho and the Pollaczek-Khinchine
    mean wait rho S / (2 (1 - rho))."""
    waits = simulated_waits(1, 0.7, SERVICE_S, REQUESTS, seed=7)
    assert _share_longer(waits, 0.0) == pytest.approx(0.7, abs=0.005)
    assert float(waits.mean()) == pytest.approx(0.7 * SERVICE_S / (2 * 0.3), rel=0.02)
    assert math.isinf(wait_percentile_s(8, 1.0, SERVICE_S, 0.9))
