"""Routing by model across the services of a services compile (``compile --services``): ``DIR/k8s/``, beside the
services' own folders.

Before: each service's manifests of one target (`ServiceManifests`: its name, which is also its namespace and the
model name its engines serve, its plan and its objects, already in its namespace). After: ``{file name: object}``
of the top-level folder, and ``kustomization.yaml`` whose resources are every service's folder
(``../<service>/k8s``) and these objects, so ``kubectl apply -k DIR/k8s`` deploys the whole platform. Objects here
name their namespace themselves (the folder spans several).

[Note: routing by model across services]
- ``engines``: one gateway, vllm-router in its inference-gateway mode (``--enable-igw``), the mode ``deploy
  --local`` runs ([Note: one gateway for many services] in `compiler.deploy.services`): a Deployment and a
  ClusterIP Service ``gimletc-gateway`` on port 8000 in the namespace ``gimletc-gateway``, installed from PyPI on
  ``python:3.12-slim`` as the services' routers are. vllm-router 0.1.17 in this mode ignores ``--worker-urls``
  and takes workers through ``POST /workers {"url": ...}``, learning each worker's model from its
  ``/v1/models``; a worker that does not answer yet is still added, as model ``unknown``, and a second POST of
  the same URL updates its model (both measured with 0.1.17). So a second container of the pod, ``register``
  (the same image, the standard library only), checks the gateway's ``GET /workers`` every 10 s and POSTs each
  service's router (``http://gimletc-router.<service>.svc.cluster.local:8000``) until the gateway lists it with
  the service's name; one the gateway learnt another name for is removed again (``DELETE /workers/<url>``) until
  its router answers. Checking for good, not once, re-registers every service after the gateway restarts (it keeps
  its workers in memory). A service with no router (no pool on a public engine) is named in the gateway's note.
  A service of SGLang pools is registered through its sglang-router like any other (measured 2026-12-07:
  sglang-router 0.3.2 in front of a stand-in engine, registered with vllm-router 0.1.17, which learnt the model
  from its ``/v1/models`` and routed requests naming it there). sglang-router has an ``--enable-igw`` mode too, but
  0.3.2 in it panics at start where it cannot download the Harmony vocabulary (no network here), so the gateway
  is vllm-router whatever the services' engines.
- ``llm-d``: per service an HTTPRoute (``gateway.networking.k8s.io/v1``) in the service's namespace, as llm-d's
  multi-model routing guide (llm-d.ai/docs/dev/operations/traffic/multi-model-routing) does: its rule matches
  the header ``X-Gateway-Base-Model-Name: <service>``, which the cluster's Inference Payload Processor (body-based
  router) sets from the request body's ``model``, and sends the request to the service's InferencePool; path
  ``/`` and no timeouts, as llm-d's guides' HTTPRoutes. A service whose pools form several serving groups (one
  InferencePool each, e.g. vLLM pools on two platforms without a KV connector between them) gets one backendRef
  per pool in the one rule, weighted by the requests/s the plan sends into each group (its colocated and prefill
  pools), in thousandths. The parent is the cluster's Gateway, by default ``inference-gateway`` in the namespace
  ``gimletc-gateway`` (`GATEWAY_NAME`, `GATEWAY_NAMESPACE`): the Gateway, its class and the payload processor are
  the cluster's and are not written; its listener must admit routes from the services' namespaces (their
  Namespaces carry ``app.kubernetes.io/part-of: gimletc-services`` for a selector).
- ``dynamo``, ``kserve`` and the reference runtime's targets: each service is already its own front door
  (DynamoGraphDeployment, LLMInferenceService, the runtime's API Service), and these targets have no object that
  routes by model across them; nothing is invented. A ConfigMap ``gimletc-routing`` (namespace
  ``gimletc-gateway``) says so and lists each service's namespace, model name and front objects: routing by
  model across them is the cluster's gateway's job.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from compiler.emit.k8s import objects as k8s
from compiler.emit.k8s.engines import ROUTER_IMAGE
from compiler.emit.k8s.engine_pod import HTTP_PORT
from compiler.emit.k8s.llm_d import GROUP, PORT, ROLE
from compiler.emit.k8s.pool_deployment import NOTE, POOL_LABEL, dns_label, labels, selector
from backends.engines.vllm import VLLM_ROUTER_RELEASE, gateway_argv
from compiler.emit.serving.router import INSTANCE
from compiler.ir.errors import BadInput

if TYPE_CHECKING:
    from compiler.plan.schema import Plan

GATEWAY_NAMESPACE = "gimletc-gateway"
#: The cluster's Gateway that the llm-d target's HTTPRoutes attach to (the Inference Extension's examples name it so).
GATEWAY_NAME = "inference-gateway"
#: The header the Inference Payload Processor sets from the request body's model (llm-d's multi-model guide).
MODEL_HEADER = "X-Gateway-Base-Model-Name"
PART_OF = {"app.kubernetes.io/part-of": "gimletc-services"}
#: Seconds between the registrar's checks of the gateway's workers.
REGISTER_EVERY_S = 10

#: The engines gateway's second container: ``python3 -c REGISTRAR GATEWAY_URL MODEL=URL ...`` (see
#: [Note: routing by model across services]).
REGISTRAR = f"""\
import json, sys, time, urllib.parse, urllib.request
gateway, wanted = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(gateway + path, data=data, method=method,
                                     headers={{"Content-Type": "application/json"}})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"{{}}")
