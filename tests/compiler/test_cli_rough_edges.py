"""The CLI's rough edges, as a new user hit them (issue 12): each test is one of them, fixed."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.conftest import REPO, assert_one_line_error, run_cli

NVIDIA = str(REPO / "examples" / "clusters" / "nvidia.yaml")
CHAT = str(REPO / "examples" / "workloads" / "chat.yaml")
TINY_CHAT = str(REPO / "examples" / "tiny_split" / "workload.yaml")  # fits llama-tiny's 512-token context
COMMANDS = ("inspect", "backends", "estimate", "calibrate", "compile", "explain", "pareto", "schema")


# ------------------------------------------------------------------------------------------- flags


@pytest.mark.parametrize("argv", [["-q", "schema"], ["schema", "-q"], ["schema", "--verbose"], ["-v", "schema"]])
def test_verbosity_flags_work_anywhere_on_the_line(argv):
    proc = run_cli(*argv)
    assert proc.returncode == 0, proc.stderr
    assert "cluster" in json.loads(proc.stdout)


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("gimletc ")


def test_help_documents_exit_codes_and_every_command_takes_json():
    top = run_cli("--help").stdout
    for line in ("0  success", "1  internal error", "2  bad input", "3  infeasible", "4  runtime failure"):
        assert line in top
    for command in COMMANDS:
        text = run_cli(command, "--help").stdout
        assert "--json" in text and "-q, --quiet" in text and "exit codes:" in text, command


def test_a_bare_power_budget_is_an_error_that_suggests_the_unit(tmp_path):
    proc = run_cli("compile", "llama-tiny", "--cluster", NVIDIA, "--workload", CHAT, "--power-budget", "200",
                   "--out", str(tmp_path))
    assert proc.returncode == 2 and "--power-budget" in proc.stderr and "200kW" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flag", ["--slo-ttft-ms=0", "--slo-tpot-ms=-5", "--slo-ttft-ms=nan"])
def test_zero_and_negative_slos_exit_2_naming_the_flag(tmp_path, flag):
    proc = run_cli("compile", "llama-tiny", "--cluster", NVIDIA, "--workload", CHAT, flag, "--out", str(tmp_path))
    assert proc.returncode == 2 and flag.split("=")[0] in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------------ --out


def _blocked(tmp_path):
    """A path no one can create a folder at, root included: it sits under a regular file."""
    (tmp_path / "a-file").write_text("x")
    return str(tmp_path / "a-file" / "out")


@pytest.mark.parametrize("command", [
    ["compile", "llama-3.1-405b", "--cluster", NVIDIA, "--workload", CHAT],
    ["pareto", "llama-3.1-405b", "--cluster", NVIDIA, "--workload", CHAT],
])
def test_unwritable_out_fails_before_any_tracing(tmp_path, command):
    start = time.perf_counter()
    proc = run_cli(*command, "--out", _blocked(tmp_path))
    assert_one_line_error(proc, "--out", "cannot write there")
    assert time.perf_counter() - start < 20  # tracing the 405B preset alone takes longer


def test_unwritable_scenarios_out_is_bad_input(tmp_path):
    src = tmp_path / "s.csv"
    src.write_text("model,device,batch\nllama-tiny,cpu-host,1\n")
    assert_one_line_error(run_cli("estimate", "--scenarios", str(src), "--out", _blocked(tmp_path) + ".csv"),
                          "--out", "cannot write there")


# ------------------------------------------------------------------------------------------ status.json


def test_a_failed_compile_writes_status_and_leaves_no_stale_plan(tmp_path):
    out = tmp_path / "plan"
    (out / "k8s").mkdir(parents=True)
    (out / "plan.json").write_text('{"old": true}')
    bad = tmp_path / "cluster.yaml"
    bad.write_text("name: x\ndevices: []\n")
    proc = run_cli("compile", "llama-tiny", "--cluster", str(bad), "--workload", CHAT, "--out", str(out))
    assert proc.returncode == 2
    assert not (out / "plan.json").exists() and not (out / "k8s").exists()
    status = json.loads((out / "status.json").read_text())
    assert status["ok"] is False and status["exit_code"] == 2 and status["command"] == "compile"
    assert str(bad) in status["error"] and status["wrote"] == []


def test_a_compile_writes_plan_manifests_and_status(tmp_path):
    out = tmp_path / "plan"
    proc = run_cli("compile", "llama-tiny", "--cluster", NVIDIA, "--workload", TINY_CHAT, "--out", str(out),
                   "--time-limit", "20")
    assert proc.returncode == 0, proc.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["ok"] is True and status["exit_code"] == 0 and status["error"] is None
    assert "plan.json" in status["wrote"] and "k8s/kustomization.yaml" in status["wrote"]
    assert set(status["timings_s"]) >= {"inputs", "cost", "place", "emit", "write"}
    kustomization = yaml.safe_load((out / "k8s" / "kustomization.yaml").read_text())
    assert all((out / "k8s" / f).is_file() for f in kustomization["resources"])
    # Readable output: a timings line with units, the objective with its unit, device ids whole.
    assert "times: " in proc.stdout and "{'" not in proc.stdout and "req/s, bound" in proc.stdout
    assert "nvidia-h100-sxm" in proc.stdout and "…" not in proc.stdout
    assert "… " not in proc.stderr  # no progress lines when stderr is not a terminal


# --------------------------------------------------------------------------------------- estimate


@pytest.mark.parametrize("flags,needles", [
    (["--count", "8", "--tp", "8"], ["--tp 8", "4 attention heads"]),
    (["--count", "3", "--tp", "3", "--engine", "vllm"], ["--tp 3", "vLLM splits attention heads evenly"]),
    (["--count", "4", "--pp", "4", "--tp", "1"], ["--pp 4", "2 layers"]),
    (["--batch", "1000000", "--input-len", "100000"], ["--batch 1000000", "GB per cpu-host", "at most"]),
])
def test_estimate_refuses_impossible_shapes(flags, needles):
    extra = [] if "--batch" in flags else ["--batch", "1"]
    proc = run_cli("estimate", "llama-tiny", "--device", "cpu-host", *flags, *extra)
    assert_one_line_error(proc, *needles)


def test_misnamed_scenarios_column_is_named_with_a_suggestion(tmp_path):
    src = tmp_path / "s.csv"
    src.write_text("model,device,concurency\nllama-tiny,cpu-host,4\n")
    assert_one_line_error(run_cli("estimate", "--scenarios", str(src)), "'concurency'", "did you mean 'concurrency'")


# -------------------------------------------------------------------------------------- d-Matrix, pareto


def test_dmatrix_left_out_of_a_bf16_compile_is_reported_with_the_fix(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("name: two\npower_budget_kw: 50\ndevices:\n  - {device: nvidia-h100-sxm, count: 8}\n"
                       "  - {device: dmatrix-corsair, count: 8}\n")
    proc = run_cli("compile", "llama-tiny", "--cluster", str(cluster), "--workload", TINY_CHAT, "--out",
                   str(tmp_path / "out"), "--time-limit", "20", "--manifests", "none")
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "dmatrix-corsair" in line]
    assert warning and warning[0].startswith("gimletc: warning:") and "--dtype fp8" in warning[0]


def test_nothing_runs_in_bf16_on_dmatrix_and_the_error_suggests_fp8(tmp_path):
    proc = run_cli("compile", "llama-tiny", "--cluster", str(REPO / "examples" / "clusters" / "dmatrix.yaml"),
                   "--workload", TINY_CHAT, "--out", str(tmp_path))
    assert proc.returncode == 3 and "--dtype fp8" in proc.stderr and "Traceback" not in proc.stderr


def test_pareto_with_no_feasible_point_exits_3_and_writes_no_frontier(tmp_path):
    workload = tmp_path / "impossible.yaml"
    workload.write_text("name: impossible\nclasses:\n  - {name: chat, share: 1, input_len: 256, output_len: 64}\n"
                        "slo: {ttft_ms: 0.001, tpot_ms: 50}\n")
    proc = run_cli("pareto", "llama-tiny", "--cluster", NVIDIA, "--workload", str(workload), "--points", "2",
                   "--time-limit", "10", "--out", str(tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert "TTFT SLO 0.001 ms <" in proc.stderr  # a lower bound shows it before the sweep ([Note: placement bounds])
    assert not any((tmp_path / f).exists() for f in ("pareto.csv", "pareto.json", "pareto.png"))
    assert json.loads((tmp_path / "status.json").read_text())["exit_code"] == 3
