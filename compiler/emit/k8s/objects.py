"""Typed builders of the Kubernetes objects gimletc emits: one small function per object or part.

Each function takes typed arguments and returns the object as plain dicts and
lists (what ``kubectl`` reads), built field by field: no string templates, so
a value can never break the YAML around it, and key order is fixed by the code
(byte-identical output). Nothing here knows about plans or vendors; the
`compiler.emit.k8s.manifests` pass decides what to build.

API versions: ``apps/v1`` (StatefulSet, Deployment), ``v1`` (Service,
ConfigMap), ``discovery.k8s.io/v1`` (EndpointSlice), ``resource.k8s.io/v1``
(ResourceClaimTemplate, stable since Kubernetes 1.34),
``leaderworkerset.x-k8s.io/v1`` (LeaderWorkerSet, kubernetes-sigs/lws),
``rbac.authorization.k8s.io/v1`` (ServiceAccount, Role, RoleBinding),
``inference.networking.k8s.io/v1`` (InferencePool, Gateway API Inference
Extension), ``gateway.networking.k8s.io/v1`` (HTTPRoute, Gateway API) and
``kustomize.config.k8s.io/v1beta1`` (Kustomization). The
Dynamo and KServe custom resources are built in their targets' modules.

>>> env_value("WORLD_SIZE", "9")
{'name': 'WORLD_SIZE', 'value': '9'}
>>> env_label("GIMLETC_REPLICA", "apps.kubernetes.io/pod-index")["valueFrom"]["fieldRef"]["fieldPath"]
"metadata.labels['apps.kubernetes.io/pod-index']"
"""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping, Sequence

Obj = dict[str, Any]


def metadata(name: str, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> Obj:
    out: Obj = {"name": name, "labels": dict(labels)}
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def env_value(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def env_label(name: str, label: str) -> Obj:
    """An environment variable read from one of the pod's own labels (downward API)."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}


def volume_mount(name: str, path: str, *, read_only: bool = True, sub_path: str | None = None) -> Obj:
    out: Obj = {"name": name, "mountPath": path, "readOnly": read_only}
    if sub_path is not None:
        out["subPath"] = sub_path
    return out


def config_map_volume(name: str, config_map: str) -> Obj:
    return {"name": name, "configMap": {"name": config_map}}


def claim_volume(name: str, claim: str, *, read_only: bool = True) -> Obj:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}


def memory_volume(name: str) -> Obj:
    """An in-memory emptyDir (``/dev/shm`` for engines whose tensor-parallel ranks share memory)."""
    return {"name": name, "emptyDir": {"medium": "Memory"}}


def env_field(name: str, field_path: str) -> Obj:
    """An environment variable from the pod's own fields (downward API), e.g. ``status.podIP``."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def env_secret(name: str, secret: str, key: str) -> Obj:
    """An environment variable from a Secret the operator may create (optional: the pod starts without it)."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}


def container(name: str, image: str, command: Sequence[str], env: Sequence[Obj], mounts: Sequence[Obj], *,
              limits: Mapping[str, int] | None = None, claims: Sequence[Obj] = (),
              ports: Sequence[tuple[str, int]] = (), args: Sequence[str] = (), ready_path: str | None = None,
              restart_policy: str | None = None) -> Obj:
    """A container; `limits` are device-plugin resources, `claims` DRA claim references (``{name, request}``);
    `ready_path` an HTTP readiness probe on the first port; `restart_policy` ``Always`` makes an init container
    a native sidecar (Kubernetes >= 1.29)."""
    out: Obj = {"name": name, "image": image}
    if command:
        out["command"] = list(command)
    if args:
        out["args"] = list(args)
    out["env"] = list(env)
    if ports:
        out["ports"] = [{"name": port_name, "containerPort": port} for port_name, port in ports]
    resources: Obj = {}
    if limits:
        resources["limits"] = dict(limits)
    if claims:
        resources["claims"] = list(claims)
    if resources:
        out["resources"] = resources
    if ready_path is not None and ports:
        out["readinessProbe"] = {"httpGet": {"path": ready_path, "port": ports[0][1]}, "periodSeconds": 10}
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    out["volumeMounts"] = list(mounts)
    return out


def pod_template(labels: Mapping[str, str], containers: Sequence[Obj], volumes: Sequence[Obj], *,
                 node_selector: Mapping[str, str] | None = None, tolerations: Sequence[Obj] = (),
                 resource_claims: Sequence[Obj] = (), annotations: Mapping[str, str] | None = None,
                 init_containers: Sequence[Obj] = (), service_account: str | None = None) -> Obj:
    meta: Obj = {"labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: Obj = {}
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    if init_containers:
        spec["initContainers"] = list(init_containers)
    spec["containers"] = list(containers)
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if resource_claims:
        spec["resourceClaims"] = list(resource_claims)
    spec["volumes"] = list(volumes)
    return {"metadata": meta, "spec": spec}


def toleration(key: str | None, operator: str, value: str | None, effect: str | None) -> Obj:
    out: Obj = {"operator": operator}
    for field, v in (("key", key), ("value", value), ("effect", effect)):
        if v is not None:
            out[field] = v
    return out


def stateful_set(meta: Obj, replicas: int, service: str, selector: Mapping[str, str], template: Obj) -> Obj:
    """Pods with stable ordinals (``apps.kubernetes.io/pod-index``), all started at once (Parallel)."""
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
            "spec": {"replicas": replicas, "serviceName": service, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": dict(selector)}, "template": template}}


def deployment(meta: Obj, replicas: int, selector: Mapping[str, str], template: Obj) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(selector)}, "template": template}}


def leader_worker_set(meta: Obj, replicas: int, size: int, template: Obj, *, sub_group_size: int | None,
                      leader_template: Obj | None = None) -> Obj:
    """Groups of `size` pods (one group per replica); without `leader_template` the worker template serves the
    leader too."""
    lwt: Obj = {"size": size, "restartPolicy": "RecreateGroupOnPodRestart"}
    if sub_group_size is not None:
        lwt["subGroupPolicy"] = {"subGroupSize": sub_group_size}
    if leader_template is not None:
        lwt["leaderTemplate"] = leader_template
    lwt["workerTemplate"] = template
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {"replicas": replicas, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": lwt}}


def service(meta: Obj, ports: Sequence[tuple[str, int]], *, selector: Mapping[str, str] | None,
            headless: bool) -> Obj:
    """A Service; headless ones publish not-ready pods too, so rendezvous can start before readiness."""
    spec: Obj = {}
    if headless:
        spec["clusterIP"] = "None"
        spec["publishNotReadyAddresses"] = True
    if selector is not None:
        spec["selector"] = dict(selector)
    if ports:  # only a headless Service may have none
        spec["ports"] = [{"name": name, "port": port, "targetPort": port, "protocol": "TCP"} for name, port in ports]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def endpoint_slice(meta: Obj, address_type: str, addresses: Sequence[str], ports: Sequence[tuple[str, int]], *,
                   hostnames: Sequence[str] = ()) -> Obj:
    """Endpoints of a selector-less Service (``meta`` must carry ``kubernetes.io/service-name``); `hostnames`
    (one per address) give each a DNS name ``<hostname>.<service>`` under a headless Service."""
    endpoints = [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]
    for endpoint, hostname in zip(endpoints, hostnames):
        endpoint["hostname"] = hostname
    out: Obj = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
                "addressType": address_type, "endpoints": endpoints}
    if ports:
        out["ports"] = [{"name": name, "port": port, "protocol": "TCP"} for name, port in ports]
    return out


def endpoint_slices(service_name: str, labels: Mapping[str, str], addresses: Sequence[str],
                    ports: Sequence[tuple[str, int]], *, hostnames: Sequence[str] = ()) -> list[Obj]:
    """The EndpointSlices of selector-less Service `service_name`: one ``<service>-ipv4``/``-ipv6`` per address
    family of `addresses` (a slice holds one), each address keeping its hostname."""
    family = [ipaddress.ip_address(a).version for a in addresses]
    out = []
    for version in sorted(set(family)):
        picked = [i for i, v in enumerate(family) if v == version]
        meta = metadata(f"{service_name}-ipv{version}", {**labels, "kubernetes.io/service-name": service_name})
        out.append(endpoint_slice(meta, f"IPv{version}", [addresses[i] for i in picked], ports,
                                  hostnames=[hostnames[i] for i in picked] if hostnames else ()))
    return out


def config_map(meta: Obj, data: Mapping[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def resource_claim_template(meta: Obj, requests: Sequence[tuple[str, str, int]]) -> Obj:
    """DRA claims: one request per ``(name, device class, count)``."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": meta,
            "spec": {"spec": {"devices": {"requests": [
                {"name": name, "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount",
                                           "count": count}}
                for name, device_class, count in requests]}}}}


