"""``gimletc compile --services``: several models on one fleet, as a user runs it.

What is checked against something other than the code that made it: the services' devices and power against
the cluster file's inventory and budget, each service's floor, the joint objective against the weighted sum of
the rates each service's own plan.json reports (a different path: plan emission, not the solver's objective),
byte-identical outputs, and one-line errors naming the file, the field and the fix.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import REPO, assert_one_line_error, run_cli

NVIDIA = str(REPO / "examples" / "clusters" / "nvidia.yaml")
CHAT = str(REPO / "examples" / "workloads" / "chat.yaml")


def services_file(tmp_path, services, name="platform"):
    path = tmp_path / "services.yaml"
    path.write_text(yaml.safe_dump({"name": name, "services": services}), encoding="utf-8")
    return str(path)


TWO = [{"name": "small", "model": "llama-3.2-1b", "workload": CHAT, "weight": 1},
       {"name": "big", "model": "llama-3.1-8b", "workload": CHAT, "weight": 4, "min_rate_per_s": 50}]


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("services")
    path = services_file(tmp, TWO)
    outs = []
    for run in ("a", "b"):
        proc = run_cli("compile", "--services", path, "--cluster", NVIDIA, "--out", str(tmp / run), "--json")
        assert proc.returncode == 0, proc.stderr
        outs.append(tmp / run)
    return outs


def test_services_share_the_fleet_and_hold_their_floors(two):
    out = two[0]
    doc = json.loads((out / "services.json").read_text())
    cluster = yaml.safe_load(open(NVIDIA))
    owned = {d["device"]: d["count"] for d in cluster["devices"]}
    used: dict[str, int] = {}
    for s in doc["services"]:
        for t, n in s["devices"].items():
            used[t] = used.get(t, 0) + n
    assert used and all(used[t] <= owned[t] for t in used), (used, owned)
    assert sum(s["provisioned_power_w"] for s in doc["services"]) <= cluster["power_budget_kw"] * 1e3 * (1 + 1e-9)
    big = next(s for s in doc["services"] if s["name"] == "big")
    assert big["predicted_requests_per_s"] >= 50 * (1 - 1e-6)
    assert doc["solver"]["status"] == "optimal"


def test_each_service_has_a_plan_of_its_own_that_adds_up_to_the_objective(two):
    """The solver's objective (weighted requests/s) equals the weights times the rates each plan.json reports,
    and each plan's pools hold the devices services.json gives that service."""
    from compiler.plan.checks import load_plan

    out = two[0]
    doc = json.loads((out / "services.json").read_text())
    weights = {s["name"]: s["weight"] for s in TWO}
    total = 0.0
    for s in doc["services"]:
        plan = load_plan(out / s["name"])
        assert plan.model == {"small": "llama-3.2-1b", "big": "llama-3.1-8b"}[s["name"]]
        devices: dict[str, int] = {}
        for p in plan.pools:
            devices[p.device] = devices.get(p.device, 0) + p.replicas * p.devices_per_replica
        assert devices == s["devices"]
        # its engines answer to the service's name: the model a request gives the gateway (deploy --local)
        assert {p.launch.served_model_name for p in plan.pools if p.launch} == {s["name"]}
        total += weights[s["name"]] * plan.predicted.requests_per_s
    assert total == pytest.approx(doc["solver"]["objective_value"], rel=1e-6)
    assert (out / "small" / "report" / "inputs.json").is_file()


def test_same_services_give_byte_identical_outputs(two):
    a, b = two
    for rel in ("services.json", "summary.md", "small/plan.json", "big/plan.json"):
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_summary_leads_with_the_gain_over_what_a_platform_team_would_do(two):
    text = (two[0] / "summary.md").read_text()
    lead = next(line for line in text.splitlines() if line.startswith("**The joint placement"))
    assert "proportional-slices:" in lead and "greedy-type:" in lead
    doc = json.loads((two[0] / "services.json").read_text())
    names = [b["name"] for b in doc["baselines"]]
    assert names[:2] == ["proportional-slices", "greedy-type"]
    assert any(n.startswith("single-type:") for n in names)


