"""The manifest targets and the one entry point that builds a target's objects.

| target | what ``DIR/k8s/`` deploys | module |
|---|---|---|
| ``engines`` (the CLI default) | each pool on its public engine, external endpoints, the router | `engines` |
| ``dynamo`` | NVIDIA Dynamo DynamoGraphDeployments (CUDA pools) | `dynamo` |
| ``llm-d`` | vLLM pods behind InferencePools and llm-d's endpoint picker | `llm_d` |
| ``kserve`` | KServe LLMInferenceServices | `kserve` |
| ``gimletc`` (``device-plugin``; ``dra`` with DRA claims) | the reference runtime's workers and driver | `manifests` |

>>> TARGETS[0]
'engines'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compiler.emit.k8s import dynamo, engines, kserve, llm_d
from compiler.emit.k8s import manifests as runtime_manifests
from compiler.ir.errors import BadInput

if TYPE_CHECKING:
    from compiler.plan.schema import Plan
    from compiler.inputs.cluster import Cluster
    from compiler.inputs.workload import Workload

TARGETS = ("engines", "dynamo", "llm-d", "kserve", "gimletc", "device-plugin", "dra")
DEFAULT_TARGET = "engines"
#: The reference runtime's target and its spellings: the gimletc target's ``mode``.
_RUNTIME_MODES = {"gimletc": "device-plugin", "device-plugin": "device-plugin", "dra": "dra"}


def manifests(plan: Plan, cluster: Cluster | None = None, *, target: str | None = None, mode: str | None = None,
              name: str = "gimletc", workload: Workload | None = None) -> dict[str, dict[str, Any]]:
    """Every object of `target`'s deployment of `plan`, keyed by file name (``kustomization.yaml`` lists them).

    `mode` is the older spelling (``device-plugin``, ``dra``); with neither, the reference runtime's manifests
    (``gimletc``), as callers before targets got them. `workload` sets llm-d's prefill threshold.
    """
    chosen = target or mode or "gimletc"
    if chosen not in TARGETS:
        raise BadInput(f"--manifests {chosen!r}: choose one of {', '.join(TARGETS)}")
    if chosen in _RUNTIME_MODES:
        return runtime_manifests.manifests(plan, cluster, mode=_RUNTIME_MODES[chosen], name=name)
    if chosen == "llm-d":
        return llm_d.manifests(plan, cluster, name=name, workload=workload)
    build = {"engines": engines.manifests, "dynamo": dynamo.manifests, "kserve": kserve.manifests}[chosen]
    return build(plan, cluster, name=name)
