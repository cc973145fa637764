"""How each pool of a plan deploys on Kubernetes, shared by every manifest target.

Before: a `Plan` and, when known, the `Cluster` it was compiled for. After:
one `PoolDeployment` per pool: its device, node size, Kubernetes device
resource, node selector, tolerations, the reference runtime's image (`RUNTIME_IMAGE`,
or the cluster entry's ``image``), and its pod layout (`kind`, `pods_per_replica`). The gimletc target
(`compiler.emit.k8s.manifests`) lays out one container per worker process; the
engine targets (`engines`, `dynamo`, `llm_d`, `kserve`) one engine process per
pod, a pod per node a replica spans.

>>> dns_label("Pool_1A")
'pool-1a'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from backends.registry import device as catalog_device
from compiler.emit.k8s import objects as k8s
from compiler.plan.topology import workers_of
from compiler.ir.errors import BadInput

if TYPE_CHECKING:
    from compiler.plan.schema import Plan, Pool
    from compiler.inputs.cluster import Cluster
    from compiler.ir.device_spec import DeviceSpec


def _package_version() -> str:
    """This gimletc's version as an image tag (letters, digits, '_', '.', '-'): ``0.1.0``."""
    try:
        version = metadata.version("gimletc")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        version = "0+unknown"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", version)


#: The reference runtime's image, built from the repository's ``Dockerfile`` (docs/cli/compile.md: "The reference
#: runtime's image") and tagged with the package version: every container of the gimletc target runs it, since no vendor
#: image holds gimletc. A cluster entry's ``image`` replaces it for that pool; ``kustomize edit set image
#: gimletc=REGISTRY/gimletc:TAG`` for every container.
RUNTIME_IMAGE = f"gimletc:{_package_version()}"
NOTE = "gimletc/note"
POOL_LABEL = "gimletc/pool"
#: RFC 5737 TEST-NET-1: documentation-only, routes nowhere; stands in for missing external endpoints.
PLACEHOLDER_ADDRESS = "192.0.2.1"


def labels(name: str, component: str, pool: str | None = None) -> dict[str, str]:
    """The labels of instance `name`'s objects of `component` (and of `pool`)."""
    out = {"app.kubernetes.io/name": "gimletc", "app.kubernetes.io/instance": name,
           "app.kubernetes.io/component": component}
    if pool is not None:
        out[POOL_LABEL] = pool
    return out


def selector(name: str, component: str, pool: str | None = None) -> dict[str, str]:
    """The subset of `labels` that selects those objects' pods."""
    out = {"app.kubernetes.io/instance": name, "app.kubernetes.io/component": component}
    if pool is not None:
        out[POOL_LABEL] = pool
    return out


@dataclass(frozen=True)
class PoolDeployment:
    """How one pool deploys: its device, node size, resource, scheduling and worker layout."""

    pool: Pool
    key: str  # DNS-label form of the pool name
    device: DeviceSpec
    node_size: int
    resource: str | None
    node_selector: dict[str, str]
    tolerations: tuple[Any, ...]
    image: str
    endpoints: tuple[str, ...]
    workers_per_replica: int

    @property
    def kind(self) -> str:
        """``external``, ``leader-worker-set`` or ``stateful-set`` (see [Note: how a plan deploys] in manifests)."""
        if self.resource is None:
            return "external"
        return "leader-worker-set" if self.spans_nodes else "stateful-set"

    @property
    def spans_nodes(self) -> bool:
        return self.pool.devices_per_replica > self.node_size

    @property
    def pods_per_replica(self) -> int:
        """Engine pods per replica: one per node the replica spans, each with an equal share of the devices."""
        pods = -(-self.pool.devices_per_replica // self.node_size)
        if self.pool.devices_per_replica % pods:
            raise BadInput(f"plan: pool {self.pool.name} has {self.pool.devices_per_replica} devices per replica, "
                           f"which do not split evenly over {pods} nodes of {self.node_size}; recompile the plan")
        return pods

    @property
    def devices_per_pod(self) -> int:
        return self.pool.devices_per_replica // self.pods_per_replica

    def tolerations_list(self) -> list[dict[str, Any]]:
        return [k8s.toleration(t.key, t.operator, t.value, t.effect) for t in self.tolerations]


def pool_deployments(plan: Plan, cluster: Cluster | None) -> list[PoolDeployment]:
    """How each pool of `plan` deploys (see [Note: how a plan deploys] in `compiler.emit.k8s.manifests`)."""
    return [pool_deployment(pool, cluster) for pool in plan.pools]


def pool_deployment(pool: Pool, cluster: Cluster | None) -> PoolDeployment:
    spec = catalog_device(pool.device)
    entry = cluster.entry(pool.device) if cluster is not None and pool.device in cluster.inventory() else None
    node_size = cluster.node_size(pool.device) if entry is not None else spec.devices_per_node
    workers = sum(1 for w in workers_of([pool]) if w.replica == 0)
    if workers < 1 or pool.devices_per_replica % workers:
        raise BadInput(f"plan: pool {pool.name} has {pool.devices_per_replica} devices per replica but "
                       f"{workers} workers (stages x tp); recompile the plan")
    selector = dict(spec.k8s_node_labels) if entry is None or entry.node_selector is None else entry.node_selector
    return PoolDeployment(
        pool=pool, key=dns_label(pool.name), device=spec, node_size=node_size,
        resource=(entry.k8s_resource if entry is not None and entry.k8s_resource else spec.k8s_resource),
        node_selector=dict(sorted(selector.items())), tolerations=entry.tolerations if entry else (),
        image=entry.image if entry is not None and entry.image else RUNTIME_IMAGE,
        endpoints=entry.endpoints if entry is not None else (), workers_per_replica=workers)


def dns_label(text: str) -> str:
    """``Pool_1A`` -> ``pool-1a``: lowercase letters, digits and '-', at most 20 characters."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:20].strip("-")
    if not label:
        raise BadInput(f"plan: pool name {text!r} has no letters or digits to name Kubernetes objects after")
    return label


def check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z]([-a-z0-9]{0,18}[a-z0-9])?", name):
        raise BadInput(f"manifest name {name!r}: use at most 20 lowercase letters, digits and '-'")


def by_file_name(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{<kind>-<name>.yaml: object}`` sorted, plus ``kustomization.yaml`` listing the others."""
    out = {f"{o['kind'].lower()}-{o['metadata']['name']}.yaml": o for o in objs}
    if len(out) != len(objs):
        raise BadInput("plan: two pools map to the same Kubernetes name; give the pools distinct names")
    out = dict(sorted(out.items()))
    out["kustomization.yaml"] = k8s.kustomization(list(out))
    return out
