"""The manifests of a services plan (``compile --services --manifests TARGET``): every object, the services' own
and the routing by model beside them (``DIR/k8s/``), validates strictly for every engine target; llm-d's routes
send each model to its own service's InferencePool; the engines target's registrar, run against a real
vllm-router gateway, makes requests naming each model reach that model's worker, and again after the gateway
restarts."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from compiler.emit.k8s.model_routing import GATEWAY_NAME, GATEWAY_NAMESPACE, MODEL_HEADER, REGISTRAR
from tests.conftest import REPO
from tests.emit.test_orchestrators import CRDS, ENGINE_TARGETS, HERE, K8S_VERSION, read_back
from tests.emit.crd_schema import strict

NVIDIA = str(REPO / "examples" / "clusters" / "nvidia.yaml")
CHAT = str(REPO / "examples" / "workloads" / "chat.yaml")
SERVICES = ("small", "big")
VALIDATED = {**CRDS, "HTTPRoute": "crds/httproute.json"}


@pytest.fixture(scope="module")
def validators():
    import jsonschema

    return {kind: jsonschema.Draft7Validator(strict(json.loads((HERE / path).read_text())["openAPIV3Schema"]))
            for kind, path in VALIDATED.items()}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One two-service placement (Llama-3.2-1B and Llama-3.1-8B on the NVIDIA fleet, no baselines), written once
    per engine target: ``{target: DIR}``."""
    from compiler.services import compile_services, write_services

    tmp = tmp_path_factory.mktemp("services")
    path = tmp / "services.yaml"
    path.write_text(yaml.safe_dump({"name": "platform", "services": [
        {"name": "small", "model": "llama-3.2-1b", "workload": CHAT},
        {"name": "big", "model": "llama-3.1-8b", "workload": CHAT, "weight": 4, "min_rate_per_s": 50}]}))
    result = compile_services(str(path), NVIDIA, baselines=False)
    out = {}
    for target in ENGINE_TARGETS:
        out[target] = tmp / target
        write_services(result, out[target], target, cluster=NVIDIA)
    return out


def folder(path: Path) -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(path.glob("*.yaml"))}


@pytest.mark.parametrize("target", ENGINE_TARGETS)
def test_every_object_of_a_services_plan_validates_strictly(written, target, validators):
    import kubernetes_validate

    root = written[target]
    top = folder(root / "k8s")
    kustomization = top.pop("kustomization.yaml")
    # kubectl apply -k DIR/k8s: every service's folder, then the routing objects
    assert kustomization["resources"] == [f"../{s}/k8s" for s in SERVICES] + sorted(top)
    checked = 0
    for where in ["k8s"] + [f"{s}/k8s" for s in SERVICES]:
        files = folder(root / where)
        files.pop("kustomization.yaml")
        for name, obj in files.items():
            if obj["kind"] in validators:
                errors = sorted(validators[obj["kind"]].iter_errors(obj), key=str)
                assert not errors, f"{where}/{name}: {errors[0].message} at {list(errors[0].absolute_path)}"
            else:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            checked += 1
    assert checked > len(top)
    if target == "engines":
        assert {o["kind"] for o in top.values()} == {"Namespace", "Deployment", "Service"}
    elif target == "llm-d":
        assert {o["kind"] for o in top.values()} == {"HTTPRoute"}
    else:  # nothing of theirs routes across services: a note says whose job it is
        note = top["configmap-gimletc-routing.yaml"]
        assert "cluster's gateway's job" in note["metadata"]["annotations"]["gimletc/note"]
        assert [line.split(":")[0] for line in note["data"]["services.txt"].splitlines()] == list(SERVICES)


def test_strict_validation_catches_a_misspelt_route(written, validators):
    route = folder(written["llm-d"] / "k8s")["httproute-big.yaml"]
    assert validators["HTTPRoute"].is_valid(route)
    route["spec"]["rules"][0]["backendRef"] = route["spec"]["rules"][0].pop("backendRefs")
    assert not validators["HTTPRoute"].is_valid(route)


def test_each_llm_d_route_sends_its_model_to_its_own_services_pool(written):
    """The header value is a service's name, which its engines serve (``--served-model-name``); the backendRef
    names an InferencePool of that service's folder, in the route's namespace; the parent is the documented
    Gateway."""
    root = written["llm-d"]
    routes = [o for o in folder(root / "k8s").values() if o["kind"] == "HTTPRoute"]
    assert sorted(r["metadata"]["namespace"] for r in routes) == sorted(SERVICES)
    for route in routes:
        namespace = route["metadata"]["namespace"]
        (rule,) = route["spec"]["rules"]
        (match,) = rule["matches"]
        assert match["headers"] == [{"type": "Exact", "name": MODEL_HEADER, "value": namespace}]
        assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                                "name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE}]
        objects = folder(root / namespace / "k8s")
        assert yaml.safe_load((root / namespace / "k8s" / "kustomization.yaml").read_text())["namespace"] == namespace
        pools = {o["metadata"]["name"] for o in objects.values() if o["kind"] == "InferencePool"}
        refs = rule["backendRefs"]
        assert refs and all(r["kind"] == "InferencePool" and r["group"] == "inference.networking.k8s.io"
                            and "namespace" not in r and r["name"] in pools for r in refs)
        served = set()
        for obj in objects.values():
            if obj["kind"] == "Deployment" and obj["metadata"]["labels"]["app.kubernetes.io/component"] == "engine":
                command = obj["spec"]["template"]["spec"]["containers"][0]["command"]
                served.add(command[command.index("--served-model-name") + 1])
        assert served == {namespace}


