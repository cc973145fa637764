"""Calibrate the host CPU (``cpu-host``): measure it with torch, fit its derate, save both.

Contract: `calibrate` measures this machine and saves a `Calibration`
(`compiler.ir.calibration.save_calibration`), which `backends.cpu.host_device`
(peaks and bandwidth, sources ``measured: ...``) and the deployment builder
(the fitted `Derate`) read from then on. It returns the report it saved; the
CLI renders it. Only the host can be measured from the host: any other device
id is a `BadInput`.

Steps: `compiler.calibrate.measure.measure` (microbenchmarks and block times),
then `fit_report` (the fit, see [Note: calibration fit], and predicted vs
measured for every point), then the atomic save.

[Note: calibration fit] The prediction is `cost_models.roofline.block_time`
on the model's `compiler.driver.block_graph`, fp32 weights and KV, on a
`DeviceSpec` holding the measured peaks. For fixed efficiencies
(``compute_eff``, ``mem_eff``, ``vector_eff``, ``elementwise_traffic``) a
block's time is its roofline time plus ``block_overhead_s + op_overhead_s *
ops``, linear in the two overheads: those come from an iteratively
reweighted non-negative least-squares on relative errors (a robust L1 fit,
`compiler.calibrate.fit.robust_overheads`). The efficiencies, bounded to
(0, 1], come from the shared derate fitter ([Note: derate fit]), minimising the
mean |log(predicted / measured)|. Every other point (alternating in each phase's
list, a checkerboard on the decode grid) is held out, so the held-out error
is a prediction, not a fit. The microbenchmarks, as one-op blocks, show how
the derate carries over to shapes far from the tiny models (reported, not fitted).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import platform
import statistics
from dataclasses import dataclass, replace
from typing import Any, Sequence

from compiler.calibrate.fit import Param, fit_fields, robust_overheads
from compiler.calibrate.measure import FULL, QUICK, Measurements, Note, Sample
from compiler.ir.block_graph import Block
from compiler.ir.calibration import Calibration, save_calibration
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.errors import BadInput
from compiler.ir.files import calibration_path
from compiler.ir.precision import Precision
from cost_models.derates import DERATES, Derate
from cost_models.roofline import block_time

log = logging.getLogger(__name__)

DEVICE_ID = "cpu-host"
#: Derate fields the fit sets (the rest keep the cpu family's values).
FITTED_EFFS = ("compute_eff", "mem_eff", "vector_eff", "elementwise_traffic")
FITTED_FIELDS = (*FITTED_EFFS, "op_overhead_s", "block_overhead_s")
#: The efficiencies' bounds and coarse grid (vector_eff is searched, but not gridded: it is rarely binding).
EFF_PARAMS = tuple(Param(name, 1e-3, 1.0, grid_lo=0.02, in_grid=name != "vector_eff") for name in FITTED_EFFS)
FP32 = Precision.of("fp32")

@dataclass(frozen=True, slots=True)
class Case:
    """A measured block time with the Block that predicts it."""

    block: Block
    point: dict[str, int]
    measured_s: float


def predict_s(case: Case, device: DeviceSpec, derate: Derate) -> float:
    return block_time(case.block, case.point, device, precision=FP32, derate=derate).time_s


def fit_host_derate(cases: Sequence[Case], device: DeviceSpec, start: Derate, *, grid_points: int = 5,
                    restarts: int = 3) -> Derate:
    """The `Derate` whose `block_time` best matches `cases`; see [Note: calibration fit]."""
    import numpy as np

    measured = np.array([c.measured_s for c in cases])
    ops = np.array([float(c.block.dispatches or sum(op.count for op in c.block.ops)) for c in cases])

    def evaluate(candidate: Derate) -> tuple[float, Derate]:
        bare = replace(candidate, op_overhead_s=0.0, block_overhead_s=0.0)
        roof = np.array([predict_s(c, device, bare) for c in cases])
        block_s, op_s = robust_overheads(roof, ops, measured)
        loss = float(np.mean(np.abs(np.log((roof + block_s + op_s * ops) / measured))))
        return loss, replace(bare, block_overhead_s=block_s, op_overhead_s=op_s)

    return fit_fields(evaluate, start, EFF_PARAMS, grid_points=grid_points, restarts=restarts)


def micro_cases(micro: dict[str, Any]) -> list[tuple[str, Case]]:
    """The fp32 linear and SDPA microbenchmarks as one-op blocks, to see how a fitted derate transfers to them."""
    from compiler.ir.block_graph import OpCost
    from compiler.ir.poly import Poly

    def one_op(name: str, op: OpCost, seconds: float) -> tuple[str, Case]:
        block = Block(name=name, role="attn" if op.kind == "attention" else "ffn", phase="prefill", layer=None,
                      ops=(op,))
        return name, Case(block, {"B": 1, "S": 1}, seconds)

    out = []
    for row in micro["linear"]:
        if row["dtype"] == "fp32":
            m, k, n = row["dims"]
            out.append(one_op(f"linear {row['shape']}", OpCost(
                "linear", "matmul", 1, flops=Poly.const(2 * m * k * n), weight_elems=Poly.const(n * k),
                act_bytes=Poly.const(4 * (m * k + m * n))), row["time_s"]))
    for row in micro["sdpa"]:
        b, heads, queries, keys, head_dim = row["dims"]
        out.append(one_op(f"sdpa {row['shape']}", OpCost(
            "scaled_dot_product_attention", "attention", 1, flops=Poly.const(4 * b * heads * queries * keys * head_dim),
            act_bytes=Poly.const(4 * b * heads * head_dim * (2 * queries + 2 * keys))), row["time_s"]))
    return out


# ---------------------------------------------------------------- driver


def calibrate(device_id: str = DEVICE_ID, progress: Note | None = None, *, quick: bool = False) -> dict[str, Any]:
    """Measure this host, fit the cpu derate, save it to ``calibration_path(device_id)`` and return the report.

    `quick` measures fewer sizes, points and repeats (seconds, not a minute): good
    for tests and a first look, noisier for the saved numbers.

    >>> report = calibrate("cpu-host")                  # doctest: +SKIP
    >>> report["summary"]["median_error_held_out"]      # doctest: +SKIP
    0.08
    """
    if device_id != DEVICE_ID:
        raise BadInput(f"calibrate: cannot measure device {device_id!r} from here; only {DEVICE_ID!r} (this "
                       f"machine's CPU) can be measured on this machine. Run `gimletc calibrate --device "
                       f"{DEVICE_ID}`; accelerator derates are fitted from published measurements by tools/fidelity.py")
    note = progress or (lambda _msg: None)
    from compiler.calibrate.measure import measure

    report = fit_report(measure(QUICK if quick else FULL, note), note, quick=quick)
    report["saved_to"] = str(calibration_path(DEVICE_ID))
    try:
        save_calibration(Calibration.from_json(report), report)
    except OSError as e:
        raise BadInput(f"calibrate: cannot write {report['saved_to']} ({e}); set GIMLETC_CACHE_DIR to a writable "
                       f"folder") from None
    log.info("saved the %s calibration to %s", DEVICE_ID, report["saved_to"])
    return report


def fit_report(measured: Measurements, note: Note, *, quick: bool = False) -> dict[str, Any]:
    """Fit the derate on the fit samples and report predicted vs measured for all (the saved JSON)."""
    from backends.cpu import host_device
    from compiler.driver import block_graph
    from compiler.ir.calibration import load_calibration
    from cost_models.derates import derate_for

    micro = measured.micro
    graphs = {name: block_graph(name, progress=note) for name in dict.fromkeys(s.model for s in measured.samples)}
    cases = [(s, Case(graphs[s.model].block(s.block, s.phase), s.point_dict, s.measured_s)) for s in measured.samples]
    note(f"fitting the cpu derate on {sum(not s.held_out for s, _ in cases)} of {len(cases)} block times")
    before_device, before_derate = host_device(), derate_for("cpu", load_calibration(DEVICE_ID))  # what the compiler used so far
    device = _measured_device(micro)
    start = replace(DERATES["cpu"], op_overhead_s=micro["dispatch_s"]["kernel"])
    settings = QUICK if quick else FULL
    derate = fit_host_derate([c for s, c in cases if not s.held_out], device, start,
                             grid_points=settings.fit_grid_points, restarts=settings.fit_restarts)
    rows = [_error_row(s, c, device, derate) for s, c in cases]
    before = [_error_row(s, c, before_device, before_derate) for s, c in cases]
    transfer = [{"op": name, "measured_s": c.measured_s, "predicted_s": predict_s(c, device, derate),
                 "error": predict_s(c, device, derate) / c.measured_s - 1} for name, c in micro_cases(micro)]
    return {
        "device": DEVICE_ID, "family": "cpu", "host": host_name(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": _torch_version(), "threads": micro["threads"], "quick": quick,
        "peak_flops_per_s": micro["peak_flops_per_s"], "mem_bw_bytes_per_s": micro["mem_bw_bytes_per_s"],
        "derate": {k: getattr(derate, k) for k in FITTED_FIELDS},
        "derate_start": {k: getattr(start, k) for k in FITTED_FIELDS},
        "microbenchmarks": {k: micro[k] for k in ("dispatch_s", "linear", "memory", "sdpa")},
        "stage_errors": rows,
        "microbenchmark_errors": transfer,
        "step_errors": _step_errors(rows),
        "spreads": {m: s.to_json() for m, s in step_spreads(_step_errors(rows)).items()},
        "summary": _summary(rows, _step_errors(rows)),
        "before": {"peaks_source": before_device.source("peak_flops_per_s.fp32"),
                   "derate_source": before_derate.provenance,
                   "median_error": _summary(before, _step_errors(before))["median_error"]},
        "elapsed_s": measured.elapsed_s,
        "timing_segments": measured.timing,
    }


def _measured_device(micro: dict[str, Any]) -> DeviceSpec:
    """cpu-host as `host_device` describes it once the measured numbers are saved."""
    from backends.cpu import host_device

    base = host_device()
    memory = tuple(replace(t, bw_bytes_per_s=micro["mem_bw_bytes_per_s"]) if i == 0 else t
                   for i, t in enumerate(base.memory))
    return replace(base, peak_flops_per_s=tuple(sorted(micro["peak_flops_per_s"].items())), memory=memory)


def _error_row(sample: Sample, case: Case, device: DeviceSpec, derate: Derate) -> dict[str, Any]:
    predicted = predict_s(case, device, derate)
    return {"model": sample.model, "block": sample.block, "phase": sample.phase, "point": case.point,
            "measured_s": sample.measured_s, "predicted_s": predicted,
            "error": (predicted - sample.measured_s) / sample.measured_s, "held_out": sample.held_out}


def _step_errors(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole-model step (every block of a phase, in sequence) per model and point."""
    steps: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r["model"], r["phase"], tuple(sorted(r["point"].items())))
        step = steps.setdefault(key, {"model": r["model"], "phase": r["phase"], "point": r["point"],
                                      "measured_s": 0.0, "predicted_s": 0.0, "held_out": r["held_out"]})
        step["measured_s"] += r["measured_s"]
        step["predicted_s"] += r["predicted_s"]
    for step in steps.values():
        step["error"] = (step["predicted_s"] - step["measured_s"]) / step["measured_s"]
    return list(steps.values())


