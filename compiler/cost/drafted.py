"""Decode options that draft: a target decode replica paired with a drafter replica on any device type.

When the workload names a drafter (``speculative:``), every decode replica shape
is also offered with a drafter beside it on each device type that holds the
draft model, the target's own type included, costed by
`cost_models.speculative` ([Note: speculative decoding placement]). Whether and
where to draft is then the placement's choice, like any other pool. A drafted
variant that is not faster than the same replica decoding alone, for any class
it serves, needs more devices for nothing and is not offered.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cost.costing import BATCHES, ClassDemand, tiers_text, usable_services
from compiler.cost.deployment import deployment, group_shape
from compiler.inputs.cluster import Cluster
from compiler.ir.block_graph import BlockGraph
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.ir.precision import Precision
from cost_models.load import StepTable, decode_curve
from cost_models.power import step_power_w
from cost_models.buckets import Buckets
from cost_models.serving import Deployment, MemoryPlan, devices_to_hold, memory_plan
from cost_models.spreads import deployment_spreads, widest
from cost_models.speculative import TOKEN_BYTES, Drafting, expected_tokens, speculative_round

#: Room a drafter replica keeps beside the draft model's weights for its KV, as a share of the weights.
DRAFT_KV_HEADROOM = 0.5


@dataclass(frozen=True, slots=True)
class DraftModel:
    """The workload's drafter, traced: the model as the user named it, its graph, α and k."""

    name: str
    graph: BlockGraph
    acceptance: float
    draft_tokens: int


def drafters(draft: DraftModel, cluster: Cluster, precision: Precision, buckets: Buckets) -> list[Deployment]:
    """One drafter replica per device type of the cluster that can hold the draft model: the smallest
    tensor-parallel group, at the target's precision or, where the device lacks it, fp8; launched with the
    target pool's `buckets` ([Note: buckets])."""
    out = []
    for dev_id in sorted(cluster.inventory()):
        served = cluster.served(dev_id)
        p = next((q for q in (precision, Precision.of("fp8")) if not served.unsupported_reasons(q.weights)), None)
        if p is None:
            continue
        need = devices_to_hold(draft.graph.weight_bytes(p) * (1 + DRAFT_KV_HEADROOM), served.spec)
        tp, pp = group_shape(served.spec, need)
        if pp == 1:
            out.append(deployment(served, tp, tp, 1, p, buckets=buckets))
    return out


def drafted_options(graph: BlockGraph, target: Deployment, plan: MemoryPlan, batch: int, served: list[ClassDemand],
                    plain: dict[str, StepTable], draft: DraftModel, pool: list[Deployment],
                    cluster: Cluster) -> list[PoolOption]:
    """The drafted variants of one decode option (`target` at `batch`): one per drafter in `pool` that makes
    some class's decode faster than `plain` (each class's step table without drafting)."""
    out = []
    for drafter in pool:
        room = memory_plan(draft.graph, drafter).kv_capacity_bytes * drafter.group
        classes = [c for c in served
                   if room >= batch * draft.graph.kv_bytes_per_sequence(c.shape.kv_tokens, drafter.precision)]
        if not classes:
            continue
        drafting = _drafting(draft, drafter, target, cluster)
        tables = {c.name: _table(graph, target, drafting, c, batch) for c in classes}
        if all(tables[c.name].at(batch) >= plain[c.name].at(batch) for c in classes):
            continue
        out.append(_option(graph, target, plan, batch, classes, tables, drafting, draft))
    return out


def _drafting(draft: DraftModel, drafter: Deployment, target: Deployment, cluster: Cluster) -> Drafting:
    """Draft tokens cross the cluster's link between two types, or one type's own fabric."""
    a, b = drafter.device, target.device
    if a.id != b.id:
        bw, latency = cluster.link(a.id, b.id)
    else:
        link = a.scale_up or a.scale_out
        bw, latency = link.bw_bytes_per_s, link.latency_s
    return Drafting(draft.graph, drafter, draft.acceptance, draft.draft_tokens, bw, latency)


def _table(graph: BlockGraph, target: Deployment, drafting: Drafting, c: ClassDemand, batch: int) -> StepTable:
    """Time per output token at each batch up to `batch`: a round over the tokens it yields."""
    return StepTable(tuple((float(j), speculative_round(graph, target, drafting, j, c.shape.decode_context,
                                                        c.shape.computed_prompt, c.shape.output_len).tpot_s)
                           for j in BATCHES if j <= batch))


def _option(graph: BlockGraph, target: Deployment, plan: MemoryPlan, batch: int, classes: list[ClassDemand],
            tables: dict[str, StepTable], drafting: Drafting, draft: DraftModel) -> PoolOption:
    services = [ClassService(c.name, *decode_curve(tables[c.name], batch, c.shape.output_len, c.percentile))
                for c in classes]
    c = classes[0]
    r = speculative_round(graph, target, drafting, batch, c.shape.decode_context, c.shape.computed_prompt,
                          c.shape.output_len)
    drafter = drafting.dep
    power = sum(dep.group * step_power_w(dep.device, time_s=r.time_s, compute_s=busy.compute_s,
                                         memory_s=busy.memory_s)
                for dep, busy in ((target, r.verify), (drafter, r.draft)))
    t, d = target.device.id, drafter.device.id
    devices = ((t, target.group + drafter.group),) if t == d else ((t, target.group), (d, drafter.group))
    key = (f"decode:{t}:tp{target.tp}:pp{target.pp}:b{batch}+draft:{d}:tp{drafter.tp}"
           f":k{drafting.draft_tokens}")
    tokens = expected_tokens(drafting.acceptance, drafting.draft_tokens)
    return PoolOption(
        key, "decode", devices, power, target.group * target.device.tdp_w + drafter.group * drafter.device.tdp_w,
        t, target.tp, target.pp, batch, usable_services(services),
        (("bound", r.verify.bound), ("draft_acceptance", drafting.acceptance), ("draft_device", d),
         ("draft_dtype", drafter.precision.weights), ("draft_k", drafting.draft_tokens), ("draft_model", draft.name),
         ("draft_tp", drafter.tp), ("weights_in", tiers_text(plan.weight_tiers))),
        link_bytes_per_token=0.0 if t == d else (drafting.draft_tokens + 1) * TOKEN_BYTES / tokens,
        spreads=_both(target, drafter))


def _both(target: Deployment, drafter: Deployment) -> tuple:
    """The spreads of a drafted option: each metric's widest of the target's and the drafter's."""
    a, b = dict(deployment_spreads(target)), dict(deployment_spreads(drafter))
    return tuple((m, widest(a[m], b[m])) for m in a)
