"""Candidate pools for the placement ILP, each costed by the serving model.

Before: a BlockGraph, a cluster (inventory, links) and a workload (mean
lengths, SLOs). After: a list of `PoolOption`s, one per way to run one
replica of a role on some devices:

- ``colocated``: prefill and decode on the same replica (continuous batching
  with chunked prefill; interference included), concurrency C;
- ``prefill``: prompt processing only, B prompts per step; its KV is handed off;
- ``decode``: token generation only, batch B, receiving KV from prefill pools;
- ``decode-af``: decode with attention (and the KV cache) on one device type and
  FFN/MoE, embedding and head on another, hidden states crossing every layer.

Each option records devices used per type, power (predicted draw, and the
TDP the power budget must provision for), the request rate one replica
sustains and the latency a request sees. The ILP (`compiler.place`) picks
integer replica counts; which roles end up separate is its outcome.
Options whose latency breaks an SLO are kept and marked (``slo_ok``) so an
infeasible solve can name the SLO as the binding constraint.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput
from cost_models.power import device_power_w
from cost_models.serving import (
    Deployment, StepTime, af_decode_step, continuous_batching, decode_step, devices_to_hold, kv_bytes_per_sequence,
    max_batch, memory_plan, prefill_time,
)

log = logging.getLogger(__name__)

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PREFILL_BATCHES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class PoolOption:
    """One replica of one role on specific devices, costed. Times in seconds, rates in requests/s."""

    key: str
    kind: str  # "colocated" | "prefill" | "decode" | "decode-af"
    devices: tuple[tuple[str, int], ...]  # (device id, devices per replica)
    power_w: float  # predicted mean draw of one replica while serving
    provisioned_w: float  # what the budget must reserve for it: the devices' TDP
    rate_per_s: float
    ttft_s: float | None
    tpot_s: float | None
    kv_device: str  # the device type that holds the KV this option produces or consumes
    tp: int
    pp: int
    batch: int
    slo_ok: bool = True
    detail: tuple[tuple[str, Any], ...] = ()

    def uses(self, device_id: str) -> int:
        return dict(self.devices).get(device_id, 0)

    @property
    def device_types(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.devices)


def _power(dep: Deployment, step: StepTime) -> float:
    return dep.group * device_power_w(tdp_w=dep.device.tdp_w, idle_w=dep.device.idle_w,
                                      memory_util=step.memory_s / step.time_s, compute_util=step.compute_s / step.time_s)


def _groups(graph: BlockGraph, device_id: str, count: int, dtype: str, weight_fraction: float = 1.0):
    """(tp, pp) shapes worth trying: the smallest group that holds the weights, and twice and four times it."""
    from backends.registry import device

    spec = device(device_id)
    need = devices_to_hold(graph.weight_bytes(dtype) * weight_fraction, spec)
    domain = spec.scale_up.domain_devices if spec.scale_up is not None else 1
    shapes = []
    for target in (need, 2 * need, 4 * need):
        tp = 1
        while tp * 2 <= min(domain, target, 8):
            tp *= 2
        pp = math.ceil(target / tp)
        if tp * pp <= count and (tp, pp) not in shapes:
            shapes.append((tp, pp))
    return shapes


def enumerate_options(graph: BlockGraph, cluster, workload, *, dtype: str = "bf16",
                      kv_dtype: str | None = None) -> tuple[list[PoolOption], list[str]]:
    """All candidate pools for `graph` on `cluster` under `workload`; also the reasons types were skipped."""
    from backends.registry import backend_of, device
    from compiler.estimate import deployment

    inventory = cluster.inventory()
    slo_ttft = workload.slo.ttft_ms / 1e3 if workload.slo.ttft_ms else math.inf
    slo_tpot = workload.slo.tpot_ms / 1e3 if workload.slo.tpot_ms else math.inf
    s_in, s_out = workload.mean_input_len, workload.mean_output_len
    s_prefill = max(1.0, workload.mean_prefill_tokens)
    ctx = s_in + s_out / 2
    seq_kv_mean = kv_bytes_per_sequence(graph, workload.kv_tokens_per_request_mean, kv_dtype or dtype)
    seq_kv_max = kv_bytes_per_sequence(graph, workload.kv_tokens_per_request_max, kv_dtype or dtype)
    options: list[PoolOption] = []
    skipped: list[str] = []
    for dev_id, count in sorted(inventory.items()):
        spec = device(dev_id)
        reasons = backend_of(spec).unsupported_reasons(spec, dtype)
        if reasons:
            skipped.append("; ".join(reasons))
            continue
        shapes = _groups(graph, dev_id, count, dtype)
        if not shapes:
            skipped.append(f"{dev_id}: {count} devices cannot hold {graph.model} weights at {dtype}")
            continue
        for tp, pp in shapes:
            dep = deployment(dev_id, tp * pp, tp, pp, dtype, kv_dtype)
            plan = memory_plan(graph, dep)
            replica_kv = plan.kv_capacity_bytes * dep.group
            if replica_kv < seq_kv_max:
                continue  # cannot hold even one longest request
            b_max = max_batch(replica_kv, seq_kv_mean / workload.kv_tokens_per_request_mean,
                              [workload.kv_tokens_per_request_mean])
            shape = f"{dev_id}:tp{tp}:pp{pp}"
            for b in [b for b in BATCHES if b <= b_max]:
                kv_plan = memory_plan(graph, dep, seq_kv_mean * b / dep.group)
                step = decode_step(graph, dep, b, ctx, kv_plan)
                options.append(PoolOption(
                    f"decode:{shape}:b{b}", "decode", ((dev_id, dep.group),), _power(dep, step), dep.group * spec.tdp_w,
                    b / (s_out * step.time_s), None, step.time_s, dev_id, tp, pp, b, step.time_s <= slo_tpot,
                    (("bound", step.bound),)))
                steady = continuous_batching(graph, dep, b, round(s_prefill), round(s_out))
                life = steady.ttft_s + (s_out - 1) * steady.tpot_s
                options.append(PoolOption(
                    f"colocated:{shape}:c{b}", "colocated", ((dev_id, dep.group),), _power(dep, step),
                    dep.group * spec.tdp_w, b / life,
                    steady.ttft_s, steady.tpot_s, dev_id, tp, pp, b,
                    steady.ttft_s <= slo_ttft and steady.tpot_s <= slo_tpot,
                    (("interference", round(steady.interference, 4)),)))
            for b in [b for b in PREFILL_BATCHES if b * s_prefill * seq_kv_mean / workload.kv_tokens_per_request_mean
                      <= replica_kv]:
                step = prefill_time(graph, dep, b, s_prefill, plan=plan)
                options.append(PoolOption(
                    f"prefill:{shape}:b{b}", "prefill", ((dev_id, dep.group),), _power(dep, step),
                    dep.group * spec.tdp_w, b / step.time_s,
                    step.time_s, None, dev_id, tp, pp, b, step.time_s <= slo_ttft, (("bound", step.bound),)))
    options += _af_options(graph, cluster, workload, dtype, kv_dtype, ctx, s_out, slo_tpot, seq_kv_mean)
    if not options:
        raise BadInput(f"no device type in the cluster can hold {graph.model} at {dtype}: " + "; ".join(skipped))
    options.sort(key=lambda o: o.key)
    return options, skipped


def _af_options(graph, cluster, workload, dtype, kv_dtype, ctx, s_out, slo_tpot, seq_kv_mean) -> list[PoolOption]:
    """Attention on one type, FFN/MoE on another; smallest groups that hold each side."""
    from backends.registry import backend_of, device
    from compiler.estimate import deployment

    inventory = cluster.inventory()
    attn_params = sum(b.weight_params for b in graph.phase_blocks("decode") if b.role == "attn")
    attn_fraction = attn_params / max(graph.params_total, 1)
    usable = [d for d in sorted(inventory) if not backend_of(device(d)).unsupported_reasons(device(d), dtype)]
    out = []
    for ta in usable:
        for tf in usable:
            if ta == tf:
                continue
            sa = _groups(graph, ta, inventory[ta], dtype, attn_fraction)
            sf = _groups(graph, tf, inventory[tf], dtype, 1 - attn_fraction)
            if not sa or not sf:
                continue
            (tpa, ppa), (tpf, ppf) = sa[-1 if len(sa) > 1 else 0], sf[0]
            if ppa > 1 or ppf > 1:
                continue  # pipelining on top of attention/FFN disaggregation is not modelled
            attn = deployment(ta, tpa, tpa, 1, dtype, kv_dtype)
            ffn = deployment(tf, tpf, tpf, 1, dtype, kv_dtype)
            bw, lat = cluster.link(ta, tf)
            for b in BATCHES:
                step, plan_a, plan_f = af_decode_step(graph, attn, ffn, b, ctx, link_bw_bytes_per_s=bw,
                                                      link_latency_s=lat)
                if plan_a.kv_capacity_bytes * attn.group < seq_kv_mean * b or not plan_f.fits:
                    break
                power = _power(attn, step) + _power(ffn, step)
                tdp = tpa * attn.device.tdp_w + tpf * ffn.device.tdp_w
                out.append(PoolOption(
                    f"decode-af:{ta}:tp{tpa}+{tf}:tp{tpf}:b{b}", "decode-af", ((ta, tpa), (tf, tpf)), power, tdp,
                    b / (s_out * step.time_s), None, step.time_s, ta, tpa, 1, b, step.time_s <= slo_tpot,
                    (("ffn_tp", tpf), ("bound", step.bound))))
    return out


def with_slo(options: list[PoolOption], ttft_s: float | None, tpot_s: float | None) -> list[PoolOption]:
    """The same options re-marked against other SLOs (costs do not depend on them)."""
    from dataclasses import replace

    def ok(o: PoolOption) -> bool:
        return ((ttft_s is None or o.ttft_s is None or o.ttft_s <= ttft_s)
                and (tpot_s is None or o.tpot_s is None or o.tpot_s <= tpot_s))

    return [replace(o, slo_ok=ok(o)) for o in options]