while True:
    try:
        have = {{w["url"]: w.get("model_id") for w in call("GET", "/workers").get("workers", [])}}
        for model, url in wanted.items():
            if have.get(url) == model:
                continue
            learnt = call("POST", "/workers", {{"url": url}}).get("worker", {{}}).get("model_id")
            if learnt == model:
                print(f"registered {{url}}: model {{model}}", flush=True)
            else:
                call("DELETE", "/workers/" + urllib.parse.quote(url, safe=""))
                print(f"{{url}} does not serve {{model}} yet (the gateway learnt {{learnt!r}}); retrying", flush=True)
    except (OSError, ValueError) as e:
        print(f"gateway {{gateway}}: {{e}}; retrying", flush=True)
    time.sleep({REGISTER_EVERY_S})
"""


@dataclass(frozen=True)
class ServiceManifests:
    """One service's manifests as written to ``DIR/<name>/k8s/``."""

    name: str  # the service: its namespace, and the model name its engines serve
    plan: Plan
    objects: Mapping[str, Mapping[str, Any]]  # file name -> object, kustomization.yaml included


def model_routing(target: str, services: Sequence[ServiceManifests]) -> dict[str, dict[str, Any]]:
    """The top-level ``k8s/`` of a services compile (see [Note: routing by model across services])."""
    clash = [s.name for s in services if s.name == GATEWAY_NAMESPACE]
    if clash:
        raise BadInput(f"service {clash[0]!r}: that namespace holds the routing by model of every service; name "
                       "the service otherwise")
    if target == "engines":
        objs = gateway(services)
    elif target == "llm-d":
        objs = [http_route(s) for s in services]
    else:
        objs = note(target, services)
    out = dict(sorted((f"{o['kind'].lower()}-{o['metadata']['name']}.yaml", o) for o in objs))
    out["kustomization.yaml"] = k8s.kustomization([f"../{s.name}/k8s" for s in services] + list(out))
    return out


def _meta(name: str, namespace: str, component: str, note: str | None = None) -> dict[str, Any]:
    meta = k8s.metadata(name, labels(INSTANCE, component), {NOTE: note} if note else None)
    return {"name": meta.pop("name"), "namespace": namespace, **meta}


def _namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY_NAMESPACE, "labels": PART_OF}}


def router_url(service: ServiceManifests) -> str | None:
    """The in-cluster URL of the service's router Service (engines target), None when it has none."""
    for obj in service.objects.values():
        if obj.get("kind") == "Service" and obj["metadata"]["labels"].get("app.kubernetes.io/component") == "router":
            port = obj["spec"]["ports"][0]["port"]
            return f"http://{obj['metadata']['name']}.{service.name}.svc.cluster.local:{port}"
    return None


def gateway(services: Sequence[ServiceManifests]) -> list[dict[str, Any]]:
    """The engines target's gateway: vllm-router --enable-igw and the container that registers every router."""
    urls = {s.name: router_url(s) for s in services}
    routed = {name: url for name, url in urls.items() if url is not None}
    unrouted = sorted(set(urls) - set(routed))
    argv = gateway_argv("vllm-router", "0.0.0.0", HTTP_PORT)
    serve = k8s.container("gateway", ROUTER_IMAGE, ["sh", "-c", f"pip install vllm-router=={VLLM_ROUTER_RELEASE} && "
                                                                f"exec {shlex.join(argv)}"], [], [],
                          ports=[("http", HTTP_PORT)], ready_path="/health")
    register = k8s.container("register", ROUTER_IMAGE, ["python3", "-c", REGISTRAR],
                             [], [], args=[f"http://127.0.0.1:{HTTP_PORT}"] + [f"{n}={u}" for n, u in routed.items()])
    note = (f"vllm-router {VLLM_ROUTER_RELEASE} in inference-gateway mode routes each request by its model to the "
            f"service of that name: {', '.join(routed) or 'none'}; the register container adds each service's "
            "router through POST /workers once both answer, and again after a restart. vllm-router is installed "
            "from PyPI when the pod starts.")
    if unrouted:
        note += f" Not routed (no router: no pool on a public engine): {', '.join(unrouted)}."
    pod = k8s.pod_template(labels(INSTANCE, "gateway"), [serve, register], [])
    return [_namespace(),
            k8s.deployment(_meta(GATEWAY_NAMESPACE, GATEWAY_NAMESPACE, "gateway", note), 1,
                           selector(INSTANCE, "gateway"), pod),
            k8s.service(_meta(GATEWAY_NAMESPACE, GATEWAY_NAMESPACE, "gateway",
                              "the OpenAI-compatible API of every service, routed by the request's model"),
                        [("http", HTTP_PORT)], selector=selector(INSTANCE, "gateway"), headless=False)]


