"""Candidate pools for the placement ILP, each costed for every request class by the serving model.

Before: a BlockGraph, a cluster (inventory, links, engines), a workload (request
classes with their lengths and SLO percentiles) and a `Precision`. After: a list
of `PoolOption`s (`compiler.ir.pool_option`), one per way to run one replica of
a role on some devices: ``colocated`` (continuous batching with chunked prefill),
``prefill``, ``decode``, and ``decode-af`` (attention and KV on one device type,
FFN/MoE, embedding and head on another, hidden states crossing every layer).

Each request class is costed on its own ([Note: request classes]): an option
serves a class only if one replica holds that class's longest request, and for
each class it serves it records the rate one replica sustains and a
latency-versus-utilisation curve (`cost_models.load`). Options do not depend on
the SLOs: the placement reads the curves against the targets.

[Note: request classes] A mix is never collapsed to a mean request. A class's
prompt length, decode context (its input plus half its output) and output
length cost its steps; its longest request decides where it fits, so a
200K-token class limits only the pools it can be routed to. An option's batch
is a number of sequences; every class it serves fits that batch on its own, so
any mix of those classes fits too.

Steps: `_classes` (the workload's classes as the numbers they are costed at);
per device type `_shapes` (tp x pp groups worth trying) and `_replica_options`
(decode, colocated and prefill options of one shape); then `_af_options`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable

from backends.registry import backend_of, device
from compiler.cost.deployment import deployment
from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.ir.precision import Precision
from cost_models.derates import Derate
from cost_models.load import (
    RequestShape, StepTable, colocated_curve, decode_curve, decode_table, prefill_curve, prefill_table,
)
from cost_models.power import step_power_w
from cost_models.serving import (
    Deployment, StepTime, af_decode_step, decode_step, devices_to_hold, max_batch, memory_plan, prefill_time,
)

log = logging.getLogger(__name__)

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PREFILL_BATCHES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class ClassDemand:
    """One request class as the numbers it is costed at; `percentile` is its SLO percentile (0-1)."""

    name: str
    shape: RequestShape
    percentile: float
    kv_mean_bytes: float  # one request's KV at the class's mean lengths
    kv_max_bytes: float  # ... at its longest prompt and output

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_mean_bytes / self.shape.kv_tokens


def class_demands(graph: BlockGraph, workload: Workload, precision: Precision) -> list[ClassDemand]:
    out = []
    for c in workload.classes:
        shape = RequestShape(c.input_len.mean, c.output_len.mean, c.prefill_tokens_mean)
        out.append(ClassDemand(
            c.name, shape, workload.class_slo(c).percentile / 100,
            graph.kv_bytes_per_sequence(shape.kv_tokens, precision),
            graph.kv_bytes_per_sequence(c.input_len.max + c.output_len.max, precision)))
    return out


def enumerate_options(graph: BlockGraph, cluster: Cluster, workload: Workload, precision: Precision, *,
                      only: set[str] | None = None,
                      adjust: Callable[[Derate], Derate] | None = None) -> tuple[list[PoolOption], list[str]]:
    """All candidate pools for `graph` on `cluster` under `workload`; also the reasons types were skipped.

    `only` restricts the costing to options touching those device types, whose derates `adjust` changes
    (what the sensitivity analysis re-costs).
    """
    classes = class_demands(graph, workload, precision)
    options: list[PoolOption] = []
    skipped: list[str] = []
    for dev_id, count in sorted(cluster.inventory().items()):
        if only is not None and dev_id not in only:
            continue
        reasons = _unsupported(dev_id, precision)
        if reasons:
            skipped.append("; ".join(reasons))
            continue
        shapes = _shapes(graph, dev_id, count, precision)
        if not shapes:
            skipped.append(f"{dev_id}: {count} devices cannot hold {graph.model} weights at {precision.weights}")
            continue
        for tp, pp in shapes:
            dep = deployment(dev_id, tp * pp, tp, pp, precision, cluster.engine(dev_id), adjust)
            options += _replica_options(graph, dep, classes)
    options += _af_options(graph, cluster, precision, classes, only, adjust)
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


def _replica_options(graph: BlockGraph, dep: Deployment, classes: list[ClassDemand]) -> list[PoolOption]:
    """Decode, colocated and prefill options of one replica shape, each serving the classes that fit it."""
    plan = memory_plan(graph, dep)
    replica_kv = plan.kv_capacity_bytes * dep.group
    fits = [c for c in classes if replica_kv >= c.kv_max_bytes]  # holds at least one longest request
    if not fits:
        return []
    b_max = {c.name: max_batch(replica_kv, c.kv_bytes_per_token, [c.shape.kv_tokens]) for c in fits}
    tables = {c.name: decode_table(graph, dep, tuple(b for b in BATCHES if b <= max(b_max[c.name], 1)), c.shape)
              for c in fits}
    shape = f"{dep.device.id}:tp{dep.tp}:pp{dep.pp}"
    out = []
    for b in BATCHES:
        served = [c for c in fits if b <= b_max[c.name]]
        if not served:
            break
        decode = [ClassService(c.name, *decode_curve(tables[c.name], b, c.shape.output_len, c.percentile))
                  for c in served]
        colocated = [ClassService(c.name, *colocated_curve(graph, dep, b, c.shape, tables[c.name], c.percentile))
                     for c in served]
        step = _step_at(graph, dep, b, served[0])
        out.append(_option(f"decode:{shape}:b{b}", "decode", dep, b, step, decode))
        out.append(_option(f"colocated:{shape}:c{b}", "colocated", dep, b, step, colocated))
    for k in PREFILL_BATCHES:
        served = [c for c in fits if k * c.shape.computed_prompt * c.kv_bytes_per_token <= replica_kv]
        if not served:
            break
        prefill = []
        for c in served:
            table = prefill_table(graph, dep, tuple(j for j in PREFILL_BATCHES if j <= k), c.shape, plan)
            prefill.append(ClassService(c.name, *prefill_curve(table, k, dep.engine.request_overhead_s, c.percentile)))
        step = prefill_time(graph, dep, k, served[0].shape.computed_prompt, plan=plan)
        out.append(_option(f"prefill:{shape}:b{k}", "prefill", dep, k, step, prefill))
    return out


def _step_at(graph: BlockGraph, dep: Deployment, batch: int, c: ClassDemand) -> StepTime:
    """The decode step whose utilisations set an option's power (the first class it serves, full batch)."""
    kv_plan = memory_plan(graph, dep, c.kv_mean_bytes * batch / dep.group)
    return decode_step(graph, dep, batch, c.shape.decode_context, kv_plan)


