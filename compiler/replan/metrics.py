"""Engine metrics in the Prometheus text format: snapshots from a URL or saved files, and their deltas over a window.

One scrape is a `compiler.deploy.metrics.Snapshot` (its pools, the metric names read, and [Note: queue and
service histograms] are there). A window
is two snapshots: counters and histograms as deltas between them, taken engine by engine ([Note: rounds of
scrapes]; a counter that went down was reset: its later value is the delta), gauges as their mean over the
snapshots inside it and as their change from the first to the last (a queue that grows: requests arrived that
were not served). `windows` cuts a sequence of snapshots into consecutive windows, the series a forecast reads
(`compiler.replan.forecast`).

[Note: rounds of scrapes] One collection reads every engine once, one after another: a round of scrapes, each
stamped with its own time. Scrapes are told apart by engine (`Snapshot.engine`): a URL is one engine; a folder's
files are one engine's scrapes over time (or one whole deployment's); files given one by one are the engine their
``POOL=`` names. Files of one engine key at the same moment (to the millisecond: tools/replay.py stamps the files
of one round alike) are different engines, told apart by their order of name (so an engine keeps its place while
each round saves the same engines). Sorted by time, a scrape joins the round being built unless its engine is
already in it (`merged`). A window takes counters and histograms per engine: from the engine's scrape in the
window's last round back to its own latest scrape at or before the window's first round (else its first one after
it), over that engine's own interval, scaled to the window's seconds (the rounds' span) and summed over engines.
So a rate is the sum of each engine's delta over its own two timestamps, and a reset is one engine's own.
Grouping scrapes by their exact time instead never merged two engines (milliseconds apart): a window then ran
from one engine's scrape to another's and counted the other's requests since it started as the window's (an
idle deployment read at 10 req/s, its decode pool absent). Summing engines before subtracting would hide
one engine's reset behind another's growth. An engine with no earlier scrape in the window (started inside it)
counts everything since it started (`Window.unpaired`; `window` warns).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from compiler.deploy.metrics import Histogram, Snapshot, parse
from compiler.ir.errors import BadInput

log = logging.getLogger(__name__)


def load(sources: list[str]) -> list[Snapshot]:
    """Rounds of scrapes of every source, oldest first ([Note: rounds of scrapes]): ``[POOL=]URL`` (scraped once
    now), a file, or a folder of files (sorted by name). A source given twice is read once."""
    snaps: list[Snapshot] = []
    for given in dict.fromkeys(sources):
        pool, _, where = given.rpartition("=") if "=" in given.split("://", 1)[0] else ("", "", given)
        if where.startswith(("http://", "https://")):
            asked = time.time()
            try:
                with urllib.request.urlopen(where, timeout=10) as r:  # noqa: S310 (an http(s) URL the user gave)
                    text = r.read().decode("utf-8")
            except OSError as e:
                raise BadInput(f"--metrics {where}: cannot scrape it ({e}); is the engine up?") from None
            snaps.append(parse(text, where, (asked + time.time()) / 2, pool or None, engine=given))
            continue
        path = Path(where)
        if not path.exists():
            raise BadInput(f"--metrics {where}: no such file, folder or URL; give a saved scrape, a folder of "
                           "them or an http:// URL")
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        engine = given if path.is_dir() else pool
        for f in files:
            snaps.append(parse(f.read_text(encoding="utf-8"), str(f), os.path.getmtime(f), pool or None, engine))
    return merged(snaps)


def merged(snaps: list[Snapshot]) -> list[Snapshot]:
    """The engines' scrapes of `snaps` (rounds or single scrapes) grouped into rounds, oldest first ([Note:
    rounds of scrapes]): in time order, a scrape starts a new round when its engine is in the current one."""
    scrapes = sorted((p for s in snaps for p in s.scrapes()), key=lambda p: (round(p.time_s, 3), p.source))
    rounds: list[list[Snapshot]] = []
    for p in _told_apart(scrapes):
        if not rounds or any(q.engine == p.engine for q in rounds[-1]):
            rounds.append([])
        rounds[-1].append(p)
    return [_round(group) for group in rounds]


def _told_apart(scrapes: list[Snapshot]) -> list[Snapshot]:
    """Scrapes of one engine key at one moment are different engines' (the files of one round): the second and
    later, by name, get ``#2``, ``#3``, ... after the key, the same in every round."""
    seen: dict[tuple[float, str], int] = {}
    out = []
    for p in scrapes:
        key = (round(p.time_s, 3), p.engine)
        seen[key] = seen.get(key, 0) + 1
        out.append(p if seen[key] == 1 else dataclasses.replace(p, engine=f"{p.engine}#{seen[key]}"))
    return out


