"""Scaling rules the orchestrator runs between replans: a KEDA ``ScaledObject`` per engine
pool on its engines' queue, or the NVIDIA Dynamo planner's configuration, bounded by replica ranges that keep the
plan's power budget and inventory.

Before: a `Plan`, the provisioned watts of one replica of each pool (`PoolOption.provisioned_w`, on the budget's
footing) and each pool's requests/s at full load per replica (from its options' service rates). After:
``{file name: object}`` for ``DIR2/autoscale/`` (`scaled_objects`, with ``kustomization.yaml``) or the planner's
config (`dynamo_planner`); same inputs, same bytes.

[Note: replica ranges within the budget] A pool ``i`` runs ``n_i`` replicas in the plan, each provisioning
``P_i`` watts and using ``d_i`` devices of type ``t_i``. The budget's headroom ``H = B - sum_j n_j P_j`` is split
over the pools in proportion to their provisioned watts, and each type's free devices ``F_t = inventory_t -
sum_{j on t} n_j d_j`` over the pools on ``t`` in proportion to their devices:

    max_i = n_i + min(floor(H · n_i P_i / sum_j n_j P_j / P_i), floor(F_t · n_i d_i / sum_{j on t} n_j d_j / d_i))

so every pool at its maximum at once still provisions at most ``B`` watts and uses at most each type's inventory
(the autoscalers act independently: a bound that held only for one pool at a time would not hold). No budget:
the inventory alone bounds. ``min_i = 1``: a pool the router sends a class to keeps a replica (its queue is what
scales it back up). The KEDA object scales ``<name>-<pool>`` (the engines target's StatefulSet, or
LeaderWorkerSet for a replica that spans nodes) on ``sum(vllm:num_requests_waiting)`` (SGLang:
``sglang:num_queue_reqs``) over the pool's pods (``<name>-<pool>-<r>``, and an LWS group's workers
``-<i>`` after it), as an average per replica (``AverageValue``) against a
threshold: the requests a replica can have waiting before a new one's wait uses up the TTFT target's slack,
``floor(mu_i · (TTFT target - predicted TTFT))`` with ``mu_i`` the pool's requests/s per replica at full load
(a queue of ``q`` drains in ``q / mu_i`` seconds), at least 1; without a TTFT target, a batch. The router's
replica list is the plan's: replicas above the plan's serve once a replan (or an llm-d InferencePool, which
selects pods by label) routes to them.

The Dynamo planner ([Note: how the dynamo target deploys] in `dynamo`) scales one prefill and one decode
component (or one aggregated worker) of a DynamoGraphDeployment within ``max_gpu_budget`` GPUs; its fields here
are those of ``dynamo.planner.config.planner_config.PlannerConfig`` (github.com/ai-dynamo/dynamo
components/src/dynamo/planner/config/, commit 34ede16d). The GPU budget is the plan's GPUs plus the headroom
over the most watts one GPU of its pools provisions, within the inventory; a plan with two pools of one role
has no such configuration (`dynamo_planner` says why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.engines import serving_engine
from compiler.emit.k8s import objects as k8s
from compiler.emit.k8s.pool_deployment import NOTE, by_file_name, check_name, labels, pool_deployments

if TYPE_CHECKING:
    from compiler.plan.schema import Plan
    from compiler.inputs.cluster import Cluster

KEDA_API = "keda.sh/v1alpha1"
#: Where KEDA reads Prometheus (kube-prometheus-stack's service); `scaled_objects` takes another.
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
POLLING_S = 15
COOLDOWN_S = 300  # scale-down stabilisation: a replica's weights take minutes to load again


@dataclass(frozen=True, slots=True)
class Range:
    """A pool's replica range and its queue threshold (requests waiting per replica)."""

    pool: str
    replicas: int  # the plan's
    min_replicas: int
    max_replicas: int
    waiting_per_replica: int


