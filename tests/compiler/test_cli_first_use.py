"""What a new user meets at the command line: one-line errors that name the input and the fix, quiet
success, and units where numbers are read or printed."""

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
    assert "Writing model shards" not in proc.stderr  # nor transformers' progress bar
    _same_artifacts_written_here(out, tmp_path / "here")


def _same_artifacts_written_here(out, here):
    """The compile wrote its artifacts in a child process ([Note: artifacts in the background]); writing the same
    plan in this process gives the same bytes, file for file, manifest included."""
    from compiler.emit.artifacts import write_plan_dir
    from compiler.plan.checks import load_plan

    plan = load_plan(out)
    bare = plan.model_copy(update={
        "pools": [p.model_copy(update={"stages": [s.model_copy(update={"execution": None}) for s in p.stages]})
                  for p in plan.pools],
        "transfers": [t.model_copy(update={"detail": None}) for t in plan.transfers]})
    write_plan_dir(bare, "llama-tiny", here)
    written = sorted(p.relative_to(here).as_posix() for p in here.rglob("*") if p.is_file())
    assert "manifest.json" in written and any(name.startswith("onnx/") for name in written)
    for name in written:
        assert (out / name).read_bytes() == (here / name).read_bytes(), name


# --------------------------------------------------------------------------------------- estimate


@pytest.mark.parametrize("flags,needles", [
    (["--count", "8", "--tp", "8"], ["--tp 8", "4 attention heads"]),
    (["--count", "3", "--tp", "3", "--engine", "vllm"], ["--tp 3", "vLLM splits attention heads evenly"]),
    (["--count", "4", "--pp", "4", "--tp", "1"], ["--pp 4", "2 layers"]),
    (["--batch", "1000000", "--input-len", "400"], ["--batch 1000000", "GB per cpu-host", "at most"]),
])
def test_estimate_refuses_impossible_shapes(flags, needles):
    extra = [] if "--batch" in flags else ["--batch", "1"]
    proc = run_cli("estimate", "llama-tiny", "--device", "cpu-host", *flags, *extra)
    assert_one_line_error(proc, *needles)


@pytest.mark.parametrize("device,flags,needles", [
    ("aws-trn2", ["--context-buckets", "128,256"], ["--context-buckets 128,256", "cannot hold 400 tokens",
                                                    "at least 400"]),
    ("aws-trn2", ["--token-buckets", "256,480", "--context-buckets", "512"], ["--token-buckets 256,480",
                                                                              "cannot hold 500 tokens"]),
    ("aws-trn2", ["--context-buckets", "2k,8k"], ["--context-buckets '2k,8k'", "separated by commas"]),
    ("cpu-host", ["--context-buckets", "512"], ["cpu-host's engine compiles no program per length", "drop them"]),
])
def test_estimate_refuses_buckets_the_request_or_the_device_cannot_use(device, flags, needles):
    proc = run_cli("estimate", "llama-tiny", "--device", device, "--batch", "1", "--input-len", "400",
                   "--output-len", "100", *flags)
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
                   str(tmp_path / "out"), "--time-limit", "20", "--manifests", "none",
                   "--no-sensitivity", "--no-report", "--no-onnx")  # the placement says it: nothing after it needed
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


# ------------------------------------------------------------------------------ a new user's first commands


TINY_CLUSTER = str(REPO / "examples" / "tiny_split" / "cluster.yaml")


def _listening_port():
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def test_serve_on_a_port_in_use_is_bad_input_before_any_worker_starts(tmp_path):
    """It used to start the workers, then exit 3 ("infeasible", uvicorn's startup failure) 12.8 s in. The port is
    bound first: the plan directory is not even read (this one does not exist)."""
    sock, port = _listening_port()
    with sock:
        proc = run_cli("serve", str(tmp_path / "no-plan"), "--port", str(port))
    assert_one_line_error(proc, f"--port {port}", "already in use", "pick another --port")


def test_serve_port_out_of_range_is_one_line_not_a_traceback(tmp_path):
    assert_one_line_error(run_cli("serve", str(tmp_path), "--port", "70000"), "--port", "70000", "1 to 65535")