def _round(group: list[Snapshot]) -> Snapshot:
    """One round of scrapes: their sums, at the latest one's time."""
    if len(group) == 1:
        return group[0]
    counters: dict = {}
    gauges: dict = {}
    hists: dict = {}
    for s in group:
        for k, v in s.counters:
            counters[k] = counters.get(k, 0.0) + v
        for k, v in s.gauges:
            gauges[k] = gauges.get(k, 0.0) + v
        for k, h in s.histograms:
            hists[k] = hists[k].plus(h) if k in hists else h
    return Snapshot(max(s.time_s for s in group), ", ".join(s.source for s in group), tuple(sorted(counters.items())),
                    tuple(sorted(gauges.items())), tuple(sorted(hists.items())), "", tuple(group),
                    tuple(sorted({m for s in group for m in s.models})))


def by_model(snaps: list[Snapshot], models: list[str]) -> dict[str, list[Snapshot]]:
    """The rounds of each of `models` ([Note: rounds of scrapes]): each engine's scrapes go to the model its
    samples name (vLLM labels every metric with ``model_name``, the name its requests give). A scrape naming no
    model, another model or two of them is bad input, named."""
    out: dict[str, list[Snapshot]] = {m: [] for m in models}
    for p in (p for s in snaps for p in s.scrapes()):
        named = [m for m in p.models if m in out]
        if len(p.models) != 1 or not named:
            found = ", ".join(p.models) or "none"
            raise BadInput(f"--metrics {p.source}: its samples name model {found}; each engine's scrape must name "
                           f"exactly one of the plan's services ({', '.join(models)}) in vLLM's model_name label")
        out[named[0]].append(p)
    return {m: merged(ps) for m, ps in out.items()}


@dataclass(frozen=True, slots=True)
class Window:
    """What happened between two snapshots: counter and histogram deltas (each engine's over its own interval,
    scaled to `seconds`: [Note: rounds of scrapes]), gauge means, and the seconds between."""

    start_s: float
    seconds: float
    counters: dict
    gauges: dict
    histograms: dict
    gauge_change: dict = None  # (quantity, pool) -> last value - first value
    unpaired: tuple[str, ...] = ()  # sources of engines with no earlier scrape: counted since they started

    def grown(self, quantity: str, pool: str) -> float:
        """How much gauge `quantity` of `pool` rose over the window (0 when it fell, or is absent)."""
        return max((self.gauge_change or {}).get((quantity, pool), 0.0), 0.0)

    def counter(self, quantity: str, pool: str) -> float | None:
        return self.counters.get((quantity, pool))

    def histogram(self, quantity: str, pool: str) -> Histogram | None:
        return self.histograms.get((quantity, pool))

    def pools(self) -> list[str]:
        return sorted({p for _q, p in (*self.counters, *self.gauges, *self.histograms)})


