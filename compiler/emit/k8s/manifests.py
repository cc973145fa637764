"""Kubernetes manifests for a plan: one object per file, named ``<kind>-<name>.yaml``, plus a kustomization.

Before: a `Plan` (and, when known, the `Cluster` it was compiled for). After:
``{relative path: object}`` (`manifests`); `compiler.emit.k8s.yaml_text`
writes them. Same plan, same bytes.

[Note: how a plan deploys]
- Every worker process of the plan (`compiler.plan.topology`: one per pool x
  replica x pipeline stage x tensor-parallel rank) gets one device and runs
  the worker contract's command, ``python -m compiler.runtime.worker --plan /plan``,
  with ``MASTER_ADDR`` (the driver's headless Service), ``MASTER_PORT``,
  ``WORLD_SIZE``, ``GIMLETC_POOL``, ``GIMLETC_REPLICA`` and ``GIMLETC_WORKER_INDEX``.
- Every container runs the gimletc image (`RUNTIME_IMAGE`, built from the
  repository's ``Dockerfile``; a cluster entry's ``image`` replaces it for its
  pool): vendor images do not hold gimletc, and the reference runtime needs
  none, because it computes on the host CPU whatever the pool's device. A
  pool on an accelerator therefore says so on purpose: its annotation
  ``gimletc/execution`` reads "emulated on the node's CPU", and its device
  request only places the worker on the node the plan chose.
- A pool whose replica fits one node (``devices_per_replica <= node size``) is
  a StatefulSet: one pod per replica holding one container per worker, so a
  replica's tensor-parallel peers share a node. A StatefulSet rather than a
  Deployment because the replica index must be stable and distinct:
  ``GIMLETC_REPLICA`` comes from the pod's ordinal (label
  ``apps.kubernetes.io/pod-index``, Kubernetes >= 1.28), which a Deployment's
  pods do not have. The pool's headless Service names the pods.
- A pool whose replica spans nodes is a LeaderWorkerSet: one group per
  replica, one pod per worker; ``GIMLETC_REPLICA`` is the group index and
  ``GIMLETC_WORKER_INDEX`` the worker index LWS labels each pod with, and
  subgroups of one node's worth of workers each get a node to themselves.
- Devices without a Kubernetes resource (Cerebras, d-Matrix: no public device
  plugin) are external endpoints: a selector-less headless Service plus an
  EndpointSlice with the addresses from the cluster file (``endpoints``), and a
  ConfigMap holding each external worker's environment, to start the same
  worker program on those systems. A cluster file that names a resource for
  them (``k8s_resource``) gets ordinary pods instead.
- The driver (rank 0, ``gimletc serve``) is a Deployment of one pod, behind a
  headless Service (rendezvous) and a ClusterIP Service (the HTTP API).
- ``plan.json`` travels in a ConfigMap mounted over ``/plan/plan.json`` (past
  the ConfigMap limit of about 1 MB it comes from the volume alone); the rest
  of the plan directory (stage programs, weight shards, the artifact manifest
  whose hashes the runtime checks) comes from a PersistentVolumeClaim the
  operator creates and fills with the compiled directory, named
  ``<name>-plan-dir``.
- ``mode="dra"`` requests devices through Dynamic Resource Allocation
  (``resource.k8s.io/v1`` ResourceClaimTemplates of the backend's DeviceClass)
  instead of device-plugin limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compiler.emit.k8s import objects as k8s
from compiler.emit.k8s.pool_deployment import (NOTE, PLACEHOLDER_ADDRESS, RUNTIME_IMAGE, PoolDeployment,
                                               by_file_name, check_name, labels, pool_deployments, selector)
from compiler.plan.topology import workers_of, world_size
from compiler.ir.errors import BadInput

if TYPE_CHECKING:
    from compiler.plan.schema import Plan
    from compiler.inputs.cluster import Cluster

MODES = ("device-plugin", "dra")
__all__ = ["MODES", "PoolDeployment", "RUNTIME_IMAGE", "manifests", "pool_deployments"]
MASTER_PORT = 29500
HTTP_PORT = 8000
PLAN_DIR = "/plan"
WORKER_COMMAND = ("python", "-m", "compiler.runtime.worker", "--plan", PLAN_DIR)
DRIVER_COMMAND = ("gimletc", "serve", PLAN_DIR, "--host", "0.0.0.0", "--port", str(HTTP_PORT))
POD_INDEX = "apps.kubernetes.io/pod-index"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
EXECUTION = "gimletc/execution"
#: A ConfigMap holds at most 1 MiB (etcd's object limit), metadata included.
CONFIG_MAP_LIMIT_BYTES = 1_000_000


@dataclass(frozen=True)
class _Context:
    plan: Plan
    name: str
    mode: str
    world_size: int
    plan_in_config_map: bool  # False past the ConfigMap size limit: plan.json then comes from the PVC alone

    def labels(self, component: str, pool: str | None = None) -> dict[str, str]:
        return labels(self.name, component, pool)

    def selector(self, component: str, pool: str | None = None) -> dict[str, str]:
        return selector(self.name, component, pool)

    @property
    def driver_service(self) -> str:
        return f"{self.name}-driver"


def manifests(plan: Plan, cluster: Cluster | None = None, *, mode: str = "device-plugin",
              name: str = "gimletc") -> dict[str, dict[str, Any]]:
    """Every object of the deployment, keyed by its file name; ``kustomization.yaml`` lists the others.

    `cluster` supplies node sizes, node selectors, tolerations, images and
    external endpoints; without it the catalog's defaults apply.
    """
    if mode not in MODES:
        raise BadInput(f"--manifests {mode!r}: choose one of {', '.join(MODES)}")
    check_name(name)
    ctx = _Context(plan, name, mode, world_size(plan), len(plan.dumps().encode()) <= CONFIG_MAP_LIMIT_BYTES)
    objs: list[dict[str, Any]] = [*([_plan_config_map(ctx)] if ctx.plan_in_config_map else []), *_driver(ctx)]
    for d in pool_deployments(plan, cluster):
        build = {"external": _external_pool, "leader-worker-set": _lws_pool, "stateful-set": _stateful_pool}[d.kind]
        objs.extend(build(ctx, d))
    return by_file_name(objs)


def _plan_config_map(ctx: _Context) -> dict[str, Any]:
    meta = k8s.metadata(f"{ctx.name}-plan", ctx.labels("plan"), {
        NOTE: f"plan.json of {ctx.plan.model} on {ctx.plan.cluster}, mounted over {PLAN_DIR}/plan.json in every pod"})
    return k8s.config_map(meta, {"plan.json": ctx.plan.dumps()})


def _volumes(ctx: _Context) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The plan directory (PVC) at /plan with plan.json from the ConfigMap over it: (volumes, mounts)."""
    volumes = [k8s.claim_volume("plan-dir", f"{ctx.name}-plan-dir")]
    mounts = [k8s.volume_mount("plan-dir", PLAN_DIR)]
    if ctx.plan_in_config_map:
        volumes.append(k8s.config_map_volume("plan", f"{ctx.name}-plan"))
        mounts.append(k8s.volume_mount("plan", f"{PLAN_DIR}/plan.json", sub_path="plan.json"))
    return volumes, mounts


