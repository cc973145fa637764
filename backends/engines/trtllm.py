"""TensorRT-LLM: its release and image, ``trtllm-serve`` flags (the PyTorch backend; options without a flag in a
YAML file), its cache transceiver, ``trtllm-serve disaggregated`` as its router, and Dynamo's spellings."""

from __future__ import annotations

from backends.engines.base import (PLAN_MOUNT, PORT, Connector, KvEnd, LaunchInputs, RouterCommand, ServingEngine,
                                   Upstreams, options_yaml)
from cost_models.engines import SHARED_BUDGET_SOURCE, fitted

TRTLLM_RELEASE = "1.2.0"
TRTLLM_DOCKER = ("https://nvidia.github.io/TensorRT-LLM/installation/containers.html "
                 "(nvcr.io/nvidia/tensorrt-llm/release)")
TRTLLM_OVERLAP = ("https://nvidia.github.io/TensorRT-LLM/torch/features/overlap_scheduler.html (PyTorch backend: "
                  "overlap scheduler enabled by default, disable_overlap_scheduler=False)")
TRTLLM_MIXING = ("https://nvidia.github.io/TensorRT-LLM/features/paged-attention-ifb-scheduler.html (in-flight "
                 "batching: sequences in the context phase are processed together with sequences in generation)")
TRTLLM_DISAGG_DOC = "https://nvidia.github.io/TensorRT-LLM/features/disagg-serving.html"
#: trtllm-serve flag -> dynamo.trtllm flag (None: dropped).
_DYNAMO_FLAGS = {"--tp_size": "--tensor-parallel-size", "--pp_size": "--pipeline-parallel-size",
                 "--ep_size": "--expert-parallel-size", "--max_batch_size": "--max-batch-size",
                 "--max_num_tokens": "--max-num-tokens", "--max_seq_len": "--max-seq-len",
                 "--extra_llm_api_options": "--extra-engine-args", "--host": None, "--port": None,
                 "--backend": None}
DISAGGREGATED_CONFIG = "engines/disaggregated.yaml"


class Trtllm(ServingEngine):
    name = "trtllm"
    display = "TensorRT-LLM"
    release = TRTLLM_RELEASE
    # step costs fitted on the sweeps' TensorRT-LLM rows; its max_num_tokens default is the budget all three share
    costs = fitted("trtllm", SHARED_BUDGET_SOURCE, TRTLLM_OVERLAP, TRTLLM_MIXING, request_overhead_s=0.1115,
                   admission_fraction=0.0001)
    even_heads = True  # assumption: the same rule as vLLM's
    connectors = (Connector("trtllm", "cuda", "cuda", "UCX", "cuda",
                            TRTLLM_DISAGG_DOC + " (cache_transceiver_config backend)"),)
    multi_node_refusal = "TensorRT-LLM across nodes starts under MPI, which this target does not generate"
    dynamo_runtime = "tensorrtllm-runtime"

    def launch(self, x: LaunchInputs, connector: KvEnd | None) -> tuple[list[str], dict[str, str]]:
        argv = ["trtllm-serve", "serve", x.model, "--host", "0.0.0.0", "--port", str(PORT), "--backend", "pytorch",
                "--tp_size", str(x.tp), "--pp_size", str(x.pp), "--max_batch_size", str(x.batch),
                "--max_num_tokens", str(x.budget), "--max_seq_len", str(x.max_model_len)]
        if x.moe and x.tp > 1:
            argv += ["--ep_size", str(x.tp)]
        options = {"kv_cache_config": {"dtype": "fp8" if x.kv_dtype in ("fp8", "fp4") else "auto",
                                       "tokens_per_block": x.block_size}}
        if connector is not None:
            options["cache_transceiver_config"] = {"backend": connector.name}
        path = f"engines/{x.pool}.yaml"
        argv += ["--extra_llm_api_options", f"{PLAN_MOUNT}/{path}"]
        return argv, {path: options_yaml(options)}

    def router(self, up: Upstreams, image: str | None) -> RouterCommand:
        lines = ["hostname: 0.0.0.0", f"port: {PORT}"]
        for key, urls in (("context_servers", up.first), ("generation_servers", up.decode)):
            hosts = [u.removeprefix("http://") for u in urls]
            lines += [f"{key}:", f"  num_instances: {len(hosts)}", "  urls:"] + [f"    - {h}" for h in hosts]
        return RouterCommand(router="trtllm-disaggregated", version=self.release, image=image,
                             command=["trtllm-serve", "disaggregated", "-c", f"{PLAN_MOUNT}/{DISAGGREGATED_CONFIG}"],
                             policy="round_robin", files={DISAGGREGATED_CONFIG: "\n".join(lines) + "\n"})

    def dynamo_args(self, argv: list[str], role: str, served_model_name: str) -> list[str]:
        args = ["--model-path", argv[2], "--served-model-name", served_model_name]  # trtllm-serve serve MODEL
        rest = argv[3:]
        for flag, value in zip(rest[::2], rest[1::2]):
            if _DYNAMO_FLAGS.get(flag, flag) is not None:
                args += [_DYNAMO_FLAGS.get(flag, flag), value]
        if role in ("prefill", "decode"):
            args += ["--disaggregation-mode", role]
        return args


ENGINE = Trtllm()