@pytest.mark.parametrize("entry, needles", [
    ({"name": "Chat", "model": "llama-3.2-1b", "workload": CHAT}, ("services[0].name", "pattern")),
    ({"name": "k8s", "model": "llama-3.2-1b", "workload": CHAT}, ("services[0].name", "name the service otherwise")),
    ({"name": "gimletc-gateway", "model": "llama-3.2-1b", "workload": CHAT}, ("services[0].name", "otherwise")),
    ({"name": "chat", "model": "llama-3.2-1b", "workload": "nowhere.yaml"}, ("services[0].workload", "not a file")),
    ({"name": "chat", "model": "llama-3.2-1b", "workload": CHAT, "dtype": "fp7"}, ("services[0].dtype", "fp8")),
    ({"name": "chat", "model": "llama-3.2-1b", "workload": CHAT, "wieght": 2}, ("did you mean 'weight'",)),
])
def test_a_bad_services_file_is_one_line_naming_file_field_and_fix(tmp_path, entry, needles):
    path = services_file(tmp_path, [entry])
    proc = run_cli("compile", "--services", path, "--cluster", NVIDIA, "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, "services.yaml", *needles)


def test_repeated_service_names_and_mixed_inputs_are_refused(tmp_path):
    entry = {"name": "chat", "model": "llama-3.2-1b", "workload": CHAT}
    path = services_file(tmp_path, [entry, entry])
    assert_one_line_error(run_cli("compile", "--services", path, "--cluster", NVIDIA, "--out", str(tmp_path / "o")),
                          "'chat' repeats")
    path = services_file(tmp_path, [entry])
    assert_one_line_error(run_cli("compile", "llama-3.2-1b", "--services", path, "--cluster", NVIDIA, "--out",
                                  str(tmp_path / "o")), "drop MODEL")
    assert_one_line_error(run_cli("compile", "--cluster", NVIDIA, "--out", str(tmp_path / "o")),
                          "MODEL and --workload", "--services")


def test_a_rate_and_a_minimum_rate_together_are_refused(tmp_path):
    rated = tmp_path / "rated.yaml"
    rated.write_text(open(CHAT).read().replace("arrival_rate_per_s: maximise", "arrival_rate_per_s: 5"))
    assert "arrival_rate_per_s: 5" in rated.read_text()
    path = services_file(tmp_path, [{"name": "chat", "model": "llama-3.2-1b", "workload": str(rated),
                                     "min_rate_per_s": 2}])
    assert_one_line_error(run_cli("compile", "--services", path, "--cluster", NVIDIA, "--out", str(tmp_path / "o")),
                          "min_rate_per_s", "give one")


def test_the_python_api_writes_what_the_cli_writes(two, tmp_path):
    """``compiler.compile(services=...)`` and ``ServicesPlan.save`` give the CLI's files, byte for byte."""
    import compiler

    path = services_file(tmp_path, TWO)
    plan = compiler.compile(cluster=NVIDIA, services=path)
    assert set(plan.plans) == {"small", "big"} and "proportional-slices" in plan.summary()
    out = plan.save(tmp_path / "api")
    for rel in ("services.json", "summary.md", "small/plan.json", "big/plan.json"):
        assert (out / rel).read_bytes() == (two[0] / rel).read_bytes(), rel


def test_each_service_deploys_into_a_namespace_of_its_own(two):
    """Both services' manifests carry the same object names (gimletc-<pool>, which each router addresses): each
    service's kustomization puts every one of its objects into the service's own namespace, and creates it."""
    for service in ("small", "big"):
        folder = two[0] / service / "k8s"
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        assert kustomization["namespace"] == service
        files = sorted(p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml")
        assert sorted(kustomization["resources"]) == files
        namespaces = [yaml.safe_load((folder / f).read_text()) for f in files]
        assert [o["metadata"]["name"] for o in namespaces if o["kind"] == "Namespace"] == [service]
    # beside them, the routing by model (tests/emit/test_services_manifests.py checks its objects)
    top = yaml.safe_load((two[0] / "k8s" / "kustomization.yaml").read_text())
    assert top["resources"][:2] == ["../small/k8s", "../big/k8s"] and "deployment-gimletc-gateway.yaml" in top["resources"]


def test_explain_speaks_per_service(two):
    """``gimletc explain DIR`` of a services plan: each service's rate, devices and pools as its plan.json has them,
    and what binds it; one service's folder is explained with a note that the fleet is shared."""
    from compiler.plan.checks import load_plan

    out = two[0]
    proc = run_cli("explain", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "services.json").read_text())
    for s in doc["services"]:
        line = next(x for x in proc.stdout.splitlines() if x.startswith(f"{s['name']} ("))
        assert f"{s['predicted_requests_per_s']:,.2f} req/s" in line and f"bound by {s['binds']}" in line
        for pool in load_plan(out / s["name"]).pools:
            assert f"  {pool.name}: {pool.role} on {pool.device}, {pool.replicas} x " in proc.stdout
    alone = run_cli("explain", str(out / "big"), "--no-resolve")
    assert alone.returncode == 0 and alone.stdout.startswith("note: this service shares its fleet"), alone.stderr
