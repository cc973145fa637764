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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compiler.replan.settings import ClassPlan, Settings

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


def forecast_statement(settings: Settings, classes: tuple[ClassPlan, ...]) -> str:
    """The forecast used, in words, with its error on the windows it read (what ``gimletc replan`` prints)."""
    windows = max((c.windows for c in classes), default=0)
    if settings.forecast == "auto":
        picks = ", ".join(f"{c.name} {'Holt' if c.error_points and c.holt_mape < c.last_value_mape else 'last value'}"
                          for c in classes)
        how = (f"per class, the one with the smaller replayed error of Holt's smoothing (alpha {ALPHA:g}, beta "
               f"{BETA:g}) and the last window's rate (--forecast auto; {picks}) over {windows} window(s) of "
               f"{settings.window_s:g} s")
    elif settings.forecast == "holt":
        how = (f"Holt's linear exponential smoothing (alpha {ALPHA:g}, beta {BETA:g}) over {windows} window(s) of "
               f"{settings.window_s:g} s")
    else:
        how = f"the last window's rates (--forecast none; {windows} window(s) of {settings.window_s:g} s read)"
    scored = [c for c in classes if c.error_points]
    if not scored:
        return f"forecast: {how}; its error is unmeasured here (replaying it needs three windows or more)"
    errs = ", ".join(f"{c.name} {c.holt_mape:.1%} (last value {c.last_value_mape:.1%}, {c.error_points} window(s))"
                     for c in scored)
    return f"forecast: {how}; one-step error replayed on these windows, Holt against the last value: {errs}"


#: Smallest share a class keeps in the planned workload: a class that vanished from the window still has its
#: pools' SLOs to meet if it returns, and the workload file refuses a zero share.
MIN_SHARE = 1e-3


def forecast_error(c: ClassPlan, how: str) -> float | None:
    """The replayed one-step error (a fraction of the rate) of the forecast class `c` got; None when unmeasured."""
    if not c.error_points:
        return None
    pick = chosen_forecast(how, ForecastError(c.error_points, c.holt_mape, c.last_value_mape))
    return c.holt_mape if pick == "holt" else c.last_value_mape


def checked_rates(classes: tuple[ClassPlan, ...], settings: Settings) -> list[dict[str, float]]:
    """The class rates the cool-down's overload check runs the running plan at ([Note: cool-down]): the forecast,
    then each class's forecast moved up by ``forecast_weight`` times the larger of the two forecasts' replayed
    errors, the others kept. The larger: with a few windows replayed, the error of the forecast chosen (the lower of
    two noisy estimates) is biased low, and a false alarm here costs only the cool-down's margin.

    >>> from compiler.replan.settings import ClassPlan, Settings
    >>> chat = ClassPlan("chat", 30.0, 30.0, 0.75, 0.01, 512, 256, 5, 0.3, 0.2, 3)   # Holt 30%, last value 20% off
    >>> docs = ClassPlan("docs", 10.0, 10.0, 0.25, 0.01, 6000, 128, 5, 0.5, 0.6, 3)  # Holt 50%, last value 60% off
    >>> checked_rates((chat, docs), Settings())
    [{'chat': 30.0, 'docs': 10.0}, {'chat': 39.0, 'docs': 10.0}, {'chat': 30.0, 'docs': 16.0}]
    """
    rates = {c.name: c.forecast_requests_per_s for c in classes}
    out = [rates]
    for c in classes if settings.forecast_weight > 0 else ():
        err = max(c.holt_mape, c.last_value_mape) if c.error_points else None
        if err and rates[c.name]:
            out.append(dict(rates, **{c.name: rates[c.name] * (1 + settings.forecast_weight * err)}))
    return out


def forecast_mixes(classes: tuple[ClassPlan, ...], settings: Settings) -> list[tuple[dict[str, float], ...]]:
    """Pairs of class shares: each class's forecast rate moved up and down by ``forecast_weight`` times its
    replayed error ([Note: forecast error]), the others kept: the mixes the next window may bring instead.

    >>> from compiler.replan.settings import ClassPlan, Settings
    >>> chat = ClassPlan("chat", 30.0, 30.0, 0.75, 0.01, 512, 256, 5, 0.3, 0.2, 3)   # last value: 20% off
    >>> docs = ClassPlan("docs", 10.0, 10.0, 0.25, 0.01, 6000, 128, 5, 0.5, 0.6, 3)  # Holt: 50% off
    >>> [[round(m["chat"], 4) for m in pair] for pair in forecast_mixes((chat, docs), Settings())]
    [[0.7826, 0.7059], [0.6667, 0.8571]]
    """
    out = []
    rates = {c.name: c.forecast_requests_per_s for c in classes}
    for c in classes if settings.forecast_weight > 0 and len(classes) > 1 else ():
        err = forecast_error(c, settings.forecast)
        if not err or not rates[c.name]:
            continue
        pair = []
        for sign in (1, -1):
            moved = dict(rates, **{c.name: rates[c.name] * max(1 + sign * settings.forecast_weight * err, 0.0)})
            shares = {n: max(r / sum(moved.values()), MIN_SHARE) for n, r in moved.items()}
            pair.append({n: v / sum(shares.values()) for n, v in shares.items()})
        out.append(tuple(pair))
    return out
