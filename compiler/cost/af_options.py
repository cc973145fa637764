"""Attention/FFN disaggregated decode options: M attention groups to N FFN groups, m micro-batches in flight
([Note: attention/FFN ping-pong] in `cost_models.af`), on one device type or two.

Per pair of device types and per batch per attention group, the shape with the most output tokens per
provisioned watt becomes an option; `worth_placing` then keeps those that beat plain decode somewhere.
"""

from __future__ import annotations

import math
from typing import Callable

from compiler.cost.costing import BATCHES, ClassDemand, pool_buckets, tiers_text, usable_services
from compiler.cost.deployment import deployment, group_shape
from compiler.inputs.cluster import Cluster
from compiler.ir.block_graph import BlockGraph
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.ir.precision import Precision
from cost_models.af import ATTN_ROLES, EDGE_ROLES, FFN_ROLES, AFShape, af_decode_step, af_plans, af_step_s, is_moe
from cost_models.derates import Derate
from cost_models.load import StepTable, decode_curve
from cost_models.power import step_power_w
from cost_models.buckets import Buckets
from cost_models.serving import Deployment, block_groups, devices_to_hold
from cost_models.spreads import deployment_spreads, widest

#: Attention groups, FFN groups and micro-batches tried for one attention/FFN replica. MegaScale-Infer runs
#: M:N ratios of attention to expert GPUs with two to four micro-batches; M grows (doubling) only while it
#: buys output tokens per provisioned watt ([Note: attention/FFN ping-pong]).
AF_ATTN_GROUPS = (1, 2, 4, 8, 16, 32, 64)
AF_FFN_GROUPS = (1, 2, 4, 8, 16)
AF_MICRO_BATCHES = (1, 2, 3, 4)


def af_options(graph: BlockGraph, cluster: Cluster, precision: Precision, classes: list[ClassDemand],
                only: set[str] | None = None, adjust: Callable[[Derate], Derate] | None = None) -> list[PoolOption]:
    """Attention on one type, FFN/MoE on the same or another: per batch, the best M:N shape per provisioned watt."""
    usable = [d for d in sorted(cluster.inventory()) if not cluster.served(d).unsupported_reasons(precision.weights)]
    buckets = pool_buckets(classes)
    out = []
    for ta in usable:
        for tf in usable:
            if only is not None and ta not in only and tf not in only:
                continue
            attn = _af_group(graph, ta, ATTN_ROLES, 1, precision, cluster, adjust if ta in (only or ()) else None,
                             buckets)
            ffns = [(n, ffn) for n in AF_FFN_GROUPS if (ffn := _af_group(
                graph, tf, FFN_ROLES + EDGE_ROLES, n, precision, cluster, adjust if tf in (only or ()) else None,
                buckets))]
            if attn is not None and ffns:
                out += _af_pair(graph, cluster, attn, ffns, classes)
    return out


def worth_placing(af: list[PoolOption], others: list[PoolOption]) -> list[PoolOption]:
    """The attention/FFN options that beat, for some class they serve, every plain decode option on their
    device types: more requests/s per provisioned watt (on the budget's footing, as the options arrive), or a
    lower TPOT at the same load.

    [Note: attention/FFN options worth placing] An M:N search leaves about ten
    options per pair of device types and most of them, on dense models above
    all, lose to plain decode on one of the two types in both throughput per
    watt and latency: such an option is never needed while power binds, and
    dropping it keeps the ILP small. Where only inventory binds it could still
    lend a second type's devices, so this is a heuristic trim, the one place the
    candidate set is cut on value rather than feasibility.
    """
    plain: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for o in others:
        if o.kind == "decode":
            for s in o.classes:
                plain.setdefault((o.kv_device, s.name), []).append((s.rate_per_s / o.provisioned_w, _tpot(s)))
    kept = []
    for o in af:
        for s in o.classes:
            rivals = [r for t in o.device_types for r in plain.get((t, s.name), [])]
            if not any(w >= s.rate_per_s / o.provisioned_w and tpot <= _tpot(s) for w, tpot in rivals):
                kept.append(o)
                break
    return kept