def _rendezvous_env(ctx: _Context) -> list[dict[str, Any]]:
    return [k8s.env_value("MASTER_ADDR", ctx.driver_service), k8s.env_value("MASTER_PORT", str(MASTER_PORT)),
            k8s.env_value("WORLD_SIZE", str(ctx.world_size))]


def _driver(ctx: _Context) -> list[dict[str, Any]]:
    """Rank 0: one pod running ``gimletc serve``, its rendezvous (headless) Service and its API Service."""
    labels, selector = ctx.labels("driver"), ctx.selector("driver")
    volumes, mounts = _volumes(ctx)
    env = [*_rendezvous_env(ctx), k8s.env_value("RANK", "0")]
    box = k8s.container("driver", RUNTIME_IMAGE, DRIVER_COMMAND, env, mounts,
                        ports=[("rendezvous", MASTER_PORT), ("http", HTTP_PORT)])
    note = (f"rank 0 of {ctx.world_size}: owns requests and sampling; workers rendezvous at "
            f"{ctx.driver_service}:{MASTER_PORT}")
    return [
        k8s.deployment(k8s.metadata(ctx.driver_service, labels, {NOTE: note}), 1, selector,
                       k8s.pod_template(labels, [box], volumes)),
        k8s.service(k8s.metadata(ctx.driver_service, labels, {NOTE: "torch.distributed env:// rendezvous"}),
                    [("rendezvous", MASTER_PORT)], selector=selector, headless=True),
        k8s.service(k8s.metadata(f"{ctx.name}-api", labels, {NOTE: "the OpenAI-compatible HTTP API"}),
                    [("http", HTTP_PORT)], selector=selector, headless=False),
    ]


