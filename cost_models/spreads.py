"""How far to trust a prediction: the 80% spread of its kind, from leave-one-out residuals.

`spread_for` picks the basis of a deployment's predictions ([Note: prediction intervals] in
`compiler.ir.prediction`), most specific first:

1. ``measured``: the deployment's engine was calibrated on this very device (a profile from ``gimletc
   calibrate --from`` or an engine record from ``--engine``): the spread of its own points, each predicted by
   a fit that left it out (`Engine.spreads`);
2. ``uncalibrated``: a device whose serving engine was never measured and whose peaks or overheads are
   guesses about whatever host runs gimletc (the ``cpu`` family): unbounded, nothing is claimed;
3. ``sweeps``: a GPU whose kernel efficiencies the serving sweeps fit, under one of their engines;
4. ``published``: a device with published rows of its own (at least two), in a family fitted on them;
5. ``unseen-device``: a device of a fitted family with no rows of its own;
6. ``assumed``: a family fitted on nothing (its derate is a guess).

Metrics: ``ttft``, ``tpot`` and ``e2e`` (a request's whole latency; a closed loop's throughput is its inverse,
`Spread.inverse`). The published rows are few per family, so their spread pools every metric (`TIME`); the
sweeps' and the unseen devices' are per metric (`PER_METRIC`).

The table `SPREADS` is generated: ``tools/intervals.py --write`` computes every row's leave-one-out residual
(cost_models/data/loo_residuals.csv) and writes the block between the markers below;
tests/cost_models/test_intervals.py recomputes it from that file and checks each row's coverage.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from typing import TYPE_CHECKING

from compiler.ir.prediction import UNBOUNDED, Spread
from cost_models.derates import DERATES, DEVICE_EFFS, MEASURED_ROWS

if TYPE_CHECKING:
    from cost_models.serving import Deployment

METRICS = ("ttft", "tpot", "e2e")
#: The published rows' one spread for every metric of a family (rows of every metric, as times).
TIME = "time"
#: The bases with a spread per metric (`METRICS`); the others have one for every metric (`TIME`).
PER_METRIC = ("sweeps", "unseen-device")
#: The engines of the serving sweeps.
SWEEP_ENGINES = ("sglang", "trtllm", "vllm")
#: Families whose predictions rest on nothing until their serving engine is measured on the host at hand.
HOST_FAMILIES = ("cpu",)


def key(basis: str, scope: str, metric: str) -> str:
    """The `SPREADS` key of one kind: ``sweeps:*:ttft``, ``published:amd:time``, ``assumed:*:time``."""
    return f"{basis}:{scope}:{metric}"


#: What each basis's residuals are, in words (`Spread.basis`).
BASIS_WORDS = {
    "sweeps": "measured serving sweeps of TensorRT-LLM, vLLM and SGLang on H100/H200, each model x device x engine "
              "group predicted by a fit without it",
    "published": "published {scope} measurements, each row predicted by a fit on its family's other rows",
    "unseen-device": "devices with no measurement of their own in a measured family: each device's published rows "
                     "predicted by a fit without them",
    "assumed": "families no measurement fits: published rows of every family predicted at the generic derate",
}


@dataclass(frozen=True, slots=True)
class Residual:
    """One measured row's leave-one-out residual, as cost_models/data/loo_residuals.csv holds it."""

    basis: str  # sweeps, published, unseen-device, assumed
    scope: str  # the engine (sweeps), the family (published), or * (pooled)
    metric: str  # ttft, tpot, e2e, or `TIME` (published: every metric as a time)
    group: str  # rows that move together (a sweep's model x device x engine; a published row alone)
    row: str  # the measured row's id
    family: str
    device: str
    engine: str
    measured: float  # as a time (a rate's inverse), in its row's unit
    predicted: float

    @property
    def key(self) -> str:
        """The kind it belongs to: per metric where the serving sweeps' hundreds of rows fill it (the sweeps, and
        a device left out), else one for every metric (`TIME`): a published family has a dozen rows."""
        return key(self.basis, self.scope, self.metric if self.basis in PER_METRIC else TIME)

    @property
    def log_ratio(self) -> float:
        return math.log(self.measured / self.predicted)


def table(residuals: Iterable[Residual], leave_out: str | None = None) -> dict[str, Spread]:
    """The spread of every kind among `residuals`; `leave_out`: without that group's rows (a coverage check's)."""
    by: dict[str, list[Residual]] = {}
    for r in residuals:
        if r.group != leave_out:
            by.setdefault(r.key, []).append(r)
    out = {}
    for k, rs in sorted(by.items()):
        basis, scope, _metric = k.split(":")
        sizes: dict[str, int] = {}
        for r in rs:
            sizes[r.group] = sizes.get(r.group, 0) + 1
        words = BASIS_WORDS[basis].format(scope=scope) + f": {len(rs)} rows in {len(sizes)} groups, each group weighing "
        words += "as one"
        out[k] = Spread.from_log_residuals([r.log_ratio for r in rs], words, len(sizes),
                                           [1.0 / sizes[r.group] for r in rs])
    return out


