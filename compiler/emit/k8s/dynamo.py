"""The ``dynamo`` target: NVIDIA Dynamo ``DynamoGraphDeployment`` objects (``nvidia.com/v1beta1``).

Before: a `Plan` whose pools carry their `EngineLaunch`, and when known the
`Cluster`. After: one DynamoGraphDeployment ``<name>-<engine>`` per engine the
CUDA pools run (``backendFramework`` vllm, sglang or trtllm: a graph runs one
framework), plus the runtime-needs ConfigMap (`engine_pod.runtime_needs`).

[Note: how the dynamo target deploys]
- Components: a ``frontend`` (``python3 -m dynamo.frontend --http-port
  8000``, Dynamo's OpenAI API and router) and one component per pool, of type
  ``worker`` (colocated), ``prefill`` or ``decode``, with the pool's replicas,
  ``multinode.nodeCount`` when a replica spans nodes (the operator then
  starts the engine across the nodes), and a pod template whose container
  ``main`` carries image, command, args, env and the device limit of one pod.
- Dynamo workers do not run the engine's own server: they run Dynamo's
  wrapper of the engine, ``python3 -m dynamo.vllm --model M [vLLM engine
  args] --disaggregation-mode prefill|decode``, ``python3 -m dynamo.sglang
  --model-path M [SGLang server args]`` and ``python3 -m dynamo.trtllm
  --model-path M --served-model-name S --extra-engine-args FILE
  [--disaggregation-mode ...]``, as Dynamo's examples do
  (github.com/ai-dynamo/dynamo examples/backends/{vllm,sglang,trtllm}/deploy/
  v1beta1/disagg.yaml, vLLM at commit 14a3b0d9, disagg-multinode.yaml at
  04521f47). The launch's engine flags are kept; its ``--host``/``--port``
  are dropped (the frontend owns the HTTP port; SGLang keeps ``--host`` for
  its bootstrap server), and TensorRT-LLM's ``trtllm-serve`` flags are
  renamed to ``dynamo.trtllm``'s spellings (``--tp_size`` ->
  ``--tensor-parallel-size``, ``--extra_llm_api_options`` ->
  ``--extra-engine-args``, ...; these renames follow the wrapper's argument
  names and were not run here).
- Images are Dynamo's runtime images (``nvcr.io/nvidia/ai-dynamo/
  <framework>-runtime:1.3.1``), which carry the wrapper; the engine release is
  Dynamo's pin, not the launch's ``version``.
- Dynamo runs its frameworks on CUDA only: pools on other platforms (ROCm,
  Gaudi, Neuron, CPU), external pools and pools without a launch are not
  emitted; they are listed in the runtime-needs ConfigMap with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.engines import displays, serving_engine, serving_engines
from compiler.emit.k8s import objects as k8s
from compiler.emit.k8s.engine_pod import base_env, limits_of, plan_volumes, runtime_needs, scheduling, served_pools
from compiler.emit.k8s.pool_deployment import NOTE, PoolDeployment, by_file_name, check_name, labels

if TYPE_CHECKING:
    from compiler.plan.schema import Plan
    from compiler.inputs.cluster import Cluster

TARGET = "dynamo"
DYNAMO_RELEASE = "1.3.1"
_TYPE = {"colocated": "worker", "prefill": "prefill", "decode": "decode"}


def image(framework: str) -> str:
    """Dynamo's runtime image of `framework` (an engine's ``dynamo_runtime``)."""
    return f"nvcr.io/nvidia/ai-dynamo/{serving_engine(framework).dynamo_runtime}:{DYNAMO_RELEASE}"


def manifests(plan: Plan, cluster: Cluster | None = None, *, name: str = "gimletc") -> dict[str, dict[str, Any]]:
    """One DynamoGraphDeployment per framework of the CUDA pools (see [Note: how the dynamo target deploys])."""
    check_name(name)
    serving, skipped = served_pools(plan, cluster, skip_reason)
    groups: dict[str, list[PoolDeployment]] = {}
    for d in serving:
        groups.setdefault(d.pool.launch.engine, []).append(d)
    objs = [graph(name, framework, pools, skipped) for framework, pools in sorted(groups.items())]
    return by_file_name(objs + runtime_needs(plan, name, skipped, TARGET))


def skip_reason(d: PoolDeployment) -> str:
    """Why Dynamo cannot run launched pool `d` ('' when it can)."""
    launch = d.pool.launch
    if serving_engine(launch.engine).dynamo_runtime is None or launch.platform != "cuda":
        frameworks = displays([e for e in serving_engines() if e.dynamo_runtime is not None])
        return f"Dynamo runs {frameworks} on CUDA only; this pool runs {launch.engine} on {launch.platform}"
    return ""


def worker_args(d: PoolDeployment) -> list[str]:
    """The launch's engine flags in the Dynamo wrapper's form (see the module docstring)."""
    launch = d.pool.launch
    return serving_engine(launch.engine).dynamo_args(list(launch.command), d.pool.role, launch.served_model_name)


def component(name: str, d: PoolDeployment) -> dict[str, Any]:
    launch = d.pool.launch
    volumes, mounts = plan_volumes(name, launch)
    main = k8s.container("main", image(launch.engine), ["python3", "-m", f"dynamo.{launch.engine}"],
                         base_env(launch), mounts, limits=limits_of(d), args=worker_args(d))
    spec: dict[str, Any] = {"containers": [main], **scheduling(d)}
    if volumes:
        spec["volumes"] = volumes
    out: dict[str, Any] = {"name": d.key, "type": _TYPE[d.pool.role], "replicas": d.pool.replicas}
    if d.spans_nodes:
        out["multinode"] = {"nodeCount": d.pods_per_replica}
    out["podTemplate"] = {"metadata": {"labels": labels(name, "engine", d.key)}, "spec": spec}
    return out


def frontend(framework: str) -> dict[str, Any]:
    main = k8s.container("main", image(framework), ["python3", "-m", "dynamo.frontend"], [], [],
                         args=["--http-port", "8000"])
    return {"name": "frontend", "type": "frontend", "replicas": 1, "podTemplate": {"spec": {"containers": [main]}}}


def graph(name: str, framework: str, pools: list[PoolDeployment], skipped: dict[str, str]) -> dict[str, Any]:
    note = (f"the plan's {framework} pools on CUDA ({', '.join(d.pool.name for d in pools)}) as one Dynamo graph; "
            f"Dynamo's frontend routes requests over them")
    if skipped:
        note += f"; not in this graph: {', '.join(sorted(skipped))} (see {name}-needs-runtime)"
    meta = k8s.metadata(f"{name}-{framework}", labels(name, "dynamo"), {NOTE: note})
    return {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment", "metadata": meta,
            "spec": {"backendFramework": framework,
                     "components": [frontend(framework)] + [component(name, d) for d in pools]}}
