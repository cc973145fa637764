"""Request classes end to end: routing, percentile SLOs at the operating point, capacity limits per class."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, run_cli

CLUSTERS, WORKLOADS = REPO / "examples" / "clusters", REPO / "examples" / "workloads"


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    memo = {}

    def get(model: str, cluster: str, workload: str) -> dict:
        key = (model, cluster, workload)
        if key not in memo:
            out = tmp_path_factory.mktemp("plan")
            proc = run_cli("compile", model, "--cluster", str(cluster), "--workload", str(workload), "--out", str(out),
                           "--no-onnx", "--no-report", "--no-sensitivity")  # the placement is what these tests read
            assert proc.returncode == 0, proc.stderr
            memo[key] = json.loads((out / "plan.json").read_text())
        return memo[key]

    return get


def _pools_of(plan: dict, cls: str) -> set[str]:
    return {p["name"] for p in plan["pools"] if any(c["name"] == cls for c in p["predicted_classes"])}


def test_chat_and_documents_go_to_different_pools_and_each_meets_its_own_slo(plans):
    plan = plans("llama-3.1-8b", CLUSTERS / "two_tier.yaml", WORKLOADS / "chat_and_documents.yaml")
    classes = {c["name"]: c for c in plan["classes"]}
    assert set(classes) == {"chat", "documents"}
    assert _pools_of(plan, "chat") != _pools_of(plan, "documents")
    for c in classes.values():
        assert c["requests_per_s"] > 0 and c["meets_slo_at_estimate"], c
        assert c["ttft_slo_percentile_ms"] <= c["slo_ttft_ms"] and c["tpot_slo_percentile_ms"] <= c["slo_tpot_ms"], c
        assert c["ttft_p50_ms"] <= c["ttft_slo_percentile_ms"] and c["slo_percentile"] == 90
    # the mix is served in its shares (80% chat, 20% documents)
    total = sum(c["requests_per_s"] for c in classes.values())
    assert classes["chat"]["requests_per_s"] / total == pytest.approx(0.8, abs=0.01)


@pytest.mark.slow  # whole compiles, 25-35 s on 2 cores (CI runs -m slow)
def test_every_pool_runs_below_saturation_at_a_utilisation_its_classes_tolerate(plans):
    plan = plans("llama-3.1-70b", CLUSTERS / "mixed.yaml", WORKLOADS / "mix.yaml")
    assert plan["pools"]
    for p in plan["pools"]:
        assert 0 < p["predicted_utilisation"] < 1, p["name"]
    for c in plan["classes"]:
        assert c["meets_slo_at_estimate"], c


def test_the_coding_agent_class_limits_only_the_pools_it_is_routed_to(plans, tmp_path):
    """100K-token agent turns beside chat: only pools serving the agent are sized for their KV per sequence (a paged
    cache holds sequences at their mean length; the longest must fit once)."""
    workload = tmp_path / "agent_and_chat.yaml"
    workload.write_text(
        "name: agent-and-chat\nclasses:\n"
        "  - {name: chat, share: 0.9, input_len: {mean: 1024, max: 4096}, output_len: {mean: 256, max: 1024}}\n"
        "  - {name: agent, share: 0.1, input_len: {mean: 100000, max: 120000}, output_len: {mean: 512, max: 2048},\n"
        "     slo: {ttft_ms: 30000, tpot_ms: 100}}\n"
        "slo: {ttft_ms: 1000, tpot_ms: 60}\n")
    plan = plans("llama-3.1-8b", CLUSTERS / "nvidia.yaml", workload)
    kv_per_token = 32 * 8 * 128 * 2 * 2  # llama-3.1-8b: 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes
    agent, chat_only = _pools_of(plan, "agent"), _pools_of(plan, "chat") - _pools_of(plan, "agent")
    assert agent and chat_only
    from backends.registry import device

    weights = 8.03e9 * 2
    for p in plan["pools"]:
        room = p["devices_per_replica"] * device(p["device"]).capacity_bytes - weights
        if p["name"] in agent:
            assert room >= kv_per_token * (120000 + 2048)  # the longest agent turn fits
            assert p["batch"] <= room // (kv_per_token * (100000 + 512))  # a batch of mean-length turns fits
    # chat-only pools are not held to the agent's KV: they batch more sequences than any agent pool could
    assert max(p["batch"] for p in plan["pools"] if p["name"] in chat_only) > max(
        p["batch"] for p in plan["pools"] if p["name"] in agent)
