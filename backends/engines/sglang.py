"""SGLang: its release and images, ``sglang.launch_server`` flags, KV transfer backends, router
(sglang-router), metrics and torch.distributed across nodes.

tests/emit/test_engine_launch.py parses every SGLang launch with the argument parser of sglang `SGLANG_RELEASE`
(CI installs it without its dependencies, GIMLETC_SGLANG_PYTHON).
"""

from __future__ import annotations

import shlex

from backends.engines.base import (PORT, TORCH_DTYPE, Connector, KvEnd, LaunchInputs, RouterCommand, ServingEngine,
                                   Upstreams, drop_flags)
from cost_models.engines import fitted

SGLANG_RELEASE = "0.5.23"
SGLANG_ROUTER_RELEASE = "0.3.2"
SGLANG_DOCKER = "https://docs.sglang.ai/get_started/install.html (lmsysorg/sglang images, CUDA and ROCm tags)"
SGLANG_PD_DOC = "https://docs.sglang.ai/advanced_features/pd_disaggregation.html"

SGLANG_DEFAULTS = ("https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py "
                   "(chunked_prefill_size 8192 on 80+ GB GPUs; max_prefill_tokens 16384)")
SGLANG_OVERLAP = ("https://lmsys.org/blog/2024-12-04-sglang-v0-4/#zero-overhead-batch-scheduler (overlap scheduler on "
                  "by default since v0.4; server_args disable_overlap_schedule=False)")
SGLANG_MIXING = ("https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py "
                 "(enable_mixed_chunk: bool = False; managers/scheduler.py get_next_batch_to_run prefers a new "
                 "prefill batch to the running decode batch)")

_KV_DTYPE = {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3", "fp4": "fp8_e4m3"}
DIST_PORT = 20000


class Sglang(ServingEngine):
    name = "sglang"
    display = "SGLang"
    release = SGLANG_RELEASE
    # step costs fitted on the sweeps' SGLang rows; by default it keeps prefill apart from decodes, so a wave stays
    # whole and no request waits for one (admission not fitted)
    costs = fitted("sglang", SGLANG_DEFAULTS, SGLANG_OVERLAP, SGLANG_MIXING, mixes_prefill=False,
                   request_overhead_s=0.08853, admission_fraction=0.0001, unseen=("admission_fraction",))
    even_heads = True  # its copy of vLLM's QKVParallelLinear
    connectors = (
        Connector("sglang", "cuda", "cuda", "nixl", "cuda", SGLANG_PD_DOC),
        Connector("sglang", "rocm", "rocm", "mori", "cuda", SGLANG_PD_DOC + " (MoRI on AMD Instinct)"),
    )
    # SGLang's prefill time is exported only per stage, with labels that vary between versions: not read
    # ([Note: queue and service histograms] in `compiler.deploy.metrics`)
    metrics = {
        "ttft_s": ("sglang:time_to_first_token_seconds",),
        "tpot_s": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "request_tpot_s": ("sglang:time_per_output_token_seconds",),
        "queue_s": ("sglang:queue_time_seconds",),
        "requests": ("sglang:num_requests",),
        "prompt_tokens": ("sglang:prompt_tokens",),
        "generation_tokens": ("sglang:generation_tokens",),
        "prompt_len": ("sglang:prompt_tokens_histogram",),
        "output_len": ("sglang:generation_tokens_histogram",),
        "waiting": ("sglang:num_queue_reqs",),
        "running": ("sglang:num_running_reqs",),
        "kv_usage": ("sglang:token_usage",),
    }
    multi_node = "torch.distributed"
    dynamo_runtime = "sglang-runtime"

    def launch(self, x: LaunchInputs, connector: KvEnd | None) -> tuple[list[str], dict[str, str]]:
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", x.model, "--host", "0.0.0.0",
                "--port", str(PORT), "--served-model-name", x.served_model_name,
                "--tp-size", str(x.tp), "--pp-size", str(x.pp), "--max-running-requests", str(x.batch),
                "--chunked-prefill-size", str(x.budget), "--context-length", str(x.max_model_len),
                "--dtype", TORCH_DTYPE[x.dtype], "--kv-cache-dtype", _KV_DTYPE[x.kv_dtype],
                "--page-size", str(x.block_size)]
        if x.dtype == "fp8":
            argv += ["--quantization", "fp8"]
        if x.moe and x.tp > 1:
            argv += ["--ep-size", str(x.tp)]
        if connector is not None:
            argv += ["--disaggregation-mode", "prefill" if connector.role == "kv_producer" else "decode",
                     "--disaggregation-transfer-backend", connector.name]
        return argv, {}

    def router(self, up: Upstreams, image: str | None) -> RouterCommand:
        argv = ["python3", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(PORT)]
        if up.pd:
            argv += ["--pd-disaggregation", *[a for u in up.first for a in ("--prefill", u)],
                     *[a for u in up.decode for a in ("--decode", u)]]
        else:
            argv += ["--worker-urls", *up.first]
        return RouterCommand(router="sglang-router", version=SGLANG_ROUTER_RELEASE, image=None, command=argv,
                             policy="cache_aware")

    def dynamo_args(self, argv: list[str], role: str, served_model_name: str) -> list[str]:
        return drop_flags(argv[3:], ("--port",))  # python3 -m sglang.launch_server --flags...

    def multi_node_commands(self, argv: list[str]) -> tuple[list[str], list[str]]:
        dist = (f' --dist-init-addr "$LWS_LEADER_ADDRESS:{DIST_PORT}" --nnodes "$LWS_GROUP_SIZE"'
                ' --node-rank "$LWS_WORKER_INDEX"')
        both = ["sh", "-c", "exec " + shlex.join(argv) + dist]
        return both, both


ENGINE = Sglang()
