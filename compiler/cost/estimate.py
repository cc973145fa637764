"""Predict serving metrics of one homogeneous deployment: the ``gimletc estimate`` pass.

Before: a BlockGraph, a `Deployment` (device, count, tp, pp, precision) and a
request shape (input and output length) with one of three batching modes:

- ``batch=B``: B requests start together (static batch); ``batch="max"``: the
  largest B whose KV fits memory;
- ``concurrency=C``: C closed-loop clients, each sending its next request as
  soon as the previous one finishes (what serving benchmarks measure): continuous
  batching with prefill chunks inside decode steps, the engine's scheduler costs
  and the wait for a prefill slot included (`cost_models.load.closed_loop`); clients
  beyond what the KV cache holds wait for a running request to finish
  ([Note: clients beyond the slots]).

After: an `Estimate` (`compiler.ir.estimate`). Every number is a prediction of
the cost model, not a measurement.

Steps: `_check_fits` (weights fit, or say how many devices they need),
`_batch_per_replica` (the mode's batch and the largest that fits), `_phases`
(prefill and decode step times in the mode), then the totals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput
from compiler.ir.estimate import INTERVAL_OF, Estimate
from compiler.ir.prediction import Interval
from compiler.cost.deployment import devices_needed, group_shape
from cost_models.power import energy_per_token_j, step_power_w
from cost_models.load import RequestShape, closed_loop
from cost_models.spreads import deployment_spreads
from cost_models.serving import Deployment, MemoryPlan, memory_plan, sequences_that_fit
from cost_models.steps import StepTime, decode_step, prefill_time

#: Most sequences one replica schedules at once (TensorRT-LLM's default max batch size is 2048).
MAX_BATCH_CAP = 2048


@dataclass(frozen=True, slots=True)
class _Phases:
    """What a request sees in one mode: latencies, the steps behind them, and the share of time in prefill."""

    ttft_s: float
    tpot_s: float
    prefill: StepTime
    decode: StepTime
    prefill_share: float
    interference: float | None = None
    prefill_tokens_per_step: float | None = None
    mean_e2e_s: float | None = None  # a closed loop's mean request life, where `ttft_s`, `tpot_s` are the median's

    def e2e_s(self, output_len: int) -> float:
        """A request's mean life: what throughput is (Little's law)."""
        return self.mean_e2e_s if self.mean_e2e_s is not None else self.ttft_s + (output_len - 1) * self.tpot_s


def estimate(graph: BlockGraph, dep: Deployment, *, input_len: int, output_len: int, batch: int | str | None = None,
             concurrency: int | None = None, lockstep: bool = True) -> Estimate:
    """`lockstep` False: a closed loop's requests draw their lengths from a range (`input_len` and `output_len` are
    their means), so its clients do not stay in lock-step waves (`cost_models.load.assemble`)."""
    if (batch is None) == (concurrency is None):
        raise BadInput("give exactly one of --batch B, --batch max or --concurrency C")
    if input_len < 1 or output_len < 1:
        raise BadInput("--input-len and --output-len must be at least 1")
    weights_only = _check_fits(graph, dep)
    seq_kv = graph.kv_bytes_per_sequence(input_len + output_len, dep.precision)
    per_replica, running, fit_batch, fits = _batch_per_replica(graph, dep, weights_only, input_len, output_len,
                                                               batch, concurrency)
    warnings = ()
    if not fits and isinstance(batch, int) and running <= _whole_memory_fit(graph, dep, input_len + output_len):
        # the engine's KV share is a default, not a limit: a measured static batch beyond it ran ([Note: KV memory])
        fits, warnings = True, (static_batch_warning(dep, batch),)
        dep = replace(dep, engine=replace(dep.engine, kv_memory_fraction=1.0))
    plan = memory_plan(graph, dep, seq_kv * running / dep.kv_devices)
    phases = _phases(graph, dep, plan, per_replica, running, input_len, output_len,
                     concurrent=concurrency is not None, lockstep=lockstep)
    e2e = phases.e2e_s(output_len)
    requests = per_replica * dep.replicas
    power = dep.count * _mean_power(dep, phases)
    values = dict(ttft_ms=phases.ttft_s * 1e3, tpot_ms=phases.tpot_s * 1e3, e2e_latency_s=e2e,
                  output_tokens_per_s=requests * output_len / e2e,
                  total_tokens_per_s=requests * (input_len + output_len) / e2e,
                  tokens_per_s_per_user=1.0 / phases.tpot_s,
                  energy_j_per_token=energy_per_token_j(power, e2e, requests * output_len), power_w=power)
    intervals, basis = intervals_of(dep, values)
    return Estimate(
        model=graph.model, device=dep.device.id, count=dep.count, tp=dep.tp, pp=dep.pp, replicas=dep.replicas,
        dtype=dep.precision.weights, kv_dtype=dep.precision.kv, input_len=input_len, output_len=output_len,
        mode="concurrency" if concurrency is not None else ("batch_max" if batch == "max" else "batch"),
        **values, batch=per_replica, max_batch=fit_batch,
        fits=fits, memory_bytes=plan.weight_bytes + seq_kv * running / dep.kv_devices,
        memory_capacity_bytes=dep.device.capacity_bytes, bound_prefill=phases.prefill.bound, bound_decode=phases.decode.bound, derate=dep.derate.provenance,
        interference=phases.interference, prefill_tokens_per_step=phases.prefill_tokens_per_step,
        weight_tiers=dict(plan.weight_tiers.fractions), kv_tiers=dict(plan.kv_tiers.fractions),
        fast_tier=dep.device.memory[0].name, resident_devices=devices_needed(graph, dep, resident=True),
        intervals=intervals, interval_basis=basis, warnings=warnings,
    )


def _whole_memory_fit(graph: BlockGraph, dep: Deployment, tokens: int) -> int:
    """Sequences of `tokens` a replica holds when its KV cache takes all the memory weights and the runtime reserve
    leave (no engine default held back): the most any engine can run as one static batch."""
    whole = replace(dep, engine=replace(dep.engine, kv_memory_fraction=1.0))
    return sequences_that_fit(graph, whole, tokens)


def static_batch_warning(dep: Deployment, batch: int) -> str:
    """A static batch beyond the engine's default KV share but within the memory: what the engine must be told."""
    return (f"--batch {batch}: its KV fits only with the cache taking more than the {dep.engine.kv_memory_fraction:.0%} "
            f"of free memory engine {dep.engine.name} gives it by default (vLLM --gpu-memory-utilization, TensorRT-LLM "
            "kv_cache_free_gpu_mem_fraction, SGLang --mem-fraction-static); predicted with all of it")


