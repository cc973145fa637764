"""`gimletc compile` writes DIR/report/; `gimletc explain DIR [BLOCK|POOL]` says why each block went where; the
Python plan API (examples/api_example.py) writes and runs what the CLI does. One compile for the module."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from tests.conftest import REPO, assert_one_line_error, preset_config, run_cli

TINY = REPO / "examples" / "tiny_split"


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("explained")
    proc = run_cli("compile", "llama-tiny", "--cluster", str(TINY / "cluster.yaml"), "--workload",
                   str(TINY / "workload.yaml"), "--out", str(out), "--no-onnx", "--no-sensitivity",
                   "--wait-for-report")
    assert proc.returncode == 0, proc.stderr
    return out


def test_compile_writes_the_report_and_records_it(plan_dir):
    """What a user reads first is written (and recorded) by the compile; the timeline and pictures are drawn after
    it, and --wait-for-report waits for them ([Note: the report in the background])."""
    status = json.loads((plan_dir / "status.json").read_text())
    for name in ("summary.md", "report.json", "inputs.json"):
        assert f"report/{name}" in status["wrote"] and (plan_dir / "report" / name).is_file(), name
    for name in ("pareto.png", "roofline.png", "power.png", "timeline.json"):
        assert (plan_dir / "report" / name).is_file(), name
    assert sorted(p.name for p in (plan_dir / "report").iterdir()) == [
        "inputs.json", "pareto.png", "power.png", "report.json", "roofline.png", "summary.md", "timeline.json"]
    assert "report" in status["timings_s"]
    inputs = json.loads((plan_dir / "report" / "inputs.json").read_text())
    assert inputs["model"] == "llama-tiny" and inputs["cluster"] == str(TINY / "cluster.yaml")
    assert "this plan is the star" in (plan_dir / "report" / "summary.md").read_text()


def test_the_reports_frontier_draws_the_plan_beside_the_single_type_fleet_closest_to_it(tmp_path):
    cluster = tmp_path / "budgeted.yaml"
    cluster.write_text((TINY / "cluster.yaml").read_text() + "power_budget_kw: 3\n")
    out = tmp_path / "out"
    proc = run_cli("compile", "llama-tiny", "--cluster", str(cluster), "--workload", str(TINY / "workload.yaml"),
                   "--out", str(out), "--no-onnx", "--no-sensitivity")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((out / "plan.json").read_text())
    report = json.loads((out / "report" / "report.json").read_text())
    fleets = [b for b in plan["baselines"] if b["name"].startswith("iso-power:") and b.get("plan_gain")]
    assert len(fleets) >= 2
    closest = min(fleets, key=lambda b: (b["plan_gain"], b["name"]))["name"]
    assert {r["curve"] for r in report["frontier"]["points"]} == {"heterogeneous", closest}
    assert closest in (out / "report" / "summary.md").read_text()


def test_report_draws_again_what_the_compile_drew_byte_for_byte(plan_dir, tmp_path):
    """`gimletc report DIR` redraws the timeline and pictures from plan.json and report.json alone (a fresh
    process, no compile in memory): the same bytes as the compile's own drawing, and report.json as it was."""
    out = tmp_path / "plan"
    shutil.copytree(plan_dir, out)
    drawn = ("pareto.png", "roofline.png", "power.png", "timeline.json")
    for name in drawn:
        (out / "report" / name).unlink()
    proc = run_cli("report", str(out))
    assert proc.returncode == 0, proc.stderr
    for name in (*drawn, "report.json", "summary.md"):
        assert (out / "report" / name).read_bytes() == (plan_dir / "report" / name).read_bytes(), name
    assert not (out / "report" / "drawing.log").exists()


def test_report_of_a_plan_compiled_without_one_writes_the_whole_report(plan_dir, tmp_path):
    """Without report.json (as compiled with --no-report, inputs recorded), `gimletc report` writes the summary, the
    numbers with a frontier solved afresh from the recorded inputs, and the pictures."""
    out = tmp_path / "plan"
    shutil.copytree(plan_dir, out, ignore=shutil.ignore_patterns("*.png", "timeline.json", "report.json",
                                                                 "summary.md"))
    proc = run_cli("report", str(out), "--report-points", "2")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report" / "report.json").read_text())
    assert len({r["tpot_target_ms"] for r in report["frontier"]["points"] if r["curve"] == "heterogeneous"}) == 2
    for name in ("summary.md", "pareto.png", "roofline.png", "power.png", "timeline.json"):
        assert (out / "report" / name).is_file(), name


def test_explain_lists_every_pool_with_its_candidates_and_constraints(plan_dir):
    proc = run_cli("explain", str(plan_dir), "--no-resolve")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((plan_dir / "plan.json").read_text())
    for pool in plan["pools"]:
        assert f"{pool['name']} ({pool['role']} on {pool['device']}" in proc.stdout
        assert re.search(rf"\* {re.escape(pool['device'])}\s+tp{pool['tp']} pp{pool['pp']} b{pool['batch']}",
                         proc.stdout), pool["name"]
    assert "plan-wide constraints:" in proc.stdout and "inventory:" in proc.stdout and "predictions" in proc.stdout