def replica_ranges(plan: Plan, provisioned_w: dict[str, float], *, pools: list[str] | None = None
                   ) -> dict[str, tuple[int, int]]:
    """(min, max) replicas of each of `pools` (default: all) of `plan` ([Note: replica ranges within the budget]);
    `provisioned_w` is one replica's, per pool name.

    >>> from types import SimpleNamespace as S
    >>> p = S(power_budget_w=6000.0, inventory={"a": 8, "b": 8}, pools=[
    ...     S(name="p0", device="a", devices_per_replica=1, replicas=2), S(name="p1", device="b",
    ...     devices_per_replica=1, replicas=2)])
    >>> replica_ranges(p, {"p0": 1000.0, "p1": 500.0})   # headroom 3000 W: 2000 W to p0, 1000 W to p1
    {'p0': (1, 4), 'p1': (1, 4)}
    """
    names = [p.name for p in plan.pools] if pools is None else pools
    watts = {p.name: p.replicas * provisioned_w[p.name] for p in plan.pools}
    used: dict[str, int] = {}
    for p in plan.pools:
        used[p.device] = used.get(p.device, 0) + p.replicas * p.devices_per_replica
    headroom = None if plan.power_budget_w is None else max(plan.power_budget_w - sum(watts.values()), 0.0)
    out = {}
    for p in plan.pools:
        if p.name not in names:
            continue
        on_type = sum(q.replicas * q.devices_per_replica for q in plan.pools if q.device == p.device)
        free = max(plan.inventory.get(p.device, used[p.device]) - used[p.device], 0)
        more = math.floor(free * p.replicas * p.devices_per_replica / on_type / p.devices_per_replica) \
            if on_type else 0
        if headroom is not None and provisioned_w[p.name] > 0:
            total = sum(watts.values())
            share = headroom * watts[p.name] / total if total > 0 else 0.0
            more = min(more, math.floor(share / provisioned_w[p.name] + 1e-9))
        out[p.name] = (min(1, p.replicas), p.replicas + more)
    return out


def waiting_threshold(ttft_slo_ms: float | None, predicted_ttft_ms: float | None, per_replica_per_s: float,
                      batch: int) -> int:
    """Requests waiting per replica before a new one's wait uses up the TTFT slack (the Note).

    >>> waiting_threshold(2000.0, 1000.0, 12.5, 64)   # 1 s of slack at 12.5 requests/s
    12
    >>> waiting_threshold(None, None, 12.5, 64), waiting_threshold(500.0, 900.0, 12.5, 64)
    (64, 1)
    """
    if ttft_slo_ms is None:
        return max(batch, 1)
    slack_s = max(ttft_slo_ms - (predicted_ttft_ms or 0.0), 0.0) / 1e3
    return max(math.floor(per_replica_per_s * slack_s + 1e-9), 1)


def scaled_objects(plan: Plan, cluster: Cluster | None, provisioned_w: dict[str, float],
                   per_replica_per_s: dict[str, float], *, name: str = "gimletc",
                   prometheus_url: str = PROMETHEUS_URL) -> tuple[dict[str, dict[str, Any]], tuple[Range, ...]]:
    """A KEDA ScaledObject per engine pool that runs pods (the Note), with ``kustomization.yaml``; and the
    ranges."""
    check_name(name)
    deployed = [d for d in pool_deployments(plan, cluster)
                if d.kind != "external" and d.pool.launch is not None
                and serving_engine(d.pool.launch.engine).queue_metric() is not None]
    ranges = replica_ranges(plan, provisioned_w, pools=[d.pool.name for d in deployed])
    objs, out = [], []
    for d in deployed:
        p = d.pool
        low, high = ranges[p.name]
        waited = p.predicted_ttft_ms if p.predicted_ttft_ms is not None else p.predicted_slot_wait_ms  # decode pools
        threshold = waiting_threshold(plan.slo_ttft_ms, waited, per_replica_per_s[p.name], p.batch)
        out.append(Range(p.name, p.replicas, low, high, threshold))
        target = f"{name}-{d.key}"
        kind, api = ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1") if d.kind == "leader-worker-set" \
            else ("StatefulSet", "apps/v1")
        query = f'sum({serving_engine(p.launch.engine).queue_metric()}{{pod=~"{target}-[0-9]+(-[0-9]+)?"}})'
        meta = k8s.metadata(target, labels(name, "autoscaler", p.name), {
            NOTE: (f"scales pool {p.name} ({p.role} on {p.device}) between {low} and {high} replicas (the plan runs "
                   f"{p.replicas}) on its engines' queue: {threshold} waiting per replica; the range keeps the "
                   "plan's power budget and inventory with every pool at its maximum (gimletc replan, "
                   "[Note: replica ranges within the budget])")})
        objs.append({"apiVersion": KEDA_API, "kind": "ScaledObject", "metadata": meta, "spec": {
            "scaleTargetRef": {"apiVersion": api, "kind": kind, "name": target},
            "minReplicaCount": low, "maxReplicaCount": high, "pollingInterval": POLLING_S,
            "cooldownPeriod": COOLDOWN_S,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleDown": {"stabilizationWindowSeconds": COOLDOWN_S,
                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}}},
            "triggers": [{"type": "prometheus", "metricType": "AverageValue", "metadata": {
                "serverAddress": prometheus_url, "query": query, "threshold": str(threshold)}}]}})
    return (by_file_name(objs) if objs else {}), tuple(out)


