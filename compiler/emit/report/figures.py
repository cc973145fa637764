"""How a predicted figure and its 80% interval read, in the summary and on the console alike.

>>> with_interval(999.0, [812.4, 1240.0], ".0f")
'999 (812-1240)'
>>> with_interval(0.71, [0.0, None], ".2f")
'0.71 (no bound)'
>>> gain_text(1.12, [1.051, 1.2]), gain_text(1.01, [0.79, 1.28]), gain_text(1.0, [0.0, None])
('1.12x (1.05-1.20)', '1.01x (0.79-1.28)', '1.00x (no bound)')
"""

from __future__ import annotations

from typing import Sequence

#: What an interval is, in one sentence: the footnote beside every table that shows them.
INTERVAL_NOTE = ("In brackets: the 80% interval of each prediction, from how far predictions of its kind (device, "
                 "engine, metric) landed from measurements they were not fitted on; \"no bound\" where nothing "
                 "measured pins it down.")


#: Why a decode pool's TTFT cell is empty, beside every pool table ([Note: no TTFT on a decode pool] in
#: compiler/emit/emit_plan.py).
DECODE_TTFT_NOTE = ("TTFT \"-\": decode pools do not produce the first token of the requests they take over; their "
                    "TTFT is the class's, end to end (prefill, KV hand-off, the wait for a decode slot), in the "
                    "request classes.")


def with_interval(value: float | None, bounds: Sequence[float | None] | None, fmt: str) -> str:
    """``value (lo-hi)``; ``-`` without a value; ``(no bound)`` where the interval is unbounded."""
    if value is None:
        return "-"
    text = format(value, fmt)
    if not bounds:
        return text
    lo, hi = bounds
    if hi is None:
        return f"{text} (no bound)"
    return f"{text} ({format(lo, fmt)}-{format(hi, fmt)})"


def gain_text(gain: float | None, bounds: Sequence[float | None] | None) -> str:
    """A plan gain with its interval: ``1.12x (1.05-1.20)``."""
    if gain is None:
        return "-"
    if not bounds:
        return f"{gain:.2f}x"
    lo, hi = bounds
    return f"{gain:.2f}x (no bound)" if hi is None else f"{gain:.2f}x ({lo:.2f}-{hi:.2f})"


def meets_text(meets_slo: bool, at_estimate: bool) -> str:
    """Whether a class meets its SLO: ``yes`` (its whole 80% interval does), ``at estimate only`` (the central
    prediction does, the interval reaches past a target), ``NO``."""
    return "yes" if meets_slo else ("at estimate only" if at_estimate else "NO")
