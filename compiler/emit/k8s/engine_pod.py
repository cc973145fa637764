"""The pieces every engine target shares: an engine pod's container, volumes, scheduling and the objects for
what cannot run on an engine (`engines`, `dynamo`, `llm_d`, `kserve`).

Before: a pool's `EngineLaunch` (`compiler.emit.serving`) and its `PoolDeployment`. After: containers, pod
templates and objects as plain dicts (`compiler.emit.k8s.objects`).

[Note: engine pods]
- A container runs the launch's ``command`` as is: the engine's own CLI
  (``vllm serve``, ``python3 -m sglang.launch_server``, ``trtllm-serve``),
  with the launch's ``env``; its device limit is the devices of one pod (a
  whole replica on one node, or one node's share of it).
- ``HF_TOKEN`` comes from the Secret ``hf-token-secret`` (key ``HF_TOKEN``,
  optional: public checkpoints need none), the name Dynamo's examples use.
- NIXL pools get ``VLLM_NIXL_SIDE_CHANNEL_HOST`` = the pod IP, as llm-d's
  P/D guide sets it, so the KV handshake reaches this pod and not localhost.
- ``/dev/shm`` is an in-memory emptyDir: tensor-parallel ranks exchange
  through shared memory, and the container default (64 MiB) is too small.
- The plan directory (PVC ``<name>-plan-dir``, the gimletc target's
  convention) is mounted at ``/plan`` only where a pod reads it: a model under
  ``/plan/model``, engine files under ``/plan/engines``, or the KV folder
  ``/plan/kv`` of a shared-storage connector (``ExampleConnector``), which is
  mounted read-write and so needs a ReadWriteMany volume.
- A launch without a public image gets ``registry.invalid/...``: RFC 2606
  reserves ``.invalid``, so the pull fails at once and visibly; the pool's
  note says to set ``image:`` in the cluster file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from backends.engines import displays, serving_engine, serving_engines
from backends.engines.base import PLAN_MOUNT as PLAN_DIR
from backends.engines.base import PORT as HTTP_PORT
from compiler.emit.k8s import objects as k8s
from compiler.emit.k8s.pool_deployment import NOTE, PLACEHOLDER_ADDRESS, PoolDeployment, labels, pool_deployments

if TYPE_CHECKING:
    from compiler.plan.schema import EngineLaunch, Plan
    from compiler.inputs.cluster import Cluster

Obj = dict[str, Any]
HF_SECRET = "hf-token-secret"
NEEDS = "gimletc/needs"


def refusal(d: PoolDeployment, target: str, says: str) -> str:
    """Why orchestrator `target` runs no engine for pool `d` ('' when its engine lists `target` among its
    ``orchestrators``): "<says> vLLM; this pool runs sglang"."""
    if target in serving_engine(d.pool.launch.engine).orchestrators:
        return ""
    return f"{says} {displays([e for e in serving_engines() if target in e.orchestrators])}; this pool runs " \
           f"{d.pool.launch.engine}"


def served_pools(plan: Plan, cluster: Cluster | None,
                 refuse: Callable[[PoolDeployment], str]) -> tuple[list[PoolDeployment], dict[str, str]]:
    """``(pools the target deploys, {pool: why not})``: a pool without a launch runs on the reference runtime
    only; `refuse` gives why the target cannot run a launched pool ('' when it can)."""
    serving, skipped = [], {}
    for d in pool_deployments(plan, cluster):
        why = f"role {d.pool.role} runs on the reference runtime only" if d.pool.launch is None else refuse(d)
        if why:
            skipped[d.pool.name] = why
        else:
            serving.append(d)
    return serving, skipped


def scheduling(d: PoolDeployment) -> Obj:
    """The PodSpec fields that place `d`'s pods: ``nodeSelector`` and ``tolerations``, where it has them."""
    out: Obj = {}
    if d.node_selector:
        out["nodeSelector"] = dict(d.node_selector)
    if d.tolerations:
        out["tolerations"] = d.tolerations_list()
    return out


def image_of(launch: EngineLaunch) -> str:
    """The launch's image, or an unpullable placeholder naming what to build (see [Note: engine pods])."""
    if launch.image:
        return launch.image
    build = launch.plugin or f"{launch.engine}-{launch.platform}"
    return f"registry.invalid/set-image-in-cluster-file/{build}:{launch.version}"


def base_env(launch: EngineLaunch) -> list[Obj]:
    """The launch's environment and ``HF_TOKEN`` from the optional Secret."""
    return [*(k8s.env_value(k, v) for k, v in sorted(launch.env.items())),
            k8s.env_secret("HF_TOKEN", HF_SECRET, "HF_TOKEN")]


def engine_env(launch: EngineLaunch) -> list[Obj]:
    env = base_env(launch)
    if launch.kv_connector is not None and launch.kv_connector.name == "NixlConnector":
        env.append(k8s.env_field("VLLM_NIXL_SIDE_CHANNEL_HOST", "status.podIP"))
    return env


def reads_plan_dir(launch: EngineLaunch) -> bool:
    return bool(launch.files) or launch.model.startswith(PLAN_DIR) or writes_kv(launch)


def writes_kv(launch: EngineLaunch) -> bool:
    return launch.kv_connector is not None and launch.kv_connector.name == "ExampleConnector"