#: What bounds a deployment's drawn power: its devices between idle and full load ([Note: drawn power]).
POWER_BASIS = "physics: between the devices' idle and rated power (no power measurement fits it)"


def intervals_of(dep: Deployment, values: dict[str, float]) -> tuple[dict[str, Interval], dict[str, str]]:
    """The 80% interval of each predicted metric in `values` (`INTERVAL_OF`), and what each kind rests on
    ([Note: prediction intervals] in `compiler.ir.prediction`)."""
    intervals, basis = {}, {}
    spreads = dict(deployment_spreads(dep))
    for name, value in values.items():
        kind, rate = INTERVAL_OF[name]
        if kind == "power":
            intervals[name] = Interval(min(value, dep.count * dep.device.idle_w), max(value, dep.count * dep.device.tdp_w))
            basis[kind] = POWER_BASIS
            continue
        spread = spreads[kind]
        intervals[name] = (spread.inverse() if rate else spread).of(value)
        basis[kind] = spread.basis
    return intervals, basis


def _check_fits(graph: BlockGraph, dep: Deployment) -> MemoryPlan:
    """The memory plan of the weights alone; `BadInput` naming the devices needed if they do not fit."""
    plan = memory_plan(graph, dep)
    if not plan.fits:
        need = devices_needed(graph, dep)
        tp, pp = group_shape(dep.device, need)
        flags = " ".join(f"--{k} {v}" for k, v in (("tp", tp), ("pp", pp)) if v > 1) + f" --count {tp * pp}"
        raise BadInput(
            f"{graph.model} ({graph.weight_bytes(dep.precision) / 1e9:.1f} GB at {dep.precision.weights}) does not fit "
            f"{dep.group} x {dep.device.id} ({_tiers_text(dep)}); it needs at least {need} devices per "
            f"replica: try {flags}")
    return plan


