"""The ``engines`` target (the default): each pool on its public serving engine, and the router in front.

Before: a `Plan` whose pools carry their `EngineLaunch` and whose ``router`` is
set (`compiler.emit.serving`), and when known the `Cluster`. After:
``{file name: object}`` plus ``kustomization.yaml``; same plan, same bytes.

[Note: how the engines target deploys]
- A pool whose replica fits one node is a StatefulSet ``<name>-<pool>``: one
  pod per replica running the launch's command ([Note: engine pods] in
  `engine_pod`), and a headless Service ``<name>-<pool>``. A StatefulSet, as
  for the gimletc target, because the router addresses replica r by its
  stable name ``<name>-<pool>-<r>.<name>-<pool>:8000``
  (`compiler.emit.serving.router.replica_urls`).
- A replica that spans nodes is a LeaderWorkerSet, a group of one pod per
  node. vLLM runs across nodes on Ray, as vLLM's LWS guide does
  (https://docs.vllm.ai/en/stable/deployment/frameworks/lws.html): the
  leader runs ``ray start --head`` and then the launch's command with
  ``--distributed-executor-backend ray`` (vLLM waits for the workers'
  devices to join its placement group); each worker runs ``ray start
  --address=$LWS_LEADER_ADDRESS:6379 --block``. SGLang starts the same
  command on every pod with ``--dist-init-addr``, ``--nnodes`` and
  ``--node-rank`` from the LWS environment. LWS creates a headless Service
  named after the set, and its leader pods are ``<set>-<group>``, so the
  router's replica URLs reach the leaders. TensorRT-LLM across nodes starts
  under MPI, which this target does not generate: such pools are listed as
  skipped.
- An ``external`` pool (Cerebras, d-Matrix: the vendor's server) runs no pod:
  a selector-less headless Service and an EndpointSlice whose endpoints carry
  the replica hostnames, so the same URLs resolve to the systems.
- The router is a Deployment ``<name>-router`` running ``plan.router``'s
  command behind a ClusterIP Service on port 8000. vllm-router and
  sglang-router publish no image: they run on ``python:3.12-slim`` after
  ``pip install <router>==<version>``, which pulls from PyPI when the pod
  starts (set a mirror, or build an image, where pods cannot reach PyPI).
- Pools without a launch (attention/FFN pools, drafters) and everything in
  ``plan.needs_runtime`` are listed in the ConfigMap ``<name>-needs-runtime``
  (annotation ``gimletc/needs: gimletc-runtime``): only the reference runtime
  runs them.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from backends.engines import serving_engine
from compiler.emit.k8s import objects as k8s
from compiler.emit.k8s.engine_pod import (HTTP_PORT, PLAN_DIR, engine_container, engine_pod, external_pool,
                                          multi_node_commands, pool_annotations, runtime_needs, served_pools)
from compiler.emit.k8s.pool_deployment import NOTE, PoolDeployment, by_file_name, check_name, labels, selector
from compiler.emit.serving.router import INSTANCE
from compiler.ir.errors import BadInput

if TYPE_CHECKING:
    from compiler.plan.schema import Plan
    from compiler.inputs.cluster import Cluster

TARGET = "engines"
ROUTER_IMAGE = "python:3.12-slim"
_PIP_PACKAGE = {"vllm-router": "vllm-router", "sglang-router": "sglang-router"}


def manifests(plan: Plan, cluster: Cluster | None = None, *, name: str = INSTANCE) -> dict[str, dict[str, Any]]:
    """Every object of the engines deployment, keyed by file name (see [Note: how the engines target deploys])."""
    check_name(name)
    if plan.router is not None and name != INSTANCE:
        raise BadInput(f"manifest name {name!r}: the plan's router addresses the engines as {INSTANCE}-<pool>; "
                       f"use the name {INSTANCE} (or recompile with another instance name)")
    objs, (serving, skipped) = [], served_pools(plan, cluster, skip_reason)
    for d in serving:
        if not serving_engine(d.pool.launch.engine).launchable:
            objs += external_pool(name, d)
        else:
            check_url_name(d)
            objs += lws_pool(name, d) if d.spans_nodes else stateful_pool(name, d)
    return by_file_name(objs + router(plan, name) + runtime_needs(plan, name, skipped, TARGET))


def skip_reason(d: PoolDeployment) -> str:
    """Why the engines target deploys no engine for launched pool `d` ('' when it does)."""
    engine = serving_engine(d.pool.launch.engine)
    return engine.multi_node_refusal if d.spans_nodes and engine.multi_node is None else ""


def check_url_name(d: PoolDeployment) -> None:
    if d.key != d.pool.name:
        raise BadInput(f"plan: pool name {d.pool.name!r} is not a DNS label, but the router addresses it as is; "
                       f"rename the pool (e.g. {d.key!r}) and recompile")


def stateful_pool(name: str, d: PoolDeployment) -> list[dict[str, Any]]:
    """A replica on one node: a StatefulSet pod per replica running the engine, and its headless Service."""
    svc, pod_labels = f"{name}-{d.key}", labels(name, "engine", d.key)
    note = (f"one {d.pool.launch.engine} engine per replica, {d.devices_per_pod} {d.resource or 'device'} each; "
            f"replica r answers at {svc}-r.{svc}:{d.pool.launch.port}")
    template = engine_pod(name, d, pod_labels, [engine_container(name, d, d.pool.launch.command)])
    return [k8s.stateful_set(k8s.metadata(svc, pod_labels, pool_annotations(d, note)), d.pool.replicas, svc,
                             selector(name, "engine", d.key), template),
            k8s.service(k8s.metadata(svc, pod_labels, {NOTE: f"names the engine pods of {d.pool.name}"}),
                        [("http", d.pool.launch.port)], selector=selector(name, "engine", d.key), headless=True)]


def lws_pool(name: str, d: PoolDeployment) -> list[dict[str, Any]]:
    """A replica across nodes: a LeaderWorkerSet group of one engine pod per node."""
    svc, pod_labels = f"{name}-{d.key}", labels(name, "engine", d.key)
    leader_cmd, worker_cmd = multi_node_commands(d)
    leader = engine_pod(name, d, pod_labels, [engine_container(name, d, leader_cmd)])
    worker = engine_pod(name, d, pod_labels, [engine_container(name, d, worker_cmd, ready=False)])
    how = serving_engine(d.pool.launch.engine).multi_node
    note = (f"a replica spans nodes ({d.pool.devices_per_replica} > {d.node_size} devices per node): a group of "
            f"{d.pods_per_replica} pods over {how}; the leader serves at {svc}-r.{svc}:{d.pool.launch.port} "
            "(LWS's headless Service)")
    return [k8s.leader_worker_set(k8s.metadata(svc, pod_labels, pool_annotations(d, note)), d.pool.replicas,
                                  d.pods_per_replica, worker, sub_group_size=None, leader_template=leader)]


def router(plan: Plan, name: str) -> list[dict[str, Any]]:
    """The router Deployment and its ClusterIP Service (none when the plan has no router)."""
    r = plan.router
    if r is None or r.router == "none":
        return []
    notes = list(r.notes)
    if r.image:
        image, command = r.image, list(r.command)
    else:
        package = _PIP_PACKAGE[r.router]
        image = ROUTER_IMAGE
        command = ["sh", "-c", f"pip install {package}=={r.version} && exec {shlex.join(r.command)}"]
        notes.append(f"{package} {r.version} is installed from PyPI when the pod starts")
    volumes, mounts = [], []
    if r.files:
        volumes, mounts = [k8s.claim_volume("plan-dir", f"{name}-plan-dir")], [k8s.volume_mount("plan-dir", PLAN_DIR)]
    svc, router_labels = f"{name}-router", labels(name, "router")
    box = k8s.container("router", image, command, [], mounts, ports=[("http", r.port)])
    note = f"{r.router} ({r.mode}, policy {r.policy}) in front of the engines. " + " ".join(
        n.rstrip(".") + "." for n in notes)
    return [k8s.deployment(k8s.metadata(svc, router_labels, {NOTE: note}), 1, selector(name, "router"),
                           k8s.pod_template(router_labels, [box], volumes)),
            k8s.service(k8s.metadata(svc, router_labels, {NOTE: "the OpenAI-compatible API of the plan"}),
                        [("http", HTTP_PORT)], selector=selector(name, "router"), headless=False)]
