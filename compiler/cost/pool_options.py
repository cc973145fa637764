"""Candidate pools for the placement ILP, each costed by the serving model.

Before: a BlockGraph, a cluster (inventory, links), a workload (mean lengths,
SLOs) and a `Precision`. After: a list of `PoolOption`s (`compiler.ir.pool_option`),
one per way to run one replica of a role on some devices: ``colocated``
(continuous batching with chunked prefill; interference included),
``prefill``, ``decode``, and ``decode-af`` (attention and KV on one device
type, FFN/MoE, embedding and head on another, hidden states crossing every layer).

Each option records devices used per type, power (predicted draw, and the
TDP the power budget must provision for), the request rate one replica
sustains and the latency a request sees. The ILP (`compiler.place`) picks
integer replica counts; which roles end up separate is its outcome.
Options whose latency breaks an SLO are kept and marked (``slo_ok``) so an
infeasible solve can name the SLO as the binding constraint.

Steps: `_demand` (the workload as the numbers options are costed at), per
device type `_shapes` (tp x pp groups worth trying) and `_replica_options`
(decode, colocated and prefill options of one shape), then `_af_options`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from backends.registry import backend_of, device
from compiler.cost.deployment import deployment
from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput
from compiler.ir.pool_option import PoolOption
from compiler.ir.precision import Precision
from cost_models.power import step_power_w
from cost_models.serving import (
    Deployment, StepTime, af_decode_step, continuous_batching, decode_step, devices_to_hold, max_batch, memory_plan,
    prefill_time,
)

log = logging.getLogger(__name__)

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PREFILL_BATCHES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class _Demand:
    """The workload as the numbers a pool is costed at (means over the request mix), and the SLOs in seconds."""

    slo_ttft_s: float
    slo_tpot_s: float
    output_len: float
    prefill_tokens: float  # prompt tokens computed per request after prefix-cache hits
    decode_context: float  # mean context a decode step sees
    kv_tokens: float  # mean tokens of KV one request holds
    seq_kv_mean_bytes: float
    seq_kv_max_bytes: float

    @property
    def kv_bytes_per_token(self) -> float:
        return self.seq_kv_mean_bytes / self.kv_tokens


def _demand(graph: BlockGraph, workload: Workload, precision: Precision) -> _Demand:
    return _Demand(
        slo_ttft_s=workload.slo.ttft_ms / 1e3 if workload.slo.ttft_ms else math.inf,
        slo_tpot_s=workload.slo.tpot_ms / 1e3 if workload.slo.tpot_ms else math.inf,
        output_len=workload.mean_output_len,
        prefill_tokens=max(1.0, workload.mean_prefill_tokens),
        decode_context=workload.mean_input_len + workload.mean_output_len / 2,
        kv_tokens=workload.kv_tokens_per_request_mean,
        seq_kv_mean_bytes=graph.kv_bytes_per_sequence(workload.kv_tokens_per_request_mean, precision),
        seq_kv_max_bytes=graph.kv_bytes_per_sequence(workload.kv_tokens_per_request_max, precision))


def enumerate_options(graph: BlockGraph, cluster: Cluster, workload: Workload,
                      precision: Precision) -> tuple[list[PoolOption], list[str]]:
    """All candidate pools for `graph` on `cluster` under `workload`; also the reasons types were skipped."""
    demand = _demand(graph, workload, precision)
    options: list[PoolOption] = []
    skipped: list[str] = []
    for dev_id, count in sorted(cluster.inventory().items()):
        reasons = _unsupported(dev_id, precision)
        if reasons:
            skipped.append("; ".join(reasons))
            continue
        shapes = _shapes(graph, dev_id, count, precision)
        if not shapes:
            skipped.append(f"{dev_id}: {count} devices cannot hold {graph.model} weights at {precision.weights}")
            continue
        for tp, pp in shapes:
            options += _replica_options(graph, deployment(dev_id, tp * pp, tp, pp, precision), demand)
    options += _af_options(graph, cluster, precision, demand)
    if not options:
        raise BadInput(f"no device type in the cluster can hold {graph.model} at {precision.weights}: "
                       + "; ".join(skipped))
    options.sort(key=lambda o: o.key)
    return options, skipped


def _unsupported(device_id: str, precision: Precision) -> list[str]:
    spec = device(device_id)
    return backend_of(spec).unsupported_reasons(spec, precision.weights)


def _shapes(graph: BlockGraph, device_id: str, count: int, precision: Precision,
            weight_fraction: float = 1.0) -> list[tuple[int, int]]:
    """(tp, pp) shapes worth trying: the smallest group that holds the weights, and twice and four times it."""
    spec = device(device_id)
    need = devices_to_hold(graph.weight_bytes(precision) * weight_fraction, spec)
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


def _power(dep: Deployment, step: StepTime) -> float:
    return dep.group * step_power_w(dep.device, time_s=step.time_s, compute_s=step.compute_s, memory_s=step.memory_s)


def _replica_options(graph: BlockGraph, dep: Deployment, demand: _Demand) -> list[PoolOption]:
    """Decode, colocated and prefill options of one replica shape (none if it cannot hold the longest request)."""
    plan = memory_plan(graph, dep)
    replica_kv = plan.kv_capacity_bytes * dep.group
    if replica_kv < demand.seq_kv_max_bytes:
        return []  # cannot hold even one longest request
    dev_id, shape = dep.device.id, f"{dep.device.id}:tp{dep.tp}:pp{dep.pp}"
    tdp = dep.group * dep.device.tdp_w
    out = []
    b_max = max_batch(replica_kv, demand.kv_bytes_per_token, [demand.kv_tokens])
    for b in [b for b in BATCHES if b <= b_max]:
        kv_plan = memory_plan(graph, dep, demand.seq_kv_mean_bytes * b / dep.group)
        step = decode_step(graph, dep, b, demand.decode_context, kv_plan)
        out.append(PoolOption(
            f"decode:{shape}:b{b}", "decode", ((dev_id, dep.group),), _power(dep, step), tdp,
            b / (demand.output_len * step.time_s), None, step.time_s, dev_id, dep.tp, dep.pp, b,
            step.time_s <= demand.slo_tpot_s, (("bound", step.bound),)))
        steady = continuous_batching(graph, dep, b, round(demand.prefill_tokens), round(demand.output_len))
        life = steady.ttft_s + (demand.output_len - 1) * steady.tpot_s
        out.append(PoolOption(
            f"colocated:{shape}:c{b}", "colocated", ((dev_id, dep.group),), _power(dep, step), tdp, b / life,
            steady.ttft_s, steady.tpot_s, dev_id, dep.tp, dep.pp, b,
            steady.ttft_s <= demand.slo_ttft_s and steady.tpot_s <= demand.slo_tpot_s,
            (("interference", round(steady.interference, 4)),)))
    for b in [b for b in PREFILL_BATCHES
              if b * demand.prefill_tokens * demand.seq_kv_mean_bytes / demand.kv_tokens <= replica_kv]:
        step = prefill_time(graph, dep, b, demand.prefill_tokens, plan=plan)
        out.append(PoolOption(
            f"prefill:{shape}:b{b}", "prefill", ((dev_id, dep.group),), _power(dep, step), tdp, b / step.time_s,
            step.time_s, None, dev_id, dep.tp, dep.pp, b, step.time_s <= demand.slo_ttft_s, (("bound", step.bound),)))
    return out


def _af_options(graph: BlockGraph, cluster: Cluster, precision: Precision, demand: _Demand) -> list[PoolOption]:
    """Attention on one type, FFN/MoE on another; smallest groups that hold each side."""
    inventory = cluster.inventory()
    attn_params = sum(b.weight_params for b in graph.phase_blocks("decode") if b.role == "attn")
    attn_fraction = attn_params / max(graph.params_total, 1)
    usable = [d for d in sorted(inventory) if not _unsupported(d, precision)]
    out = []
    for ta in usable:
        for tf in usable:
            if ta == tf:
                continue
            sa = _shapes(graph, ta, inventory[ta], precision, attn_fraction)
            sf = _shapes(graph, tf, inventory[tf], precision, 1 - attn_fraction)
            if not sa or not sf:
                continue
            (tpa, ppa), (tpf, ppf) = sa[-1 if len(sa) > 1 else 0], sf[0]
            if ppa > 1 or ppf > 1:
                continue  # pipelining on top of attention/FFN disaggregation is not modelled
            attn = deployment(ta, tpa, tpa, 1, precision)
            ffn = deployment(tf, tpf, tpf, 1, precision)
            bw, lat = cluster.link(ta, tf)
            for b in BATCHES:
                step, plan_a, plan_f = af_decode_step(graph, attn, ffn, b, demand.decode_context,
                                                      link_bw_bytes_per_s=bw, link_latency_s=lat)
                if plan_a.kv_capacity_bytes * attn.group < demand.seq_kv_mean_bytes * b or not plan_f.fits:
                    break
                power = _power(attn, step) + _power(ffn, step)
                tdp = tpa * attn.device.tdp_w + tpf * ffn.device.tdp_w
                out.append(PoolOption(
                    f"decode-af:{ta}:tp{tpa}+{tf}:tp{tpf}:b{b}", "decode-af", ((ta, tpa), (tf, tpf)), power, tdp,
                    b / (demand.output_len * step.time_s), None, step.time_s, ta, tpa, 1, b,
                    step.time_s <= demand.slo_tpot_s, (("ffn_tp", tpf), ("bound", step.bound))))
    return out


def with_slo(options: list[PoolOption], ttft_s: float | None, tpot_s: float | None) -> list[PoolOption]:
    """The same options re-marked against other SLOs (costs do not depend on them)."""

    def ok(o: PoolOption) -> bool:
        return ((ttft_s is None or o.ttft_s is None or o.ttft_s <= ttft_s)
                and (tpot_s is None or o.tpot_s is None or o.tpot_s <= tpot_s))

    return [replace(o, slo_ok=ok(o)) for o in options]
