"""The ``llm-d`` target: vLLM engines behind llm-d's inference scheduler (an InferencePool and its endpoint
picker).

Before: a `Plan` whose pools carry their `EngineLaunch`, when known the
`Cluster`, and optionally the `Workload` (for the prefill threshold). After:
per serving group an ``InferencePool`` (``inference.networking.k8s.io/v1``),
the endpoint picker (EPP) Deployment, Service, configuration ConfigMap and
RBAC, and per pool a Deployment (a LeaderWorkerSet when a replica spans
nodes) running the launch's ``vllm serve`` command; plus the runtime-needs
ConfigMap.

[Note: how the llm-d target deploys]
- Engine pods carry ``llm-d.ai/role`` (``prefill``, ``decode``, or ``both``
  for colocated pools; the scheduler's ``prefill-filter`` and
  ``decode-filter`` select on it, llm-d-inference-scheduler
  pkg/plugins/filter/pd_role.go) and ``llm-d.ai/inferenceServing: "true"``.
- A serving group is the pools one EPP may pair: pools joined by their KV
  connectors, and colocated pools on the same platform; a cross-vendor pair
  without a connector (``plan.needs_runtime``) is never in one group, so the
  EPP cannot pick a prefill pod whose KV the decode pod cannot load.
- The EPP configuration follows llm-d's P/D guide
  (github.com/llm-d/llm-d guides/pd-disaggregation/gaie-pd/values.yaml at
  commit 126f65d6, scheduler image ghcr.io/llm-d/llm-d-inference-scheduler
  v0.5.0): ``prefill-header-handler``, ``prefill-filter``, ``decode-filter``,
  ``prefix-cache-scorer`` (weight 2), ``load-aware-scorer`` (weight 1) and
  ``max-score-picker`` per profile (the scorer set KServe's scheduler used
  with the same handler), and ``pd-profile-handler`` with ``threshold``:
  prompts of at most that many (uncached) tokens skip disaggregation and are
  served by a decode or ``both`` pod alone. When the plan routes some request
  classes only to colocated pools and the others through prefill/decode, the
  threshold is the longest prompt of the colocated-only classes (when the
  workload is given and that is shorter than the mean prompt of every P/D
  class); otherwise 0, disaggregating every request.
- Decode pods of a P/D group run llm-d's routing sidecar as a native sidecar
  (init container with ``restartPolicy: Always``) on port 8000, which first
  sends the prompt to the prefill pod the EPP chose (header
  ``x-prefiller-host-port``); vLLM then listens on 8200, as in llm-d's guides
  (guides/pd-disaggregation/modelserver/gpu/vllm/base/patch-decode.yaml;
  the sidecar's ``--port=8000 --vllm-port=8200 --connector=nixlv2
  --secure-proxy=false`` as in the guides' decode pods, image
  ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0).
- Not emitted: the Gateway and HTTPRoute that send traffic to the
  InferencePool (they depend on the cluster's gateway implementation: add an
  HTTPRoute whose backendRef is the InferencePool; a services compile writes
  one per service, routing by model: `compiler.emit.k8s.model_routing`);
  non-vLLM, external and launch-less pools (listed in the runtime-needs
  ConfigMap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compiler.emit.k8s import objects as k8s
from compiler.emit.k8s.engine_pod import (engine_container, engine_pod, multi_node_commands, pool_annotations,
                                          refusal, runtime_needs, served_pools)
from compiler.emit.k8s.pool_deployment import NOTE, PoolDeployment, by_file_name, check_name, labels, selector
from compiler.emit.k8s.yaml_text import dump

if TYPE_CHECKING:
    from compiler.plan.schema import Plan
    from compiler.inputs.cluster import Cluster
    from compiler.inputs.workload import Workload

TARGET = "llm-d"
SCHEDULER_IMAGE = "ghcr.io/llm-d/llm-d-inference-scheduler:v0.5.0"
SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0"
ROLE = "llm-d.ai/role"
SERVING = "llm-d.ai/inferenceServing"
GROUP = "gimletc/serving-group"
PORT, VLLM_BEHIND_SIDECAR, EPP_PORT, EPP_HEALTH_PORT = 8000, 8200, 9002, 9003
_ROLE = {"colocated": "both", "prefill": "prefill", "decode": "decode"}


def manifests(plan: Plan, cluster: Cluster | None = None, *, name: str = "gimletc",
              workload: Workload | None = None) -> dict[str, dict[str, Any]]:
    """Engines, InferencePools and endpoint pickers (see [Note: how the llm-d target deploys])."""
    check_name(name)
    serving, skipped = served_pools(plan, cluster, lambda d: refusal(d, TARGET, "llm-d's guides serve"))
    objs, threshold = [], prefill_threshold(plan, workload)
    for group_name, pools in serving_groups(name, serving).items():
        pd = any(d.pool.role == "prefill" for d in pools)
        for d in pools:
            objs += engine(name, group_name, d, sidecar=pd and d.pool.role == "decode")
        objs += picker(name, group_name, threshold if pd else 0)
    return by_file_name(objs + runtime_needs(plan, name, skipped, TARGET))


def serving_groups(name: str, serving: list[PoolDeployment]) -> dict[str, list[PoolDeployment]]:
    """``{group name: pools}``: pools joined by KV connectors, colocated pools with a group of their platform."""
    group_of = {d.pool.name: d.pool.name for d in serving}

    def root(pool: str) -> str:
        while group_of[pool] != pool:
            pool = group_of[pool]
        return pool

    for d in serving:
        connector = d.pool.launch.kv_connector
        for peer in connector.peers if connector else ():
            if peer in group_of:
                a, b = sorted((root(d.pool.name), root(peer)))
                group_of[b] = a
    for d in serving:
        if d.pool.launch.kv_connector is None:
            same = sorted(root(e.pool.name) for e in serving
                          if e.pool.launch.platform == d.pool.launch.platform and e.pool.launch.kv_connector)
            if same:
                group_of[d.pool.name] = same[0]
    groups: dict[str, list[PoolDeployment]] = {}
    for d in serving:
        groups.setdefault(root(d.pool.name), []).append(d)
    named = {}
    for first, pools in sorted(groups.items()):
        label = f"{name}-{pools[0].pool.launch.platform}"
        named[label if label not in named else f"{name}-{pools[0].key}"] = pools
    return named


def prefill_threshold(plan: Plan, workload: Workload | None) -> int:
    """Prompt tokens below which requests skip disaggregation (see the module docstring); 0: always P/D."""
    if plan.router is None or workload is None:
        return 0
    roles = {p.name: p.role for p in plan.pools}
    colocated_only, pd = [], []
    for route in plan.router.routes:
        first = {roles.get(pool) for pool in route.prefill}
        (pd if route.decode or "prefill" in first else colocated_only).append(route.name)
    classes = {c.name: c for c in workload.classes}
    if not colocated_only or not pd or not all(n in classes for n in colocated_only + pd):
        return 0
    longest = max(classes[n].input_len.max for n in colocated_only)
    return longest if longest < min(classes[n].input_len.mean for n in pd) else 0


def engine(name: str, group_name: str, d: PoolDeployment, *, sidecar: bool) -> list[dict[str, Any]]:
    """One pool's vLLM pods: a Deployment, or a LeaderWorkerSet when a replica spans nodes."""
    pod_labels = {**labels(name, "engine", d.key), ROLE: _ROLE[d.pool.role], SERVING: "true", GROUP: group_name}
    command = list(d.pool.launch.command)
    port = VLLM_BEHIND_SIDECAR if sidecar else PORT
    if sidecar:
        command[command.index("--port") + 1] = str(VLLM_BEHIND_SIDECAR)
    init = [routing_sidecar()] if sidecar else []
    note = (f"{_ROLE[d.pool.role]} pods of {group_name}"
            + ("; vLLM on 8200 behind llm-d's routing sidecar on 8000" if sidecar else ""))
    meta = k8s.metadata(f"{name}-{d.key}", pod_labels, pool_annotations(d, note))
    if not d.spans_nodes:
        pod = engine_pod(name, d, pod_labels, [engine_container(name, d, command, port=port)],
                         init_containers=tuple(init))
        return [k8s.deployment(meta, d.pool.replicas, selector(name, "engine", d.key), pod)]
    leader_cmd, worker_cmd = multi_node_commands(d, command)
    leader = engine_pod(name, d, pod_labels, [engine_container(name, d, leader_cmd, port=port)],
                        init_containers=tuple(init))
    worker = engine_pod(name, d, pod_labels, [engine_container(name, d, worker_cmd, ready=False)])
    return [k8s.leader_worker_set(meta, d.pool.replicas, d.pods_per_replica, worker, sub_group_size=None,
                                  leader_template=leader)]


