"""How far a replan may move and what it takes to move (`Settings`, the CLI's defaults), and a class as the
replan plans for it (`ClassPlan`): the values the forecast, the history and the replan itself all read."""

from __future__ import annotations

from dataclasses import dataclass

#: Defaults of the CLI's flags.
WINDOW_S = 600.0
MIN_GAIN = 0.10
SLACK = 0.02
#: How many standard errors the gain must clear ([Note: hysteresis]).
GAIN_SIGMAS = 2.0
#: [Note: cool-down]: for how many windows a change is recent, and the gain a move back needs beyond min_gain.
COOLDOWN_WINDOWS = 3
COOLDOWN_GAIN = 0.10
#: [Note: forecast error]: how many replayed one-step errors of each class's forecast enter the gain's error.
FORECAST_WEIGHT = 1.0


@dataclass(frozen=True, slots=True)
class Settings:
    """How far a replan may move and what it takes to move."""

    window_s: float = WINDOW_S
    max_moves: int | None = None
    min_gain: float = MIN_GAIN
    slack: float = SLACK
    forecast: str = "auto"  # "holt", "none" (the last window's rates), or "auto" (`chosen_forecast`)
    time_limit_s: float = 60.0
    cooldown_windows: int = COOLDOWN_WINDOWS  # [Note: cool-down]; 0: off
    cooldown_gain: float = COOLDOWN_GAIN
    forecast_weight: float = FORECAST_WEIGHT  # [Note: forecast error]; 0: off


@dataclass(frozen=True, slots=True)
class ClassPlan:
    """One class as the replan plans for it: measured over the window, forecast for the next (a prediction)."""

    name: str
    measured_requests_per_s: float
    forecast_requests_per_s: float
    share: float
    share_se: float
    input_mean: float
    output_mean: float
    windows: int  # how many windows the forecast read
    #: the forecast's one-step-ahead errors replayed over those windows (`compiler.replan.forecast.errors`): mean
    #: absolute percentage errors of Holt's and of the last value's forecast, over `error_points` windows (None:
    #: fewer than three windows, nothing to replay)
    holt_mape: float | None = None
    last_value_mape: float | None = None
    error_points: int = 0
