"""Calibrate the host CPU (``cpu-host``): measure it with torch, fit its derate, save both.

Contract: `calibrate` measures this machine and writes
``calibration_path("cpu-host")``, which `backends.cpu.host_device` (peaks and
bandwidth, sources ``measured: ...``) and `cost_models.derates.derate_for`
(the fitted `Derate`) read from then on. It returns the report it saved;
`compiler.calibrate_report.print_calibration` renders it. Only the host can be measured from the host:
any other device id is a `BadInput`.

Steps (`measure`, then `fit_report`):

1. Microbenchmarks (torch, eager, default thread count): ``F.linear`` at
   square and model-like shapes per dtype, a large copy and a large sum,
   SDPA at a few shapes, and the dispatch time of a tiny aten op. The best
   matmul rate is the dtype's ``peak_flops_per_s`` (a CPU has no datasheet:
   the measured best *is* the peak); the faster of copy and sum (bytes read
   plus written per second) is ``mem_bw_bytes_per_s``.
2. Block times: each tiny model is built with real fp32 weights, traced and
   split exactly as execution splits it (`compiler.stage_split`); every
   block piece is timed on the inputs it receives in a real run, at several
   prefill (B, S) and decode (B, L) points.
3. Fit (see [Note: calibration fit]), report predicted vs measured, save atomically.

Timings are guarded against other load on the host; see [Note: timing under contention].

[Note: calibration fit] The prediction is `cost_models.roofline.block_time`
on the model's `compiler.pipeline.block_graph`, fp32 weights and KV, on a
`DeviceSpec` holding the measured peaks. For fixed efficiencies
(``compute_eff``, ``mem_eff``, ``vector_eff``, ``elementwise_traffic``) a
block's time is its roofline time plus ``block_overhead_s + op_overhead_s *
ops``, linear in the two overheads: those come from an iteratively
reweighted non-negative least-squares on relative errors (a robust L1 fit).
The efficiencies, bounded to (0, 1], come from a coarse log grid followed by
a Nelder-Mead search in log space from the best few grid points, minimising
the mean |log(predicted / measured)|. Every other point (alternating in each phase's
list, a checkerboard on the decode grid) is held out, so the held-out error
is a prediction, not a fit. The microbenchmarks, as one-op blocks, show how
the derate carries over to shapes far from the tiny models (reported, not fitted).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from compiler.ir.block_graph import Block
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.errors import BadInput
from compiler.ir.paths import calibration_path
from cost_models.derates import DERATES, Derate
from cost_models.roofline import block_time

log = logging.getLogger(__name__)

DEVICE_ID = "cpu-host"
#: Derate fields the fit sets (the rest keep the cpu family's values).
FITTED_EFFS = ("compute_eff", "mem_eff", "vector_eff", "elementwise_traffic")
FITTED_FIELDS = (*FITTED_EFFS, "op_overhead_s", "block_overhead_s")
_EFF_BOUNDS = (1e-3, 1.0)

from compiler.quiet_timing import Job, Note, QuietGate, _time_rounds


@dataclass(frozen=True, slots=True)
class Settings:
    """How much to measure. ``linear`` shapes are (M, K, N): x[M, K] @ w[N, K]^T."""

    square_sizes: tuple[tuple[str, tuple[int, ...]], ...]
    model_linears: tuple[tuple[int, int, int], ...]
    sdpa_shapes: tuple[tuple[int, int, int, int, int], ...]  # (B, heads, queries, keys, head_dim)
    memory_mib: int
    models: tuple[str, ...]
    prefill_points: tuple[tuple[int, int], ...]  # (B, S)
    decode_points: tuple[tuple[int, int], ...]  # (B, L)
    micro_rounds: int  # microbenchmarks: the fastest of at least this many single calls
    block_rounds: int  # block pieces: the fastest of at least this many medians of `block_calls` calls
    block_calls: int
    segment_s: float  # shortest timing segment (see [Note: timing under contention])
    wait_budget_s: float  # longest total pause for the host to become quiet
    fit_grid_points: int  # per efficiency in the fit's coarse grid
    fit_restarts: int  # Nelder-Mead searches from the best grid points


FULL = Settings(
    square_sizes=(("fp32", (256, 512, 1024, 2048)), ("bf16", (256, 512, 1024))),
    model_linears=((512, 64, 224), (128, 4096, 4096), (8, 4096, 4096)),
    sdpa_shapes=((1, 4, 128, 128, 16), (4, 4, 256, 256, 16), (8, 4, 1, 256, 16), (1, 32, 512, 512, 128)),
    memory_mib=256,
    models=("llama-tiny", "mixtral-tiny"),
    prefill_points=((1, 32), (1, 128), (4, 64), (2, 256), (8, 128), (4, 256)),
    decode_points=tuple((b, length) for b in (1, 2, 4, 8) for length in (64, 128, 256)),
    micro_rounds=7, block_rounds=7, block_calls=5, segment_s=0.1, wait_budget_s=120.0,
    fit_grid_points=5, fit_restarts=3,
)

QUICK = Settings(
    square_sizes=(("fp32", (256, 512)), ("bf16", (128,))),
    model_linears=((512, 64, 224),),
    sdpa_shapes=((1, 4, 128, 128, 16),),
    memory_mib=64,
    models=("llama-tiny",),
    prefill_points=((1, 32), (2, 64), (4, 64), (1, 128)),
    decode_points=((1, 64), (2, 64), (4, 128), (8, 128)),
    micro_rounds=3, block_rounds=3, block_calls=3, segment_s=0.03, wait_budget_s=3.0,
    fit_grid_points=4, fit_restarts=1,
)


@dataclass(frozen=True, slots=True)
class Sample:
    """One block of one model timed at one point; `held_out` samples are not fitted on."""

    model: str
    block: str
    phase: str
    point: tuple[tuple[str, int], ...]
    measured_s: float
    held_out: bool

    @property
    def point_dict(self) -> dict[str, int]:
        return dict(self.point)


# ---------------------------------------------------------------- microbenchmarks


def microbenchmark_jobs(settings: Settings) -> dict[str, Job]:
    """One job per microbenchmark, keyed as `microbenchmark_rows` reads them (tensors allocated here)."""
    import torch
    import torch.nn.functional as F

    from compiler.trace import TORCH_DTYPES

    torch.manual_seed(0)

    def timed(fn: Callable[[], Any], calls: int = 1) -> Job:
        return lambda: _time_rounds([fn], rounds=settings.micro_rounds, calls=calls, min_s=settings.segment_s)

    jobs: dict[str, Job] = {}
    for dtype, (m, k, n) in _linear_shapes(settings):
        torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
        x, w = torch.randn(m, k, dtype=torch_dtype), torch.randn(n, k, dtype=torch_dtype)
        jobs[f"linear {dtype} {m}x{k}x{n}"] = timed(lambda x=x, w=w: F.linear(x, w))
    src = torch.rand(settings.memory_mib * 2**20 // 4)
    dst = torch.empty_like(src)
    jobs["copy"] = timed(lambda: dst.copy_(src))
    jobs["sum"] = timed(lambda: src.sum())
    for b, heads, queries, keys, head_dim in settings.sdpa_shapes:
        q = torch.randn(b, heads, queries, head_dim)
        k, v = torch.randn(b, heads, keys, head_dim), torch.randn(b, heads, keys, head_dim)
        jobs[f"sdpa {b} {heads} {queries} {keys} {head_dim}"] = timed(
            lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v))
    t = torch.ones(8)
    add, view = torch.ops.aten.add.Tensor, torch.ops.aten.view.default
    jobs["dispatch kernel"] = timed(lambda: add(t, 1.0), calls=100)
    jobs["dispatch view"] = timed(lambda: view(t, [2, 4]), calls=100)
    return jobs


def _linear_shapes(settings: Settings) -> list[tuple[str, tuple[int, int, int]]]:
    return [(dtype, (n, n, n)) for dtype, sizes in settings.square_sizes for n in sizes] + \
        [("fp32", shape) for shape in settings.model_linears]


def microbenchmark_rows(settings: Settings, seconds: Mapping[str, list[float]]) -> dict[str, Any]:
    """Peaks, bandwidth and dispatch time, and the rows they come from (JSON-ready)."""
    import torch

    linears = []
    for dtype, (m, k, n) in _linear_shapes(settings):
        t = seconds[f"linear {dtype} {m}x{k}x{n}"][0]
        linears.append({"dtype": dtype, "shape": f"{m}x{k}x{n}", "dims": [m, k, n], "time_s": t,
                        "flops_per_s": 2 * m * k * n / t})
    peaks: dict[str, float] = {}
    for row in linears:
        peaks[row["dtype"]] = max(peaks.get(row["dtype"], 0.0), row["flops_per_s"])
    for row in linears:
        row["fraction_of_peak"] = row["flops_per_s"] / peaks[row["dtype"]]
    nbytes = settings.memory_mib * 2**20
    memory = [{"op": "copy", "bytes": 2 * nbytes, "time_s": seconds["copy"][0],
               "bytes_per_s": 2 * nbytes / seconds["copy"][0]},
              {"op": "sum", "bytes": nbytes, "time_s": seconds["sum"][0], "bytes_per_s": nbytes / seconds["sum"][0]}]
    sdpa = []
    for dims in settings.sdpa_shapes:
        b, heads, queries, keys, head_dim = dims
        t = seconds[f"sdpa {b} {heads} {queries} {keys} {head_dim}"][0]
        flops = 4 * b * heads * queries * keys * head_dim
        sdpa.append({"shape": f"B{b} H{heads} q{queries} k{keys} d{head_dim}", "dims": list(dims), "time_s": t,
                     "flops_per_s": flops / t, "fraction_of_peak": flops / t / peaks["fp32"]})
    return {
        "peak_flops_per_s": peaks,
        "mem_bw_bytes_per_s": max(row["bytes_per_s"] for row in memory),
        "dispatch_s": {"kernel": seconds["dispatch kernel"][0], "view": seconds["dispatch view"][0]},
        "threads": torch.get_num_threads(),
        "linear": linears, "memory": memory, "sdpa": sdpa,
    }


# ---------------------------------------------------------------- block times


@dataclass(frozen=True, slots=True)
class PointJob:
    """All block pieces of one model at one point, timed as one segment."""

    model: str
    phase: str
    point: tuple[tuple[str, int], ...]
    blocks: tuple[str, ...]
    held_out: bool
    job: Job

    @property
    def key(self) -> str:
        return f"{self.model} {self.phase} {self.point}"

    def samples(self, seconds: Sequence[float]) -> list[Sample]:
        return [Sample(self.model, name, self.phase, self.point, t, self.held_out)
                for name, t in zip(self.blocks, seconds)]


def block_jobs(model_name: str, settings: Settings, note: Note) -> list[PointJob]:
    """Build `model_name` with fp32 weights, split it, and make one job per prefill and decode point."""
    import torch
    from torch.utils._pytree import tree_flatten
    from transformers import DynamicCache

    from compiler.stage_split import split_model

    note(f"building {model_name} with fp32 weights and splitting it into blocks")
    model, prefill, decode = split_model(model_name)
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    jobs = []
    with torch.no_grad():
        for i, (b, s) in enumerate(settings.prefill_points):
            ids = torch.randint(0, vocab, (b, s), generator=generator)
            jobs.append(_point_job(model_name, "prefill", {"B": b, "S": s}, prefill, (ids, False), settings, i))
        for i, (b, length) in enumerate(settings.decode_points):
            prompt = torch.randint(0, vocab, (b, length), generator=generator)
            kv = tree_flatten(model(input_ids=prompt, use_cache=True, cache=DynamicCache()).cache)[0]
            token = torch.randint(0, vocab, (b, 1), generator=generator)
            jobs.append(_point_job(model_name, "decode", {"B": b, "L": length}, decode, (token, *kv, True),
                                   settings, i))
    return jobs


def _point_job(model_name: str, phase: str, point: dict[str, int], split, inputs: tuple, settings: Settings,
               index: int) -> PointJob:
    """Run `split` once, recording each block piece's inputs; the job times each piece alone on them."""
    import torch

    calls: list[tuple[str, Any, tuple]] = []
    hooks = []
    for node in split.graph.nodes:
        if node.op == "call_module":
            piece, name = getattr(split, node.target), node.meta["block"]
            hooks.append(piece.register_forward_pre_hook(
                lambda _m, args, name=name, piece=piece: calls.append((name, piece, args))))
    try:
        split(*inputs)
    finally:
        for hook in hooks:
            hook.remove()
    fns = [lambda piece=piece, args=args: piece(*args) for _name, piece, args in calls]

    def job() -> list[float]:
        with torch.no_grad():
            return _time_rounds(fns, rounds=settings.block_rounds, calls=settings.block_calls, min_s=settings.segment_s)

    return PointJob(model_name, phase, tuple(sorted(point.items())), tuple(name for name, _p, _a in calls),
                    held_out=index % 2 == 1, job=job)