def routing_sidecar() -> dict[str, Any]:
    args = [f"--port={PORT}", f"--vllm-port={VLLM_BEHIND_SIDECAR}", "--connector=nixlv2", "--secure-proxy=false"]
    return k8s.container("routing-proxy", SIDECAR_IMAGE, [], [], [], ports=[("proxy", PORT)], args=args,
                         restart_policy="Always")


def epp_config(threshold: int) -> str:
    """The EndpointPickerConfig (see the module docstring for its source)."""
    def plugins(role_filter: str) -> list[dict[str, Any]]:
        return [{"pluginRef": role_filter}, {"pluginRef": "prefix-cache-scorer", "weight": 2},
                {"pluginRef": "load-aware-scorer", "weight": 1}, {"pluginRef": "max-score-picker"}]

    config = {"apiVersion": "inference.networking.x-k8s.io/v1alpha1", "kind": "EndpointPickerConfig",
              "plugins": [{"type": "prefill-header-handler"}, {"type": "prefill-filter"}, {"type": "decode-filter"},
                          {"type": "prefix-cache-scorer"}, {"type": "load-aware-scorer"},
                          {"type": "max-score-picker"},
                          {"type": "pd-profile-handler", "parameters": {"threshold": threshold}}],
              "schedulingProfiles": [{"name": "prefill", "plugins": plugins("prefill-filter")},
                                     {"name": "decode", "plugins": plugins("decode-filter")}]}
    return dump(config)