def test_what_would_change_a_pool_matches_a_compile_without_its_device(plan_dir, tmp_path):
    """Explain re-solves without the pool's kind on its device type. Compiling on a cluster without that device at
    all must reach the same objective when the re-solve's answer uses only the remaining devices."""
    plan = json.loads((plan_dir / "plan.json").read_text())
    pool = next(p for p in plan["pools"] if p["device"] == "amd-mi300x")
    proc = run_cli("explain", str(plan_dir), pool["name"], "--json")
    assert proc.returncode == 0, proc.stderr
    (why,) = json.loads(proc.stdout)["pools"]
    line = next(a for a in why["alternatives"] if a.startswith("without "))
    assert "amd-mi300x" not in line.split("(", 1)[1]  # the answer uses the H100 alone
    got = float(re.search(r"-> ([0-9.e+]+)", line).group(1))
    cluster = tmp_path / "h100.yaml"
    cluster.write_text("name: h100-only\ndevices:\n  - {device: nvidia-h100-sxm, count: 1}\n")
    from compiler.driver import compile

    want = compile("llama-tiny", str(cluster), str(TINY / "workload.yaml"), baselines=False, analyse=False)
    assert got == pytest.approx(want.plan.solver.objective_value, rel=1e-3)


def test_explain_a_block_costs_it_on_each_candidate_device(plan_dir):
    """L0.attn's decode step reads its KV cache: at least B x L x (K and V: 2 x kv heads x head dim x 2 bytes)
    over the device's datasheet HBM bandwidth (H100 SXM 3.35 TB/s, MI300X 5.3 TB/s)."""
    proc = run_cli("explain", str(plan_dir), "decode/L0.attn", "--json", "--no-resolve")
    assert proc.returncode == 0, proc.stderr
    cfg = preset_config("llama-tiny")
    kv_per_token = 2 * cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"]) * 2
    bandwidth = {"nvidia-h100-sxm": 3.35e12, "amd-mi300x": 5.3e12}
    costs = [c for p in json.loads(proc.stdout)["pools"] for c in p["block_costs"]]
    assert {c["devices"] for c in costs} == set(bandwidth) and all(c["phase"] == "decode" for c in costs)
    for c in costs:
        point = dict(kv.split("=") for kv in c["point"].split())
        kv_bytes = float(point["B"]) * float(point["L"]) * kv_per_token
        assert c["time_s"] >= kv_bytes / bandwidth[c["devices"]] and c["bound"] == "memory"


def test_explain_without_recorded_inputs_asks_for_the_files(plan_dir, tmp_path):
    out = tmp_path / "plan"
    shutil.copytree(plan_dir, out)
    (out / "report" / "inputs.json").unlink()  # as compiled with --no-report
    assert_one_line_error(run_cli("explain", str(out)), "--cluster", "--workload")
    proc = run_cli("explain", str(out), "pool0", "--no-resolve", "--cluster", str(TINY / "cluster.yaml"),
                   "--workload", str(TINY / "workload.yaml"))
    assert proc.returncode == 0 and "pool0" in proc.stdout, proc.stderr


def test_explain_an_unknown_target_names_the_pools_and_blocks(plan_dir):
    assert_one_line_error(run_cli("explain", str(plan_dir), "pool9"), "pool9", "pools: pool0", "L0.attn")


# ------------------------------------------------------------------------------------------ the Python API


def test_the_api_example_runs_and_saves_what_the_cli_writes(plan_dir, tmp_path):
    """examples/api_example.py: compile, save, load, summary, manifests, run, estimate, pareto. Its plan.json is
    the CLI's byte for byte (same inputs), and the tokens it prints are Hugging Face greedy generate's."""
    import subprocess
    import sys

    out = tmp_path / "api"
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "api_example.py"), str(out)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert (out / "plan.json").read_bytes() == (plan_dir / "plan.json").read_bytes()
    for name in ("summary.md", "pareto.png", "roofline.png", "power.png", "timeline.json", "inputs.json"):
        assert (out / "report" / name).is_file(), name
    assert "TPOT" in proc.stdout and "(predicted" in proc.stdout and "frontier:" in proc.stdout
    tokens = json.loads(re.search(r"greedy tokens: (\[.*\])", proc.stdout).group(1))
    from tests.runtime.conftest import hf_reference

    ((want, _logits),) = hf_reference(out / "model", [[1, 2, 3, 4]], 8)
    assert tokens == want


def test_a_loaded_plan_deploys_and_summarises_as_the_compile_wrote_it(plan_dir):
    import compiler

    plan = compiler.Plan.load(plan_dir)
    assert plan.inputs is not None and plan.inputs.model == "llama-tiny" and plan.path == plan_dir
    written = json.loads((plan_dir / "plan.json").read_text())
    assert {p.name for p in plan.pools} == {p["name"] for p in written["pools"]}
    assert set(plan.manifests()) == {p.name for p in (plan_dir / "k8s").iterdir()}
    summary_md = (plan_dir / "report" / "summary.md").read_text()
    assert summary_md.startswith(plan.summary().split("## Frontier")[0].rstrip())


def test_api_errors_are_the_clis(tmp_path):
    import compiler
    from compiler.ir.errors import BadInput

    with pytest.raises(BadInput, match="power_budget '200 kw!'"):
        compiler.compile("llama-tiny", TINY / "cluster.yaml", TINY / "workload.yaml", power_budget="200 kw!")
    with pytest.raises(BadInput, match="plan.save"):
        compiler.Plan(None).run([[1, 2]])  # never saved: nothing to run