def _plan_with_config(tmp_path, **config):
    """A plan directory as far as `run` reads it before starting workers: its model's config."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_run_checks_token_ids_against_the_vocabulary_before_starting_workers(tmp_path):
    """No manifest, no stage programs: had `run` started workers (as it did, 11 s in), this would fail on those."""
    plan = _plan_with_config(tmp_path, vocab_size=512, max_position_embeddings=512)
    assert_one_line_error(run_cli("run", plan, "--prompt-ids", "1,99999"), "--prompt-ids", "99999", "[0, 512)")


def test_run_checks_the_length_against_the_context_before_starting_workers(tmp_path):
    plan = _plan_with_config(tmp_path, vocab_size=512, max_position_embeddings=512)
    # 3 prompt tokens + 600 new > 512; at most 512 - 3 = 509 new tokens fit
    assert_one_line_error(run_cli("run", plan, "--prompt-ids", "1,2,3", "--max-new-tokens", "600"),
                          "--prompt-ids", "context of 512", "at most 509 new tokens")


def test_estimate_beyond_a_rotary_context_warns_with_the_engine_flags_and_predicts():
    """Llama-3.1-8B's context is 131,072 tokens (its config.json); engines run a rotary model past it when told to
    (the published Neuron runs of Llama-2 at 8,192 tokens did), so 1,000,000 + 256 is predicted, with a warning
    naming the flags that allow it."""
    proc = run_cli("estimate", "llama-3.1-8b", "--device", "nvidia-h100-sxm", "--count", "8", "--batch", "1",
                   "--input-len", "1000000", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["input_len"] == 1000000 and r["ttft_ms"] > 0
    for needle in ("--input-len 1000000", "131,072", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", "--context-length"):
        assert needle in proc.stderr and needle in r["warnings"][0]


def test_estimate_beyond_learned_positions_is_bad_input(tmp_path):
    """OPT keeps a table of learned positions (no rotary key in its config): no engine runs past its rows."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 64,
                                  "num_hidden_layers": 2, "num_attention_heads": 4, "ffn_dim": 128,
                                  "vocab_size": 256, "max_position_embeddings": 512, "word_embed_proj_dim": 64}))
    proc = run_cli("estimate", str(config), "--device", "cpu-host", "--batch", "1", "--input-len", "600",
                   "--output-len", "10")
    assert_one_line_error(proc, "--input-len 600", "512", "learned table", "qwen2.5-7b-instruct-1m")