def _tpot(s: ClassService) -> float:
    """A class's TPOT on an option at 85% load (the comparison point of `worth_placing`)."""
    return s.at(0.85)[4]


def _af_group(graph: BlockGraph, device_id: str, roles: tuple[str, ...], groups: int, precision: Precision,
              cluster: Cluster, adjust: Callable[[Derate], Derate] | None, buckets: Buckets) -> Deployment | None:
    """The smallest tensor-parallel group (no pipeline) holding `roles`' weights, a MoE's experts split over
    `groups` groups; None if it takes more than one scale-up domain."""
    if groups > 1 and not is_moe(graph):
        return None  # a dense FFN is replicated, never split over groups: one group is the shape
    weights = sum(b.weight_bytes(precision) * n for b, n in block_groups(graph, "decode", roles))
    expert = sum(b.weight_bytes(precision) * n for b, n in block_groups(graph, "decode", ("moe",)))
    per_group = weights - expert * (1 - 1 / groups)
    served = cluster.served(device_id)
    tp, pp = group_shape(served.spec, devices_to_hold(per_group, served.spec))
    if pp > 1:
        return None
    return deployment(served, tp, tp, 1, precision, adjust, buckets=buckets)


def _af_fits(inventory: dict[str, int], shape: AFShape) -> bool:
    a, f = shape.attn.device.id, shape.ffn.device.id
    if a == f:
        return shape.devices <= inventory[a]
    return shape.attn_devices <= inventory[a] and shape.ffn_devices <= inventory[f]


class _Seam:
    """What the shapes of one attention/FFN pair share, looked up once: the links their seam may cross (`shape`:
    scale-up when one type's replica fits one scale-up domain, else each device's NIC, capped across two pools by
    the cluster's link between them) and what one device of each side counts against the power budget."""

    def __init__(self, cluster: Cluster, attn: Deployment, ffn: Deployment):
        a, f = attn.device, ffn.device
        self.attn, self.ffn = attn, ffn
        self.up = a.scale_up if a.id == f.id else None  # one type: the scale-up domain, where the replica fits
        nics = [d.scale_out or d.scale_up for d in (a, f)]
        self.per_device = min(link.bw_bytes_per_s for link in nics)
        self.pool_bw, self.latency = cluster.link(a.id, f.id) if a.id != f.id else \
            (math.inf, max(n.latency_s for n in nics))
        self.attn_w, self.ffn_w = cluster.spec_w(a), cluster.spec_w(f)

    def shape(self, m_groups: int, n_groups: int, micro: int) -> AFShape:
        attn, ffn = self.attn, self.ffn
        if self.up is not None and m_groups * attn.group + n_groups * ffn.group <= self.up.domain_devices:
            return AFShape(attn, ffn, m_groups, n_groups, micro, self.up.bw_bytes_per_s, self.up.latency_s)
        return AFShape(attn, ffn, m_groups, n_groups, micro, self.per_device, self.latency, self.pool_bw)

    def budget_w(self, shape: AFShape) -> float:
        """What `shape` counts against the power budget on its footing: shapes are ranked per watt of it."""
        return shape.attn_devices * self.attn_w + shape.ffn_devices * self.ffn_w


