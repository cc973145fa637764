"""The move-cost hook of the placement (`compiler.place.moves`): a re-solve from a running plan reaches only what
`max_moves` allows, checked against enumerating every placement within that many moves."""

from __future__ import annotations

import pytest

from compiler.place.moves import Moves, base_key


@pytest.fixture(scope="module")
def tiny():
    from compiler.driver import prepare

    return prepare("llama-tiny", "examples/tiny_split/cluster.yaml", "examples/tiny_split/workload.yaml").instance


def test_max_moves_bounds_the_reachable_optimum(tiny):
    from compiler.place.ilp import solve

    fresh = solve(tiny, "throughput", time_limit_s=30)
    used = {base_key(k): n for k, n in fresh.replicas}
    assert len(used) == 2 and set(used.values()) == {1}  # one replica on each of two device types
    (a, _), (b, _) = sorted(used.items())
    start = Moves(((a, 1),), max_moves=0)
    stay = solve(tiny, "throughput", time_limit_s=30, moves=start)
    assert {base_key(k) for k, _ in stay.replicas} == {a}  # no move: the running replica alone
    one = solve(tiny, "throughput", time_limit_s=30, moves=Moves(((a, 1),), max_moves=1))
    # Within one move of {a}: {a}, {}, {b} or {a, b}; the fresh optimum {a, b} is one start away, so it is reached.
    assert {base_key(k) for k, _ in one.replicas} == {a, b}
    assert one.objective.value == pytest.approx(fresh.objective.value)
    assert stay.objective.value < one.objective.value


def test_window_rates_come_from_counter_deltas_with_resets(tmp_path):
    """Two scrapes 60 s apart, parsed by prometheus_client: rates and means are deltas, worked by hand."""
    from compiler.replan.metrics import load, window

    def scrape(t_ms, done, ttft_sum, ttft_count, pool="pool0"):
        return (f"# TYPE vllm:request_success_total counter\n"
                f'vllm:request_success_total{{pool="{pool}",finished_reason="stop"}} {done} {t_ms}\n'
                f"# TYPE vllm:time_to_first_token_seconds histogram\n"
                f'vllm:time_to_first_token_seconds_bucket{{pod="gimletc-{pool}-0",le="0.1"}} {ttft_count} {t_ms}\n'
                f'vllm:time_to_first_token_seconds_bucket{{pod="gimletc-{pool}-0",le="+Inf"}} {ttft_count} {t_ms}\n'
                f'vllm:time_to_first_token_seconds_sum{{pod="gimletc-{pool}-0"}} {ttft_sum} {t_ms}\n'
                f'vllm:time_to_first_token_seconds_count{{pod="gimletc-{pool}-0"}} {ttft_count} {t_ms}\n')

    (tmp_path / "a.prom").write_text(scrape(1_000_000, 100, 2.0, 100))
    (tmp_path / "b.prom").write_text(scrape(1_060_000, 220, 5.0, 160))
    w = window(load([str(tmp_path)]), 600)
    assert w.seconds == pytest.approx(60.0)
    assert w.counter("requests", "pool0") / w.seconds == pytest.approx(120 / 60)
    assert w.histogram("ttft_s", "pool0").mean == pytest.approx(3.0 / 60)
    (tmp_path / "c.prom").write_text(scrape(1_120_000, 30, 0.3, 10))  # the engine restarted: counters reset
    w = window(load([str(tmp_path)]), 60)
    assert w.counter("requests", "pool0") == 30 and w.histogram("ttft_s", "pool0").count == 10