@dataclass(frozen=True, slots=True)
class Measurements:
    """What `measure` timed: microbenchmark rows and peaks (JSON-ready), block samples, gate statistics."""

    micro: dict[str, Any]
    samples: tuple[Sample, ...]
    timing: dict[str, Any]
    elapsed_s: float

    @staticmethod
    def from_report(report: dict[str, Any]) -> Measurements:
        """The measurements inside a saved report, to fit again (``tools/bench_calibrate.py --from``)."""
        micro = {**report["microbenchmarks"], "threads": report["threads"],
                 "peak_flops_per_s": report["peak_flops_per_s"], "mem_bw_bytes_per_s": report["mem_bw_bytes_per_s"]}
        samples = tuple(Sample(r["model"], r["block"], r["phase"], tuple(sorted(r["point"].items())),
                               r["measured_s"], r["held_out"]) for r in report["stage_errors"])
        return Measurements(micro, samples, report["timing_segments"], report["elapsed_s"])


def measure(settings: Settings, note: Note) -> Measurements:
    """Run the microbenchmarks and time every tiny model's blocks, all through one `QuietGate`."""
    import torch

    started = time.perf_counter()
    points = [p for name in settings.models for p in block_jobs(name, settings, note)]
    micro_jobs = microbenchmark_jobs(settings)
    note(f"timing {len(micro_jobs)} microbenchmarks and {len(points)} model points on "
         f"{torch.get_num_threads()} threads")
    gate = QuietGate(settings.wait_budget_s, note)
    seconds = gate.run({**micro_jobs, **{p.key: p.job for p in points}})
    samples = [s for p in points for s in p.samples(seconds[p.key])]
    return Measurements(microbenchmark_rows(settings, seconds), tuple(samples), gate.to_json(),
                        round(time.perf_counter() - started, 1))


