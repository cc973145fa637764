"""Kubernetes manifests: they validate offline, match the golden files, request each backend's resource,
and give every worker what it needs to find the others."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from backends.registry import device
from compiler.emit.k8s import manifests, write_manifests
from compiler.emit.k8s.manifests import MASTER_PORT, pool_deployments
from compiler.emit.k8s.yaml_text import dump, render
from compiler.plan.checks import load_plan
from compiler.plan.topology import rank_of, world_size
from compiler.inputs import load_cluster
from compiler.ir.errors import BadInput
from tests.conftest import pod_processes
from tests.emit.crd_schema import strict

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "k8s_golden"
K8S_VERSION = "1.34"  # DRA (resource.k8s.io/v1) is stable from 1.34


@pytest.fixture(scope="module")
def golden():
    return load_plan(GOLDEN / "plan.json"), load_cluster(GOLDEN / "cluster.yaml")


def single_vendor(plan):
    """The golden plan cut down to its NVIDIA pool: a single-vendor deployment."""
    pools = [p for p in plan.pools if p.device.startswith("nvidia")]
    return plan.model_copy(update={"pools": pools, "transfers": [], "inventory": {"nvidia-h100-sxm": 32}})


def cases(golden):
    plan, cluster = golden
    return {"mixed": manifests(plan, cluster), "mixed-dra": manifests(plan, cluster, mode="dra"),
            "mixed-no-cluster": manifests(plan), "nvidia": manifests(single_vendor(plan), cluster),
            "nvidia-dra": manifests(single_vendor(plan), cluster, mode="dra")}


def read_back(objects, tmp_path) -> dict[str, dict]:
    """Write the manifests and parse the files again, as kubectl would."""
    write_manifests(objects, tmp_path / "k8s")
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted((tmp_path / "k8s").iterdir())}


# ------------------------------------------------------------------------------------------ validation


def test_every_object_validates_with_kubernetes_validate_in_strict_mode(golden, tmp_path):
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError

    seen_kinds = set()
    for case, objects in cases(golden).items():
        for name, obj in read_back(objects, tmp_path / case).items():
            if obj["kind"] in ("LeaderWorkerSet", "Kustomization"):
                continue  # no built-in schema: the CRD test and the kustomization test below cover them
            try:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            except SchemaNotFoundError:
                pytest.fail(f"{case}/{name}: kubernetes-validate has no schema for {obj['apiVersion']} {obj['kind']}")
            seen_kinds.add(obj["kind"])
    assert seen_kinds == {"ConfigMap", "Deployment", "Service", "StatefulSet", "EndpointSlice", "ResourceClaimTemplate"}


def test_leader_worker_sets_validate_against_the_published_crd(golden, tmp_path):
    import jsonschema

    vendored = json.loads((HERE / "lws_crd_v0.10.0.json").read_text())
    validator = jsonschema.Draft7Validator(strict(vendored["openAPIV3Schema"]))
    count = 0
    for case, objects in cases(golden).items():
        for name, obj in read_back(objects, tmp_path / case).items():
            if obj["kind"] == "LeaderWorkerSet":
                errors = sorted(validator.iter_errors(obj), key=str)
                assert not errors, f"{case}/{name}: {errors[0].message} at {list(errors[0].absolute_path)}"
                count += 1
    assert count >= 4  # H100 and Trainium2 pools, device-plugin and DRA modes
    bad = read_back(manifests(*golden), tmp_path / "bad")["leaderworkerset-gimletc-pool0.yaml"]
    bad["spec"]["leaderWorkerTemplate"]["sise"] = 16  # a typo the strict schema must catch
    assert not validator.is_valid(bad)


def test_kustomization_lists_every_other_file_once(golden, tmp_path):
    files = read_back(manifests(*golden), tmp_path)
    kustomization = files.pop("kustomization.yaml")
    assert kustomization["kind"] == "Kustomization" and sorted(kustomization["resources"]) == sorted(files)


# ----------------------------------------------------------------------------------------- golden files


PLAN_TEXT = "(plan.json: the plan beside this folder, as Plan.dumps() writes it under the current schema)\n"


def golden_view(objects):
    """The manifests with the plan ConfigMap's text replaced by a marker, so a change to the plan schema does
    not touch the golden files (the ConfigMap's content is checked against ``plan.dumps()`` below)."""
    out = dict(objects)
    for name, obj in objects.items():
        if obj["kind"] == "ConfigMap" and "plan.json" in obj.get("data", {}):
            out[name] = {**obj, "data": {**obj["data"], "plan.json": PLAN_TEXT}}
    return out


def test_golden_files(golden):
    """`python tools/regen_k8s_golden.py` rewrites tests/emit/k8s_golden/expected/ after a reviewed change."""
    objects = golden_view(manifests(*golden))
    expected = GOLDEN / "expected"
    assert sorted(p.name for p in expected.iterdir()) == sorted(objects)
    for name, obj in objects.items():
        assert render(obj) == (expected / name).read_text(), f"{name} differs; run tools/regen_k8s_golden.py"


def test_same_plan_gives_byte_identical_files(golden, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_manifests(manifests(*golden), a)
    write_manifests(manifests(*golden), b)
    assert {p.name: p.read_bytes() for p in a.iterdir()} == {p.name: p.read_bytes() for p in b.iterdir()}


# ----------------------------------------------------------------------------------------- resources


def _pod_specs(obj):
    if obj["kind"] in ("StatefulSet", "Deployment"):
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "LeaderWorkerSet":
        return [obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]]
    return []


def test_each_pool_requests_its_backends_resource_and_product(golden, tmp_path):
    plan, cluster = golden
    files = read_back(manifests(plan, cluster), tmp_path)
    by_pool = {}
    for obj in files.values():
        pool = obj.get("metadata", {}).get("labels", {}).get("gimletc/pool")
        if pool and _pod_specs(obj):
            by_pool[pool] = obj
    for d in pool_deployments(plan, cluster):
        spec = device(d.pool.device)
        if spec.k8s_resource is None:
            assert d.key not in by_pool, f"{d.pool.name}: {spec.id} has no device plugin, so no pods"
            continue
        pod = _pod_specs(by_pool[d.key])[0]
        requested = sum(c["resources"]["limits"][spec.k8s_resource] for c in pod["containers"])
        pods_per_replica = d.workers_per_replica // len(pod["containers"])
        assert requested * pods_per_replica == d.pool.devices_per_replica, d.pool.name
        expected_selector = cluster.entry(spec.id).node_selector or dict(spec.k8s_node_labels)
        assert pod["nodeSelector"] == expected_selector
    assert by_pool["pool0"]["kind"] == by_pool["pool3"]["kind"] == "LeaderWorkerSet"  # 16 > 8, 32 > 16
    assert by_pool["pool1"]["kind"] == by_pool["pool4"]["kind"] == "StatefulSet"
    assert _pod_specs(by_pool["pool0"])[0]["tolerations"] == [
        {"operator": "Exists", "key": "nvidia.com/gpu", "effect": "NoSchedule"}]


def test_dra_mode_claims_devices_instead_of_limits(golden, tmp_path):
    files = read_back(manifests(*golden, mode="dra"), tmp_path)
    templates = {o["metadata"]["name"]: o for o in files.values() if o["kind"] == "ResourceClaimTemplate"}
    assert set(templates) == {"gimletc-pool0-devices", "gimletc-pool1-devices", "gimletc-pool3-devices",
                              "gimletc-pool4-devices"}
    requests = templates["gimletc-pool1-devices"]["spec"]["spec"]["devices"]["requests"]
    assert [(r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in requests] == [("gpu.amd.com", 1)] * 4
    pod = files["statefulset-gimletc-pool1.yaml"]["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "devices", "resourceClaimTemplateName": "gimletc-pool1-devices"}]
    assert [c["resources"] for c in pod["containers"]] == [
        {"claims": [{"name": "devices", "request": f"worker{i}"}]} for i in range(4)]


def test_devices_without_a_plugin_are_external_endpoints(golden, tmp_path):
    files = read_back(manifests(*golden), tmp_path)
    cs3 = files["endpointslice-gimletc-pool2a-ipv4.yaml"]
    assert cs3["metadata"]["labels"]["kubernetes.io/service-name"] == "gimletc-pool2a"
    assert [e["addresses"] for e in cs3["endpoints"]] == [["10.20.0.7"]]
    assert "selector" not in files["service-gimletc-pool2a.yaml"]["spec"]
    placeholder = files["endpointslice-gimletc-pool2f-ipv4.yaml"]["endpoints"][0]["addresses"][0]
    assert ipaddress.ip_address(placeholder) in ipaddress.ip_network("192.0.2.0/24")  # documentation range
    assert "placeholder" in files["service-gimletc-pool2f.yaml"]["metadata"]["annotations"]["gimletc/note"]


def test_a_resource_name_from_the_cluster_file_gives_cerebras_real_pods(golden, tmp_path):
    plan, _ = golden
    path = tmp_path / "cluster.yaml"
    path.write_text((GOLDEN / "cluster.yaml").read_text().replace(
        "endpoints: [10.20.0.7]", "k8s_resource: example.com/wse"))
    files = read_back(manifests(plan, load_cluster(path)), tmp_path)
    pod = files["statefulset-gimletc-pool2a.yaml"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"example.com/wse": 1}


# -------------------------------------------------------------------------------------------- rendezvous


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
def test_rendezvous_environment_lets_every_worker_find_the_others(golden, tmp_path, mode):
    plan, cluster = golden
    files = read_back(manifests(plan, cluster, mode=mode), tmp_path)
    procs = list(pod_processes(files))
    drivers = [env for env, cmd in procs if cmd[:2] == ["gimletc", "serve"]]
    workers = [env for env, cmd in procs if "compiler.runtime.worker" in cmd]
    assert len(drivers) == 1 and len(workers) + 1 == len(procs)
    # WORLD_SIZE is the plan's process count everywhere, and every worker is a distinct (pool, replica, index).
    assert {env["WORLD_SIZE"] for env, _ in procs} == {str(world_size(plan))}
    keys = [(env["GIMLETC_POOL"], int(env["GIMLETC_REPLICA"]), int(env["GIMLETC_WORKER_INDEX"])) for env in workers]
    assert len(set(keys)) == len(keys) == world_size(plan) - 1
    assert sorted(rank_of(plan, *k) for k in keys) == list(range(1, world_size(plan)))
    # MASTER_ADDR/PORT name the driver's headless Service, which selects the driver pod on that port.
    addr = {(env["MASTER_ADDR"], env["MASTER_PORT"]) for env, _ in procs}
    assert addr == {("gimletc-driver", str(MASTER_PORT))}
    svc = files["service-gimletc-driver.yaml"]
    driver = files["deployment-gimletc-driver.yaml"]["spec"]["template"]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"].items() <= driver["metadata"]["labels"].items()
    assert [p["port"] for p in svc["spec"]["ports"]] == [MASTER_PORT]
    assert MASTER_PORT in [p["containerPort"] for p in driver["spec"]["containers"][0]["ports"]]


def test_every_pod_mounts_the_plan_from_the_config_map(golden, tmp_path):
    plan, cluster = golden
    files = read_back(manifests(plan, cluster), tmp_path)
    assert files["configmap-gimletc-plan.yaml"]["data"]["plan.json"] == plan.dumps()
    for obj in files.values():
        for pod in _pod_specs(obj):
            assert {"name": "plan", "configMap": {"name": "gimletc-plan"}} in pod["volumes"]
            for c in pod["containers"]:
                assert {"name": "plan", "mountPath": "/plan/plan.json", "readOnly": True,
                        "subPath": "plan.json"} in c["volumeMounts"]


# ------------------------------------------------------------------------------------------------ YAML


@pytest.mark.parametrize("text", ["on", "Off", "yes", "N", "y", "true", "null", "~", "", "8", "0755", "1e3", "0x1F",
                                  "1:20", ".inf", "-1", "+5"])
def test_strings_yaml_could_misread_are_quoted(text):
    line = dump({"k": text}).strip()
    assert line == f'k: "{text}"' and yaml.safe_load(line) == {"k": text}


def test_node_label_value_on_stays_a_string(golden, tmp_path):
    text = (GOLDEN / "expected" / "statefulset-gimletc-pool4.yaml").read_text()
    assert 'example.com/fast-fabric: "on"' in text


def test_bad_mode_and_name_are_bad_input(golden):
    with pytest.raises(BadInput, match="--manifests"):
        manifests(*golden, mode="helm")
    with pytest.raises(BadInput, match="manifest name"):
        manifests(*golden, name="Not_A_DNS_Label")


def test_a_plan_too_big_for_a_config_map_comes_from_the_volume_alone(golden, tmp_path, monkeypatch):
    import importlib

    module = importlib.import_module("compiler.emit.k8s.manifests")

    monkeypatch.setattr(module, "CONFIG_MAP_LIMIT_BYTES", 1000)
    files = read_back(manifests(*golden), tmp_path)
    assert "configmap-gimletc-plan.yaml" not in files
    for obj in files.values():
        for pod in _pod_specs(obj):
            assert [v["name"] for v in pod["volumes"]] == ["plan-dir"]


# ------------------------------------------------------------------------------------------------ image


REPO = HERE.parent.parent
ORCHESTRATORS = HERE / "orchestrator_golden"


def recipe():
    """The Dockerfile as dockerfile-parse reads it: (base image, labels, RUN lines, COPY sources)."""
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(path=str(REPO / "Dockerfile"))
    runs = [i["value"] for i in parser.structure if i["instruction"] == "RUN"]
    copies = [i["value"].split()[0] for i in parser.structure if i["instruction"] == "COPY"]
    return parser.baseimage, parser.labels, runs, copies


def test_the_dockerfile_installs_gimletc_with_the_constraints_pins():
    import tomllib

    from packaging.specifiers import SpecifierSet

    base, labels_, runs, copies = recipe()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    # The base is an official Python image whose Python satisfies requires-python (so `python` is on PATH).
    name, tag = base.split(":")
    assert name == "python" and tag.split("-")[0] in SpecifierSet(project["project"]["requires-python"])
    assert labels_["org.opencontainers.image.version"] == project["project"]["version"]
    # torch at the constraints pin, then the package itself with the same constraints.
    pinned = (REPO / "requirements" / "constraints.txt").read_text()
    assert "torch==" in pinned
    assert any("-c requirements/constraints.txt torch" in r and "whl/cpu" in r for r in runs)
    assert any("-c requirements/constraints.txt ." in r for r in runs)
    # Everything the wheel is built from is copied in, and .dockerignore lets it through.
    packages = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in packages} <= set(copies)
    assert {"pyproject.toml", "requirements/constraints.txt"} <= set(copies)
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    for needed in ("pyproject.toml", "README.md", "requirements/constraints.txt", *(p.rstrip("*") + "/"
                                                                                  for p in packages)):
        assert f"!{needed}" in ignored, needed


def _containers(obj):
    for pod in _pod_specs(obj):
        yield from pod["containers"]


def test_every_reference_runtime_container_runs_a_command_the_image_holds(golden):
    """Each container's command is the package's console script or a module the Dockerfile copies in, and its image
    is the recipe's tag, or the image the cluster file names for that pool."""
    import tomllib

    _, labels_, _, copies = recipe()
    image = f"{labels_['org.opencontainers.image.title']}:{labels_['org.opencontainers.image.version']}"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    scripts = project["project"]["scripts"]
    plan, cluster = golden
    overrides = {d.key: d.image for d in pool_deployments(plan, cluster) if cluster.entry(d.pool.device).image}
    assert overrides == {"pool4": "registry.example.com/gimletc-gaudi:0.1.0"}  # the cluster file's Gaudi image
    seen = set()
    for case, objects in cases(golden).items():
        for obj in objects.values():
            for c in _containers(obj):
                pool = obj["metadata"]["labels"].get("gimletc/pool")
                expected = overrides.get(pool, image) if case != "mixed-no-cluster" else image
                assert c["image"] == expected, (case, obj["metadata"]["name"], c["image"])
                command = c["command"]
                if command[0] in scripts:
                    module = scripts[command[0]].split(":")[0]
                else:
                    assert command[:2] == ["python", "-m"], command
                    module = command[2]
                path = module.replace(".", "/")
                assert module.split(".")[0] in copies and ((REPO / f"{path}.py").is_file()
                                                           or (REPO / path / "__main__.py").is_file()), module
                seen.add(module)
    assert seen == {"compiler.cli.main", "compiler.runtime.worker"}


def test_accelerator_pools_say_their_workers_compute_on_the_cpu(golden, tmp_path):
    """No reference worker sits on an accelerator node's CPU unannounced: the annotation follows what the runtime
    itself reports for the device (`compiler.runtime.report.execution_of`)."""
    from compiler.runtime.report import execution_of

    plan, cluster = golden
    annotated = {}
    for obj in read_back(manifests(plan, cluster), tmp_path).values():
        meta = obj.get("metadata", {})
        if "gimletc/execution" in meta.get("annotations", {}):
            annotated[meta["annotations"]["gimletc/device"]] = meta["annotations"]["gimletc/execution"]
    assert set(annotated) == {p.device for p in plan.pools}
    for dev, text in annotated.items():
        assert text.startswith("emulated" if execution_of(dev) == "emulated" else "native"), (dev, text)


def test_engine_targets_run_the_engines_published_images(golden):
    """The engine targets never run the gimletc image or the reference worker: each engine container runs the
    image its backend's catalog publishes for that engine and platform."""
    from backends.registry import backend_of
    from compiler.emit.k8s.pool_deployment import RUNTIME_IMAGE
    from tests.emit.test_orchestrators import pod_specs as _orchestrator_pod_specs

    plan, cluster = load_plan(ORCHESTRATORS / "plan-mixed.json"), load_cluster(ORCHESTRATORS / "cluster-mixed.yaml")
    published = {}
    for p in plan.pools:
        if p.launch is not None and p.launch.engine != "external":
            platforms = backend_of(device(p.device)).engines
            published[p.name] = next(e.image for e in platforms
                                     if (e.engine, e.platform) == (p.launch.engine, p.launch.platform))
    assert published
    checked = set()
    for target in ("engines", "dynamo", "llm-d", "kserve"):
        for obj in manifests(plan, cluster, target=target).values():
            for pod in _orchestrator_pod_specs(obj):
                for c in pod["containers"]:
                    assert c["image"] != RUNTIME_IMAGE and "compiler.runtime.worker" not in " ".join(
                        c.get("command", [])), (target, obj["metadata"]["name"])
                    pool = obj["metadata"].get("labels", {}).get("gimletc/pool")
                    if pool in published and obj["metadata"]["labels"].get("app.kubernetes.io/component") == "engine":
                        # no published image (vllm-gaudi): an unpullable placeholder that says to set one
                        assert c["image"] == published[pool] or (published[pool] is None and c["image"].startswith(
                            "registry.invalid/set-image-in-cluster-file/")), (target, pool, c["image"])
                        checked.add(c["image"])
    assert any(i.startswith("vllm/vllm-openai:") for i in checked) and any(i.startswith("rocm/") for i in checked)
