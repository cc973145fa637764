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

Steps: `class_demands` (the workload's classes as the numbers they are costed
at, `compiler.cost.costing`); per device type `_shapes` (tp x pp groups worth
trying) and `_replica_options` (decode, colocated and prefill options of one
shape); then the attention/FFN options (`compiler.cost.af_options`) and, when
the workload drafts, decode options with a drafter pool (`compiler.cost.drafted`).

Power: each option carries one replica's draw at full load (``power_w``: the
decode step at full batch; for a colocated option the mixed step that also
carries the prompts arriving at that rate; for prefill the prefill batch), its
draw serving nothing (``idle_w``) and what it provisions (``provisioned_w``),
all on the cluster's ``power_basis`` (`compiler.cost.costing.on_basis`); the
placement draws between idle and full in proportion to the load it routes
([Note: drawn power] in `cost_models.power`).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from compiler.cost.af_options import af_options, worth_placing
from compiler.cost.costing import (
    BATCHES, PREFILL_BATCHES, ClassDemand, class_demands, on_basis, pool_buckets, replica_power, tiers_text,
    usable_services,
)
from compiler.cost.deployment import deployment, group_shape
from compiler.cost.drafted import DraftModel, drafted_options, drafters
from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.errors import BadInput
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.ir.precision import Precision
from cost_models.derates import Derate
from cost_models.spreads import deployment_spreads
from cost_models.load import colocated_curve, decode_curve, decode_table, prefill_curve, prefill_table
from cost_models.serving import Deployment, MemoryPlan, devices_to_hold, max_batch, memory_plan
from cost_models.steps import Batch, StepTime, decode_step, prefill_time
from cost_models.steps import step as engine_step

log = logging.getLogger(__name__)


def enumerate_options(graph: BlockGraph, cluster: Cluster, workload: Workload, precision: Precision, *,
                      only: set[str] | None = None, adjust: Callable[[Derate], Derate] | None = None,
                      draft: DraftModel | None = None, rivals: Sequence[PoolOption] = ()
                      ) -> tuple[list[PoolOption], list[str]]:
    """All candidate pools for `graph` on `cluster` under `workload`; also the reasons types were skipped.

    `only` restricts the costing to options touching those device types, whose derates `adjust` changes
    (what the sensitivity analysis re-costs); `rivals` are the other types' options, already costed, against
    which an attention/FFN option must be worth placing (`worth_placing`), as in a full costing. `draft` (the
    workload's drafter, traced) adds decode options with a drafter pool (`compiler.cost.drafted`).
    """
    classes = class_demands(graph, workload, precision)
    buckets = pool_buckets(classes)
    pool = drafters(draft, cluster, precision, buckets) if draft is not None else []
    options: list[PoolOption] = []
    skipped: list[str] = []
    for dev_id, count in sorted(cluster.inventory().items()):
        if only is not None and dev_id not in only:
            continue
        served = cluster.served(dev_id)
        reasons = served.unsupported_reasons(precision.weights)
        if reasons:
            skipped.append("; ".join(reasons))
            continue
        shapes = _shapes(graph, served.spec, count, precision)
        if not shapes:
            skipped.append(f"{dev_id}: {count} devices cannot hold {graph.model} weights at {precision.weights}")
            continue
        for tp, pp in shapes:
            dep = deployment(served, tp * pp, tp, pp, precision, adjust, buckets=buckets)
            options += _replica_options(graph, dep, classes, draft, pool, cluster)
    basis = lambda o: on_basis(o, cluster)  # noqa: E731
    options = [basis(o) for o in options]  # attention/FFN options are judged on the budget's footing too
    options += worth_placing([basis(o) for o in af_options(graph, cluster, precision, classes, only, adjust)],
                             [*options, *rivals])
    if not options:
        raise BadInput(f"no device type in the cluster can hold {graph.model} at {precision.weights}: "
                       + "; ".join(skipped))
    options.sort(key=lambda o: o.key)
    return options, skipped