def engine_volumes(name: str, launch: EngineLaunch) -> tuple[list[Obj], list[Obj]]:
    """``(volumes, mounts)`` of an engine pod (see [Note: engine pods])."""
    volumes, mounts = plan_volumes(name, launch)
    return ([k8s.memory_volume("shm"), *volumes],
            [k8s.volume_mount("shm", "/dev/shm", read_only=False), *mounts])


def plan_volumes(name: str, launch: EngineLaunch) -> tuple[list[Obj], list[Obj]]:
    """The plan directory at /plan where the engine reads it (read-write for shared-storage KV), else nothing."""
    if not reads_plan_dir(launch):
        return [], []
    rw = writes_kv(launch)
    return ([k8s.claim_volume("plan-dir", f"{name}-plan-dir", read_only=not rw)],
            [k8s.volume_mount("plan-dir", PLAN_DIR, read_only=not rw)])


def limits_of(d: PoolDeployment) -> dict[str, int] | None:
    return {d.resource: d.devices_per_pod} if d.resource else None


def engine_container(name: str, d: PoolDeployment, command: list[str], *, args: tuple[str, ...] = (),
                     container: str = "engine", port: int = HTTP_PORT, ready: bool = True) -> Obj:
    """The engine container of `d`'s pods (see [Note: engine pods])."""
    launch = d.pool.launch
    _, mounts = engine_volumes(name, launch)
    return k8s.container(container, image_of(launch), command, engine_env(launch), mounts, limits=limits_of(d),
                         ports=[("http", port)], args=list(args), ready_path="/health" if ready else None)


def engine_pod(name: str, d: PoolDeployment, pod_labels: dict[str, str], containers: list[Obj], *,
               init_containers: tuple[Obj, ...] = (), annotations: dict[str, str] | None = None) -> Obj:
    volumes, _ = engine_volumes(name, d.pool.launch)
    return k8s.pod_template(pod_labels, containers, volumes, node_selector=d.node_selector,
                            tolerations=d.tolerations_list(), annotations=annotations,
                            init_containers=list(init_containers))


def pool_annotations(d: PoolDeployment, note: str) -> dict[str, str]:
    p, launch = d.pool, d.pool.launch
    out = {"gimletc/device": p.device, "gimletc/role": p.role,
           "gimletc/shape": f"replicas {p.replicas}, {p.devices_per_replica} devices each, tp={p.tp}, pp={p.pp}",
           "gimletc/engine": f"{launch.engine} {launch.version} ({launch.platform})"}
    notes = [note, *launch.notes]
    out[NOTE] = " ".join(n.rstrip(".") + "." for n in notes if n)
    return out


def external_pool(name: str, d: PoolDeployment) -> list[Obj]:
    """An external engine (its vendor's server, OpenAI-compatible): a selector-less headless Service and an
    EndpointSlice whose endpoints carry the replica hostnames the router's URLs use (``<svc>-<r>.<svc>``)."""
    svc, pool_labels = f"{name}-{d.key}", labels(name, "external", d.key)
    launch = d.pool.launch
    addresses = tuple(launch.endpoints) or d.endpoints or (PLACEHOLDER_ADDRESS,)
    placeholder = "" if launch.endpoints or d.endpoints else (
        f" The address {PLACEHOLDER_ADDRESS} is a placeholder (RFC 5737): list the systems under endpoints in the "
        "cluster file.")
    note = (f"{d.pool.device} is served outside the cluster by its vendor's OpenAI-compatible server on port "
            f"{launch.port}; gimletc starts no pod for it." + placeholder)
    out = [k8s.service(k8s.metadata(svc, pool_labels, pool_annotations(d, note)), [("http", launch.port)],
                       selector=None, headless=True)]
    replicas = range(d.pool.replicas)
    return out + k8s.endpoint_slices(svc, pool_labels, [addresses[r % len(addresses)] for r in replicas],
                                     [("http", launch.port)], hostnames=[f"{svc}-{r}" for r in replicas])


def runtime_needs(plan: Plan, name: str, skipped: dict[str, str], target: str) -> list[Obj]:
    """A ConfigMap naming what this target leaves to the reference runtime (``needs: gimletc-runtime``): the
    plan's `RuntimeNeed`s and the pools it skipped, each with why; nothing when there is neither."""
    if not plan.needs_runtime and not skipped:
        return []
    lines = [f"{n.feature} ({', '.join(n.pools)}): {n.why}" for n in plan.needs_runtime]
    lines += [f"pool {pool} not deployed by the {target} target: {why}" for pool, why in sorted(skipped.items())]
    note = ("parts of this plan no public engine runs here; deploy them with the reference runtime "
            f"(`gimletc compile --manifests gimletc`, or `gimletc serve`): {len(lines)} item(s) in needs.txt")
    meta = k8s.metadata(f"{name}-needs-runtime", labels(name, "needs-runtime"),
                        {NEEDS: "gimletc-runtime", NOTE: note})
    return [k8s.config_map(meta, {"needs.txt": "".join(line + "\n" for line in lines)})]


def multi_node_commands(d: PoolDeployment, argv: list[str] | None = None) -> tuple[list[str], list[str]]:
    """``(leader command, worker command)`` of a replica spanning nodes, as its engine starts one (Ray for vLLM,
    torch.distributed for SGLang: `ServingEngine.multi_node_commands`; see [Note: how the engines target
    deploys] in `compiler.emit.k8s.engines`)."""
    return serving_engine(d.pool.launch.engine).multi_node_commands(
        list(d.pool.launch.command if argv is None else argv))
