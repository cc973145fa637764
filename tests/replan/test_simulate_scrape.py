"""The simulated engines' scrapes read as a real vLLM engine's do (`compiler.replan.simulate`).

vLLM 0.32 counts finished requests in a prometheus_client ``Counter("vllm:request_success")``, which
prometheus_client writes as ``# TYPE vllm:request_success_total counter`` above ``vllm:request_success_total``
samples. The simulation wrote ``# TYPE vllm:request_success counter``: prometheus_client's parser then files the
samples under an untyped ``vllm:request_success_total`` family, the metrics reader never saw the request counter,
and the replan counted requests from the prompt histogram instead. The reference here is prometheus_client's own
exposition of such a counter, not the simulation's code.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from compiler.replan.metrics import parse
from compiler.replan.simulate import Deployment, Truth
from tests.replan.conftest import WINDOW_S, sim_classes


def _vllm_counter_type_line() -> str:
    """The TYPE line prometheus_client (vLLM's metrics library) writes for vLLM's request counter."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    Counter("vllm:request_success", "Count of successfully processed requests.", ["finished_reason"],
            registry=registry).labels("stop").inc()
    text = generate_latest(registry).decode()
    return next(line for line in text.splitlines() if line.startswith("# TYPE vllm:request_success"))


def test_the_request_counter_is_typed_as_vllm_writes_it_and_read():
    shape = "colocated:nvidia-h200-sxm:tp1:pp1:c8"
    plan = SimpleNamespace(model="llama-tiny", pools=(SimpleNamespace(name="pool0", option=shape, role="colocated",
                                                                      predicted_classes=(), launch=None),))
    text = Deployment(plan, {shape: None}, []).scrape()
    assert _vllm_counter_type_line() in text.splitlines()
    snapshot = parse(text, "sim")
    assert dict(snapshot.counters) == {("requests", "pool0"): 0.0}
    assert snapshot.models == ("llama-tiny",)  # vLLM labels every metric with the model it serves


def test_the_simulated_request_counter_counts_the_plans_requests(day, truth_options):
    """One window of the day plan at its own predicted rates: each pool's request counter, as the metrics reader
    reads it, is the pool's predicted requests/s (plan.json) times the window, within Poisson noise (5 sd)."""
    _plan_dir, compiled = day
    options, prep = truth_options
    plan = compiled.plan
    sim = Deployment(plan, options, sim_classes(prep), seed=5)
    sim.step({c.name: c.requests_per_s for c in plan.classes}, WINDOW_S, Truth())
    counters = dict(parse(sim.scrape(), "sim").counters)
    for p in plan.pools:
        expected = p.predicted_requests_per_s * WINDOW_S
        assert counters[("requests", p.name)] == pytest.approx(expected, abs=5 * math.sqrt(expected)), p.name
