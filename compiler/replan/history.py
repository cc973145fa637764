"""What earlier replans changed ([Note: cool-down] in `compiler.replan.replan`): the history a plan directory's
``report/replan.json`` records, the changes recent enough to hold, and which of them a move would reverse."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compiler.replan.settings import Settings


@dataclass(frozen=True, slots=True)
class PastChange:
    """A change of replicas of one shape a replan made, and when: its window's end (the last snapshot's time, s)."""

    time_s: float
    shape: str
    before: int
    after: int

    @property
    def up(self) -> bool:
        return self.after > self.before


def read_history(plan_dir: str | Path) -> tuple[PastChange, ...]:
    """The changes a plan directory's ``report/replan.json`` records ([Note: cool-down]); none for a compiled
    plan, or one written before the history was."""
    return history_in(Path(plan_dir) / "report" / "replan.json")


def history_in(path: Path) -> tuple[PastChange, ...]:
    """The changes a replan's summary at `path` records (a services plan's ``replan.json``); none where there is
    no such file."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    return tuple(PastChange(float(c["time_s"]), str(c["shape"]), int(c["before"]), int(c["after"]))
                 for c in data.get("history", ()))


def recent_changes(history: tuple[PastChange, ...], now_s: float, settings: "Settings") -> tuple[PastChange, ...]:
    """The changes made within the last ``cooldown_windows`` windows before `now_s` (half a window's slack: a
    scrape's time wanders by milliseconds around the window's end).

    >>> from compiler.replan.settings import Settings
    >>> h = (PastChange(0.0, "a", 0, 1), PastChange(30.0, "b", 1, 0))
    >>> [c.shape for c in recent_changes(h, 60.0, Settings(window_s=15.0, cooldown_windows=3))]
    ['b']
    """
    horizon = (settings.cooldown_windows + 0.5) * settings.window_s
    return tuple(c for c in history if settings.cooldown_windows > 0 and 0 <= now_s - c.time_s <= horizon)


def moved_back(recent: tuple[PastChange, ...], current: tuple[tuple[str, int], ...],
               after: tuple[tuple[str, int], ...]) -> tuple[PastChange, ...]:
    """The recent changes that going from `current` to `after` reverses: a shape scaled the other way.

    >>> moved_back((PastChange(0.0, "c8", 0, 1),), (("c8", 1), ("b4", 1)), (("b4", 2),))
    (PastChange(time_s=0.0, shape='c8', before=0, after=1),)
    """
    now, nxt = dict(current), dict(after)
    out = []
    for c in recent:
        delta = nxt.get(c.shape, 0) - now.get(c.shape, 0)
        if delta and (delta > 0) != c.up:
            out.append(c)
    return tuple(out)