def window(snaps: list[Snapshot], window_s: float) -> Window:
    """The last `window_s` seconds of `snaps` (rounds, oldest first): from the latest round at least `window_s`
    before the last one (or the first round, when none is that old) to the last; counters and histograms engine
    by engine ([Note: rounds of scrapes]). One round alone is its counters since the engines started, over an
    unknown time: refused.

    >>> def scrape(t_s, done):
    ...     return f"# TYPE vllm:request_success_total counter\\nvllm:request_success_total {done} {t_s * 1000:.0f}\\n"
    >>> a = [parse(scrape(t, n), f"a{t}", pool="pool0", engine="a") for t, n in ((1e3, 10), (1060.0, 70))]
    >>> b = [parse(scrape(t, n), f"b{t}", pool="pool0", engine="b") for t, n in ((1000.5, 5), (1050.5, 55))]
    >>> w = window(merged(a + b), 600)   # rounds at 1000.5 s and 1060 s; a: 60 requests in 60 s, b: 50 in 50 s
    >>> w.seconds, round(w.counter("requests", "pool0") / w.seconds, 9)
    (59.5, 2.0)
    """
    w = _window(snaps, window_s)
    if w.unpaired:
        log.warning("--metrics %s: no earlier scrape of this engine in the last %g s: its requests since it started "
                    "are counted as the window's; if it ran before, give its scrapes under one source (its URL, a "
                    "folder of its own, or POOL=FILE files stamped like the other engines' of the same round)",
                    ", ".join(w.unpaired), window_s)
    return w


def _window(snaps: list[Snapshot], window_s: float) -> Window:
    """`window` without its warning."""
    if len(snaps) < 2:
        raise BadInput("--metrics: rates need two snapshots at least (counters are cumulative): give a folder or "
                       "several files of scrapes taken apart, or scrape a URL twice (gimletc replan scrapes a URL "
                       "again after --scrape-interval)")
    last = snaps[-1]
    older = [i for i, s in enumerate(snaps[:-1]) if last.time_s - s.time_s >= window_s]
    start = older[-1] if older else 0
    first = snaps[start]
    seconds = last.time_s - first.time_s
    if seconds <= 0:
        raise BadInput(f"--metrics: the snapshots {first.source} and {last.source} are from the same moment; "
                       "give scrapes taken at different times")
    counters: dict = {}
    histograms: dict = {}
    unpaired = []
    for end in last.scrapes():
        begin = _earlier(snaps[:-1], start, end.engine)
        if begin is None:
            unpaired.append(end.source)
            scale, before_c, before_h = 1.0, {}, {}
        else:
            if end.time_s <= begin.time_s:
                raise BadInput(f"--metrics: {begin.source} and {end.source} are scrapes of one engine at the same "
                               "moment; give each engine's scrapes taken at different times")
            scale, before_c, before_h = seconds / (end.time_s - begin.time_s), dict(begin.counters), \
                dict(begin.histograms)
        for k, v in end.counters:
            earlier = before_c.get(k)
            counters[k] = counters.get(k, 0.0) + (v - earlier if earlier is not None and v >= earlier else v) * scale
        for k, h in end.histograms:
            delta = h.minus(before_h.get(k)).scaled(scale)
            histograms[k] = histograms[k].plus(delta) if k in histograms else delta
    inside = [s for s in snaps if first.time_s < s.time_s <= last.time_s]
    gauges: dict = {}
    for s in inside:
        for k, v in s.gauges:
            gauges[k] = gauges.get(k, 0.0) + v / len(inside)
    before_g = dict(first.gauges)
    change = {k: v - before_g.get(k, 0.0) for k, v in last.gauges}
    return Window(first.time_s, seconds, counters, gauges, histograms, change, tuple(unpaired))


def _earlier(snaps: list[Snapshot], start: int, engine: str) -> Snapshot | None:
    """`engine`'s scrape a window starting at round `start` of `snaps` subtracts: its latest at or before that
    round, else its first after it; None when `snaps` hold none."""
    mine = [(i, p) for i, s in enumerate(snaps) for p in s.scrapes() if p.engine == engine]
    before = [p for i, p in mine if i <= start]
    return before[-1] if before else mine[0][1] if mine else None


def windows(snaps: list[Snapshot], window_s: float) -> list[Window]:
    """Consecutive windows of about `window_s` seconds, oldest first, ending at the last snapshot: each from the
    latest snapshot at least `window_s` before its end (the first snapshot when none is). The last is
    `window(snaps, window_s)` (whose warning it leaves to that)."""
    out: list[Window] = []
    end = len(snaps)
    while end >= 2:
        part = snaps[:end]
        w = _window(part, window_s)
        out.append(w)
        end = next(i for i, s in enumerate(part) if s.time_s == w.start_s) + 1
    return out[::-1]