def _shapes(graph: BlockGraph, spec: DeviceSpec, count: int, precision: Precision,
            weight_fraction: float = 1.0) -> list[tuple[int, int]]:
    """(tp, pp) shapes worth trying: the smallest group that holds the weights, twice and four times it, and
    the smallest that holds them in the fastest tier alone (dozens of Corsair cards' SRAM) and twice that."""
    weights = graph.weight_bytes(precision) * weight_fraction
    need = devices_to_hold(weights, spec)
    resident = devices_to_hold(weights, spec, resident=True)
    targets = (need, 2 * need, 4 * need) + ((resident, 2 * resident) if resident > need else ())
    shapes = []
    for target in targets:
        tp, pp = group_shape(spec, target)
        if tp * pp <= count and (tp, pp) not in shapes:
            shapes.append((tp, pp))
    return shapes


def _replica_options(graph: BlockGraph, dep: Deployment, classes: list[ClassDemand], draft: DraftModel | None,
                     pool: list[Deployment], cluster: Cluster) -> list[PoolOption]:
    """Decode (alone, and beside each drafter in `pool`), colocated and prefill options of one replica shape,
    each serving the classes that fit it."""
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
        out.append(_option(f"decode:{shape}:b{b}", "decode", dep, b, step, decode, plan))
        out.append(_option(f"colocated:{shape}:c{b}", "colocated", dep, b, step, colocated, plan,
                           power_step=_mixed_step_at(graph, dep, b, served[0])))
        if draft is not None:
            out += drafted_options(graph, dep, plan, b, served, tables, draft, pool, cluster)
    for k in PREFILL_BATCHES:
        served = [c for c in fits if k * c.shape.computed_prompt * c.kv_bytes_per_token <= replica_kv]
        if not served:
            break
        prefill = []
        for c in served:
            table = prefill_table(graph, dep, tuple(j for j in PREFILL_BATCHES if j <= k), c.shape, plan)
            prefill.append(ClassService(c.name, *prefill_curve(table, k, dep.engine.request_overhead_s, c.percentile)))
        step = prefill_time(graph, dep, k, served[0].shape.computed_prompt, plan=plan,
                            before=served[0].shape.cached_prompt)
        out.append(_option(f"prefill:{shape}:b{k}", "prefill", dep, k, step, prefill, plan))
    return out


def _step_at(graph: BlockGraph, dep: Deployment, batch: int, c: ClassDemand) -> StepTime:
    """The decode step whose utilisations set an option's power (the first class it serves, full batch)."""
    kv_plan = memory_plan(graph, dep, c.kv_mean_bytes * batch / dep.group)
    return decode_step(graph, dep, batch, c.shape.decode_context, kv_plan)


def _mixed_step_at(graph: BlockGraph, dep: Deployment, batch: int, c: ClassDemand) -> StepTime:
    """The mean step of a colocated replica at full batch (the first class it serves): its decodes plus the prompt
    tokens that arrive with them (batch x prompt / output per step, within the prefill budget), the step whose
    utilisations set its power."""
    prompt, out = c.shape.computed_prompt, max(c.shape.output_len, 1.0)
    tokens = min(batch * prompt / out, max(1.0, dep.engine.prefill_budget_tokens - batch))
    kv_plan = memory_plan(graph, dep, c.kv_mean_bytes * batch / dep.group)
    return engine_step(graph, dep, Batch(decodes=batch, context=c.shape.decode_context, prefill_tokens=tokens,
                                         prefill_requests=tokens / prompt if prompt else 0.0,
                                         prefill_before=c.shape.cached_prompt), kv_plan)


def _option(key: str, kind: str, dep: Deployment, batch: int, step: StepTime, services: list[ClassService],
            plan: MemoryPlan, power_step: StepTime | None = None) -> PoolOption:
    """One option on the chip footing (`enumerate_options` moves it to the cluster's); `power_step` (default
    `step`) is the full-load step whose utilisations set its draw."""
    return PoolOption(key, kind, ((dep.device.id, dep.group),), replica_power(dep, power_step or step),
                      dep.group * dep.device.tdp_w,
                      dep.device.id, dep.tp, dep.pp, batch, usable_services(services),
                      (("bound", step.bound), ("weights_in", tiers_text(plan.weight_tiers))),
                      spreads=deployment_spreads(dep))
