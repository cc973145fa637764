"""Fit a serving engine's step costs on this host from its closed-loop measurements (``gimletc calibrate --engine``).

Before: `Row` s measured with the engine's own benchmark client
(`compiler.calibrate.engine`): C closed-loop clients, fixed prompt and output
lengths, the median TTFT and TPOT of the point's requests; each row tagged fit
or held out. After: the `Engine` whose `cost_models.load.closed_loop`
predictions (what ``gimletc estimate --concurrency C`` computes) match the fit
rows best, and its prediction for every row.

[Note: engine fit on the host] The same model and fitter as the serving
sweeps (``tools/fidelity_sweeps.py --fit``): for each set of kernel
efficiencies in `KERNEL_GRID` (``compute_eff``, ``mem_eff``: the shares of the
device's peaks the engine's kernels reach, compute up to the share of the
cores it computes on) the engine-independent steps are
costed once per row (`cost_models.load.loop_steps`), and the engine's own
numbers (`FIT_PARAMS`: host time per step and per running sequence, front end,
closed-loop admission and wave share) are fitted by
`compiler.calibrate.fit.fit_fields` on the closed form
(`cost_models.load.assemble`), minimising mean |log| error of TTFT plus twice
that of TPOT. Each set is scored by a short fit; the best set's is fitted in
full. On one model the per-block and per-call overheads cost the same in every
step, so they cannot be told from the per-step time: they are folded into it
(set to zero, and said so in the provenance). A held-out row passed to the fit
is refused (`compiler.calibrate.fit.refuse_held_out`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

from compiler.calibrate.fit import Param, fit_fields, refuse_held_out
from compiler.ir.block_graph import BlockGraph
from compiler.ir.prediction import Spread
from cost_models.engines import Engine, with_measured_kernels
from cost_models.load import ClosedLoop, LoopSteps, RequestShape, assemble, closed_loop, loop_steps
from cost_models.serving import Deployment

#: An engine's front end and closed-loop admission, as this fit and the serving sweeps' (``tools/fidelity_sweeps.py``)
#: both fit them. A lower bound stands for "none", so it must be negligible at every row: the admission wait is that
#: share of a whole request's life over C, and 1% of it was 120 ms at 8,192 output tokens and 4 clients (GPT-OSS-120B,
#: whose TTFT does not grow with the output length), so "none" is 0.01%.
ENGINE_OWN_PARAMS = (Param("request_overhead_s", 1e-4, 1.0, grid_lo=1e-3),  # front end: up to a second
                     Param("admission_fraction", 1e-4, 1.0, grid_lo=1e-3))  # closed loop: wait for the next completion
#: The engine's own numbers, with physical bounds (lower bounds stand for "none"). On a CPU the host work of a step
#: (Python scheduling, input preparation, sampling) is milliseconds, not the GPU's microseconds.
FIT_PARAMS = (Param("step_overhead_s", 1e-5, 0.1, grid_lo=3e-4),  # host time per step: up to 100 ms
              Param("seq_overhead_s", 1e-7, 5e-3, grid_lo=1e-6),  # per running sequence per step: up to 5 ms
              *ENGINE_OWN_PARAMS,
              Param("sync_fraction", 0.01, 1.0, grid_lo=0.02))  # closed loop: share arriving in waves
#: Kernel efficiencies tried (compute_eff x mem_eff), as shares of the device's peaks as `host_device` states them
#: (`fit_engine` keeps the compute shares its cores can reach).
KERNEL_GRID = tuple((c, m) for c in (0.03, 0.06, 0.1, 0.15, 0.22, 0.33, 0.5, 0.75, 1.0) for m in (0.25, 0.5, 1.0))


@dataclass(frozen=True, slots=True)
class Point:
    """One closed-loop load: C clients, fixed prompt and output lengths, `requests` requests in all."""

    concurrency: int
    input_len: int
    output_len: int
    requests: int
    held_out: bool = False

    @property
    def name(self) -> str:
        return f"c{self.concurrency} i{self.input_len} o{self.output_len}"


class OfPoint:
    """What a measured row says of its `Point`: held out or not, and its name."""

    __slots__ = ()
    point: Point

    @property
    def held_out(self) -> bool:
        return self.point.held_out

    @property
    def name(self) -> str:
        return self.point.name


@dataclass(frozen=True, slots=True)
class Row(OfPoint):
    """A measured `Point`: medians over its requests, and their spread (25th to 75th percentile)."""

    point: Point
    ttft_s: float
    tpot_s: float
    ttft_iqr_s: tuple[float, float]
    tpot_iqr_s: tuple[float, float]
    result_file: str  # the benchmark client's own --save-result JSON


@dataclass(frozen=True, slots=True)
class Case(OfPoint):
    """One measured load as the fit sees it: the model's BlockGraph, the deployment that served it (its device at
    its shipped derate, the engine's budget and max batch as launched), the load and the medians measured."""

    graph: BlockGraph
    dep: Deployment
    point: Point
    ttft_s: float
    tpot_s: float
    lockstep: bool = True  # the run's requests all had the same lengths ([Note: waves])


def _shape(p: Point) -> RequestShape:
    return RequestShape(p.input_len, p.output_len)


def _slots(p: Point, engine: Engine) -> int:
    return max(1, min(p.concurrency, engine.max_batch))


#: A kernel set: the `Derate` efficiencies a fit tries, by field name.
Kernels = tuple[tuple[str, float], ...]


