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
