"""Several independent solves at once: `concurrently` runs them on threads, since HiGHS releases the GIL while it
solves (baselines, sensitivity moves, the frontier's points)."""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Solves `concurrently` runs at once: two cores here (HiGHS releases the GIL while it solves).
SOLVES_AT_ONCE = 2


def concurrently(solve_one: Callable[[T], R], items: Sequence[T], at_once: int = SOLVES_AT_ONCE) -> list[R]:
    """`solve_one` of each of `items`, `at_once` at a time, results in the order of `items`. Every solve is
    deterministic on its own, so running several at once changes only the wall time."""
    from concurrent.futures import ThreadPoolExecutor

    if at_once <= 1:
        return list(map(solve_one, items))
    with ThreadPoolExecutor(at_once) as pool:
        return list(pool.map(solve_one, items))
