"""Timing that notices other load on the host: what `compiler.calibrate` measures with.

Moved out of calibrate.py so the measuring discipline has one home; see
[Note: timing under contention].
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

Note = Callable[[str], None]
#: A timing segment: runs its benchmarks and returns seconds per call of each.
Job = Callable[[], list[float]]


@dataclass(frozen=True, slots=True)
class HostLoad:
    """Cumulative counters that say whether anything else ran: CPU pressure stall (Linux PSI) and ticks."""

    stall_s: float | None  # time some runnable task waited for a CPU, since boot
    busy_ticks: int  # non-idle ticks of every CPU of the host
    own_ticks: int  # user + system ticks of this process

    @staticmethod
    def read() -> HostLoad | None:
        try:
            with open("/proc/stat") as f:
                ticks = [int(v) for v in f.readline().split()[1:9]]
            with open("/proc/self/stat") as f:
                own = f.read().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            return None
        try:
            with open("/proc/pressure/cpu") as f:
                stall_s: float | None = int(f.readline().rsplit("total=", 1)[1]) / 1e6
        except (OSError, ValueError, IndexError):
            stall_s = None
        return HostLoad(stall_s, sum(ticks) - ticks[3] - ticks[4], int(own[11]) + int(own[12]))


class QuietGate:
    """Runs timing segments while the host runs at full speed; see [Note: timing under contention].

    [Note: timing under contention] Other load only ever adds time, and more
    than one would guess: with both cores running OpenMP threads, one busy
    process turns a 0.25 ms matmul into 15 ms; and on a VM a single-threaded
    0.2 ms block piece takes 0.4 ms for seconds at a time while something
    outside the VM shares the core, with no counter inside the VM showing it.
    So every timing segment (one microbenchmark, or all pieces of a model at
    one point, at least `Settings.segment_s` long) is bracketed by two checks:
    `HostLoad` counters (a task waited for a CPU more than `STALL_LIMIT` of
    the segment, or other processes took more than `OTHER_LIMIT` of the
    host's ticks) and a canary (a fixed loop of tiny aten calls) slower than
    `SLOW_LIMIT` x the fastest canary seen. A failed segment is rerun after a
    pause. After the first pass, segments whose canary was slow against the
    final best (seen only later) are rerun, keeping the faster time. Once
    `wait_budget_s` is spent, segments are kept and counted as contended and
    the report says so. Within a segment, a median over calls rejects
    one-off outliers and the minimum over rounds what remains.
    """

    STALL_LIMIT = 0.15
    OTHER_LIMIT = 0.05
    SLOW_LIMIT = 1.15
    PAUSE_S = 0.25

    def __init__(self, wait_budget_s: float, note: Note) -> None:
        self.wait_left_s = wait_budget_s
        self.segments = self.rejected = self.contended = self.rerun = 0
        self.waited_s = 0.0
        self.best_canary_s = math.inf
        self.checked = HostLoad.read() is not None
        self._note = note
        self._noted = False

    def run(self, jobs: Mapping[str, Job]) -> dict[str, list[float]]:
        """Seconds per call from every job, each from a segment that ran on a quiet host if it could."""
        results: dict[str, list[float]] = {}
        canary: dict[str, float] = {}
        for key, job in jobs.items():
            results[key], canary[key] = self._segment(job)
        for key, job in jobs.items():
            if canary[key] > self.SLOW_LIMIT * self.best_canary_s and self.wait_left_s > 0:
                self.rerun += 1
                again, _ = self._segment(job)
                results[key] = [min(a, b) for a, b in zip(results[key], again)]
        return results

    def _segment(self, job: Job) -> tuple[list[float], float]:
        while True:
            before, canary_before = HostLoad.read(), _canary_s()
            start = time.perf_counter()
            values = job()
            wall = time.perf_counter() - start
            after, canary_after = HostLoad.read(), _canary_s()
            canary = max(canary_before, canary_after)
            self.best_canary_s = min(self.best_canary_s, canary_before, canary_after)
            self.segments += 1
            if self._quiet(before, after, wall) and canary <= self.SLOW_LIMIT * self.best_canary_s:
                return values, canary
            if self.wait_left_s <= 0:
                self.contended += 1
                return values, canary
            self.rejected += 1
            if not self._noted:
                self._note("the host is busy or slowed down: pausing timings until it is quiet")
                self._noted = True
            pause = min(self.PAUSE_S, self.wait_left_s)
            time.sleep(pause)
            self.wait_left_s -= pause + wall
            self.waited_s += pause + wall

    def _quiet(self, before: HostLoad | None, after: HostLoad | None, wall_s: float) -> bool:
        if before is None or after is None:
            return True
        if before.stall_s is not None and after.stall_s is not None \
                and after.stall_s - before.stall_s > self.STALL_LIMIT * wall_s:
            return False
        window_ticks = wall_s * os.sysconf("SC_CLK_TCK") * (os.cpu_count() or 1)
        other_ticks = (after.busy_ticks - before.busy_ticks) - (after.own_ticks - before.own_ticks)
        return other_ticks <= max(1.0, self.OTHER_LIMIT * window_ticks)

    def to_json(self) -> dict[str, Any]:
        return {"segments": self.segments, "rejected": self.rejected, "rerun": self.rerun,
                "contended": self.contended, "waited_s": round(self.waited_s, 2),
                "canary_s": self.best_canary_s, "checked": self.checked}


def _canary_s(calls: int = 50) -> float:
    """Fastest of three loops of `calls` tiny aten adds: how fast the host runs eager torch right now."""
    import torch

    t, add = torch.ones(8), torch.ops.aten.add.Tensor
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            add(t, 1.0)
        best = min(best, time.perf_counter() - start)
    return best


def time_rounds(fns: Sequence[Callable[[], Any]], *, rounds: int, calls: int, min_s: float) -> list[float]:
    """Seconds per call of each of `fns`: the fastest over rounds of the median of `calls` calls.

    Rounds go over every fn in turn, so a burst of load spoils one round of
    several fns rather than every round of one, and continue past `rounds`
    until `min_s` has passed (at most 50 rounds), so a segment is long
    enough for `QuietGate` to judge it.
    """
    for fn in fns:
        fn()  # warm-up: allocator, oneDNN primitive caches
    best = [math.inf] * len(fns)
    start = time.perf_counter()
    done = 0
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while done < rounds or (time.perf_counter() - start < min_s and done < 50):
            for i, fn in enumerate(fns):
                times = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t0)
                best[i] = min(best[i], statistics.median(times))
            done += 1
    finally:
        if gc_was_enabled:
            gc.enable()
    return best