def _pool_annotations(d: PoolDeployment, note: str) -> dict[str, str]:
    p = d.pool
    return {"gimletc/device": p.device, "gimletc/role": p.role,
            "gimletc/shape": f"replicas {p.replicas}, {p.devices_per_replica} devices each, tp={p.tp}, pp={p.pp}",
            EXECUTION: _execution(d), NOTE: note}


def _execution(d: PoolDeployment) -> str:
    """Where the pool's workers compute (see [Note: how a plan deploys]): the host CPU, emulating any other device."""
    if d.device.torch_device == "cpu":
        return "native on the node's CPU"
    if d.kind == "external":
        return (f"emulated on the external systems' host CPU, not on the {d.pool.device}: the reference runtime "
                "computes on the host CPU (same numerics, host timings)")
    return (f"emulated on the node's CPU, not on the {d.pool.device}: the reference runtime computes on the host "
            f"CPU (same numerics, host timings); the {d.resource} request only places the worker on its node")


def _worker_env(ctx: _Context, d: PoolDeployment, replica: dict[str, Any], index: dict[str, Any]) -> list:
    return [*_rendezvous_env(ctx), k8s.env_value("GIMLETC_POOL", d.pool.name), replica, index]


def _devices(ctx: _Context, d: PoolDeployment, workers: int) -> tuple[list[dict], str | None, int]:
    """``(ResourceClaimTemplates, template name, devices per worker)``: DRA claims, or none for plugin limits."""
    per_worker = d.pool.devices_per_replica // d.workers_per_replica
    if ctx.mode != "dra" or d.device.dra_device_class is None or d.resource != d.device.k8s_resource:
        return [], None, per_worker
    name = f"{ctx.name}-{d.key}-devices"
    meta = k8s.metadata(name, ctx.labels("worker", d.key), {NOTE: f"{per_worker} {d.device.dra_device_class} "
                                                                  "device(s) per worker container"})
    requests = [(f"worker{i}", d.device.dra_device_class, per_worker) for i in range(workers)]
    return [k8s.resource_claim_template(meta, requests)], name, per_worker


def _worker_container(ctx: _Context, d: PoolDeployment, i: int, env: list, claim: str | None,
                      per_worker: int) -> dict[str, Any]:
    _, mounts = _volumes(ctx)
    if claim is not None:
        return k8s.container(f"worker{i}", d.image, WORKER_COMMAND, env, mounts,
                             claims=[{"name": "devices", "request": f"worker{i}"}])
    return k8s.container(f"worker{i}", d.image, WORKER_COMMAND, env, mounts, limits={d.resource: per_worker})


