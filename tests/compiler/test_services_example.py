"""The shipped services example, examples/services/: its files validate (default suite, no solve), and a compile of
it through the CLI holds the cluster file's inventory, its power budget and every service's floor (slow).

Expectations come from the input files and the device catalog, not from the compiler: the devices each service
holds are summed against the cluster file's counts, and their watts (the catalog's node power per device, the
footing a cluster file without ``power_basis`` budgets) against its ``power_budget_kw``.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import REPO, preset_config, run_cli

EXAMPLE = REPO / "examples" / "services"
SERVICES = EXAMPLE / "services.yaml"
MIXED = REPO / "examples" / "clusters" / "mixed.yaml"


def test_the_example_services_file_and_its_workloads_validate():
    from compiler.inputs import load_workload
    from compiler.inputs.model_spec import preset_names
    from compiler.inputs.services import load_services

    parsed = load_services(SERVICES)
    assert [s.model for s in parsed.services] == ["llama-3.1-8b", "llama-3.1-70b", "gpt-oss-120b", "qwen3-235b-a22b"]
    for s in parsed.services:
        assert s.model in preset_names()
        workload = load_workload(s.workload)
        assert workload.arrival_rate_per_s == "maximise" and s.min_rate_per_s is not None, s.name
        context = preset_config(s.model)["max_position_embeddings"]
        for c in workload.classes:  # the longest request fits the model's context
            assert c.input_len.max + c.output_len.max <= context, (s.name, c.name, context)


@pytest.mark.slow
def test_the_example_compiles_within_the_fleet_its_budget_and_every_floor(tmp_path):
    from backends.registry import device

    out = tmp_path / "plan-services"
    proc = run_cli("compile", "--services", str(SERVICES), "--cluster", str(MIXED), "--out", str(out), "--json",
                   timeout=900)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "services.json").read_text())
    cluster = yaml.safe_load(MIXED.read_text())
    spec = yaml.safe_load(SERVICES.read_text())
    assert "power_basis" not in cluster  # the budget counts node power per device (the cluster file's default)

    owned = {d["device"]: d["count"] for d in cluster["devices"]}
    held: dict[str, int] = {}
    for s in doc["services"]:
        for t, n in s["devices"].items():
            held[t] = held.get(t, 0) + n
    assert held and all(held[t] <= owned[t] for t in held), (held, owned)
    watts = sum(n * device(t).node_w for t, n in held.items())
    assert watts <= cluster["power_budget_kw"] * 1e3 * (1 + 1e-9)
    assert sum(s["provisioned_power_w"] for s in doc["services"]) == pytest.approx(watts, rel=1e-6)

    floors = {s["name"]: s["min_rate_per_s"] for s in spec["services"]}
    weights = {s["name"]: s["weight"] for s in spec["services"]}
    assert [s["name"] for s in doc["services"]] == list(floors)
    for s in doc["services"]:
        assert s["predicted_requests_per_s"] >= floors[s["name"]] * (1 - 1e-6), s
        assert (out / s["name"] / "plan.json").is_file()
    assert doc["solver"]["status"] in ("optimal", "feasible")
    weighted = sum(weights[s["name"]] * s["predicted_requests_per_s"] for s in doc["services"])
    assert weighted == pytest.approx(doc["solver"]["objective_value"], rel=1e-6)
    assert [b["name"] for b in doc["baselines"][:2]] == ["proportional-slices", "greedy-type"]