# ---------------------------------------------------------------- fit


@dataclass(frozen=True, slots=True)
class Case:
    """A measured block time with the Block that predicts it."""

    block: Block
    point: dict[str, int]
    measured_s: float


def predict_s(case: Case, device: DeviceSpec, derate: Derate) -> float:
    return block_time(case.block, case.point, device, dtype="fp32", kv_dtype="fp32", derate=derate).time_s


def fit_derate(cases: Sequence[Case], device: DeviceSpec, start: Derate, *, grid_points: int = 5,
               restarts: int = 3) -> Derate:
    """The `Derate` whose `block_time` best matches `cases`; see [Note: calibration fit]."""
    import numpy as np

    measured = np.array([c.measured_s for c in cases])
    ops = np.array([float(c.block.dispatches or sum(op.count for op in c.block.ops)) for c in cases])

    def solve(effs: dict[str, float]) -> tuple[float, Derate]:
        bare = replace(start, **effs, op_overhead_s=0.0, block_overhead_s=0.0)
        roof = np.array([predict_s(c, device, bare) for c in cases])
        block_s, op_s = _robust_overheads(roof, ops, measured)
        loss = float(np.mean(np.abs(np.log((roof + block_s + op_s * ops) / measured))))
        return loss, replace(bare, block_overhead_s=block_s, op_overhead_s=op_s)

    # A coarse grid over the efficiencies that trade off against each other, then a Nelder-Mead search in
    # log space over all four from the best few grid points (the max() in the roofline makes the loss
    # multi-modal, and its valleys run diagonally, where a one-coordinate search stalls).
    grid = np.geomspace(0.02, 1.0, grid_points)
    starts = []
    for ce, me, et in itertools.product(grid, grid, grid):
        effs = (float(ce), float(me), _clip_eff(start.vector_eff), float(et))
        starts.append((solve(dict(zip(FITTED_EFFS, effs)))[0], effs))
    starts.sort(key=lambda entry: entry[0])

    def log_loss(x) -> float:
        return solve({k: _clip_eff(math.exp(v)) for k, v in zip(FITTED_EFFS, x)})[0]

    best = min((_nelder_mead(log_loss, np.log(effs), step=math.log(grid[1] / grid[0]))
                for _loss, effs in starts[:restarts]), key=lambda entry: entry[0])[1]
    return solve({k: _clip_eff(math.exp(v)) for k, v in zip(FITTED_EFFS, best)})[1]