def dynamo_planner(plan: Plan, provisioned_w: dict[str, float], *, adjustment_interval_s: int = 600
                   ) -> tuple[dict[str, Any] | None, str]:
    """The Dynamo planner's configuration for the plan's CUDA engine pools, or None and why not (the Note)."""
    pools = [p for p in plan.pools if p.launch is not None and p.launch.platform == "cuda"]
    frameworks = sorted({p.launch.engine for p in pools})
    if len(frameworks) != 1:
        return None, (f"the Dynamo planner scales one graph of one framework; the plan's CUDA pools run "
                      f"{frameworks or 'none'}")
    roles = {r: [p for p in pools if p.role == r] for r in ("prefill", "decode", "colocated")}
    if any(len(v) > 1 for v in roles.values()) or (roles["colocated"] and (roles["prefill"] or roles["decode"])):
        return None, ("the Dynamo planner scales one prefill and one decode component (or one worker); the plan has "
                      + ", ".join(f"{len(v)} {r} pools" for r, v in roles.items() if v)
                      + ": its KEDA objects (autoscale/keda) scale each pool instead")
    gpus = sum(p.replicas * p.devices_per_replica for p in pools)
    per_gpu_w = max(provisioned_w[p.name] / p.devices_per_replica for p in pools)
    free = sum(plan.inventory.get(t, 0) for t in {p.device for p in pools}) - gpus
    more = max(free, 0)
    if plan.power_budget_w is not None:
        headroom = plan.power_budget_w - sum(q.replicas * provisioned_w[q.name] for q in plan.pools)
        more = min(more, max(math.floor(headroom / per_gpu_w + 1e-9), 0))
    disagg = bool(roles["prefill"])
    config: dict[str, Any] = {
        "environment": "kubernetes", "backend": frameworks[0], "mode": "disagg" if disagg else "agg",
        "optimization_target": "sla", "pre_deployment_sweeping_mode": "rapid",
        "ttft": plan.slo_ttft_ms, "itl": plan.slo_tpot_ms, "load_predictor": "kalman",
        "throughput_adjustment_interval": int(adjustment_interval_s), "max_gpu_budget": gpus + more,
        "min_endpoint": 1}
    if disagg:
        config["prefill_engine_num_gpu"] = roles["prefill"][0].devices_per_replica
        if roles["decode"]:
            config["decode_engine_num_gpu"] = roles["decode"][0].devices_per_replica
    else:
        config["decode_engine_num_gpu"] = roles["colocated"][0].devices_per_replica
    if config["ttft"] is None or config["itl"] is None:
        config["optimization_target"] = "throughput"  # no SLA to scale to: queue and KV thresholds
        config = {k: v for k, v in config.items() if k not in ("ttft", "itl")}
    return config, ""