def pool_weights(service: ServiceManifests) -> dict[str, int | None]:
    """InferencePool name -> its backendRef weight, None for a service's only pool: the thousandths of the
    service's requests/s that the plan sends through the pool's serving group, which is what its colocated and
    prefill pools take, or its decode pools where more (a decode pool whose prefill partner this target does not
    run serves whole requests)."""
    pools = sorted(o["metadata"]["name"] for o in service.objects.values() if o.get("kind") == "InferencePool")
    if len(pools) < 2:
        return {p: None for p in pools}
    rate = {dns_label(p.name): p.predicted_requests_per_s for p in service.plan.pools}
    entry, decode = dict.fromkeys(pools, 0.0), dict.fromkeys(pools, 0.0)
    for obj in service.objects.values():
        meta_labels = obj.get("metadata", {}).get("labels", {})
        group = meta_labels.get(GROUP)
        if group in entry and meta_labels.get("app.kubernetes.io/component") == "engine":
            into = decode if meta_labels.get(ROLE) == "decode" else entry
            into[group] += rate.get(meta_labels.get(POOL_LABEL), 0.0)
    through = {p: max(entry[p], decode[p]) for p in pools}
    total = sum(through.values())
    return {p: round(1000 * r / total) if total > 0 else 1 for p, r in through.items()}


def http_route(service: ServiceManifests) -> dict[str, Any]:
    """The llm-d target's route of one model to its service's InferencePool(s)."""
    weights = pool_weights(service)
    if not weights:
        raise BadInput(f"service {service.name!r}: its llm-d manifests have no InferencePool (no vLLM pool to "
                       "serve it); compile it with another --manifests target")
    backends = []
    for pool, weight in weights.items():
        ref = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool, "port": PORT}
        backends.append(ref if weight is None else {**ref, "weight": weight})
    note = (f"requests whose model is {service.name} go to {', '.join(weights)} (weights: the plan's requests/s into "
            f"each); the header {MODEL_HEADER} is set from the request body by the cluster's Inference Payload "
            f"Processor, and the Gateway {GATEWAY_NAMESPACE}/{GATEWAY_NAME} is the cluster's: neither is written "
            "here. Its listener must admit routes from this namespace.")
    return k8s.http_route(_meta(service.name, service.name, "route", note), (GATEWAY_NAME, GATEWAY_NAMESPACE),
                          (MODEL_HEADER, service.name), backends)


def front_objects(service: ServiceManifests) -> list[str]:
    """``Kind/name`` of what a client of the service reaches: its graphs, inference services or API Services."""
    out = []
    for obj in service.objects.values():
        kind = obj.get("kind")
        if kind in ("DynamoGraphDeployment", "LLMInferenceService") or \
                (kind == "Service" and obj["spec"].get("clusterIP") != "None"):
            out.append(f"{kind}/{obj['metadata']['name']}")
    return sorted(out)


def note(target: str, services: Sequence[ServiceManifests]) -> list[dict[str, Any]]:
    """What the targets without a cross-service router write: a ConfigMap saying so, naming each service."""
    lines = [f"{s.name}: namespace {s.name}, model {s.name}, {', '.join(front_objects(s)) or 'no front object'}"
             for s in services]
    text = (f"The {target} target routes within a service only: each service in services.txt is its own front "
            "door, serving the model named after it. Routing requests by their model across the services is the "
            "cluster's gateway's job (for example an HTTPRoute per service matching the header "
            f"{MODEL_HEADER}, set by an Inference Payload Processor, as the llm-d target writes).")
    return [_namespace(),
            k8s.config_map(_meta("gimletc-routing", GATEWAY_NAMESPACE, "routing", text),
                           {"services.txt": "".join(line + "\n" for line in lines)})]