def _nelder_mead(f: Callable[[Any], float], x0, *, step: float, iterations: int = 300,
                 tolerance: float = 1e-7) -> tuple[float, Any]:
    """Minimise `f` from `x0` with the Nelder-Mead simplex method; returns (value, point)."""
    import numpy as np

    simplex = [np.asarray(x0, dtype=float)] + [x0 + step * e for e in np.eye(len(x0))]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tolerance:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        f_reflected = f(reflected)
        if f_reflected < values[0]:
            expanded = centroid + 2.0 * (centroid - simplex[-1])
            f_expanded = f(expanded)
            simplex[-1], values[-1] = (expanded, f_expanded) if f_expanded < f_reflected else (reflected, f_reflected)
        elif f_reflected < values[-2]:
            simplex[-1], values[-1] = reflected, f_reflected
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            f_contracted = f(contracted)
            if f_contracted < values[-1]:
                simplex[-1], values[-1] = contracted, f_contracted
            else:  # shrink towards the best point
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    i = int(np.argmin(values))
    return values[i], simplex[i]


def _clip_eff(value: float) -> float:
    return min(max(value, _EFF_BOUNDS[0]), _EFF_BOUNDS[1])


def _robust_overheads(roof, ops, measured) -> tuple[float, float]:
    """Non-negative (block_s, op_s) minimising the mean |relative error| (iteratively reweighted least squares)."""
    import numpy as np

    columns = np.stack([1.0 / measured, ops / measured], axis=1)
    target = 1.0 - roof / measured  # relative error = columns @ (block_s, op_s) - target
    solution = _overheads(columns, target)
    for _ in range(15):
        weight = 1.0 / np.sqrt(np.maximum(np.abs(columns @ solution - target), 1e-3))
        solution = _overheads(columns * weight[:, None], target * weight)
    return float(solution[0]), float(solution[1])


