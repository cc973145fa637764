"""`PoolOption`: one costed way to run one replica of a role; what the cost stage hands the placement.

Standard library only. ``kind`` is one of `POOL_KINDS`:

- ``colocated``: prefill and decode on the same replica (continuous batching with chunked prefill);
- ``prefill``: prompt processing only; its KV is handed off to a decode pool;
- ``decode``: token generation only, receiving KV from prefill pools;
- ``decode-af``: decode with attention (and the KV cache) on one device type and FFN/MoE on another.

An option serves request classes (`ClassService`), each costed on its own: how
many requests per second of that class one replica sustains at full load, and
its latency-versus-load curve under Poisson arrivals ([Note: queueing model]).
The curve makes the option independent of the SLO: the placement derives, for
any target, the highest utilisation at which the class's percentile latency
meets it (`ClassService.max_utilisation`). Times are seconds, rates requests
per second, power watts; every number is a prediction of the cost model.

>>> s = ClassService("chat", 10.0, ((0.5, 0.2, 0.3, 0.01, 0.012), (0.9, 0.4, 0.9, 0.012, 0.02)))
>>> s.max_utilisation(ttft_s=0.6, tpot_s=None)
0.7
>>> o = PoolOption("decode:x:tp1:pp1:b8", "decode", (("x", 1),), power_w=400.0, provisioned_w=700.0,
...                kv_device="x", tp=1, pp=1, batch=8, classes=(s,))
>>> o.uses("x"), o.devices_per_replica, o.service("chat").rate_per_s
(1, 1, 10.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler.ir.prediction import UNBOUNDED, Spread

POOL_KINDS: tuple[str, ...] = ("colocated", "prefill", "decode", "decode-af")

#: One point of a latency curve: (utilisation, TTFT p50, TTFT at the SLO percentile, TPOT p50, TPOT at the percentile).
CurvePoint = tuple[float, float, float, float, float]


@dataclass(frozen=True, slots=True)
class ClassService:
    """One request class on one pool option: capacity and latency versus utilisation.

    ``rate_per_s`` is what one replica sustains serving only this class at utilisation 1.
    ``curve`` samples the class's latencies at increasing utilisation (TTFT is the whole
    time to first token for colocated and prefill options, the wait for a decode slot for
    decode options; TPOT is zero where the option does not decode).
    ``parts`` splits the mean TTFT at each point of ``curve`` as serving engines' histograms
    split it: (the mean wait before the scheduler admits the request, the mean time from
    admission to the first token), seconds; the front end's latency is the rest. Empty where
    the option was not costed with the split.
    """

    name: str
    rate_per_s: float
    curve: tuple[CurvePoint, ...]
    parts: tuple[tuple[float, float], ...] = ()

    def parts_at(self, utilisation: float) -> tuple[float, float] | None:
        """(mean queue wait, mean prefill) at `utilisation`, interpolated as `at` does; None without ``parts``."""
        if not self.parts:
            return None
        us = [p[0] for p in self.curve]
        if utilisation <= us[0]:
            return self.parts[0]
        for i in range(1, len(us)):
            if utilisation <= us[i]:
                w = (utilisation - us[i - 1]) / (us[i] - us[i - 1])
                (q0, p0), (q1, p1) = self.parts[i - 1], self.parts[i]
                return q0 + w * (q1 - q0), p0 + w * (p1 - p0)
        return self.parts[-1]

    def at(self, utilisation: float) -> CurvePoint:
        """Latencies at `utilisation`, linear between samples (the first sample below it, the last above)."""
        pts = self.curve
        if utilisation <= pts[0][0]:
            return pts[0]
        for lo, hi in zip(pts, pts[1:]):
            if utilisation <= hi[0]:
                w = (utilisation - lo[0]) / (hi[0] - lo[0])
                return tuple(a + w * (b - a) for a, b in zip(lo, hi))  # type: ignore[return-value]
        return pts[-1]

    def max_utilisation(self, *, ttft_s: float | None, tpot_s: float | None) -> float:
        """The highest utilisation whose percentile TTFT and TPOT meet the targets (0.0 if even light load misses);
        kept per service and targets (`_CAPS`: the placement asks the same services again for every what-if)."""
        key = (id(self), ttft_s, tpot_s)
        hit = _CAPS.get(key)
        if hit is not None and hit[0] is self:
            return hit[1]
        if len(_CAPS) >= CAPS_KEPT:
            _CAPS.clear()
        best = self._max_utilisation(ttft_s, tpot_s)
        _CAPS[key] = (self, best)
        return best

    def _max_utilisation(self, ttft_s: float | None, tpot_s: float | None) -> float:
        def ok(p: CurvePoint) -> bool:
            return (ttft_s is None or p[2] <= ttft_s) and (tpot_s is None or p[4] <= tpot_s)

        best = 0.0
        for lo, hi in zip((None, *self.curve), self.curve):
            if ok(hi):
                best = hi[0]
                continue
            if lo is not None and ok(lo):  # the target is crossed between two samples: interpolate
                best = lo[0] + (hi[0] - lo[0]) * _crossing(lo, hi, ttft_s, tpot_s)
            break
        return best


#: `ClassService.max_utilisation` by (the service's id, targets), with the service itself (an id is reused only once
#: the service is gone); cleared past `CAPS_KEPT` entries. A sensitivity analysis builds some forty instances whose
#: options are mostly the same objects, and pruning each asks every service for its caps again.
_CAPS: dict[tuple[int, float | None, float | None], tuple[ClassService, float]] = {}
CAPS_KEPT = 200_000


def _crossing(lo: CurvePoint, hi: CurvePoint, ttft_s: float | None, tpot_s: float | None) -> float:
    """Where between `lo` (meets) and `hi` (misses) the first target is crossed, as a fraction."""
    fractions = []
    for index, target in ((2, ttft_s), (4, tpot_s)):
        if target is not None and hi[index] > target >= lo[index] and hi[index] > lo[index]:
            fractions.append((target - lo[index]) / (hi[index] - lo[index]))
    return min(fractions, default=0.0)


@dataclass(frozen=True, slots=True)
class PoolOption:
    """One replica of one role on specific devices, costed for each request class it can serve."""

    key: str
    kind: str
    devices: tuple[tuple[str, int], ...]  # (device id, devices per replica)
    power_w: float  # predicted draw of one replica at full load, on the budget's footing ([Note: drawn power])
    provisioned_w: float  # what the budget must reserve for it: its devices' rated power on that footing
    kv_device: str  # the device type that holds the KV this option produces or consumes
    tp: int
    pp: int
    batch: int
    classes: tuple[ClassService, ...] = ()  # the classes whose longest request fits, in workload order
    detail: tuple[tuple[str, Any], ...] = ()
    link_bytes_per_token: float = 0.0  # per output token, between its two device types (attention/FFN seam)
    idle_w: float = 0.0  # predicted draw of one replica serving nothing, on the same footing
    hands_to: tuple[str, ...] = ()  # a prefill option's copy that hands KV only to these types (empty: any)
    # How far to trust its latencies: the 80% spread of each metric of `cost_models.spreads.METRICS` on its devices
    # and engine ([Note: prediction intervals] in compiler/ir/prediction.py); empty: unbounded.
    spreads: tuple[tuple[str, Spread], ...] = ()

    def spread(self, metric: str) -> Spread:
        """The 80% spread of this option's `metric` (ttft, tpot, e2e); unbounded where none was costed."""
        return dict(self.spreads).get(metric, UNBOUNDED)

    def uses(self, device_id: str) -> int:
        return dict(self.devices).get(device_id, 0)

    @property
    def device_types(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.devices)

    @property
    def devices_per_replica(self) -> int:
        return sum(k for _, k in self.devices)

    @property
    def receives_kv(self) -> bool:
        """Decode-only options take their KV from a prefill pool."""
        return self.kind in ("decode", "decode-af")

    def service(self, name: str) -> ClassService | None:
        return next((c for c in self.classes if c.name == name), None)