def _tiers_text(dep: Deployment) -> str:
    """'44 GB sram each; external memory does not serve inference': what a stage may use, and may not."""
    serving = " + ".join(f"{t.capacity_bytes / 1e9:.0f} GB {t.name}" for t in dep.device.serving_tiers)
    idle = [t.name for t in dep.device.memory if not t.serves]
    return serving + " each" + (f"; {', '.join(idle)} memory does not serve inference" if idle else "")


def _batch_per_replica(graph: BlockGraph, dep: Deployment, weights_only: MemoryPlan, input_len: int,
                       output_len: int, batch: int | str | None,
                       concurrency: int | None) -> tuple[int, int, int, bool]:
    """(requests per replica in this mode (closed loop: clients), how many run at once, the most that run at once,
    whether they fit).

    The most that run at once is the engine's max batch, or fewer where the KV cache beside the weights holds
    fewer: `--batch max` runs that many, and a closed loop's clients beyond it wait for a slot ([Note: clients
    beyond the slots]). An explicit static batch runs whole, so it fits if its KV does (the engine's max batch
    is a scheduler default, not a limit: optimum-habana runs static batches of 4,000).
    """
    tokens = input_len + output_len
    kv_fit = sequences_that_fit(graph, dep, tokens, weights_only)
    fit_batch = min(MAX_BATCH_CAP, dep.engine.max_batch, kv_fit)
    if concurrency is not None:
        per_replica = math.ceil(concurrency / dep.replicas)
        running = max(1, min(per_replica, fit_batch))  # at least one, to cost the loop even where none fits
    elif batch == "max":
        per_replica = running = fit_batch
    else:
        per_replica = running = math.ceil(int(batch) / dep.replicas)
    if per_replica < 1:
        raise BadInput(f"{graph.model} weights fit {dep.group} x {dep.device.id} but leave no room for the KV of one "
                       f"{tokens}-token sequence; add devices (--tp/--count) or shorten the request")
    return per_replica, running, fit_batch, 0 < running <= kv_fit


def _phases(graph: BlockGraph, dep: Deployment, plan: MemoryPlan, per_replica: int, running: int, input_len: int,
            output_len: int, *, concurrent: bool, lockstep: bool = True) -> _Phases:
    """`per_replica` requests (closed loop: clients), `running` of them at once (the rest wait for a slot)."""
    decode = decode_step(graph, dep, running, input_len + output_len / 2, plan)
    if not concurrent:
        prefill = prefill_time(graph, dep, per_replica, input_len, plan=plan)
        e2e = prefill.time_s + (output_len - 1) * decode.time_s
        return _Phases(prefill.time_s, decode.time_s, prefill, decode, prefill.time_s / e2e)
    loop = closed_loop(graph, dep, per_replica, RequestShape(input_len, output_len), slots=running,
                       lockstep=lockstep)
    prefill = prefill_time(graph, dep, 1, input_len, plan=plan)
    e2e = loop.ttft_s + (output_len - 1) * loop.tpot_s
    busy_prefill = prefill.time_s * per_replica / max(e2e, 1e-12)  # share of time spent on prefill work
    # the median request's TTFT and TPOT, as benchmarks report them; the mean life for the rates
    return _Phases(loop.ttft_median_s, loop.tpot_median_s, prefill, decode, busy_prefill, loop.interference,
                   loop.prefill_tokens_per_step, e2e)


def _mean_power(dep: Deployment, phases: _Phases) -> float:
    """One device's mean draw, weighting the prefill and decode steps' power by the time spent in each."""
    share = min(max(phases.prefill_share, 0.0), 1.0)
    return share * _power(dep, phases.prefill) + (1 - share) * _power(dep, phases.decode)


def _power(dep: Deployment, step: StepTime) -> float:
    return step_power_w(dep.device, time_s=step.time_s, compute_s=step.compute_s, memory_s=step.memory_s)