def _af_pair(graph: BlockGraph, cluster: Cluster, attn: Deployment, ffns: list[tuple[int, Deployment]],
             classes: list[ClassDemand]) -> list[PoolOption]:
    """Per batch per attention group, the shape with the most output tokens per provisioned watt: for each FFN
    split and micro-batch count, attention groups double while that grows."""
    inventory = cluster.inventory()
    room = af_plans(graph, _Seam(cluster, attn, attn).shape(1, 1, 1), 0.0, 0.0)[0].kv_capacity_bytes * attn.group
    seams = {n: _Seam(cluster, attn, ffn) for n, ffn in ffns}
    ffns = [(n, ffn) for n, ffn in ffns if af_plans(graph, seams[n].shape(1, n, 1), 0.0, 0.0)[1].fits]
    out, memo = [], {}  # each side's costing, shared by the shapes of this pair (`af_decode_step`)
    for b in BATCHES:
        served = [c for c in classes if room >= max(c.kv_mean_bytes * b, c.kv_max_bytes)]
        if not served:
            break
        best: tuple[float, AFShape] | None = None
        for n, _ffn in ffns:
            seam = seams[n]
            for micro in AF_MICRO_BATCHES:
                last = 0.0
                for m_groups in AF_ATTN_GROUPS:
                    shape = seam.shape(m_groups, n, micro)
                    if not _af_fits(inventory, shape):
                        break
                    step_s = af_step_s(graph, shape, b, served[0].shape.decode_context, memo)
                    per_watt = m_groups * b / step_s / seam.budget_w(shape)
                    if per_watt <= last:
                        break
                    last = per_watt
                    if best is None or per_watt > best[0] * (1 + 1e-9):
                        best = (per_watt, shape)
        if best is not None:
            out.append(_af_option(graph, best[1], b, served, memo))
    return out


def _tdp(shape: AFShape) -> float:
    return shape.attn_devices * shape.attn.device.tdp_w + shape.ffn_devices * shape.ffn.device.tdp_w


def _af_option(graph: BlockGraph, shape: AFShape, b: int, served: list[ClassDemand], memo: dict) -> PoolOption:
    sequences = shape.attn_groups * b
    services = []
    for c in served:
        step_s = lambda j: af_decode_step(graph, shape, j, c.shape.decode_context, memo=memo).time_s  # noqa: E731
        table = StepTable(tuple((float(shape.attn_groups * j), step_s(j)) for j in BATCHES if j <= b))
        services.append(ClassService(c.name, *decode_curve(table, sequences, c.shape.output_len, c.percentile)))
    step = af_decode_step(graph, shape, b, served[0].shape.decode_context, memo=memo)
    power = sum(n * step_power_w(dep.device, time_s=step.time_s, compute_s=busy.compute_s, memory_s=busy.memory_s)
                for n, dep, busy in ((shape.attn_devices, shape.attn, step.attn_busy),
                                     (shape.ffn_devices, shape.ffn, step.ffn_busy)))
    a, f = shape.attn.device.id, shape.ffn.device.id
    devices = ((a, shape.devices),) if a == f else ((a, shape.attn_devices), (f, shape.ffn_devices))
    key = (f"decode-af:{a}:tp{shape.attn.tp}x{shape.attn_groups}+{f}:tp{shape.ffn.tp}x{shape.ffn_groups}"
           f":m{shape.micro_batches}:b{sequences}")
    return PoolOption(key, "decode-af", devices, power, _tdp(shape), a, shape.attn.tp, 1, sequences,
                      usable_services(services),
                      (("attn_groups", shape.attn_groups), ("bound", step.bound), ("ffn_device", f),
                       ("ffn_groups", shape.ffn_groups), ("ffn_tp", shape.ffn.tp),
                       ("micro_batches", shape.micro_batches),
                       ("weights_in", tiers_text(step.attn_plan.weight_tiers))),
                      link_bytes_per_token=0.0 if a == f else step.seam_bytes / sequences,
                      spreads=_both(shape.attn, shape.ffn))


def _both(attn: Deployment, ffn: Deployment) -> tuple:
    """The spreads of an attention/FFN option: each metric's widest of its two deployments'."""
    a, b = dict(deployment_spreads(attn)), dict(deployment_spreads(ffn))
    return tuple((m, widest(a[m], b[m])) for m in a)
