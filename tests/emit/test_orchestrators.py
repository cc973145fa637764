"""Engine targets (engines, dynamo, llm-d, kserve): every object validates strictly (core objects against the
Kubernetes schemas, custom resources against their vendored CRDs), the output matches the golden files, and
every engine container runs the engine's own command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from compiler.emit.k8s import manifests, write_manifests
from compiler.emit.k8s.llm_d import prefill_threshold
from compiler.emit.k8s.yaml_text import render
from compiler.plan.schema import ClassRoute
from compiler.plan.checks import load_plan
from compiler.inputs import load_cluster
from compiler.inputs.workload import Workload
from tests.emit.crd_schema import strict

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "orchestrator_golden"
K8S_VERSION = "1.34"
ENGINE_TARGETS = ("engines", "dynamo", "llm-d", "kserve")
CRDS = {"DynamoGraphDeployment": "crds/dynamographdeployment.json", "InferencePool": "crds/inferencepool.json",
        "LLMInferenceService": "crds/llminferenceservice.json", "LeaderWorkerSet": "lws_crd_v0.10.0.json"}
ENGINE_CLIS = {"vllm", "python3", "trtllm-serve", "sh"}


@pytest.fixture(scope="module")
def validators():
    import jsonschema

    return {kind: jsonschema.Draft7Validator(strict(json.loads((HERE / path).read_text())["openAPIV3Schema"]))
            for kind, path in CRDS.items()}


@pytest.fixture(scope="module")
def nvidia():
    return load_plan(GOLDEN / "plan-nvidia.json"), load_cluster(GOLDEN / "cluster-nvidia.yaml")


@pytest.fixture(scope="module")
def mixed():
    return load_plan(GOLDEN / "plan-mixed.json"), load_cluster(GOLDEN / "cluster-mixed.yaml")


@pytest.fixture(scope="module")
def multinode(nvidia, tmp_path_factory):
    """The NVIDIA plan on one-GPU H200 nodes: its H200 pools' replicas (2 GPUs) span nodes."""
    text = (GOLDEN / "cluster-nvidia.yaml").read_text()
    path = tmp_path_factory.mktemp("multinode") / "cluster.yaml"
    path.write_text(text.replace("{device: nvidia-h200-sxm, count: 32}", "{device: nvidia-h200-sxm, count: 32, "
                                                                          "node_size: 1}"))
    return nvidia[0], load_cluster(path)


def read_back(objects, folder) -> dict[str, dict]:
    write_manifests(objects, folder)
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(folder.iterdir())}


def pod_specs(obj) -> list[dict]:
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind in ("StatefulSet", "Deployment"):
        return [spec["template"]["spec"]]
    if kind == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        return [lwt["workerTemplate"]["spec"]] + ([lwt["leaderTemplate"]["spec"]] if "leaderTemplate" in lwt else [])
    if kind == "DynamoGraphDeployment":
        return [c["podTemplate"]["spec"] for c in spec["components"]]
    if kind == "LLMInferenceService":
        groups = [spec, spec.get("prefill", {})]
        return [g[k] for g in groups for k in ("template", "worker") if k in g]
    return []


# ------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize("case", ["nvidia", "mixed", "multinode"])
@pytest.mark.parametrize("target", ENGINE_TARGETS)
def test_every_object_validates_strictly(case, target, validators, request, tmp_path):
    import kubernetes_validate

    plan, cluster = request.getfixturevalue(case)
    files = read_back(manifests(plan, cluster, target=target), tmp_path / "k8s")
    kustomization = files.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(files)
    for name, obj in files.items():
        if obj["kind"] in validators:
            errors = sorted(validators[obj["kind"]].iter_errors(obj), key=str)
            assert not errors, f"{name}: {errors[0].message} at {list(errors[0].absolute_path)}"
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    if case == "multinode" and target in ("engines", "llm-d"):
        assert any(o["kind"] == "LeaderWorkerSet" for o in files.values())


def test_strict_validation_catches_a_misspelt_field(nvidia, validators):
    objects = manifests(*nvidia, target="dynamo")
    dgd = json.loads(json.dumps(objects["dynamographdeployment-gimletc-vllm.yaml"]))
    assert validators["DynamoGraphDeployment"].is_valid(dgd)
    worker = dgd["spec"]["components"][1]
    worker["replica"] = worker.pop("replicas")
    assert not validators["DynamoGraphDeployment"].is_valid(dgd)
    pool = json.loads(json.dumps(manifests(*nvidia, target="llm-d")["inferencepool-gimletc-cuda.yaml"]))
    pool["spec"]["targetPort"] = pool["spec"].pop("targetPorts")
    assert not validators["InferencePool"].is_valid(pool)
    isvc = json.loads(json.dumps(next(o for name, o in sorted(manifests(*nvidia, target="kserve").items())
                                      if name.startswith("llminferenceservice-"))))
    isvc["spec"]["parallelism"]["tensorParallel"] = 2
    assert not validators["LLMInferenceService"].is_valid(isvc)


# ----------------------------------------------------------------------------------------- golden files


