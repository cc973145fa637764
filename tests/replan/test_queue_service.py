"""Correction factors fitted to service time, not queueing ([Note: service, not queue] in
`compiler.replan.correct`), on hand-made scrapes of one prefill engine, and the replayed forecast error in the
gain's spread ([Note: forecast error] in `compiler.replan.replan`). Expectations are hand arithmetic.

The engine: one prefill replica of a hand-made option serving 10 requests/s of class c at full load. The model's
mean prefill (admission to first token) is 100 ms at every load, its mean queue wait 20 ms x u / (1 - u), its
TTFT 30 ms of front end plus both (median = 90th percentile: the TTFT's mean is its median). The engine serves
5 requests/s (u = 0.5, the model's queue 20 ms) over 60 s: 300 requests, whose prefill took 100 ms as
modelled but which waited 1 s on average in its queue (a burst, or a busier host than the model's).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from compiler.ir.placement import ClassTarget
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.replan.correct import fit_pool
from compiler.replan.metrics import load, window
from compiler.replan.observe import ClassShape, observe

FRONT_S, PREFILL_S, REQUESTS, SECONDS = 0.030, 0.100, 300, 60.0
QUEUE_MEASURED_S = 1.0


def _queue_s(u: float) -> float:
    return 0.020 * u / (1 - u)


def _option() -> PoolOption:
    us = (0.05, 0.25, 0.5, 0.75, 0.9, 0.95)
    ttft = [FRONT_S + PREFILL_S + _queue_s(u) for u in us]
    curve = tuple((u, t, t, 0.0, 0.0) for u, t in zip(us, ttft))
    parts = tuple((_queue_s(u), PREFILL_S) for u in us)
    return PoolOption("prefill:x:tp1:pp1:b4", "prefill", (("x", 1),), 500.0, 700.0, "x", 1, 1, 4,
                      (ClassService("c", 10.0, curve, parts),))


def _histogram(name: str, t_ms: int, buckets: dict[float, int], total_s: float) -> str:
    """Cumulative buckets (le -> count) with their sum and count, as vLLM writes them."""
    label = 'pod="gimletc-pool0-0"'
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{label},le="{le}"}} {n} {t_ms}' for le, n in buckets.items()]
    n = max(buckets.values(), default=0)
    lines += [f'{name}_bucket{{{label},le="+Inf"}} {n} {t_ms}', f"{name}_sum{{{label}}} {total_s} {t_ms}",
              f"{name}_count{{{label}}} {n} {t_ms}"]
    return "\n".join(lines) + "\n"


def _scrape(t_ms: int, n: int, service_histograms: bool) -> str:
    """The engine's metrics after `n` requests: every prompt 100-200 tokens; TTFT, queue and prefill with the
    means of the module docstring."""
    k = n / REQUESTS
    text = (f"# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{pod="gimletc-pool0-0"}} {n} {t_ms}\n')
    text += _histogram("vllm:request_prompt_tokens", t_ms, {"100.0": 0, "200.0": n}, 150.0 * n)
    text += _histogram("vllm:time_to_first_token_seconds", t_ms, {"0.5": 0, "1.0": round(100 * k), "2.5": n},
                       (FRONT_S + QUEUE_MEASURED_S + PREFILL_S) * n)
    if service_histograms:
        text += _histogram("vllm:request_queue_time_seconds", t_ms, {"0.5": round(50 * k), "1.0": round(150 * k),
                                                                    "2.5": n}, QUEUE_MEASURED_S * n)
        text += _histogram("vllm:request_prefill_time_seconds", t_ms, {"0.1": round(150 * k), "0.25": n},
                           PREFILL_S * n)
    return text


def _fit(tmp_path, service_histograms: bool):
    folder = tmp_path / ("service" if service_histograms else "ttft-only")
    folder.mkdir()
    (folder / "a.prom").write_text(_scrape(1_000_000, 0, service_histograms))
    (folder / "b.prom").write_text(_scrape(1_000_000 + int(SECONDS * 1000), REQUESTS, service_histograms))
    o = _option()
    plan = SimpleNamespace(pools=[SimpleNamespace(name="pool0", option=o.key, role="prefill", device="x",
                                                  replicas=1)])
    obs = observe(window(load([str(folder)]), SECONDS), plan, [ClassShape("c", 150, 200, 1, 1)], {"c": 1.0})
    (m,) = obs.pools
    assert m.requests_per_s == pytest.approx(REQUESTS / SECONDS)  # 5/s: the model's utilisation 0.5
    return m, fit_pool(m, o, {"c": ClassTarget("c", 1.0, None, None, 1e6, 1.0)}, None, m.requests_per_s)


def test_a_long_queue_with_service_as_modelled_gives_no_correction(tmp_path):
    """With the prefill histogram the TTFT factor is the prefill's: k x P(k u) = 100 ms with P flat at 100 ms
    gives k = 1 exactly. The queue, 1 s against the model's 20 ms at u = 0.5, is reported beside it."""
    m, f = _fit(tmp_path, service_histograms=True)
    assert m.prefill_source == "prefill" and m.prefill.mean_s == pytest.approx(PREFILL_S)
    assert f.ttft.basis == "prefill"
    assert f.ttft.factor == pytest.approx(1.0, abs=0.05)
    assert f.ttft.measured_s == pytest.approx(PREFILL_S) and f.ttft.predicted_s == pytest.approx(PREFILL_S)
    assert f.queue.measured_s == pytest.approx(QUEUE_MEASURED_S)
    assert f.queue.predicted_s == pytest.approx(_queue_s(0.5))  # 20 ms: the queueing model at the measured load
    assert "contaminated" not in f.note