def step_spreads(steps: list[dict[str, Any]]) -> dict:
    """The 80% spread of the held-out whole steps ([Note: prediction intervals] in compiler/ir/prediction.py): prefill
    steps bound TTFT, decode steps TPOT, both the whole request. They bound the reference runtime's predictions on
    this host (its stage workers run these blocks), not a serving engine's (``calibrate --engine`` measures those)."""
    import math

    from compiler.ir.prediction import Spread

    held = [s for s in steps if s["held_out"] and s["measured_s"] > 0 and s["predicted_s"] > 0]
    logs = {m: [math.log(s["measured_s"] / s["predicted_s"]) for s in held if phase in (None, s["phase"])]
            for m, phase in (("ttft", "prefill"), ("tpot", "decode"), ("e2e", None))}
    basis = (f"measured: {len(held)} held-out whole steps of tiny models by `gimletc calibrate` on {host_name()} "
             "(the reference runtime's blocks; no serving engine)")
    return {m: Spread.from_log_residuals(v, basis) for m, v in logs.items()}


def _summary(rows: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[str, float]:
    def median_abs(selected: list[dict[str, Any]]) -> float:
        return statistics.median(abs(r["error"]) for r in selected) if selected else float("nan")

    return {"median_error": median_abs(rows),
            "median_error_fit": median_abs([r for r in rows if not r["held_out"]]),
            "median_error_held_out": median_abs([r for r in rows if r["held_out"]]),
            "max_error": max(abs(r["error"]) for r in rows), "points": len(rows),
            "median_step_error": median_abs(steps),
            "median_step_error_held_out": median_abs([r for r in steps if r["held_out"]])}


def host_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{platform.node()} ({cpu}, {os.cpu_count()} CPUs)"


def _torch_version() -> str:
    import torch

    return torch.__version__