def _option(key: str, kind: str, dep: Deployment, batch: int, step: StepTime,
            services: list[ClassService]) -> PoolOption:
    services = [s for s in services if s.rate_per_s > 0 and math.isfinite(s.rate_per_s)]
    return PoolOption(key, kind, ((dep.device.id, dep.group),), _power(dep, step), dep.group * dep.device.tdp_w,
                      dep.device.id, dep.tp, dep.pp, batch, tuple(services), (("bound", step.bound),))


def _af_options(graph: BlockGraph, cluster: Cluster, precision: Precision, classes: list[ClassDemand],
                only: set[str] | None = None, adjust: Callable[[Derate], Derate] | None = None) -> list[PoolOption]:
    """Attention on one type, FFN/MoE on another; smallest groups that hold each side."""
    inventory = cluster.inventory()
    attn_params = sum(b.weight_params for b in graph.phase_blocks("decode") if b.role == "attn")
    attn_fraction = attn_params / max(graph.params_total, 1)
    usable = [d for d in sorted(inventory) if not _unsupported(d, precision)]
    out = []
    for ta in usable:
        for tf in usable:
            if ta == tf or (only is not None and ta not in only and tf not in only):
                continue
            sa = _shapes(graph, ta, inventory[ta], precision, attn_fraction)
            sf = _shapes(graph, tf, inventory[tf], precision, 1 - attn_fraction)
            if not sa or not sf:
                continue
            (tpa, ppa), (tpf, ppf) = sa[-1 if len(sa) > 1 else 0], sf[0]
            if ppa > 1 or ppf > 1:
                continue  # pipelining on top of attention/FFN disaggregation is not modelled
            attn = deployment(ta, tpa, tpa, 1, precision, cluster.engine(ta), adjust if ta in (only or ()) else None)
            ffn = deployment(tf, tpf, tpf, 1, precision, cluster.engine(tf), adjust if tf in (only or ()) else None)
            out += _af_pair(graph, cluster, attn, ffn, classes)
    return out


def _af_pair(graph: BlockGraph, cluster: Cluster, attn: Deployment, ffn: Deployment,
             classes: list[ClassDemand]) -> list[PoolOption]:
    bw, lat = cluster.link(attn.device.id, ffn.device.id)
    out = []
    for b in BATCHES:
        steps, served = {}, []
        for c in classes:
            step, plan_a, plan_f = af_decode_step(graph, attn, ffn, b, c.shape.decode_context,
                                                  link_bw_bytes_per_s=bw, link_latency_s=lat)
            if plan_a.kv_capacity_bytes * attn.group >= max(c.kv_mean_bytes * b, c.kv_max_bytes) and plan_f.fits:
                steps[c.name] = step
                served.append(c)
        if not served:
            break
        services = []
        for c in served:
            table = StepTable(((float(b), steps[c.name].time_s),))  # one batch: the occupancy is not re-costed
            services.append(ClassService(c.name, *decode_curve(table, b, c.shape.output_len, c.percentile)))
        step = steps[served[0].name]
        power = _power(attn, step) + _power(ffn, step)
        tdp = attn.group * attn.device.tdp_w + ffn.group * ffn.device.tdp_w
        out.append(PoolOption(
            f"decode-af:{attn.device.id}:tp{attn.tp}+{ffn.device.id}:tp{ffn.tp}:b{b}", "decode-af",
            ((attn.device.id, attn.group), (ffn.device.id, ffn.group)), power, tdp, attn.device.id, attn.tp, 1, b,
            tuple(services), (("ffn_tp", ffn.tp), ("bound", step.bound))))
    return out