@pytest.mark.parametrize("target", ENGINE_TARGETS)
def test_golden_files(nvidia, target):
    """`python tools/regen_k8s_golden.py` rewrites tests/emit/orchestrator_golden/expected/ after a reviewed change."""
    objects = manifests(*nvidia, target=target)
    expected = GOLDEN / "expected" / target
    assert sorted(p.name for p in expected.iterdir()) == sorted(objects)
    for name, obj in objects.items():
        assert render(obj) == (expected / name).read_text(), f"{target}/{name} differs; run tools/regen_k8s_golden.py"


@pytest.mark.parametrize("target", ENGINE_TARGETS)
def test_same_plan_gives_byte_identical_files(mixed, target, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_manifests(manifests(*mixed, target=target), a)
    write_manifests(manifests(*mixed, target=target), b)
    assert {p.name: p.read_bytes() for p in a.iterdir()} == {p.name: p.read_bytes() for p in b.iterdir()}


# ---------------------------------------------------------------------------------------- what runs


def _engine_containers(obj):
    for pod in pod_specs(obj):
        for c in pod["containers"]:
            if obj.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component") in ("router", "epp"):
                continue
            if obj["kind"] == "DynamoGraphDeployment" and "dynamo.frontend" in c.get("command", []):
                continue
            yield c


@pytest.mark.parametrize("case", ["nvidia", "mixed", "multinode"])
@pytest.mark.parametrize("target", ENGINE_TARGETS)
def test_engine_containers_run_the_engine_not_the_reference_runtime(case, target, request):
    plan, cluster = request.getfixturevalue(case)
    commands = [c.get("command", []) for obj in manifests(plan, cluster, target=target).values()
                for c in _engine_containers(obj)]
    commands = [c for c in commands if c]  # KServe's multi-node worker: the preset's command
    assert commands
    for command in commands:
        assert command[0] in ENGINE_CLIS and "compiler.runtime.worker" not in " ".join(command), command
    launches = {tuple(p.launch.command) for p in plan.pools if p.launch is not None}
    if target in ("engines", "kserve") and case != "multinode":
        assert {tuple(c) for c in commands} <= launches


def test_gimletc_target_is_the_reference_runtime_as_before(nvidia):
    plan, cluster = nvidia
    assert manifests(plan, cluster, target="gimletc") == manifests(plan, cluster, mode="device-plugin") \
        == manifests(plan, cluster)
    assert manifests(plan, cluster, target="dra") == manifests(plan, cluster, mode="dra")


def test_router_urls_name_engine_replicas(mixed):
    plan, cluster = mixed
    objects = manifests(plan, cluster, target="engines")
    replicas = {}
    for obj in objects.values():
        if obj["kind"] == "StatefulSet":
            replicas[obj["spec"]["serviceName"]] = obj["spec"]["replicas"]
        elif obj["kind"] == "EndpointSlice":
            svc = obj["metadata"]["labels"]["kubernetes.io/service-name"]
            replicas[svc] = len([e for e in obj["endpoints"] if "hostname" in e])
    headless = {o["metadata"]["name"] for o in objects.values()
                if o["kind"] == "Service" and o["spec"].get("clusterIP") == "None"}
    script = objects["deployment-gimletc-router.yaml"]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    urls = [w for w in script.split() if w.startswith("http://")]
    assert urls
    for url in urls:
        host = url.removeprefix("http://").split(":")[0]
        pod, svc = host.split(".")
        assert svc in headless and pod.removeprefix(svc + "-").isdigit()
        assert int(pod.removeprefix(svc + "-")) < replicas[svc], url


def test_pools_no_engine_runs_are_listed_for_the_reference_runtime(mixed):
    plan, cluster = mixed
    for target in ENGINE_TARGETS:
        needs = manifests(plan, cluster, target=target)["configmap-gimletc-needs-runtime.yaml"]
        assert needs["metadata"]["annotations"]["gimletc/needs"] == "gimletc-runtime"
        text = needs["data"]["needs.txt"]
        assert all(n.why in text for n in plan.needs_runtime)
    dynamo_needs = manifests(plan, cluster, target="dynamo")["configmap-gimletc-needs-runtime.yaml"]["data"]
    assert "pool0 not deployed by the dynamo target" in dynamo_needs["needs.txt"]  # ROCm: not a Dynamo platform


def test_llm_d_threshold_sits_between_colocated_and_disaggregated_prompts(nvidia):
    plan, _ = nvidia
    routes = [ClassRoute(name="short", prefill={"pool0": 1.0}),
              ClassRoute(name="long", prefill={"pool2": 1.0}, decode={"pool1": 1.0})]
    plan = plan.model_copy(update={"router": plan.router.model_copy(update={"routes": routes})})
    workload = Workload(name="two", classes=[
        {"name": "short", "share": 0.5, "input_len": {"mean": 128, "max": 256}, "output_len": 64},
        {"name": "long", "share": 0.5, "input_len": {"mean": 4096, "max": 8192}, "output_len": 64}])
    assert prefill_threshold(plan, workload) == 256
    assert prefill_threshold(plan, None) == 0
    config = yaml.safe_load(manifests(plan, None, target="llm-d", workload=workload)[
        "configmap-gimletc-cuda-epp.yaml"]["data"]["epp-config.yaml"])
    handler = next(p for p in config["plugins"] if p["type"] == "pd-profile-handler")
    assert handler["parameters"]["threshold"] == 256
