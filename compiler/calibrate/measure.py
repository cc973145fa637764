"""What ``gimletc calibrate`` measures on this host: microbenchmarks and the time of every block piece.

1. Microbenchmarks (torch, eager, default thread count): ``F.linear`` at
   square and model-like shapes per dtype, a large copy and a large sum,
   SDPA at a few shapes, and the dispatch time of a tiny aten op. The best
   matmul rate is the dtype's ``peak_flops_per_s`` (a CPU has no datasheet:
   the measured best *is* the peak); the faster of copy and sum (bytes read
   plus written per second) is ``mem_bw_bytes_per_s``.
2. Block times: each tiny model is built with real fp32 weights, traced and
   split exactly as execution splits it (`compiler.trace.stage_split`); every
   block piece is timed on the inputs it receives in a real run, at several
   prefill (B, S) and decode (B, L) points. Every other point (alternating in
   each phase's list) is held out of the fit.

Timings are guarded against other load on the host; see [Note: timing under contention].
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from compiler.calibrate.quiet_timing import Job, Note, QuietGate, time_rounds

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

    from compiler.ir.precision import TORCH_DTYPES

    torch.manual_seed(0)

    def timed(fn: Callable[[], Any], calls: int = 1) -> Job:
        return lambda: time_rounds([fn], rounds=settings.micro_rounds, calls=calls, min_s=settings.segment_s)

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

    from compiler.trace.stage_split import split_model

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
            return time_rounds(fns, rounds=settings.block_rounds, calls=settings.block_calls, min_s=settings.segment_s)

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