def _pod(ctx: _Context, d: PoolDeployment, containers: list, claim: str | None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    volumes, _ = _volumes(ctx)
    tolerations = d.tolerations_list()
    claims = [{"name": "devices", "resourceClaimTemplateName": claim}] if claim else []
    return k8s.pod_template(ctx.labels("worker", d.key), containers, volumes, node_selector=d.node_selector,
                            tolerations=tolerations, resource_claims=claims, annotations=annotations)


def _stateful_pool(ctx: _Context, d: PoolDeployment) -> list[dict[str, Any]]:
    """A replica on one node: a StatefulSet pod per replica, a container per worker."""
    name, n = f"{ctx.name}-{d.key}", d.workers_per_replica
    claims, claim, per_worker = _devices(ctx, d, n)
    replica = k8s.env_label("GIMLETC_REPLICA", POD_INDEX)
    boxes = [_worker_container(ctx, d, i, _worker_env(ctx, d, replica, k8s.env_value("GIMLETC_WORKER_INDEX", str(i))),
                               claim, per_worker) for i in range(n)]
    note = (f"one pod per replica on one node ({d.pool.devices_per_replica} <= {d.node_size} devices per node), "
            f"one container per worker; a StatefulSet for its stable ordinal (GIMLETC_REPLICA)")
    labels = ctx.labels("worker", d.key)
    return [*claims,
            k8s.stateful_set(k8s.metadata(name, labels, _pool_annotations(d, note)), d.pool.replicas, name,
                             ctx.selector("worker", d.key), _pod(ctx, d, boxes, claim)),
            k8s.service(k8s.metadata(name, labels, {NOTE: f"names the pods of {d.pool.name}"}), [],
                        selector=ctx.selector("worker", d.key), headless=True)]


def _lws_pool(ctx: _Context, d: PoolDeployment) -> list[dict[str, Any]]:
    """A replica across nodes: a LeaderWorkerSet group per replica, a pod per worker."""
    name, n = f"{ctx.name}-{d.key}", d.workers_per_replica
    claims, claim, per_worker = _devices(ctx, d, 1)
    env = _worker_env(ctx, d, k8s.env_label("GIMLETC_REPLICA", LWS_GROUP_INDEX),
                      k8s.env_label("GIMLETC_WORKER_INDEX", LWS_WORKER_INDEX))
    per_node = max(1, d.node_size // per_worker)
    sub_group = per_node if n % per_node == 0 and per_node < n else None
    exclusive = {LWS_SUBGROUP_EXCLUSIVE: "kubernetes.io/hostname"} if sub_group else None
    note = (f"a replica spans nodes ({d.pool.devices_per_replica} > {d.node_size} devices per node): one group "
            f"of {n} pods per replica" + (f", {sub_group} per node" if sub_group else ""))
    template = _pod(ctx, d, [_worker_container(ctx, d, 0, env, claim, per_worker)], claim, exclusive)
    return [*claims, k8s.leader_worker_set(k8s.metadata(name, ctx.labels("worker", d.key), _pool_annotations(d, note)),
                                           d.pool.replicas, n, template, sub_group_size=sub_group)]


def _external_pool(ctx: _Context, d: PoolDeployment) -> list[dict[str, Any]]:
    """No Kubernetes resource: a selector-less Service and EndpointSlices for the systems, and their workers' env."""
    name, pool_labels = f"{ctx.name}-{d.key}", ctx.labels("external", d.key)
    addresses = d.endpoints or (PLACEHOLDER_ADDRESS,)
    placeholder = "" if d.endpoints else (f" The address {PLACEHOLDER_ADDRESS} is a placeholder (RFC 5737): list "
                                          f"the systems under endpoints in the cluster file.")
    note = (f"{d.pool.device} has no Kubernetes resource ({d.device.k8s_note}): the pool runs outside the "
            f"cluster. Start each worker in {name}-workers on those systems; MASTER_ADDR must reach the driver "
            f"from there (expose {ctx.driver_service}:{MASTER_PORT})." + placeholder)
    out = [k8s.service(k8s.metadata(name, pool_labels, _pool_annotations(d, note)), [], selector=None, headless=True),
           *k8s.endpoint_slices(name, pool_labels, addresses, [])]
    env_files = {}
    for w in workers_of([d.pool]):
        env = {"MASTER_ADDR": ctx.driver_service, "MASTER_PORT": str(MASTER_PORT), "WORLD_SIZE": str(ctx.world_size),
               "GIMLETC_POOL": d.pool.name, "GIMLETC_REPLICA": str(w.replica),
               "GIMLETC_WORKER_INDEX": str(w.worker_index)}
        env_files[f"replica{w.replica}-worker{w.worker_index}.env"] = "".join(f"{k}={v}\n" for k, v in env.items())
    out.append(k8s.config_map(k8s.metadata(f"{name}-workers", pool_labels, {
        NOTE: f"one env file per external worker; run in the image {d.image} (or where gimletc is installed): "
              "env $(cat FILE) " + " ".join(WORKER_COMMAND)}), env_files))
    return out
