"""A rate forecast for the next window, kept simple and stated: Holt's linear exponential smoothing.

Over the rates of consecutive windows y_0, y_1, ... (one series per request class):

    level_t = α·y_t + (1 − α)·(level_{t−1} + trend_{t−1})
    trend_t = β·(level_t − level_{t−1}) + (1 − β)·trend_{t−1}
    forecast = level + trend, floored at zero

starting from level_0 = y_0 and trend_0 = y_1 − y_0. α = `ALPHA` and β = `BETA` are fixed, not fitted: half
the weight on the newest window, a trend that follows in about three. With one window there is no trend and
the forecast is that window's rate; a user who distrusts it passes ``--forecast none`` (the last window's
rate). `errors` replays a series and reports the one-step-ahead error of this forecast beside the last-value
forecast's, so whether the trend helps is measured, not assumed (`tools/replay.py` prints both).

>>> round(holt([10.0, 20.0, 30.0, 40.0]), 9)   # a straight line is extrapolated exactly
50.0
>>> holt([7.0])
7.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 0.5
BETA = 0.3


def holt(series: list[float], alpha: float = ALPHA, beta: float = BETA) -> float:
    """The one-step-ahead forecast of `series` (oldest first)."""
    if not series:
        raise ValueError("a forecast needs at least one window")
    if len(series) == 1:
        return max(series[0], 0.0)
    level, trend = series[0], series[1] - series[0]
    for y in series[1:]:
        previous = level
        level = alpha * y + (1 - alpha) * (level + trend)
        trend = beta * (level - previous) + (1 - beta) * trend
    return max(level + trend, 0.0)


@dataclass(frozen=True, slots=True)
class ForecastError:
    """One-step-ahead errors over a replayed series: mean absolute percentage error of Holt's forecast and of
    the last value's, over `points` forecasts (windows with a zero actual rate are skipped)."""

    points: int
    holt_mape: float
    last_value_mape: float


def errors(series: list[float], alpha: float = ALPHA, beta: float = BETA) -> ForecastError:
    """Forecast each window from the ones before it (two at least) and compare with what came.

    >>> e = errors([10.0, 20.0, 30.0, 40.0])
    >>> e.points, round(e.holt_mape, 9), round(e.last_value_mape, 4)   # a ramp: exact, against 1/3 and 1/4 off
    (2, 0.0, 0.2917)
    """
    holt_err, last_err = [], []
    for t in range(2, len(series)):
        actual = series[t]
        if actual <= 0:
            continue
        holt_err.append(abs(holt(series[:t], alpha, beta) - actual) / actual)
        last_err.append(abs(series[t - 1] - actual) / actual)
    if not holt_err:
        return ForecastError(0, math.nan, math.nan)
    return ForecastError(len(holt_err), sum(holt_err) / len(holt_err), sum(last_err) / len(last_err))


def chosen_forecast(how: str, error: ForecastError) -> str:
    """The forecast a class gets: "holt" or "none" as asked; under "auto", Holt's only where it replayed with a
    smaller one-step error than the last value's on the windows read (three or more), else the last value: a
    trend is extrapolated only where the same metrics have shown that it helps."""
    if how != "auto":
        return how
    return "holt" if error.points and error.holt_mape < error.last_value_mape else "none"