def picker(name: str, group_name: str, threshold: int) -> list[dict[str, Any]]:
    """The group's InferencePool and its endpoint picker: Deployment, Service, ConfigMap, ServiceAccount, RBAC."""
    epp, epp_labels = f"{group_name}-epp", {**labels(name, "epp"), GROUP: group_name}
    epp_selector = {**selector(name, "epp"), GROUP: group_name}
    args = ["--pool-name", group_name, "--pool-namespace", "$(NAMESPACE)", "--pool-group",
            "inference.networking.k8s.io", "--config-file", "/config/epp-config.yaml",
            "--grpc-port", str(EPP_PORT), "--grpc-health-port", str(EPP_HEALTH_PORT)]
    box = k8s.container("epp", SCHEDULER_IMAGE, [], [k8s.env_field("NAMESPACE", "metadata.namespace")],
                        [k8s.volume_mount("config", "/config")], ports=[("grpc", EPP_PORT),
                                                                         ("grpc-health", EPP_HEALTH_PORT)], args=args)
    pod = k8s.pod_template(epp_labels, [box], [k8s.config_map_volume("config", epp)], service_account=epp)
    note = f"llm-d's endpoint picker for {group_name}: prompts of at most {threshold} tokens skip prefill/decode"
    pool_selector = {"app.kubernetes.io/instance": name, SERVING: "true", GROUP: group_name}
    rules = [("", "pods", ("get", "list", "watch")),
             ("inference.networking.k8s.io", "inferencepools", ("get", "list", "watch")),
             ("inference.networking.x-k8s.io", "inferenceobjectives", ("get", "list", "watch"))]

    def meta(object_name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        return k8s.metadata(object_name, epp_labels, annotations)

    return [
        k8s.inference_pool(k8s.metadata(group_name, labels(name, "inference-pool"), {
            NOTE: f"the vLLM pods of {group_name}; its endpoint picker is {epp}"}), pool_selector, PORT, epp,
            EPP_PORT),
        k8s.deployment(meta(epp, {NOTE: note}), 1, epp_selector, pod),
        k8s.service(meta(epp), [("grpc", EPP_PORT)], selector=epp_selector, headless=False),
        k8s.config_map(meta(epp), {"epp-config.yaml": epp_config(threshold)}),
        k8s.service_account(meta(epp)), k8s.role(meta(epp), rules), k8s.role_binding(meta(epp), epp, epp)]