def service_account(meta: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}


def role(meta: Obj, rules: Sequence[tuple[str, str, Sequence[str]]]) -> Obj:
    """A namespaced Role: one rule per ``(API group, resource, verbs)``."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
            "rules": [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
                      for group, resource, verbs in rules]}


def role_binding(meta: Obj, role_name: str, account: str) -> Obj:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": account}]}


def inference_pool(meta: Obj, selector: Mapping[str, str], port: int, picker: str, picker_port: int) -> Obj:
    """Gateway API Inference Extension InferencePool (``inference.networking.k8s.io/v1``): the model-server pods
    and the endpoint picker (EPP) Service that chooses among them; FailClose: no picker, no routing."""
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": meta,
            "spec": {"selector": {"matchLabels": dict(selector)}, "targetPorts": [{"number": port}],
                     "endpointPickerRef": {"name": picker, "kind": "Service", "port": {"number": picker_port},
                                           "failureMode": "FailClose"}}}


def http_route(meta: Obj, gateway: tuple[str, str], header: tuple[str, str], backends: Sequence[Obj]) -> Obj:
    """Gateway API HTTPRoute (``gateway.networking.k8s.io/v1``) attached to Gateway ``(name, namespace)``: one rule
    sending every path whose request carries ``header`` (``(name, exact value)``) to `backends` (backendRefs), with
    no request or backend timeout (generation may stream for minutes; llm-d's guides set the same)."""
    name, value = header
    rule = {"matches": [{"path": {"type": "PathPrefix", "value": "/"},
                         "headers": [{"type": "Exact", "name": name, "value": value}]}],
            "backendRefs": list(backends), "timeouts": {"request": "0s", "backendRequest": "0s"}}
    parent = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway[0], "namespace": gateway[1]}
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": meta,
            "spec": {"parentRefs": [parent], "rules": [rule]}}


def kustomization(resources: Sequence[str]) -> Obj:
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": list(resources)}