def test_estimate_defaults_fit_a_short_context():
    """llama-tiny's context is 512: the default 1024 + 256 scaled by 512 / 1280 is 409 + 102."""
    proc = run_cli("estimate", "llama-tiny", "--device", "cpu-host", "--batch", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert (r["input_len"], r["output_len"]) == (409, 102)


@pytest.mark.parametrize("flags,needles", [
    (["--context-len", "10000000"], ["--context-len 10,000,000", "131,072", "at most 131,071"]),
    (["--prompt-len", "200000"], ["--prompt-len 200,000", "131,072"]),
])
def test_inspect_beyond_the_context_is_bad_input(flags, needles):
    assert_one_line_error(run_cli("inspect", "llama-3.1-8b", *flags), *needles)


def test_fractional_shares_that_miss_traffic_are_bad_input(tmp_path):
    """0.4 + 0.2 = 0.6: a class is likely missing; it used to be renormalised to 2/3 and 1/3 without a word."""
    workload = tmp_path / "w.yaml"
    workload.write_text("name: w\nclasses:\n  - {name: a, share: 0.4, input_len: 100, output_len: 10}\n"
                        "  - {name: b, share: 0.2, input_len: 100, output_len: 10}\n")
    proc = run_cli("compile", "llama-tiny", "--cluster", TINY_CLUSTER, "--workload", str(workload), "--out",
                   str(tmp_path / "out"))
    assert_one_line_error(proc, str(workload), "share", "= 0.6", "sum to 1")


def test_whole_number_shares_are_weights():
    from compiler.inputs.workload import Workload

    w = Workload(name="w", classes=[{"name": "a", "share": 3, "input_len": 100, "output_len": 10},
                                    {"name": "b", "share": 1, "input_len": 100, "output_len": 10}])
    assert [c.share for c in w.classes] == [0.75, 0.25]


@pytest.mark.parametrize("count", ["10000000000", "1.0e+10"])
def test_an_absurd_count_is_bad_input_naming_the_field(tmp_path, count):
    """It used to reach the solver (or loop for minutes in the link queues' Erlang recursion)."""
    cluster = tmp_path / "c.yaml"
    cluster.write_text(f"name: x\npower_budget_kw: 10\ndevices:\n  - {{device: nvidia-h100-sxm, count: {count}}}\n")
    proc = run_cli("compile", "llama-tiny", "--cluster", str(cluster), "--workload", TINY_CHAT, "--out",
                   str(tmp_path / "out"))
    assert_one_line_error(proc, str(cluster), "devices[0].count", "at most 1,000,000")
    assert "time-limit" not in proc.stderr


def test_an_absurd_power_budget_is_named_as_such(tmp_path):
    """1e30kW has its unit; it used to get "expected a power with its unit"."""
    proc = run_cli("compile", "llama-tiny", "--cluster", TINY_CLUSTER, "--workload", TINY_CHAT, "--power-budget",
                   "1e30kW", "--out", str(tmp_path))
    assert_one_line_error(proc, "--power-budget", "1e30kW", "beyond any site", "10GW")
    assert "expected a power with its unit" not in proc.stderr


def test_a_negative_power_budget_is_named_as_such(tmp_path):
    """-5kW has its unit; the sign is what is wrong, not the unit."""
    proc = run_cli("compile", "llama-tiny", "--cluster", TINY_CLUSTER, "--workload", TINY_CHAT, "--power-budget=-5kW",
                   "--out", str(tmp_path))
    assert_one_line_error(proc, "--power-budget", "-5kW", "must be positive")
    assert "expected a power with its unit" not in proc.stderr


def test_estimate_names_an_unknown_device_before_a_missing_batch():
    """The device is the first thing to fix; the missing --batch was reported instead."""
    proc = run_cli("estimate", "llama-3.1-8b", "--device", "nvidia-h900", "--count", "1")
    assert_one_line_error(proc, "nvidia-h900", "did you mean", "nvidia-h20", "known ids")
    assert "--batch" not in proc.stderr


def test_count_any_buys_at_most_the_largest_count():
    from compiler.inputs.cluster import MAX_DEVICES, Cluster

    c = Cluster(name="x", power_budget_kw=9e6, devices=[{"device": "nvidia-h100-sxm", "count": "any"}])
    assert c.inventory() == {"nvidia-h100-sxm": MAX_DEVICES}  # 9 GW / 1,275 W would be 7 million


def test_no_spurious_too_short_problem_when_the_only_device_is_wrong(tmp_path):
    """`devices` has min_length 1; its one failing entry used to add "(and 1 more problem: devices: Tuple should have
    at least 1 item ...)"."""
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: x\npower_budget_kw: 10\ndevices:\n  - {device: nvidia-h100-sxm, count: 0}\n")
    proc = run_cli("compile", "llama-tiny", "--cluster", str(cluster), "--workload", TINY_CHAT, "--out",
                   str(tmp_path / "out"))
    assert_one_line_error(proc, "devices[0].count")
    assert "more problem" not in proc.stderr and "at least 1 item" not in proc.stderr


def test_verbose_logs_each_step():
    proc = run_cli("-v", "inspect", "llama-tiny", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "INFO compiler.driver: resolve ..." in proc.stderr and "INFO compiler.driver: resolve:" in proc.stderr


def test_run_stage_table_keeps_stage_names_whole(capsys):
    """On an 80-column stdout (not a terminal) the table used to cut cells: "pool0…", "nvidi…"."""
    from compiler.cli.run import render

    stage = {"role": "colocated", "device": "nvidia-h100-sxm", "execution": "emulated on the host CPU",
             "compute_s": {"prefill": 0.01, "decode": 0.02}, "steps": 8, "predicted_ttft_ms": 13.0,
             "predicted_tpot_ms": 4.1}
    render({"execution": [], "requests": [], "speculative": [],
            "stages": [{**stage, "stage": f"pool{i}/r0/s0/tp0"} for i in range(2)],
            "transfers": [{"kind": "kv_pages", "measured_bytes": 0, "predicted_bytes": 0,
                           "how": "prompt tokens x plan bytes_per_token"}],
            "measured": {"output_tokens": 8, "wall_s": 0.1, "output_tokens_per_s": 80.0}})
    out = capsys.readouterr().out
    for whole in ("pool0/r0/s0/tp0", "pool1/r0/s0/tp0", "nvidia-h100-sxm", "emulated on the host CPU",
                  "predicted TTFT ms", "prompt tokens x plan bytes_per_token"):
        assert whole in out, whole
    assert "…" not in out


def test_a_clean_stop_leaves_no_log_folder_and_a_failure_keeps_it(tmp_path):
    """Every run and serve used to leave a gimletc-run-* folder in the temp folder, successful ones included."""
    from compiler.runtime.launch import LocalWorkers

    clean = LocalWorkers(tmp_path, (), port=0)
    clean.start()
    clean.stop()
    assert not clean.log_dir.exists()
    failed = LocalWorkers(tmp_path, (), port=0)
    failed.start()
    failed.stop(keep_logs=True)  # the failure's message names the logs
    assert failed.log_dir.is_dir()
    chosen = LocalWorkers(tmp_path, (), port=0, log_dir=tmp_path / "logs")
    chosen.start()
    chosen.stop()
    assert (tmp_path / "logs").is_dir()  # the caller's folder is the caller's


def test_derate_provenance_cites_no_file_a_user_lacks():
    """The estimate footer cited ../shared/reference/measurements.csv, which is not in the repository."""
    from backends import registry
    from backends.engines import all_costs
    from cost_models.derates import derate_for

    texts = [derate_for(d.family, device_id=d.id).provenance for d in registry.all_devices()]
    texts += [source for engine in all_costs().values() for _, source in engine.provenance]
    assert texts and not [t for t in texts if "../" in t or "shared/reference" in t]


def test_a_bad_plan_fails_the_same_in_the_artifacts_child(tmp_path):
    """A child's BadInput is the parent's own, with the child's message (a fresh interpreter: one thread, so it
    forks)."""
    import subprocess
    import sys

    code = f"""
from compiler.driver import block_graph
from compiler.emit.artifacts import Options
from compiler.emit.background import Artifacts
from compiler.emit.handmade import PoolShape, handmade_plan
from compiler.plan.schema import Draft
from compiler.ir.errors import BadInput

plan = handmade_plan(block_graph("llama-tiny"), [PoolShape("a", "colocated"), PoolShape("b", "colocated")])
draft = Draft(pool="b", model="llama-tiny-draft", model_sha256="0", k=3)
bad = plan.model_copy(update={{"pools": [plan.pools[0].model_copy(update={{"draft": draft}}), plan.pools[1]]}})
job = Artifacts.start(bad, "llama-tiny", {str(tmp_path)!r}, Options(onnx=False))
assert job.child is not None
try:
    job.result(bad)
except BadInput as e:
    print("BadInput:", e)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "BadInput: plan: pool a: draft.pool 'b' is not a pool with role drafter" in proc.stdout


def test_a_type_that_cannot_hold_the_weights_is_never_told_to_widen_them(tmp_path):
    """One Cerebras CS-3 (44 GB of SRAM) cannot hold Llama-3.1-70B at fp8 (70.6 GB); at 16 bits it would need
    141 GB. CS-3 stores fp8 and fp4 and computes at 16 bits, so the hint is the smaller dtype it stores, never
    "--dtype fp16". d-Matrix Corsair has no bf16 rate at all: at bf16 it is told the dtype it runs."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"name": "one-wafer", "devices": [
        {"device": "cerebras-cs3", "count": 1}, {"device": "dmatrix-corsair", "count": 8},
        {"device": "nvidia-h100-sxm", "count": 8}]}))
    for dtype, want, never in (("fp8", "--dtype fp4 stores the weights in less memory on cerebras-cs3", "fp16"),
                               ("bf16", "--dtype fp8 runs on dmatrix-corsair", "fp16 runs")):
        proc = run_cli("compile", "llama-3.1-70b", "--cluster", str(cluster), "--workload",
                       str(REPO / "examples" / "workloads" / "chat.yaml"), "--dtype", dtype, "--no-sensitivity",
                       "--out", str(tmp_path / dtype))
        warned = [line for line in proc.stderr.splitlines() if "left out of the placement" in line]
        assert any(want in line for line in warned), proc.stderr[-2000:]
        assert not any(f"--dtype {never}" in line for line in warned if "cerebras" in line), warned