def test_the_old_fit_on_ttft_takes_the_queue_for_slow_service(tmp_path):
    """Without the queue and prefill histograms the factor is fitted to TTFT (1.13 s measured): k solves
    k x TTFT(0.5k) = 1.13 s with TTFT(v) = 130 ms + 20 ms x v / (1 - v), the curve held at its last point past
    v = 0.95 (510 ms). At k = 1.3 the left side is 1.3 x 167 ms = 217 ms; at k = 1.9, 1.9 x 510 ms = 969 ms: k is
    1.13 / 0.51 = 2.216, all of it queue. The note says the factor holds the queue."""
    m, f = _fit(tmp_path, service_histograms=False)
    assert m.prefill is None and m.queue is None
    assert f.ttft.basis == "ttft"
    assert f.ttft.factor > 1.3
    assert f.ttft.factor == pytest.approx(1.13 / (0.130 + _queue_s(0.95)), rel=1e-3)
    assert "queue-contaminated" in f.note and f"s.e. {f.ttft.rel_se:.0%}" in f.note
    assert f.queue is None


def test_sglang_prefill_is_ttft_less_the_queue(tmp_path):
    """SGLang exports its queue wait but no prefill histogram: the prefill is TTFT less the queue (1.13 s - 1 s =
    130 ms, the front end's 30 ms in it), fitted against the model's mean TTFT less its queue (130 ms): k = 1."""
    folder = tmp_path / "sglang"
    folder.mkdir()
    for name, t_ms, n in (("a", 1_000_000, 0), ("b", 1_060_000, REQUESTS)):
        text = _scrape(t_ms, n, service_histograms=True)
        text = "\n".join(line for line in text.splitlines() if "prefill_time" not in line) + "\n"
        (folder / f"{name}.prom").write_text(text.replace("vllm:request_queue_time_seconds",
                                                          "sglang:queue_time_seconds"))
    o = _option()
    plan = SimpleNamespace(pools=[SimpleNamespace(name="pool0", option=o.key, role="prefill", device="x",
                                                  replicas=1)])
    obs = observe(window(load([str(folder)]), SECONDS), plan, [ClassShape("c", 150, 200, 1, 1)], {"c": 1.0})
    (m,) = obs.pools
    assert m.prefill_source == "ttft-queue" and m.prefill.mean_s == pytest.approx(FRONT_S + PREFILL_S)
    f = fit_pool(m, o, {"c": ClassTarget("c", 1.0, None, None, 1e6, 1.0)}, None, m.requests_per_s)
    assert f.ttft.basis == "ttft-queue" and f.ttft.factor == pytest.approx(1.0, abs=0.05)


def test_the_forecast_error_widens_the_mix_the_gain_is_judged_on():
    """Chat forecast at 30/s with a replayed error of 20% (its forecast: the last value, which replayed better),
    documents at 10/s with 50% (Holt's): at weight 1, chat's variants are 36 and 24 /s against 10 (chat's shares
    36/46 and 24/34), the documents' 15 and 5 /s against 30 (30/45 and 30/35); at weight 2, 42 and 18 /s for chat;
    at weight 0 there are none, nor for a class whose forecast was never replayed."""
    from compiler.replan.forecast import forecast_mixes
    from compiler.replan.replan import ClassPlan, Settings

    chat = ClassPlan("chat", 30.0, 30.0, 0.75, 0.01, 512, 256, 5, 0.30, 0.20, 3)
    docs = ClassPlan("docs", 10.0, 10.0, 0.25, 0.01, 6000, 128, 5, 0.50, 0.60, 3)
    chat_shares = lambda pairs: [m["chat"] for pair in pairs for m in pair]  # noqa: E731
    assert chat_shares(forecast_mixes((chat, docs), Settings())) == pytest.approx(
        [36 / 46, 24 / 34, 30 / 45, 30 / 35])
    assert chat_shares(forecast_mixes((chat, docs), Settings(forecast_weight=2.0)))[:2] == pytest.approx(
        [42 / 52, 18 / 28])
    assert forecast_mixes((chat, docs), Settings(forecast_weight=0.0)) == []
    unreplayed = ClassPlan("docs", 10.0, 10.0, 0.25, 0.01, 6000, 128, 2)
    assert len(forecast_mixes((chat, unreplayed), Settings())) == 1