# ---- generated by tools/intervals.py --write: do not edit by hand ----
SPREADS: dict[str, Spread] = {
    'assumed:*:time': Spread(0.2146, 1.573, rows=76, groups=76, basis=(
        'families no measurement fits: published rows of every family predicted at the generic derate: 76 '
        'rows in 76 groups, each group weighing as one'
    )),
    'published:amd:time': Spread(0.8343, 1.177, rows=11, groups=11, basis=(
        "published amd measurements, each row predicted by a fit on its family's other rows: 11 rows in 11 "
        'groups, each group weighing as one'
    )),
    'published:cerebras:time': Spread(0.4593, 2.359, rows=9, groups=9, basis=(
        "published cerebras measurements, each row predicted by a fit on its family's other rows: 9 rows in 9"
        ' groups, each group weighing as one'
    )),
    'published:gaudi:time': Spread(0.651, 1.212, rows=19, groups=19, basis=(
        "published gaudi measurements, each row predicted by a fit on its family's other rows: 19 rows in 19 "
        'groups, each group weighing as one'
    )),
    'published:nvidia:time': Spread(0.6181, 1.426, rows=16, groups=16, basis=(
        "published nvidia measurements, each row predicted by a fit on its family's other rows: 16 rows in 16"
        ' groups, each group weighing as one'
    )),
    'published:trainium:time': Spread(0.6336, 1.668, rows=21, groups=21, basis=(
        "published trainium measurements, each row predicted by a fit on its family's other rows: 21 rows in "
        '21 groups, each group weighing as one'
    )),
    'sweeps:*:e2e': Spread(0.8866, 1.647, rows=842, groups=10, basis=(
        'measured serving sweeps of TensorRT-LLM, vLLM and SGLang on H100/H200, each model x device x engine '
        'group predicted by a fit without it: 842 rows in 10 groups, each group weighing as one'
    )),
    'sweeps:*:tpot': Spread(0.8727, 1.664, rows=842, groups=10, basis=(
        'measured serving sweeps of TensorRT-LLM, vLLM and SGLang on H100/H200, each model x device x engine '
        'group predicted by a fit without it: 842 rows in 10 groups, each group weighing as one'
    )),
    'sweeps:*:ttft': Spread(0.5887, 2.761, rows=842, groups=10, basis=(
        'measured serving sweeps of TensorRT-LLM, vLLM and SGLang on H100/H200, each model x device x engine '
        'group predicted by a fit without it: 842 rows in 10 groups, each group weighing as one'
    )),
    'unseen-device:*:e2e': Spread(0.7628, 1.48, rows=873, groups=7, basis=(
        "devices with no measurement of their own in a measured family: each device's published rows "
        'predicted by a fit without them: 873 rows in 7 groups, each group weighing as one'
    )),
    'unseen-device:*:tpot': Spread(0.7239, 1.433, rows=853, groups=6, basis=(
        "devices with no measurement of their own in a measured family: each device's published rows "
        'predicted by a fit without them: 853 rows in 6 groups, each group weighing as one'
    )),
    'unseen-device:*:ttft': Spread(0.3792, 2.412, rows=856, groups=7, basis=(
        "devices with no measurement of their own in a measured family: each device's published rows "
        'predicted by a fit without them: 856 rows in 7 groups, each group weighing as one'
    )),
}
# ---- end of generated table ----


def _table(basis: str, scope: str, metric: str) -> Spread | None:
    return SPREADS.get(key(basis, scope, metric)) or SPREADS.get(key(basis, scope, TIME))


def spread_for(device_id: str, family: str, engine: str, metric: str,
               measured: dict[str, Spread] | None = None) -> Spread:
    """The 80% spread of a prediction of `metric` (`METRICS`) for `device_id` of `family` under `engine`.

    `measured`: the spreads of a calibration of this engine on this device, by metric (`Engine.spreads`).

    >>> spread_for("cpu-host", "cpu", "vllm", "tpot").bounded
    False
    >>> spread_for("cpu-host", "cpu", "vllm", "tpot", {"tpot": Spread(0.9, 1.1, "here", 9)}).hi
    1.1
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
    if measured and metric in measured:
        return measured[metric]
    if family in HOST_FAMILIES:
        return Spread(0.0, float("inf"), f"uncalibrated: {engine} was never measured on {device_id}, whose "
                                         f"efficiencies are guesses; run `gimletc calibrate --device {device_id} "
                                         f"--engine vllm` (or `calibrate --from` your benchmark results)")
    found = None
    if device_id in DEVICE_EFFS and engine in SWEEP_ENGINES:
        found = _table("sweeps", "*", metric)
    elif family in DERATES and MEASURED_ROWS.get(device_id, 0) >= 2:
        found = _table("published", family, metric)
    elif family in DERATES and DERATES[family].measurements >= 2:
        found = _table("unseen-device", "*", metric)
    return found or _table("assumed", "*", metric) or UNBOUNDED


def deployment_spreads(dep: Deployment) -> tuple[tuple[str, Spread], ...]:
    """The spread of every metric of `dep`'s predictions: its engine's own where that engine was calibrated on
    this device (`Engine.spreads`), else `spread_for`'s."""
    measured = dict(dep.engine.spreads) if dep.engine.calibrated_on == dep.device.id else {}
    return tuple((m, spread_for(dep.device.id, dep.device.family, dep.engine.name, m, measured)) for m in METRICS)


def widest(*spreads: Spread) -> Spread:
    """One spread covering each of `spreads` (a prediction resting on two device types' costs: both may be off).

    >>> widest(Spread(0.9, 1.2, "a", 10), Spread(0.8, 1.1, "b", 5))
    Spread(lo=0.8, hi=1.2, basis='a; b', rows=5, groups=0)
    """
    if len(spreads) == 1:
        return spreads[0]
    return Spread(min(s.lo for s in spreads), max(s.hi for s in spreads),
                  "; ".join(dict.fromkeys(s.basis for s in spreads)), min(s.rows for s in spreads),
                  min(s.groups for s in spreads))
