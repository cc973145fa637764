"""The ``kserve`` target: KServe ``LLMInferenceService`` objects (``serving.kserve.io/v1alpha2``).

Before: a `Plan` whose pools carry their `EngineLaunch`, and when known the
`Cluster`. After: one LLMInferenceService ``<name>-<pool>`` per vLLM decode or
colocated pool, plus the runtime-needs ConfigMap.

[Note: how the kserve target deploys]
- An LLMInferenceService serves one decode (or colocated) group and at most
  one prefill group. A plan with one of each maps to one object; a plan with
  several (one pool per device type) maps to one object per decode pool, and
  each prefill pool joins the decode pool it hands the most KV to (the
  plan's ``kv`` transfers, over a pair its connector joins); a second prefill pool for the same decode pool is
  listed as skipped, as are prefill pools without a decode pool.
- ``model.uri`` is ``hf://<id>`` for a Hugging Face checkpoint, else
  ``pvc://<name>-plan-dir/model`` (the plan directory's ``model/``); the
  container still runs the launch's own command (``vllm serve <model> ...``),
  so the flags are the plan's, not KServe's preset's.
- ``replicas`` and ``parallelism`` (``tensor`` = tp, ``pipeline`` = pp,
  ``expert`` when the launch enables expert parallelism) are the pool's; the
  ``template`` container ``main`` (the name KServe merges its preset into)
  has the engine image, command, env and one pod's devices. A replica that
  spans nodes also gets ``worker`` (the same container, without command:
  KServe's multi-node preset starts Ray on the workers).
- ``router: {gateway: {}, route: {}, scheduler: {}}`` asks KServe for its
  managed Gateway, HTTPRoute and llm-d scheduler (EPP) with their defaults.
- KServe's LLMInferenceService runs vLLM: SGLang, TensorRT-LLM and external
  pools, and pools without a launch, are skipped with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compiler.emit.k8s import objects as k8s
from compiler.emit.k8s.engine_pod import (PLAN_DIR, engine_container, engine_volumes, refusal, runtime_needs,
                                          scheduling, served_pools)
from compiler.emit.k8s.pool_deployment import NOTE, PoolDeployment, by_file_name, check_name, labels

if TYPE_CHECKING:
    from compiler.plan.schema import Plan
    from compiler.inputs.cluster import Cluster

TARGET = "kserve"


def manifests(plan: Plan, cluster: Cluster | None = None, *, name: str = "gimletc") -> dict[str, dict[str, Any]]:
    """One LLMInferenceService per decode or colocated vLLM pool (see [Note: how the kserve target deploys])."""
    check_name(name)
    serving, skipped = served_pools(plan, cluster, lambda d: refusal(d, TARGET, "KServe's LLMInferenceService runs"))
    pairs = prefill_of(plan, serving, skipped)
    objs = [service(name, d, pairs.get(d.pool.name)) for d in serving if d.pool.role in ("colocated", "decode")]
    return by_file_name(objs + runtime_needs(plan, name, skipped, TARGET))


def prefill_of(plan: Plan, serving: list[PoolDeployment], skipped: dict[str, str]) -> dict[str, PoolDeployment]:
    """Decode pool -> the one prefill pool that joins its LLMInferenceService (see the module docstring)."""
    decode = {d.pool.name for d in serving if d.pool.role == "decode"}
    kv = {(t.src_pool, t.dst_pool): t.predicted_bytes_per_s for t in plan.transfers if t.kind == "kv"}
    chosen: dict[str, PoolDeployment] = {}
    for d in sorted((d for d in serving if d.pool.role == "prefill"), key=lambda d: d.pool.name):
        connector = d.pool.launch.kv_connector
        peers = set(connector.peers) & decode if connector is not None else set()
        targets = sorted((-rate, dst) for (src, dst), rate in kv.items() if src == d.pool.name and dst in peers)
        if not targets:
            skipped[d.pool.name] = "no vLLM decode pool takes its KV through a connector"
            continue
        dst = targets[0][1]
        if dst in chosen:
            skipped[d.pool.name] = (f"KServe takes one prefill group per LLMInferenceService; {dst} already has "
                                    f"{chosen[dst].pool.name}")
            continue
        chosen[dst] = d
    return chosen


def model_uri(name: str, model: str) -> str:
    if model.startswith(PLAN_DIR + "/"):
        return f"pvc://{name}-plan-dir/{model.removeprefix(PLAN_DIR + '/')}"
    return f"hf://{model}"


def parallelism(d: PoolDeployment) -> dict[str, Any]:
    out: dict[str, Any] = {"tensor": d.pool.tp, "pipeline": d.pool.pp}
    if "--enable-expert-parallel" in d.pool.launch.command:
        out["expert"] = True
    return out


def pod_spec(name: str, d: PoolDeployment, *, command: bool = True) -> dict[str, Any]:
    """A PodSpec with the engine container ``main`` (no command: KServe's preset starts it)."""
    main = engine_container(name, d, d.pool.launch.command if command else [], container="main", ready=command)
    volumes, _ = engine_volumes(name, d.pool.launch)
    return {"containers": [main], **scheduling(d), "volumes": volumes}


def group(name: str, d: PoolDeployment) -> dict[str, Any]:
    """``replicas``, ``parallelism``, ``template`` and, across nodes, ``worker`` of one pool."""
    out: dict[str, Any] = {"replicas": d.pool.replicas, "parallelism": parallelism(d), "template": pod_spec(name, d)}
    if d.spans_nodes:
        out["worker"] = pod_spec(name, d, command=False)
    return out


def service(name: str, d: PoolDeployment, prefill: PoolDeployment | None) -> dict[str, Any]:
    launch = d.pool.launch
    note = f"{d.pool.role} pool {d.pool.name} on {d.pool.device}"
    if prefill is not None:
        note += f", prefill pool {prefill.pool.name} on {prefill.pool.device}"
    note += "; KServe's managed Gateway, HTTPRoute and scheduler route requests"
    spec: dict[str, Any] = {"model": {"uri": model_uri(name, launch.model), "name": launch.served_model_name}}
    spec |= group(name, d)
    if prefill is not None:
        spec["prefill"] = group(name, prefill)
    spec["router"] = {"gateway": {}, "route": {}, "scheduler": {}}
    meta = k8s.metadata(f"{name}-{d.key}", labels(name, "kserve", d.key), {NOTE: note})
    return {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService", "metadata": meta,
            "spec": spec}
