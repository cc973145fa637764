"""`gimletc compile` end to end on the example fleet: determinism, baselines, workloads, errors."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, assert_one_line_error, run_cli

MIXED = str(REPO / "examples" / "clusters" / "mixed.yaml")


def workload(name: str) -> str:
    return str(REPO / "examples" / "workloads" / f"{name}.yaml")


#: The README's first compile as the default run compiles it: everything but the sensitivity analysis, whose 40
#: what-if solves of the whole fleet (7-12 s on 2 cores) the slow run's tests of it add (CI runs -m slow).
#: tests/compiler/test_sensitivity.py checks the analysis's solves on the same fleet in the default run.
NO_SENSITIVITY = ("--no-sensitivity",)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """plan.json per workload, compiled once per module (llama-3.1-70b on the mixed fleet)."""
    memo = {}

    def get(name: str, *extra: str) -> dict:
        key = (name, extra)
        if key not in memo:
            out = tmp_path_factory.mktemp(name)
            proc = run_cli("compile", "llama-3.1-70b", "--cluster", MIXED, "--workload", workload(name), "--out",
                           str(out), *extra)
            assert proc.returncode == 0, proc.stderr
            summary = out / "report" / "summary.md"
            text = summary.read_text() if summary.exists() else ""
            memo[key] = (json.loads((out / "plan.json").read_text()), (out / "plan.json").read_bytes(),
                         proc.stdout + proc.stderr + "\n[summary.md]\n" + text)
        return memo[key]

    return get


def test_plan_json_poses_every_baseline_and_the_summary_names_a_type_that_beats_it(compiled):
    """Baselines (a)-(d) are in plan.json with their own status and question, a note where they have no
    placement, and the summary says plainly when a single device type at equal power beats this fixed fleet.
    (What each baseline is worth, and the gains, are checked against hand arithmetic and brute force on small
    instances in tests/compiler/test_value.py.)"""
    plan, _, stdout = compiled("chat", *NO_SENSITIVITY)
    from compiler.driver import prepare
    from compiler.place.candidates import PRUNE_TOLERANCE, bound_factor
    from compiler.place.ilp import OPTIMAL_GAP, solve

    # the README's first compile is proven optimal over the options kept (it stopped 0.73% short with CP-SAT),
    # and the optimum over every option, solved here without pruning, lies between its value and its bound
    s = plan["solver"]
    assert s["status"] == "optimal" and s["gap"] <= bound_factor(PRUNE_TOLERANCE) - 1 + OPTIMAL_GAP
    exact = solve(prepare("llama-3.1-70b", MIXED, workload("chat")).instance, "throughput", exact=True)
    assert exact.status == "optimal" and exact.objective.gap <= OPTIMAL_GAP
    assert s["objective_value"] * (1 - 1e-9) <= exact.objective.value <= s["bound"] * (1 + 1e-9)
    names = [b["name"] for b in plan["baselines"]]
    assert plan["needs_runtime"]  # KV handed from an external endpoint: what public engines run is posed too
    assert {f"iso-power:{d}" for d in plan["inventory"]} | {"vendor-islands", "no-disaggregation", "greedy",
                                                           "deployable"} == set(names)
    for b in plan["baselines"]:
        assert b["status"] in ("optimal", "feasible", "infeasible", "skipped") and b["question"]
        if b["status"] in ("optimal", "feasible"):
            assert b["plan_gain"] is not None and b["provisioned_power_w"] <= plan["power_budget_w"] + 1e-6
        else:
            assert b["plan_gain"] is None and b["note"]
    winners = [b for b in plan["baselines"] if b["name"].startswith("iso-power:") and b["beats_plan"]]
    for b in winners:  # reported as it is, never clipped at 1, on the console and in summary.md's opening verdict
        ratio = b["output_tokens_per_s"] / plan["predicted"]["output_tokens_per_s"]
        device = b["name"].split(":")[1]
        gain_lo, gain_hi = b["plan_gain_interval"]
        assert b["within_error"] == (gain_lo < 1 < gain_hi)  # the interval of the plan's gain holds 1
        for text in stdout.split("[summary.md]"):
            flat = " ".join(text.split())  # the console wraps its lines
            said = ("A single device type beats this mix at equal power" if not b["within_error"] else
                    f"{device} alone at equal power would serve {ratio:.2f}x")
            assert said in flat and f"{ratio:.2f}x" in flat and device in flat
            if b["within_error"]:
                assert "within the model's error" in flat
    assert "iso-power:" in stdout and "vendor-islands" in stdout and "0.00x" not in stdout


#: The README's first compile without the analyses that re-solve it (sensitivity) or draw it (report, ONNX): what
#: the tests below that read only the placement, the solver's output or the imports compile.
LEAN = ("--no-report", "--no-sensitivity", "--no-onnx")


@pytest.fixture(scope="module")
def verbose_compile(tmp_path_factory):
    """(process, plan directory) of the lean README compile run with `-v`, once per module."""
    out = tmp_path_factory.mktemp("verbose")
    proc = run_cli("-v", "compile", "llama-3.1-70b", "--cluster", MIXED, "--workload", workload("chat"), "--out",
                   str(out), *LEAN)
    assert proc.returncode == 0, proc.stderr
    return proc, out


@pytest.fixture(scope="module")
def warm_compile(compiled, tmp_path_factory):
    """(process, plan directory) of the lean README compile run by `main` in a fresh interpreter, its trace cached
    by `compiled` (the same model), printing which of torch and transformers it imported; once per module."""
    import subprocess
    import sys

    compiled("chat", *NO_SENSITIVITY)  # the same model compiled once: its trace and config facts are in the cache
    out = tmp_path_factory.mktemp("warm")
    args = ["compile", "llama-3.1-70b", "--cluster", MIXED, "--workload", workload("chat"), "--out", str(out),
            *LEAN, "-q"]
    code = ("import sys\n"
            "from compiler.cli.main import main\n"  # the script's entry() would end the process at once
            f"assert main({args!r}) == 0\n"
            "print('imported:', *(m for m in ('torch', 'transformers') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc, out


def test_same_inputs_give_byte_identical_plans(verbose_compile, warm_compile):
    """Two compiles of the same inputs in two processes (one logging everything with `-v`, one quiet and run by
    `main`) write the same plan.json, byte for byte. The whole compile, sensitivity and report included, is
    compared in the slow run."""
    (_, first), (_, second) = verbose_compile, warm_compile
    assert (first / "plan.json").read_bytes() == (second / "plan.json").read_bytes()


@pytest.mark.slow  # a second whole compile with every analysis, 25-35 s on 2 cores (CI runs -m slow)
def test_same_inputs_give_byte_identical_plans_with_every_analysis(compiled, tmp_path):
    _, first, _ = compiled("chat")
    proc = run_cli("compile", "llama-3.1-70b", "--cluster", MIXED, "--workload", workload("chat"), "--out",
                   str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "plan.json").read_bytes() == first


#: What HiGHS prints to the C library's stdout on the README's first compile, and the start of its own
#: log lines (should MathOpt's ``enable_output`` ever be on).
HIGHS_LINE = "HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();"
HIGHS_LOG = ("Running HiGHS", "Solving MIP model", "Presolving model")


def test_the_solvers_own_output_reaches_neither_stream_unless_asked(compiled, verbose_compile):
    """The README's first compile: HiGHS's debugging line reached the terminal (on stdout, later on stderr). It is
    logged, so `-v` shows it (which also shows this compile still makes HiGHS print it)."""
    _, _, output = compiled("chat", *NO_SENSITIVITY)  # stdout and stderr
    assert "tmpSolver" not in output and not any(line in output for line in HIGHS_LOG), output
    proc, _ = verbose_compile
    assert "tmpSolver" not in proc.stdout
    assert f"compiler.place.native_output: solver: {HIGHS_LINE}" in proc.stderr, proc.stderr


@pytest.mark.slow  # the whole compile, its sensitivity analysis's 40 solves included, 25-35 s on 2 cores
def test_the_sensitivity_solves_print_nothing_either(compiled):
    """The whole README compile, its sensitivity analysis's re-solves included, prints none of HiGHS's lines."""
    _, _, output = compiled("chat")
    assert "tmpSolver" not in output and not any(line in output for line in HIGHS_LOG), output


def test_a_compile_whose_trace_is_cached_imports_neither_torch_nor_transformers(warm_compile):
    """The trace and the config facts stage programs need are cached ([Note: trace cache]): a warm compile
    skips the 3 s of importing torch and transformers."""
    proc, out = warm_compile
    assert proc.stdout.strip().splitlines()[-1] == "imported:", proc.stdout
    assert (out / "plan.json").is_file()


@pytest.mark.slow  # the whole compile, its sensitivity analysis's 40 solves included, 25-35 s on 2 cores
def test_sensitivity_moves_each_assumed_factor_both_ways_and_the_objective_follows(compiled):
    """Every assumed efficiency (and assumed node power) of a device family the fleet offers is moved +-20%; a
    faster device can only raise the most throughput the fleet serves, a slower one only lower it, and a hungrier
    one (more node power under the power budget) only lower it (up to the 2% the re-solves stop at); the pools
    are called changed only where the objective moved by more than that."""
    from cost_models.derates import HYPOTHESES

    plan, _, _ = compiled("chat")
    readings = {h.name for h in HYPOTHESES}  # another reading of the measurements: no direction to check
    moves = {(s["factor"], s["change"]): s for s in plan["sensitivity"] if s["factor"].split(".")[-1] not in readings}
    factors = {f for f, _c in moves}
    assert factors and all((f, c) in moves for f in factors for c in (0.2, -0.2))
    for s in plan["sensitivity"]:
        assert s["changes_pools"] == bool(s["pools_added"] or s["pools_removed"])
    for (factor, change), s in moves.items():
        assert 0 <= s["solve_gap"] < 0.1, s
        better = -change if factor.endswith(".node_w") else change  # more watts per device buy fewer devices
        assert s["objective_change"] * better >= -0.02 * abs(change), s
        assert s["changes_pools"] == bool(s["pools_added"] or s["pools_removed"])
        if abs(s["objective_change"]) <= 0.02:
            assert not s["changes_pools"], s


def _mix(plan: dict) -> dict[tuple[str, str], int]:
    mix: dict[tuple[str, str], int] = {}
    for p in plan["pools"]:
        key = (p["role"], p["device"])
        mix[key] = mix.get(key, 0) + p["replicas"] * p["devices_per_replica"]
    return mix


@pytest.mark.slow  # whole compiles, 25-35 s on 2 cores (CI runs -m slow)
def test_prefill_heavy_and_decode_heavy_workloads_get_different_pools(compiled):
    summarize, _, _ = compiled("summarize")
    generate, _, _ = compiled("long_generation")
    assert _mix(summarize) != _mix(generate)

    # Long generations spend their time decoding: their plan holds far more decode capacity (decode pools, or
    # colocated pools whose steps are decodes) per request than summaries, which are mostly prompt.
    def decode_slots_per_request(plan):
        return sum(p["replicas"] * p["batch"] for p in plan["pools"] if p["role"] in ("decode", "colocated")) / \
            plan["predicted"]["requests_per_s"]

    assert decode_slots_per_request(generate) > 3 * decode_slots_per_request(summarize)


@pytest.mark.slow  # whole compiles, 25-35 s on 2 cores (CI runs -m slow)
def test_prefill_decode_disaggregation_emerges_where_it_pays(tmp_path):
    """Nothing hard-codes the split. Long prompts under a tight TPOT SLO: a CS-3 wafer, all compute and little
    memory bandwidth, only pays as a prefill pool handing KV to GPU decode pools, and the solver finds that."""
    workload = tmp_path / "rag.yaml"
    workload.write_text("name: rag\nclasses:\n  - {name: rag, share: 1, input_len: {mean: 8192, max: 16384}, "
                        "output_len: {mean: 512, max: 1024}}\nslo: {ttft_ms: 2000, tpot_ms: 25}\n")
    out = tmp_path / "plan"
    proc = run_cli("compile", "llama-3.1-70b", "--cluster", MIXED, "--workload", str(workload), "--out", str(out),
                   "--no-onnx")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((out / "plan.json").read_text())
    prefill = [p for p in plan["pools"] if p["role"] == "prefill"]
    assert prefill and any(p["role"] in ("decode", "decode-attention") for p in plan["pools"])
    kv = [t for t in plan["transfers"] if t["kind"] == "kv"]
    assert kv and {t["src_pool"] for t in kv} <= {p["name"] for p in prefill}


@pytest.mark.slow  # Qwen2.5-7B-1M traced and its 200K-token turns placed on the whole mixed fleet, 25-40 s on 2 cores;
# test_classes.py's agent test checks the same KV-per-sequence bound on batches in the default run (CI runs -m slow)
def test_coding_agent_kv_binds_capacity(tmp_path):
    """The coding agent on the long-context preset it names (Qwen2.5-7B-Instruct-1M, 1010000 tokens)."""
    out = tmp_path / "agent"
    proc = run_cli("compile", "qwen2.5-7b-instruct-1m", "--cluster", MIXED, "--workload", workload("coding_agent"),
                   "--out", str(out), "--no-onnx", "--no-sensitivity")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((out / "plan.json").read_text())
    # Qwen2.5-7B keeps 28 layers x 4 KV heads x 128 x 2 x 2 bytes per token: a 200K+1K request holds ~11.5 GB of KV.
    per_request = 28 * 4 * 128 * 2 * 2 * (plan["mean_input_len"] + plan["mean_output_len"])
    weights = 7.62e9 * 2
    from backends.registry import device

    for p in plan["pools"]:
        if p["role"] in ("decode", "colocated"):
            room = p["devices_per_replica"] * device(p["device"]).capacity_bytes - weights
            assert p["batch"] * per_request <= room


def test_a_request_longer_than_the_models_context_is_bad_input(tmp_path):
    """llama-3.1-70b has 131072 tokens of context; a coding-agent turn reaches 200000 + 4096."""
    proc = run_cli("compile", "llama-3.1-70b", "--cluster", MIXED, "--workload", workload("coding_agent"), "--out",
                   str(tmp_path))
    assert_one_line_error(proc, "coding_agent.yaml", "agent-turn", "204096", "131072")


def test_infeasible_budget_exits_3_naming_power(tmp_path):
    proc = run_cli("compile", "llama-3.1-70b", "--cluster", MIXED, "--workload", workload("chat"),
                   "--power-budget", "0.5kW", "--out", str(tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert "power budget 500 W <" in proc.stderr and "needed" in proc.stderr and "Traceback" not in proc.stderr


def test_impossible_slo_exits_3_naming_the_slo(tmp_path):
    proc = run_cli("compile", "llama-3.1-70b", "--cluster", MIXED, "--workload", workload("chat"),
                   "--slo-tpot-ms", "0.5", "--out", str(tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert "TPOT SLO 0.5 ms <" in proc.stderr


def test_malformed_cluster_exits_2(tmp_path):
    bad = tmp_path / "cluster.yaml"
    bad.write_text("name: x\ndevices:\n  - device: nvidia-h100-sxm\n    count: -3\n")
    assert_one_line_error(run_cli("compile", "llama-tiny", "--cluster", str(bad), "--workload", workload("chat"),
                                   "--out", str(tmp_path / "o")), "cluster.yaml", "devices[0].count")


def test_schema_command_prints_every_schema():
    proc = run_cli("schema")
    assert proc.returncode == 0
    assert set(json.loads(proc.stdout)) == {"cluster", "workload", "services", "plan"}


def test_plan_loads_back_and_validates(compiled, tmp_path):
    from compiler.plan.checks import load_plan

    _, raw, _ = compiled("chat", *NO_SENSITIVITY)
    (tmp_path / "plan.json").write_bytes(raw)
    plan = load_plan(tmp_path)
    assert plan.dumps().encode() == raw
    broken = json.loads(raw)
    broken["pools"][0]["replicas"] = "many"
    (tmp_path / "plan.json").write_text(json.dumps(broken))
    from compiler.ir.errors import BadInput

    with pytest.raises(BadInput, match=r"field pools\[0\]\.replicas"):
        load_plan(tmp_path)


def test_pareto_writes_its_frontier_files(tmp_path):
    """`gimletc pareto` end to end: the picture, one CSV row per (target, curve) with every baseline among the
    curves, and the JSON frontier. (The sweep's values: `test_the_frontier_of_a_hand_made_fleet_is_hand_arithmetic`
    in tests/compiler/test_value.py.)"""
    import csv

    proc = run_cli("pareto", "llama-3.1-8b", "--cluster", str(REPO / "examples" / "clusters" / "nvidia.yaml"),
                   "--workload", workload("chat"), "--out", str(tmp_path), "--points", "3")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "pareto.png").stat().st_size > 10_000
    rows = list(csv.DictReader((tmp_path / "pareto.csv").open()))
    assert len({r["tpot_target_ms"] for r in rows if r["curve"] == "heterogeneous"}) == 3
    curves = {r["curve"] for r in rows}
    assert {"vendor-islands", "no-disaggregation", "greedy"} <= curves and any(c.startswith("iso-power:")
                                                                                for c in curves)
    frontier = json.loads((tmp_path / "pareto.json").read_text())
    assert frontier["points"] and frontier["objective"] == "tokens-per-watt" and len(frontier["tpot_targets_ms"]) == 3
