"""The one fitter of cost-model parameters: bounded fields found by a coarse grid and Nelder-Mead.

Every fit in gimletc uses it: the host CPU's derate (``gimletc calibrate``, on
measured block times), the accelerator families' derates (``tools/fidelity.py``,
on published measurements) and the serving engines' scheduler costs
(``tools/fidelity.py --sweeps``, on measured serving sweeps). The caller
supplies `evaluate`, which scores a candidate (a frozen dataclass: a `Derate`
or an `Engine`) and may complete it (the host fit solves its overheads in
closed form for each candidate, see `robust_overheads`).

[Note: derate fit] Every fitted parameter is a positive physical quantity with
bounds (an efficiency in (0, 1], an overhead in seconds). The search runs in
log space: a coarse geometric grid over the parameters marked ``in_grid``
(the others stay at the start value), then a Nelder-Mead simplex from the best
few grid points, each coordinate stepping one grid spacing; candidates are
clipped to their bounds before they are evaluated. The loss surface of a
roofline is multi-modal (the max() of compute and memory time) with valleys
running diagonally, where a one-coordinate search stalls.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

#: Scores a candidate derate: (loss, the candidate as it should be kept).
Evaluate = Callable[[Any], tuple[float, Any]]


@dataclass(frozen=True, slots=True)
class Param:
    """One fitted field: bounds, and where its coarse grid starts (``grid_lo``, up to ``hi``)."""

    name: str
    lo: float
    hi: float
    grid_lo: float | None = None
    in_grid: bool = True

    def grid(self, points: int) -> list[float]:
        lo = self.grid_lo if self.grid_lo is not None else self.lo
        return [lo * (self.hi / lo) ** (i / (points - 1)) for i in range(points)]

    def clip(self, value: float) -> float:
        return min(max(value, self.lo), self.hi)


class HeldOutRow(ValueError):
    """A fit was handed a row tagged as held out (a row it is asked to predict)."""


def refuse_held_out(rows: Sequence[Any], what: str = "fit") -> None:
    """Raise `HeldOutRow` if any of `rows` (anything with a ``held_out`` attribute) is tagged held out: a row a fit
    saw is no longer a prediction.

    >>> from types import SimpleNamespace as Row
    >>> refuse_held_out([Row(held_out=False, name="a")])
    >>> refuse_held_out([Row(held_out=True, name="c8 i256 o32")])
    Traceback (most recent call last):
    ...
    compiler.calibrate.fit.HeldOutRow: fit: row c8 i256 o32 is held out (it is to be predicted, not fitted on); pass only the fit rows
    """
    for row in rows:
        if getattr(row, "held_out", False):
            raise HeldOutRow(f"{what}: row {getattr(row, 'name', row)} is held out (it is to be predicted, not fitted "
                             f"on); pass only the fit rows")


def fit_fields(evaluate: Evaluate, start: Any, params: Sequence[Param], *, grid_points: int = 5,
               restarts: int = 3) -> Any:
    """The fields of `start` (a frozen dataclass) that `evaluate` scores best; see [Note: derate fit]."""

    def at(values: Sequence[float]) -> tuple[float, Any]:
        return evaluate(replace(start, **{p.name: p.clip(v) for p, v in zip(params, values)}))

    grids = [p.grid(grid_points) if p.in_grid else [p.clip(getattr(start, p.name))] for p in params]
    starts = sorted(((at(values)[0], values) for values in itertools.product(*grids)), key=lambda entry: entry[0])
    steps = [math.log(p.grid(grid_points)[1] / p.grid(grid_points)[0]) for p in params]

    def log_loss(x: Sequence[float]) -> float:
        return at([math.exp(v) for v in x])[0]

    best = min((nelder_mead(log_loss, [math.log(v) for v in values], steps=steps)
                for _loss, values in starts[:restarts]), key=lambda entry: entry[0])[1]
    return at([math.exp(v) for v in best])[1]


def nelder_mead(f: Callable[[Any], float], x0: Sequence[float], *, steps: Sequence[float], iterations: int = 300,
                tolerance: float = 1e-7) -> tuple[float, Any]:
    """Minimise `f` from `x0` with the Nelder-Mead simplex method; returns (value, point).

    >>> value, x = nelder_mead(lambda x: (x[0] - 1) ** 2 + (x[1] + 2) ** 2, [0.0, 0.0], steps=[0.5, 0.5])
    >>> [round(float(v), 3) for v in x]
    [1.0, -2.0]
    """
    import numpy as np

    x0 = np.asarray(x0, dtype=float)
    simplex = [x0] + [x0 + step * e for step, e in zip(steps, np.eye(len(x0)))]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tolerance:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        f_reflected = f(reflected)
        if f_reflected < values[0]:
            expanded = centroid + 2.0 * (centroid - simplex[-1])
            f_expanded = f(expanded)
            simplex[-1], values[-1] = (expanded, f_expanded) if f_expanded < f_reflected else (reflected, f_reflected)
        elif f_reflected < values[-2]:
            simplex[-1], values[-1] = reflected, f_reflected
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            f_contracted = f(contracted)
            if f_contracted < values[-1]:
                simplex[-1], values[-1] = contracted, f_contracted
            else:  # shrink towards the best point
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    i = int(np.argmin(values))
    return values[i], simplex[i]


def robust_overheads(roof, ops, measured) -> tuple[float, float]:
    """Non-negative (block_s, op_s) minimising the mean |relative error| of ``roof + block_s + op_s * ops``
    against `measured` (iteratively reweighted least squares)."""
    import numpy as np

    columns = np.stack([1.0 / measured, ops / measured], axis=1)
    target = 1.0 - roof / measured  # relative error = columns @ (block_s, op_s) - target
    solution = _overheads(columns, target)
    for _ in range(15):
        weight = 1.0 / np.sqrt(np.maximum(np.abs(columns @ solution - target), 1e-3))
        solution = _overheads(columns * weight[:, None], target * weight)
    return float(solution[0]), float(solution[1])


def _overheads(columns, target):
    """Non-negative least squares in two unknowns: the free solution, else the best with one pinned at zero."""
    import numpy as np

    solution = np.linalg.lstsq(columns, target, rcond=None)[0]
    if (solution >= 0).all():
        return solution
    best, best_err = np.zeros(2), float(target @ target)
    for j in (0, 1):
        col = columns[:, j]
        value = max(float(col @ target / (col @ col)), 0.0)
        err = float(np.sum((target - col * value) ** 2))
        if err < best_err:
            best, best_err = np.eye(2)[j] * value, err
    return best
