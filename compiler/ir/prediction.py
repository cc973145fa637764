"""Predictions with intervals: how far measurements of one kind of prediction have landed from it.

Standard library only. A `Spread` is the ratio measured / predicted at the low and high ends of an 80%
interval for one kind of prediction (a device family or device, an engine, a metric), with what it rests on
(`basis`, `rows`, `groups`). `Spread.of` turns a predicted time into an `Interval`; a rate (tokens/s, req/s)
is the inverse of a time, so `Spread.inverse` gives its spread. `Spread.from_log_residuals` makes one from
leave-one-out residuals; an unbounded spread (``hi`` infinite) is what a prediction with no measurement
behind it gets ([Note: prediction intervals]).

>>> s = Spread(0.8, 1.5, "example", rows=40, groups=5)
>>> s.of(10.0)
Interval(lo=8.0, hi=15.0)
>>> s.inverse().of(100.0).text()
'66.7-125'
>>> Spread.from_json(s.to_json()) == s
True
>>> UNBOUNDED.of(3.0).to_json(), UNBOUNDED.bounded
([0.0, None], False)

[Note: prediction intervals] Every figure gimletc predicts carries an 80% interval
taken from the errors of its own kind: the leave-one-out residuals (log of measured
over predicted, each row predicted by a fit that never saw it) of the rows that
share its basis. The bases, most specific first (`cost_models.spreads.spread_for`):
a measurement of this very device and engine (a ``gimletc calibrate`` profile or
engine record: its own points, each predicted with the others' fit); the serving
sweeps of the device's engine (the GPUs whose efficiencies the sweeps fit, each
row predicted with its whole model x device x engine group left out); the
published rows of the device's family (each predicted with its family's other
rows); a device of a measured family with no rows of its own (rows predicted with
their own device left out of the fit); a family fitted on nothing (rows of every
family predicted with the generic derate); and none at all (a host whose serving
engine was never measured: unbounded, nothing is claimed). With many rows the
interval is the empirical 10th to 90th percentile of the residuals; with few,
a t interval around their median, so it widens as the rows thin out. Rows of one
group (one model on one device under one engine) move together, so the basis
counts its groups too.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

#: Coverage every interval aims at: 80% of measurements inside.
COVERAGE = 0.8
#: Rows, and groups of rows that move together, from which the interval is the residuals' own percentiles; fewer
#: take the t interval.
EMPIRICAL_ROWS = 30
EMPIRICAL_GROUPS = 8
#: Two-sided 80% t quantiles (the 90th percentile of Student's t) by degrees of freedom 1-30; above 30 the
#: normal's 1.2816 (standard t table, e.g. NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2).
T90 = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356, 1.350, 1.345, 1.341,
       1.337, 1.333, 1.330, 1.328, 1.325, 1.323, 1.321, 1.319, 1.318, 1.316, 1.315, 1.314, 1.313, 1.311, 1.310)
Z90 = 1.2816


@dataclass(frozen=True, slots=True)
class Interval:
    """An 80% interval of one predicted figure, in its own unit; ``hi`` infinite where nothing bounds it."""

    lo: float
    hi: float

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.hi)

    def contains(self, value: float) -> bool:
        return self.lo <= value <= self.hi

    def scaled(self, factor: float) -> Interval:
        return Interval(self.lo * factor, self.hi * factor)

    def to_json(self) -> list[float | None]:
        """``[lo, hi]``; an unbounded end is ``null`` (JSON has no infinity)."""
        return [self.lo, self.hi if self.bounded else None]

    @staticmethod
    def from_json(v: Sequence[float | None]) -> Interval:
        return Interval(float(v[0] or 0.0), math.inf if v[1] is None else float(v[1]))

    def text(self, digits: int = 3) -> str:
        """``8.1-15`` (3 significant digits), or ``8.1-?`` where unbounded."""
        hi = f"{self.hi:.{digits}g}" if self.bounded else "?"
        return f"{self.lo:.{digits}g}-{hi}"


@dataclass(frozen=True, slots=True)
class Spread:
    """Measured / predicted at the ends of an 80% interval, for the predictions of one kind."""

    lo: float
    hi: float  # math.inf: unbounded, nothing measured pins this kind down
    basis: str  # what the residuals are, in words
    rows: int = 0
    groups: int = 0

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.hi) and self.lo > 0

    def of(self, value: float) -> Interval:
        """The interval of a predicted time (or any figure that grows with the residual)."""
        return Interval(value * self.lo, value * self.hi if self.bounded else math.inf)

    def inverse(self) -> Spread:
        """The spread of the inverse figure (a rate, where `self` is its time's)."""
        if not self.bounded:
            return Spread(0.0, math.inf, self.basis, self.rows, self.groups)
        return Spread(1.0 / self.hi, 1.0 / self.lo, self.basis, self.rows, self.groups)

    @property
    def width(self) -> float:
        """How wide the interval is as one number: hi / lo (1.0: a point; infinite when unbounded)."""
        return self.hi / self.lo if self.bounded else math.inf

    def to_json(self) -> dict[str, Any]:
        return {"lo": self.lo, "hi": self.hi if self.bounded else None, "basis": self.basis, "rows": self.rows,
                "groups": self.groups}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Spread:
        return Spread(float(d["lo"]), math.inf if d.get("hi") is None else float(d["hi"]), str(d["basis"]),
                      int(d.get("rows", 0)), int(d.get("groups", 0)))

    @staticmethod
    def from_log_residuals(logs: Sequence[float], basis: str, groups: int | None = None,
                           weights: Sequence[float] | None = None) -> Spread:
        """The 80% spread of residuals ``log(measured / predicted)`` ([Note: prediction intervals]): their 10th
        and 90th percentiles (each row counting its `weights`: a group's rows share one group's weight) from
        `EMPIRICAL_ROWS` rows in `EMPIRICAL_GROUPS` groups on, else their median plus or minus a t interval (degrees
        of freedom from the rows or, where fewer, the `groups`); unbounded below two rows or two groups. An interval
        always holds its own prediction (ratio 1), widened to it where the residuals lean to one side.

        >>> s = Spread.from_log_residuals([math.log(r) for r in (0.9, 1.0, 1.1, 1.2)], "four rows")
        >>> round(s.lo, 3), round(s.hi, 3), s.rows
        (0.836, 1.316, 4)
        """
        pairs = sorted(zip((float(x) for x in logs), weights if weights is not None else [1.0] * len(logs)))
        xs = [x for x, _w in pairs]
        n = len(xs)
        g = n if groups is None else groups
        if n < 2 or g < 2:
            return Spread(0.0, math.inf, basis + " (fewer than two measurements: unbounded)", n, g)
        if n >= EMPIRICAL_ROWS and g >= EMPIRICAL_GROUPS:
            lo, hi = (_weighted_percentile(pairs, (1 - COVERAGE) / 2),
                      _weighted_percentile(pairs, (1 + COVERAGE) / 2))
        else:
            df = min(n, g) - 1
            t = T90[df - 1] if df <= len(T90) else Z90
            total = sum(w for _x, w in pairs)
            mean = sum(x * w for x, w in pairs) / total
            var = sum(w * (x - mean) ** 2 for x, w in pairs) / total * min(n, g) / (min(n, g) - 1)
            half = t * math.sqrt(var) * math.sqrt(1 + 1 / min(n, g))
            mid = _weighted_percentile(pairs, 0.5)
            lo, hi = mid - half, mid + half
        return Spread(math.exp(min(lo, 0.0)), math.exp(max(hi, 0.0)), basis, n, g)


def _weighted_percentile(pairs: Sequence[tuple[float, float]], q: float) -> float:
    """The `q` quantile of sorted (value, weight) `pairs`: each value stands at the middle of its weight's share of
    the cumulative weight, linear between (with equal weights: numpy's "hazen" quantile).

    >>> round(_weighted_percentile([(0.0, 1), (1.0, 1), (2.0, 1), (3.0, 1)], 0.5), 6)
    1.5
    """
    total = sum(w for _x, w in pairs)
    at, mids = 0.0, []
    for _x, w in pairs:
        mids.append((at + w / 2) / total)
        at += w
    if q <= mids[0]:
        return pairs[0][0]
    for (x0, _w0), (x1, _w1), m0, m1 in zip(pairs, pairs[1:], mids, mids[1:]):
        if q <= m1:
            return x0 + (q - m0) / (m1 - m0) * (x1 - x0) if m1 > m0 else x1
    return pairs[-1][0]


UNBOUNDED = Spread(0.0, math.inf, "no measurement of this kind: unbounded")
