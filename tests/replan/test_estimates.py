"""The pieces of a replan on hand-made inputs, each checked against hand arithmetic: class recognition by prompt
length, a correction factor's fit, consecutive windows with a growing queue, the forecast."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from compiler.ir.placement import ClassTarget
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.replan.correct import Factors, at_measured_efficiency, corrected, fit, fit_pool
from compiler.deploy.metrics import Histogram
from compiler.replan.metrics import load, window, windows
from compiler.replan.observe import ClassShape, Latency, Observation, PoolMeasure, recognise

CHAT = ClassShape("chat", 512, 1024, 256, 512)  # prompts taken uniform over [1, 1023]
DOCS = ClassShape("docs", 6000, 8000, 128, 256)  # over [4000, 8000]


def _hist(counts: dict[float, float]) -> Histogram:
    """Cumulative buckets from per-bucket counts."""
    running, buckets = 0.0, []
    for le in sorted(counts):
        running += counts[le]
        buckets.append((le, running))
    return Histogram(tuple(buckets), 0.0, running)


def test_classes_apart_by_more_than_a_bucket_are_recognised_exactly():
    # 1-2-5 buckets: chat's prompts fill (0, 1000] and a sliver of (1000, 2000]; documents (2000, 5000] and up.
    h = _hist({100.0: 40, 500.0: 300, 1000.0: 350, 2000.0: 10, 5000.0: 60, 10000.0: 240, math.inf: 0})
    got = recognise(h, [CHAT, DOCS], {"chat": 0.5, "docs": 0.5})
    # (1000, 2000] holds prompts of at most 2000 tokens: only chat reaches there (documents start at 4000)
    assert got == pytest.approx({"chat": 700.0, "docs": 300.0})


def test_a_bucket_no_class_reaches_goes_to_the_nearest_class_in_log_tokens():
    h = _hist({1000.0: 90, 20000.0: 0, 50000.0: 10, math.inf: 0})  # 10 prompts of 20k-50k: longer than any class
    assert recognise(h, [CHAT, DOCS], {"chat": 0.9, "docs": 0.1}) == pytest.approx({"chat": 90.0, "docs": 10.0})


def _decode_option() -> PoolOption:
    """One decode replica serving 10 requests/s of class c at full load; TPOT 10 ms x (1 + u), linear."""
    curve = tuple((u, 0.0, 0.0, 0.01 * (1 + u), 0.012 * (1 + u)) for u in (0.05, 0.5, 0.95))
    return PoolOption("decode:x:tp1:pp1:b8", "decode", (("x", 1),), 500.0, 700.0, "x", 1, 1, 8,
                      (ClassService("c", 10.0, curve),))


def test_a_tpot_factor_is_the_service_scale_that_reproduces_the_measurement():
    """4 req/s on one replica: the model's utilisation is 0.4. Measured TPOT 18.75 ms. With every step k times
    slower the replica runs at 0.4k and its TPOT is k x 10 ms x (1 + 0.4k): k = 1.25 gives 1.25 x 15 ms =
    18.75 ms. The corrected option serves 10 / 1.25 = 8 req/s and predicts 18.75 ms at the same 4 req/s."""
    o = _decode_option()
    m = PoolMeasure("pool0", o.key, "decode", "x", 1, 2400.0, (("c", 4.0),), 0.0, None,
                    Latency(0.01875, 0.0001, 2400.0))
    target = {"c": ClassTarget("c", 1.0, None, None, 1e6, 11.0)}
    f = fit_pool(m, o, target, None, 4.0)
    assert f.tpot.factor == pytest.approx(1.25, rel=1e-6)
    assert f.tpot.predicted_s == pytest.approx(0.014)  # 10 ms x 1.4, the model at the measured load
    (fixed,) = corrected([o], (Factors("x", "", 1.0, 0.0, 0.0, f.tpot.factor, 0.01, 2400.0),),
                         tuple(target.values()))
    assert fixed.service("c").rate_per_s == pytest.approx(8.0)
    assert fixed.service("c").at(4.0 / 8.0)[3] == pytest.approx(0.01875)


def test_an_overloaded_pool_gives_no_factor():
    o = _decode_option()
    m = PoolMeasure("pool0", o.key, "decode", "x", 1, 5700.0, (("c", 10.5),), 1.0, None, Latency(0.5, 0.01, 5700.0))
    f = fit_pool(m, o, {"c": ClassTarget("c", 1.0, None, None, 1e6, 11.0)}, None, 10.5)
    assert f.tpot is None and "overloaded" in f.note


def _flat_option(key: str, kind: str, devices: int, step_s: float, ttft_s: float) -> PoolOption:
    """A replica whose steps take `step_s` at any load (TPOT flat), serving 0.1 / `step_s` requests/s of c."""
    curve = tuple((u, ttft_s, ttft_s, step_s, step_s) for u in (0.05, 0.5, 0.95))
    return PoolOption(key, kind, (("x", devices),), 500.0, 700.0, "x", devices, 1, 8,
                      (ClassService("c", 0.1 / step_s, curve),))


def _recost_x(device: str, divisor: float) -> list[PoolOption]:
    """Device x with its memory efficiency divided by `divisor`: a decode step of 2 ms fixed and 8 ms of memory
    time, a colocated tp2 step of 6 ms fixed (its prompt chunks, half the weights a device) and 4 ms of memory."""
    assert device == "x"
    return [_flat_option("decode:x:tp1:pp1:b8", "decode", 1, 0.002 + 0.008 * divisor, 0.0),
            _flat_option("colocated:x:tp2:pp1:c8", "colocated", 2, 0.006 + 0.004 * divisor, 0.05)]


def test_a_tpot_factor_reaches_other_shapes_as_the_memory_efficiency_that_explains_it():
    """The decode pool (4 req/s, the model's 10 ms steps) measures 12 ms: a factor of 1.2 against the model.
    As memory time, 2 + 8 s = 12 ms: the memory efficiency divided by s = 1.25. The colocated shape, measured by
    no pool, then steps 6 + 4 x 1.25 = 11 ms (1.1x), not 1.2 x 10 ms, and serves 0.1 / 11 ms requests/s."""
    options = _recost_x("x", 1.0)
    classes = (ClassTarget("c", 1.0, None, None, 1e6, 11.0),)
    m = PoolMeasure("pool0", "decode:x:tp1:pp1:b8", "decode", "x", 1, 2400.0, (("c", 4.0),), 0.0, None,
                    Latency(0.012, 0.0001, 2400.0))
    obs = Observation(0.0, 600.0, (), (m,))
    plan = SimpleNamespace(predicted=SimpleNamespace(requests_per_s=4.0),
                           pools=(SimpleNamespace(name="pool0", predicted_requests_per_s=4.0),))
    _pools, factors = fit(obs, plan, options, classes)
    assert next(f for f in factors if not f.shape).tpot == pytest.approx(1.2, rel=1e-6)
    recosted, factors = at_measured_efficiency(obs, plan, options, classes, factors, _recost_x)
    x = next(f for f in factors if not f.shape)
    assert x.mem_eff_divisor == pytest.approx(1.25, rel=2e-3)
    assert x.tpot == pytest.approx(1.0, abs=2e-3)
    colocated = next(o for o in corrected(recosted, factors, classes) if o.kind == "colocated")
    assert colocated.service("c").at(0.5)[3] == pytest.approx(0.011, rel=2e-3)
    assert colocated.service("c").rate_per_s == pytest.approx(0.1 / 0.011, rel=2e-3)
    assert [o.key for o in recosted] == [o.key for o in options]


def _scrape(t_ms: int, done: float, waiting: float) -> str:
    return (f"# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{pod="gimletc-pool0-0"}} {done} {t_ms}\n'
            f"# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{pod="gimletc-pool0-0"}} {waiting} {t_ms}\n')


def test_consecutive_windows_and_a_growing_queue(tmp_path):
    """Scrapes every 5 minutes for 30 minutes; 10-minute windows end at the last: [10, 20] and [20, 30] minutes
    and the first [0, 10]. The queue grows by 30 in the last window."""
    for i, (done, waiting) in enumerate([(0, 0), (100, 0), (200, 0), (300, 5), (400, 10), (500, 20), (600, 40)]):
        (tmp_path / f"{i}.prom").write_text(_scrape(1_000_000 + i * 300_000, done, waiting))
    snaps = load([str(tmp_path)])
    ws = windows(snaps, 600)
    assert [(w.start_s - 1000.0, w.seconds) for w in ws] == [(0.0, 600.0), (600.0, 600.0), (1200.0, 600.0)]
    assert [w.counter("requests", "pool0") for w in ws] == [200, 200, 200]
    last = window(snaps, 600)
    assert last.grown("waiting", "pool0") == 30 and ws[0].grown("waiting", "pool0") == 0


@pytest.mark.parametrize("series,want", [
    ([10.0, 20.0, 30.0, 40.0], 50.0),  # a ramp: Holt extrapolates it exactly (error 0 against 7/24 for last value)
    ([10.0, 20.0, 10.0, 20.0, 10.0], 10.0),  # a zigzag: Holt chases each swing, the last value misses by less
    ([10.0, 30.0], 30.0),  # two windows replay nothing: no trend is trusted
])
def test_auto_forecast_takes_the_one_that_replayed_better(series, want):
    from compiler.replan.forecast import errors, holt
    from compiler.replan.forecast import chosen_forecast

    e = errors(series)
    pick = chosen_forecast("auto", e)
    # the zigzag by hand: from [10, 20] Holt forecasts 30 (level 20, trend 10) where 10 came, the last value 20
    assert (holt(series) if pick == "holt" else series[-1]) == pytest.approx(want)
    assert chosen_forecast("holt", e) == "holt" and chosen_forecast("none", e) == "none"