def test_a_model_split_over_serving_groups_is_weighted_by_the_plans_rates():
    """The mixed golden plan has a CUDA and a ROCm InferencePool: weights are thousandths of the requests/s
    through each group; the CUDA group's decode pools take more than its prefill pools (part of their prefill
    runs on Cerebras, which llm-d does not run), so they count."""
    from compiler.emit.k8s import manifests
    from compiler.emit.k8s.model_routing import ServiceManifests, http_route
    from compiler.plan.checks import load_plan
    from compiler.inputs import load_cluster

    golden = HERE / "orchestrator_golden"
    plan, cluster = load_plan(golden / "plan-mixed.json"), load_cluster(golden / "cluster-mixed.yaml")
    refs = http_route(ServiceManifests("mixed", plan, manifests(plan, cluster, target="llm-d")))["spec"]["rules"][0][
        "backendRefs"]
    rate = {p.name: p.predicted_requests_per_s for p in plan.pools}
    cuda = rate["pool1"] + rate["pool2"] + rate["pool3"]  # decode pools on B200, H100, H200
    rocm = rate["pool0"]  # decode on MI355X, its prefill on Cerebras
    assert cuda > rate["pool5"] + rate["pool6"] + rate["pool7"]
    assert {r["name"]: r["weight"] for r in refs} == {"gimletc-cuda": round(1000 * cuda / (cuda + rocm)),
                                                       "gimletc-rocm": round(1000 * rocm / (cuda + rocm))}


def test_engines_gateway_registers_each_services_router(written):
    top = folder(written["engines"] / "k8s")
    pod = top["deployment-gimletc-gateway.yaml"]["spec"]["template"]["spec"]
    gateway, register = pod["containers"]
    assert "--enable-igw" in gateway["command"][-1]
    routers = {}
    for service in SERVICES:
        (svc,) = [o for o in folder(written["engines"] / service / "k8s").values()
                  if o["kind"] == "Service" and o["metadata"]["labels"]["app.kubernetes.io/component"] == "router"]
        port = svc["spec"]["ports"][0]["port"]
        routers[service] = f"http://{svc['metadata']['name']}.{service}.svc.cluster.local:{port}"
    assert register["args"] == ["http://127.0.0.1:8000"] + [f"{s}={u}" for s, u in routers.items()]
    assert top["service-gimletc-gateway.yaml"]["metadata"]["namespace"] == GATEWAY_NAMESPACE


# ------------------------------------------------------------------ the registrar against a real vllm-router


class _Worker(BaseHTTPRequestHandler):
    """A service's router as the gateway sees it: ``/v1/models`` names its model once ``up``; a completion answers
    which model served it."""

    model = ""
    up = True

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if not self.up:
            return self._answer(503, {"error": "starting"})
        if self.path.startswith("/v1/models"):
            return self._answer(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        return self._answer(200, {})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        return self._answer(200, {"served_by": self.model})

    def log_message(self, *_args):
        pass


def _worker(model: str, up: bool) -> tuple[ThreadingHTTPServer, type]:
    handler = type(f"Worker_{model}", (_Worker,), {"model": model, "up": up})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


def _served_by(gateway: str, model: str) -> str | None:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(f"{gateway}/v1/chat/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.loads(answer.read()).get("served_by")
    except (OSError, ValueError):
        return None


def _until(check, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.engine
def test_registrar_routes_each_model_to_its_router_through_a_real_gateway(tmp_path):
    """vllm-router --enable-igw with the registrar as the engines target writes it (checking every 0.2 s instead
    of 10): one router answers at once, the other only later (the gateway first learns it as model ``unknown``);
    both models end up routed to their own router, and again after the gateway restarts."""
    from compiler.deploy.engine_env import env_dir
    from compiler.deploy.launch import free_port
    from backends.engines.vllm import gateway_argv

    binary = env_dir() / "bin" / "vllm-router"
    if not binary.exists():
        pytest.skip(f"no vllm-router in the engine environment ({binary}); `gimletc deploy --local` creates it")
    small, _ = _worker("small", up=True)
    big, big_handler = _worker("big", up=False)
    port = free_port()
    gateway_url = f"http://127.0.0.1:{port}"
    script = REGISTRAR.replace("time.sleep(10)", "time.sleep(0.2)")
    assert script != REGISTRAR

    def start_gateway() -> subprocess.Popen:
        argv = gateway_argv(str(binary), "127.0.0.1", port) + ["--prometheus-host", "127.0.0.1",
                                                               "--prometheus-port", str(free_port())]
        return subprocess.Popen(argv, stdout=(tmp_path / "gateway.log").open("a"), stderr=subprocess.STDOUT)

    procs = [start_gateway()]
    register = subprocess.Popen([sys.executable, "-c", script, gateway_url,
                                 f"small=http://127.0.0.1:{small.server_port}",
                                 f"big=http://127.0.0.1:{big.server_port}"],
                                stdout=(tmp_path / "register.log").open("w"), stderr=subprocess.STDOUT)
    try:
        assert _until(lambda: _served_by(gateway_url, "small") == "small"), (tmp_path / "gateway.log").read_text()
        time.sleep(1.0)  # several rounds while big does not answer: it must not be taken as serving big
        big_handler.up = True
        assert _until(lambda: _served_by(gateway_url, "big") == "big"), (tmp_path / "register.log").read_text()
        assert [_served_by(gateway_url, m) for m in ("small", "big", "small", "big")] == ["small", "big"] * 2
        procs[0].terminate()
        procs[0].wait(timeout=10)
        procs.append(start_gateway())  # a restarted gateway knows no worker until the registrar adds them again
        assert _until(lambda: _served_by(gateway_url, "big") == "big" and _served_by(gateway_url, "small") == "small")
    finally:
        for proc in [register, *procs]:
            proc.terminate()
            proc.wait(timeout=10)
        small.shutdown()
        big.shutdown()
