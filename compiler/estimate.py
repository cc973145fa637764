"""Predict serving metrics of one homogeneous deployment: the ``gimletc estimate`` pass.

Before: a BlockGraph and a deployment (device id, count, tp, pp, dtype) and a
request shape (input and output length) with one of three batching modes:

- ``batch=B``: B requests start together (static batch); ``batch="max"``: the
  largest B whose KV fits memory;
- ``concurrency=C``: continuous batching with C requests in flight, prefill
  chunks interleaved with decode steps (what a request sees, interference included).

After: a dict with the documented keys (see `KEYS`). Every number is a
prediction of the cost model (``"prediction": true``), not a measurement.
"""

from __future__ import annotations

import math
from typing import Any

from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput
from cost_models.derates import derate_for
from cost_models.power import device_power_w, energy_per_token_j
from cost_models.serving import (
    Deployment, StepTime, continuous_batching, devices_to_hold, decode_step, kv_bytes_per_sequence, max_batch, memory_plan,
    prefill_time,
)

#: Most sequences one replica schedules at once (TensorRT-LLM's default max batch size is 2048).
MAX_BATCH_CAP = 2048

KEYS = ("ttft_ms", "tpot_ms", "e2e_latency_s", "output_tokens_per_s", "total_tokens_per_s", "tokens_per_s_per_user",
        "batch", "fits", "memory_bytes", "power_w", "energy_j_per_token", "bound")


def deployment(device_id: str, count: int, tp: int, pp: int, dtype: str, kv_dtype: str | None = None) -> Deployment:
    from backends.registry import backend_of, device

    spec = device(device_id)
    if count < 1 or tp < 1 or pp < 1:
        raise BadInput(f"count, tp and pp must be at least 1 (got count={count}, tp={tp}, pp={pp})")
    if count % (tp * pp):
        raise BadInput(f"--count {count} is not a multiple of tp*pp = {tp * pp}; use a count of whole replicas")
    reasons = backend_of(spec).unsupported_reasons(spec, dtype)
    if reasons:
        raise BadInput(f"{device_id} cannot run {dtype}. Reasons: {'; '.join(reasons)}")
    kv = kv_dtype or ("fp8" if dtype == "fp4" else dtype)
    return Deployment(spec, count, derate_for(spec.family, spec.id), tp, pp, dtype, kv)


def devices_needed(graph: BlockGraph, dep: Deployment) -> int:
    """Smallest tp*pp group whose memory holds the weights with room for one sequence of KV."""
    return devices_to_hold(graph.weight_bytes(dep.dtype) * 1.02, dep.device)


def estimate(graph: BlockGraph, dep: Deployment, *, input_len: int, output_len: int, batch: int | str | None = None,
             concurrency: int | None = None) -> dict[str, Any]:
    if (batch is None) == (concurrency is None):
        raise BadInput("give exactly one of --batch B, --batch max or --concurrency C")
    if input_len < 1 or output_len < 1:
        raise BadInput("--input-len and --output-len must be at least 1")
    seq_kv = kv_bytes_per_sequence(graph, input_len + output_len, dep.kv_dtype)
    plan = memory_plan(graph, dep)
    if not plan.fits:
        need = devices_needed(graph, dep)
        raise BadInput(
            f"{graph.model} ({graph.weight_bytes(dep.dtype) / 1e9:.1f} GB at {dep.dtype}) does not fit {dep.group} x "
            f"{dep.device.id} ({dep.device.capacity_bytes / 1e9:.0f} GB each); it needs at least {need} devices per "
            f"replica: try --tp {need} --count {need}")
    replica_kv = plan.kv_capacity_bytes * dep.group
    fit_batch = min(MAX_BATCH_CAP, max_batch(replica_kv, seq_kv / (input_len + output_len), [input_len + output_len]))
    if concurrency is not None:
        per_replica = math.ceil(concurrency / dep.replicas)
    elif batch == "max":
        per_replica = fit_batch
    else:
        per_replica = math.ceil(int(batch) / dep.replicas)
    if per_replica < 1:
        raise BadInput(f"{graph.model} weights fit {dep.group} x {dep.device.id} but leave no room for the KV of one "
                       f"{input_len + output_len}-token sequence; add devices (--tp/--count) or shorten the request")
    fits = per_replica <= fit_batch
    plan = memory_plan(graph, dep, seq_kv * per_replica / dep.group)
    if concurrency is not None:
        steady = continuous_batching(graph, dep, per_replica, input_len, output_len)
        ttft, tpot = steady.ttft_s, steady.tpot_s
        e2e = ttft + (output_len - 1) * tpot
        decode = decode_step(graph, dep, per_replica, input_len + output_len / 2, plan)
        prefill = prefill_time(graph, dep, 1, input_len, plan=plan)
        extra = {"interference": steady.interference, "prefill_tokens_per_step": steady.prefill_tokens_per_step}
        busy_prefill = prefill.time_s * per_replica / max(e2e, 1e-12)  # share of time spent on prefill work
    else:
        prefill = prefill_time(graph, dep, per_replica, input_len, plan=plan)
        decode = decode_step(graph, dep, per_replica, input_len + output_len / 2, plan)
        ttft, tpot = prefill.time_s, decode.time_s
        e2e = ttft + (output_len - 1) * tpot
        extra = {}
        busy_prefill = ttft / e2e
    requests = per_replica * dep.replicas
    out_tps = requests * output_len / e2e
    power = dep.count * _mean_power(dep, prefill, decode, busy_prefill)
    return {
        "prediction": True,
        "model": graph.model, "device": dep.device.id, "count": dep.count, "tp": dep.tp, "pp": dep.pp,
        "replicas": dep.replicas, "dtype": dep.dtype, "kv_dtype": dep.kv_dtype,
        "input_len": input_len, "output_len": output_len,
        "mode": "concurrency" if concurrency is not None else ("batch_max" if batch == "max" else "batch"),
        "ttft_ms": ttft * 1e3,
        "tpot_ms": tpot * 1e3,
        "e2e_latency_s": e2e,
        "output_tokens_per_s": out_tps,
        "total_tokens_per_s": requests * (input_len + output_len) / e2e,
        "tokens_per_s_per_user": 1.0 / tpot,
        "batch": per_replica,
        "max_batch": fit_batch,
        "fits": fits,
        "memory_bytes": plan.weight_bytes + seq_kv * per_replica / dep.group,
        "memory_capacity_bytes": dep.device.capacity_bytes,
        "power_w": power,
        "energy_j_per_token": energy_per_token_j(power, e2e, requests * output_len),
        "bound": {"prefill": prefill.bound, "decode": decode.bound},
        "derate": dep.derate.provenance,
        **extra,
    }


def _mean_power(dep: Deployment, prefill: StepTime, decode: StepTime, prefill_share: float) -> float:
    def phase_power(step: StepTime) -> float:
        return device_power_w(tdp_w=dep.device.tdp_w, idle_w=dep.device.idle_w,
                              memory_util=step.memory_s / step.time_s, compute_util=step.compute_s / step.time_s)

    share = min(max(prefill_share, 0.0), 1.0)
    return share * phase_power(prefill) + (1 - share) * phase_power(decode)
