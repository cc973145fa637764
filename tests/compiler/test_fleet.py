"""Cluster and workload files: the examples load, derived numbers match hand arithmetic, bad files fail in one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backends.registry import device
from compiler.inputs import Cluster, Workload, load_cluster, load_workload, schemas
from compiler.ir.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
CLUSTERS = sorted((REPO / "examples" / "clusters").glob("*.yaml"))
WORKLOADS = sorted((REPO / "examples" / "workloads").glob("*.yaml"))
SIX_FAMILIES = {"nvidia", "amd", "trainium", "cerebras", "dmatrix", "gaudi"}

GOOD_CLUSTER = """\
name: lab
power_budget_kw: 20
devices:
  - {device: nvidia-h100-sxm, count: 16}
  - {device: amd-mi300x, count: 8}
  - {device: intel-gaudi3, count: 8}
links:
  - {between: [amd-mi300x, nvidia-h100-sxm], bandwidth_gb_per_s: 100, latency_us: 12}
"""

GOOD_WORKLOAD = """\
name: two-classes
arrival_rate_per_s: maximise
classes:
  - name: short
    share: 3
    input_len: {mean: 1000, max: 2000}
    output_len: 100
    shared_prefix_len: 400
    prefix_hit_rate: 0.5
  - name: long
    share: 1
    input_len: {mean: 4000, max: 6000}
    output_len: {mean: 700, max: 3000}
    shared_prefix_len: 5000
    prefix_hit_rate: 0.25
