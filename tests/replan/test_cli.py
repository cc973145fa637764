"""``gimletc replan`` as a user runs it: metrics in (a folder of saved scrapes), the diff out, the next plan
directory written byte-identically for the same inputs; bad input is one line naming the flag and the fix."""

from __future__ import annotations

import json

import pytest

from compiler.place.moves import base_key
from tests.conftest import REPO, assert_one_line_error, run_cli
from tests.replan.conftest import night_workload, simulate


@pytest.fixture(scope="module")
def night_metrics(day, truth_options, tmp_path_factory):
    """Saved scrapes of the day plan's engines after the mix turned to documents."""
    from compiler.driver import compile
    from tests.replan.conftest import CLUSTER, MODEL

    _plan_dir, compiled = day
    options, prep = truth_options
    tmp = tmp_path_factory.mktemp("night-metrics")
    fresh = compile(MODEL, CLUSTER, night_workload(tmp), baselines=False, analyse=False)
    rates = {c.name: 0.8 * fresh.solution.requests_per_s * c.share for c in fresh.prepared.instance.classes}
    folder = tmp / "metrics"
    simulate(compiled.plan, options, prep, rates, seed=7, folder=folder)
    return folder


def test_metrics_in_diff_out_and_the_same_bytes_twice(day, night_metrics, tmp_path):
    plan_dir, compiled = day
    outs = []
    for _ in range(2):
        proc = run_cli("replan", str(plan_dir), "--metrics", str(night_metrics), "--out", str(tmp_path / "next"),
                       "--json", timeout=600)
        assert proc.returncode == 0, proc.stderr
        files = {p.relative_to(tmp_path / "next").as_posix(): p.read_bytes()
                 for p in sorted((tmp_path / "next").rglob("*")) if p.is_file() and "status" not in p.name}
        outs.append((proc.stdout, files))
    assert outs[0] == outs[1]
    summary = json.loads(outs[0][0])
    assert summary["prediction"] is True and summary["decision"]["act"] is True
    added = {c["shape"] for c in summary["changes"] if c["after"] > c["before"]}
    assert any(s.startswith("prefill:") for s in added)
    written = json.loads(outs[0][1]["plan.json"])
    assert {base_key(p["option"]) for p in written["pools"]} != {base_key(p.option) for p in compiled.plan.pools}
    assert "k8s/kustomization.yaml" in outs[0][1] and "workload.yaml" in outs[0][1]
    keda = sorted(k for k in outs[0][1] if k.startswith("autoscale/keda/scaledobject-"))
    assert len(keda) == sum(1 for p in written["pools"] if p["launch"])  # one per engine pool
    inputs = json.loads(outs[0][1]["report/inputs.json"])
    assert inputs["workload"] == str((tmp_path / "next" / "workload.yaml").resolve())
    text = run_cli("replan", str(plan_dir), "--metrics", str(night_metrics), timeout=600)
    assert text.returncode == 0 and "decision: move" in text.stdout and "advisory" in text.stdout
    print(text.stdout)


@pytest.mark.parametrize("args, needles", [
    (["--metrics", "/nonexistent/metrics"], ["--metrics /nonexistent/metrics", "no such file"]),
    (["--metrics", "METRICS", "--apply"], ["--apply", "--out DIR2"]),
    (["--metrics", "METRICS", "--out", "NEXT", "--apply"], ["--apply", "no local deployment", "gimletc deploy",
                                                           "--local"]),
    (["--metrics", "METRICS", "--out", "PLAN"], ["--out", "running plan's directory"]),
    (["--metrics", "ONE"], ["--metrics", "two snapshots"]),
    (["--metrics", "METRICS", "--window", "0"], ["--window", "duration"]),
])
def test_bad_input_is_one_line(day, night_metrics, tmp_path, args, needles):
    plan_dir, _c = day
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.prom").write_text(sorted(night_metrics.iterdir())[-1].read_text())
    given = {"METRICS": str(night_metrics), "ONE": str(one), "PLAN": str(plan_dir), "NEXT": str(tmp_path / "next")}
    args = [given.get(a, a) for a in args]
    proc = run_cli("replan", str(plan_dir), *args, timeout=600)
    if "--window" in args:  # argparse's own: usage line, then the error
        assert proc.returncode == 2 and all(n in proc.stderr for n in needles) and "Traceback" not in proc.stderr
        return
    assert_one_line_error(proc, *needles)


def test_a_plan_without_its_inputs_needs_cluster_and_workload(day, night_metrics, tmp_path):
    plan_dir, _c = day
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "plan.json").write_bytes((plan_dir / "plan.json").read_bytes())
    proc = run_cli("replan", str(bare), "--metrics", str(night_metrics), timeout=600)
    assert_one_line_error(proc, "report/inputs.json", "--cluster", "--workload")


def test_another_plans_metrics_are_blamed_on_the_users_files_not_a_scratch_file(night_metrics, tmp_path):
    """llama-tiny's plan (512 tokens of context) given the 8B day plan's scrapes (documents of thousands
    of tokens) blamed a temporary /tmp/gimletc-replan-*/workload.yaml; the error names the metrics and the plan."""
    from compiler.driver import compile
    from compiler.ir.files import atomic_write_text

    cluster = str(REPO / "examples" / "tiny_split" / "cluster.yaml")
    workload = str(REPO / "examples" / "tiny_split" / "workload.yaml")
    tiny = tmp_path / "tiny"
    atomic_write_text(tiny / "plan.json", compile("llama-tiny", cluster, workload, baselines=False,
                                                  analyse=False).plan.dumps())
    proc = run_cli("replan", str(tiny), "--metrics", str(night_metrics), "--cluster", cluster, "--workload", workload,
                   timeout=600)
    assert_one_line_error(proc, f"--metrics {night_metrics}", "llama-tiny", "context of 512", str(tiny),
                          "another deployment's metrics")
    assert "gimletc-replan-" not in proc.stderr