def _at(dep: Deployment, engine: Engine, kernels: Kernels) -> Deployment:
    return replace(dep, engine=engine, derate=replace(dep.derate, **dict(kernels)))


def physics(cases: Sequence[Case], kernels: Kernels) -> list[LoopSteps]:
    """Each case's engine-independent steps at `kernels` (its deployment's engine sets the token budget and the
    most sequences per step)."""
    return [loop_steps(c.graph, _at(c.dep, c.dep.engine, kernels), c.point.concurrency, _shape(c.point),
                       slots=_slots(c.point, c.dep.engine)) for c in cases]


def loss(cases: Sequence[Case], steps: Sequence[LoopSteps], engine: Engine) -> float:
    """Mean |log| error of TTFT plus twice that of TPOT (as the serving sweeps' fit)."""
    total = 0.0
    for c, s in zip(cases, steps):
        loop = assemble(s, engine, c.dep.derate, lockstep=c.lockstep)  # a benchmark's medians: [Note: the median
        total += (abs(math.log(loop.ttft_median_s / c.ttft_s))        # request] in cost_models/load.py
                  + 2 * abs(math.log(loop.tpot_median_s / c.tpot_s)))
    return total / len(cases)


def kernel_grid(compute_share: float = 1.0, fp8: bool = False) -> list[Kernels]:
    """The kernel sets a fit tries: `KERNEL_GRID`'s compute and memory shares, compute at most `compute_share`
    (the cores an engine computes on); for FP8 matmuls the compute share is of the FP8 peak
    (``fp8_compute_eff``)."""
    compute = "fp8_compute_eff" if fp8 else "compute_eff"
    return [((compute, c), ("mem_eff", m)) for c, m in KERNEL_GRID if c <= compute_share + 1e-9]


def fit_cases(cases: Sequence[Case], start: Engine, grid: Sequence[Kernels], *,
              params: Sequence[Param] = FIT_PARAMS) -> tuple[Engine, float]:
    """The engine (from `start`, its budget and max batch kept) and kernel set of `grid` that best predict
    `cases`, and its loss; see [Note: engine fit on the host]. Raises `compiler.calibrate.fit.HeldOutRow` if a
    case is held out."""
    refuse_held_out(cases, "engine fit")
    if not cases:
        raise ValueError("engine fit: no rows to fit on")
    base = replace(start, block_overhead_s=0.0, op_overhead_s=0.0, **{p.name: p.lo for p in params})

    def fit_at(kernels: Kernels, grid_points: int, restarts: int) -> tuple[float, Engine]:
        steps = physics(cases, kernels)
        fitted = fit_fields(lambda c: (loss(cases, steps, c), c), base, params, grid_points=grid_points,
                            restarts=restarts)
        fitted = replace(fitted, **dict(kernels))
        return loss(cases, steps, fitted), fitted

    scored = sorted((fit_at(k, 3, 1)[0], k) for k in grid)
    best = min((fit_at(k, 4, 3) for _score, k in scored[:2]), key=lambda entry: entry[0])
    return best[1], best[0]


def fit_engine(graph: BlockGraph, dep: Deployment, rows: Sequence[Row], *, grid: Sequence[tuple[float, float]] =
               KERNEL_GRID, compute_share: float = 1.0) -> tuple[Engine, float]:
    """The engine (from `dep.engine`, its budget and max batch kept) that best predicts `rows`, and its loss; see
    [Note: engine fit on the host]. `compute_share`: the share of the device's compute peak on the cores the engine
    computes on, the most its ``compute_eff`` can be (`grid` values above it are not tried). Raises
    `compiler.calibrate.fit.HeldOutRow` if a row is held out."""
    refuse_held_out(rows, "engine fit")
    sets = [(("compute_eff", c), ("mem_eff", m)) for c, m in grid if c <= compute_share + 1e-9]
    return fit_cases([Case(graph, dep, r.point, r.ttft_s, r.tpot_s) for r in rows], dep.engine, sets)


def predict(graph: BlockGraph, dep: Deployment, engine: Engine, point: Point, lockstep: bool = True) -> ClosedLoop:
    """What ``gimletc estimate --concurrency C`` predicts for `point` under `engine` (its kernels' efficiencies and
    overheads on `dep`'s derate)."""
    served = replace(dep, engine=engine, derate=with_measured_kernels(engine, engine.applied_to(dep.derate)))
    return closed_loop(graph, served, point.concurrency, _shape(point), slots=_slots(point, engine),
                       lockstep=lockstep)


def spreads(cases: Sequence[Any], predicted: Sequence[tuple[float, float]], basis: str) -> dict[str, Spread]:
    """The 80% spread of each metric from held-out predictions (TTFT, TPOT) of `cases` (anything with the
    ``point``, ``ttft_s`` and ``tpot_s`` measured: a `Case`, an engine sweep's `Row`)."""
    logs: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2e": []}
    for c, (ttft, tpot) in zip(cases, predicted):
        out = c.point.output_len
        logs["ttft"].append(math.log(c.ttft_s / ttft))
        logs["tpot"].append(math.log(c.tpot_s / tpot))
        logs["e2e"].append(math.log((c.ttft_s + (out - 1) * c.tpot_s) / (ttft + (out - 1) * tpot)))
    return {m: Spread.from_log_residuals(v, basis) for m, v in logs.items()}