slo: {ttft_ms: 500, tpot_ms: 40}
"""


def write(tmp_path: Path, text: str, name: str = "input.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def one_line_error(load, path: Path) -> str:
    with pytest.raises(BadInput) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    return message


# ------------------------------------------------------------------------------------------- examples


def test_the_examples_are_there():
    assert {p.stem for p in CLUSTERS} >= {"mixed", "nvidia", "amd", "trainium", "gaudi", "cerebras"}
    assert {p.stem for p in WORKLOADS} >= {"chat", "summarize", "long_generation", "coding_agent", "mix"}


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_every_example_cluster_loads(path):
    cluster = load_cluster(path)
    assert cluster.power_budget_kw is not None and cluster.inventory()
    for device_id, count in cluster.inventory().items():
        assert count % cluster.node_size(device_id) == 0, f"{path.name}: {device_id} does not fill whole nodes"


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_single_vendor_examples_have_one_family(path):
    families = {device(d).family for d in load_cluster(path).inventory()}
    assert families == SIX_FAMILIES if path.stem == "mixed" else len(families) == 1


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.name)
def test_every_example_workload_loads(path):
    workload = load_workload(path)
    assert workload.arrival_rate_per_s == "maximise"
    assert sum(c.share for c in workload.classes) == pytest.approx(1.0)


def test_mixed_cluster_has_all_six_families_and_a_binding_power_budget():
    cluster = load_cluster(REPO / "examples" / "clusters" / "mixed.yaml")
    assert {device(d).family for d in cluster.inventory()} == SIX_FAMILIES
    tdp_w = sum(device(d).tdp_w * n for d, n in cluster.inventory().items())
    assert cluster.power_budget_w == 200e3 < tdp_w


def test_example_workloads_say_what_the_issue_asks():
    chat = load_workload(REPO / "examples" / "workloads" / "chat.yaml")
    assert (chat.mean_input_len, chat.max_input_len, chat.mean_output_len, chat.max_output_len) == (1024, 4096, 256, 1024)
    assert (chat.slo.ttft_ms, chat.slo.tpot_ms) == (1000, 50)
    agent = load_workload(REPO / "examples" / "workloads" / "coding_agent.yaml")
    assert agent.max_input_len == 200_000
    assert agent.mean_prefill_tokens == 200_000 - 0.8 * 150_000
    mix = load_workload(REPO / "examples" / "workloads" / "mix.yaml")
    assert [round(c.share, 6) for c in mix.classes] == [0.6, 0.25, 0.15]
    assert (mix.slo.ttft_ms, mix.slo.tpot_ms) == (1000, 40)


# ------------------------------------------------------------------------------------- cluster model


def test_cluster_links_are_unordered_with_a_default_and_a_fabric_of_catalog_nics_within_a_pool(tmp_path):
    cluster = load_cluster(write(tmp_path, GOOD_CLUSTER))
    assert cluster.inventory() == {"nvidia-h100-sxm": 16, "amd-mi300x": 8, "intel-gaudi3": 8}
    assert cluster.power_budget_w == 20_000
    assert cluster.link("nvidia-h100-sxm", "amd-mi300x") == cluster.link("amd-mi300x", "nvidia-h100-sxm") \
        == (100e9, 12e-6)
    assert cluster.link("intel-gaudi3", "amd-mi300x") == (50e9, 20e-6)  # default_link
    out = device("intel-gaudi3").scale_out
    assert cluster.nic("intel-gaudi3") == (out.bw_bytes_per_s, out.latency_s)
    assert cluster.link("intel-gaudi3", "intel-gaudi3") == (8 // 2 * out.bw_bytes_per_s, out.latency_s)  # fabric
    assert cluster.node_size("nvidia-h100-sxm") == device("nvidia-h100-sxm").devices_per_node
    with pytest.raises(BadInput, match="no 'aws-trn2' pool"):
        cluster.link("aws-trn2", "amd-mi300x")


def test_models_are_frozen_and_round_trip_through_json(tmp_path):
    cluster = load_cluster(write(tmp_path, GOOD_CLUSTER))
    workload = load_workload(write(tmp_path, GOOD_WORKLOAD, "w.yaml"))
    with pytest.raises(Exception):
        cluster.name = "other"
    assert Cluster.model_validate_json(cluster.model_dump_json()) == cluster
    assert Workload.model_validate_json(workload.model_dump_json()) == workload


# ------------------------------------------------------------------------------------ workload model


def test_two_class_workload_means_by_hand(tmp_path):
    w = load_workload(write(tmp_path, GOOD_WORKLOAD))
    assert [c.share for c in w.classes] == [0.75, 0.25]  # shares 3:1
    assert w.mean_input_len == pytest.approx(1750)  # 0.75 * 1000 + 0.25 * 4000
    assert w.mean_output_len == pytest.approx(250)  # 0.75 * 100 + 0.25 * 700
    assert (w.max_input_len, w.max_output_len) == (6000, 3000)
    # short: 1000 - 0.5 * min(400, 1000) = 800; long: 4000 - 0.25 * min(5000, 4000) = 3000
    assert w.mean_prefill_tokens == pytest.approx(1350)  # 0.75 * 800 + 0.25 * 3000
    assert w.kv_tokens_per_request_mean == pytest.approx(2000)  # 1750 + 250
    assert w.kv_tokens_per_request_max == 9000  # 6000 + 3000, maxima of the two classes


def test_prefix_longer_than_the_longest_prompt_is_rejected(tmp_path):
    path = write(tmp_path, GOOD_WORKLOAD.replace("shared_prefix_len: 5000", "shared_prefix_len: 7000"))
    message = one_line_error(load_workload, path)
    assert "classes[1]" in message and "shared_prefix_len: 7000" in message


# ---------------------------------------------------------------------------------------- bad files


def test_missing_file(tmp_path):
    message = one_line_error(load_cluster, tmp_path / "nope.yaml")
    assert "not found" in message and "examples/clusters/" in message


def test_yaml_syntax_error_names_line_and_column(tmp_path):
    path = write(tmp_path, "name: lab\ndevices:\n  - {device: nvidia-h100-sxm, count: 8\n")
    message = one_line_error(load_cluster, path)
    assert re.search(r"YAML syntax error at line \d+, column \d+", message)


def test_duplicate_yaml_key_is_caught(tmp_path):
    message = one_line_error(load_cluster, write(tmp_path, GOOD_CLUSTER + "power_budget_kw: 30\n"))
    assert "'power_budget_kw' appears twice" in message


def test_empty_file(tmp_path):
    assert "empty file" in one_line_error(load_workload, write(tmp_path, ""))


def test_unknown_device_suggests_the_close_id(tmp_path):
    path = write(tmp_path, GOOD_CLUSTER.replace("device: intel-gaudi3", "device: intel-gaudi-3"))
    message = one_line_error(load_cluster, path)
    assert "devices[2].device:" in message
    assert "'intel-gaudi3'" in message and "gimletc backends" in message


def test_negative_count(tmp_path):
    message = one_line_error(load_cluster, write(tmp_path, GOOD_CLUSTER.replace("count: 8}", "count: -8}", 1)))
    assert "devices[1].count:" in message and "greater than or equal to 1" in message and "-8" in message


def test_unknown_field_suggests_the_intended_one(tmp_path):
    message = one_line_error(load_cluster, write(tmp_path, GOOD_CLUSTER.replace("power_budget_kw", "power_budget_k")))
    assert "power_budget_k:" in message and "did you mean 'power_budget_kw'" in message


def test_unknown_nested_field_lists_that_models_fields(tmp_path):
    path = write(tmp_path, GOOD_WORKLOAD.replace("tpot_ms: 40", "tpot: 40"))
    message = one_line_error(load_workload, path)
    assert "slo.tpot:" in message and "'tpot_ms'" in message


def test_input_mean_above_max(tmp_path):
    path = write(tmp_path, GOOD_WORKLOAD.replace("{mean: 1000, max: 2000}", "{mean: 3000, max: 2000}"))
    message = one_line_error(load_workload, path)
    assert "classes[0].input_len:" in message and "mean 3000 > max 2000" in message


def test_link_to_a_device_not_in_the_cluster(tmp_path):
    path = write(tmp_path, GOOD_CLUSTER.replace("[amd-mi300x, nvidia-h100-sxm]", "[amd-mi355x, nvidia-h100-sxm]"))
    message = one_line_error(load_cluster, path)
    assert "links[0].between:" in message and "'amd-mi355x' is not in devices" in message


def test_link_pair_given_twice_in_either_order(tmp_path):
    extra = "  - {between: [nvidia-h100-sxm, amd-mi300x], bandwidth_gb_per_s: 50, latency_us: 10}\n"
    message = one_line_error(load_cluster, write(tmp_path, GOOD_CLUSTER + extra))
    assert "links[1].between:" in message and "links[0]" in message


def test_device_listed_twice(tmp_path):
    text = GOOD_CLUSTER.replace("  - {device: intel-gaudi3, count: 8}", "  - {device: amd-mi300x, count: 8}")
    message = one_line_error(load_cluster, write(tmp_path, text))
    assert "devices:" in message and "listed twice" in message


def test_several_problems_report_the_first_and_a_count(tmp_path):
    text = GOOD_CLUSTER.replace("count: 16", "count: 0").replace("power_budget_kw: 20", "power_budget_kw: -1")
    message = one_line_error(load_cluster, write(tmp_path, text))
    assert message.startswith(f"{tmp_path / 'input.yaml'}: power_budget_kw: ")
    assert message.endswith("(and 1 more problem: [2] devices[0].count: Input should be greater than or equal to 1 "
                            "(got 0))")


def test_bad_arrival_rate_gives_one_clear_message(tmp_path):
    path = write(tmp_path, GOOD_WORKLOAD.replace("arrival_rate_per_s: maximise", "arrival_rate_per_s: fast"))
    message = one_line_error(load_workload, path)
    assert "arrival_rate_per_s:" in message and "'maximise'" in message and "more problem" not in message


# ------------------------------------------------------------------------------------------- schema


def test_schemas_cover_every_input_file():
    out = schemas()
    assert set(out) == {"cluster", "workload", "services"}
    assert "min_rate_per_s" in out["services"]["$defs"]["Service"]["properties"]
    assert "power_budget_kw" in out["cluster"]["properties"]
    assert "classes" in out["workload"]["properties"]
    json.dumps(out)


def test_import_does_not_load_torch():
    code = "import sys, compiler.inputs; compiler.inputs.schemas(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"