def _overheads(columns, target):
    """Non-negative least squares in two unknowns: the free solution, else the best with one pinned at zero."""
    import numpy as np

    solution = np.linalg.lstsq(columns, target, rcond=None)[0]
    if (solution >= 0).all():
        return solution
    best, best_err = np.zeros(2), float(target @ target)
    for j in (0, 1):
        col = columns[:, j]
        value = max(float(col @ target / (col @ col)), 0.0)
        err = float(np.sum((target - col * value) ** 2))
        if err < best_err:
            best, best_err = np.eye(2)[j] * value, err
    return best


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
    report = fit_report(measure(QUICK if quick else FULL, note), note, quick=quick)
    report["saved_to"] = str(calibration_path(DEVICE_ID))
    _save(report)
    return report


def fit_report(measured: Measurements, note: Note, *, quick: bool = False) -> dict[str, Any]:
    """Fit the derate on the fit samples and report predicted vs measured for all (the saved JSON)."""
    from backends.cpu import host_device
    from compiler.pipeline import block_graph
    from cost_models.derates import derate_for

    micro = measured.micro
    graphs = {name: block_graph(name, progress=note) for name in dict.fromkeys(s.model for s in measured.samples)}
    cases = [(s, Case(graphs[s.model].block(s.block, s.phase), s.point_dict, s.measured_s)) for s in measured.samples]
    note(f"fitting the cpu derate on {sum(not s.held_out for s, _ in cases)} of {len(cases)} block times")
    before_device, before_derate = host_device(), derate_for("cpu", DEVICE_ID)  # what the compiler used so far
    device = _measured_device(micro)
    start = replace(DERATES["cpu"], op_overhead_s=micro["dispatch_s"]["kernel"])
    settings = QUICK if quick else FULL
    derate = fit_derate([c for s, c in cases if not s.held_out], device, start,
                        grid_points=settings.fit_grid_points, restarts=settings.fit_restarts)
    rows = [_error_row(s, c, device, derate) for s, c in cases]
    before = [_error_row(s, c, before_device, before_derate) for s, c in cases]
    transfer = [{"op": name, "measured_s": c.measured_s, "predicted_s": predict_s(c, device, derate),
                 "error": predict_s(c, device, derate) / c.measured_s - 1} for name, c in micro_cases(micro)]
    return {
        "device": DEVICE_ID, "family": "cpu", "host": _host_name(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": _torch_version(), "threads": micro["threads"], "quick": quick,
        "peak_flops_per_s": micro["peak_flops_per_s"], "mem_bw_bytes_per_s": micro["mem_bw_bytes_per_s"],
        "derate": {k: getattr(derate, k) for k in FITTED_FIELDS},
        "derate_start": {k: getattr(start, k) for k in FITTED_FIELDS},
        "microbenchmarks": {k: micro[k] for k in ("dispatch_s", "linear", "memory", "sdpa")},
        "stage_errors": rows,
        "microbenchmark_errors": transfer,
        "step_errors": _step_errors(rows),
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


def _summary(rows: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[str, float]:
    def median_abs(selected: list[dict[str, Any]]) -> float:
        return statistics.median(abs(r["error"]) for r in selected) if selected else float("nan")

    return {"median_error": median_abs(rows),
            "median_error_fit": median_abs([r for r in rows if not r["held_out"]]),
            "median_error_held_out": median_abs([r for r in rows if r["held_out"]]),
            "max_error": max(abs(r["error"]) for r in rows), "points": len(rows),
            "median_step_error": median_abs(steps),
            "median_step_error_held_out": median_abs([r for r in steps if r["held_out"]])}


def _host_name() -> str:
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


def _save(report: dict[str, Any]) -> None:
    path = calibration_path(DEVICE_ID)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(report, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError as e:
        raise BadInput(f"calibrate: cannot write {path} ({e}); set GIMLETC_CACHE_DIR to a writable folder") from None
    log.info("saved the %s calibration to %s", DEVICE_ID, path)

