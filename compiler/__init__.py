"""gimletc: a heterogeneous multi-silicon placement compiler for LLM inference.

The public Python API (`compiler.api`): ``compile(...) -> Plan``, ``Plan.save`` / ``Plan.load`` /
``Plan.summary()`` / ``Plan.run(...)`` / ``Plan.serve(...)`` / ``Plan.manifests()``, ``estimate(...)``,
``pareto(...)`` and ``explain(...)``; examples/api_example.py uses them all. Importing this package is cheap:
every name below loads its module on first use, so ``import compiler`` pulls in none of torch, ortools,
pydantic or rich (a test checks this).

>>> import compiler
>>> "llama-3.1-70b" in compiler.preset_names()
True
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    # values (compiler.ir)
    "BadInput": "compiler.ir.errors", "GimletError": "compiler.ir.errors", "Infeasible": "compiler.ir.errors",
    "RuntimeFailure": "compiler.ir.errors", "UnsupportedModel": "compiler.ir.errors",
    "Block": "compiler.ir.block_graph", "BlockGraph": "compiler.ir.block_graph", "Edge": "compiler.ir.block_graph",
    "OpCost": "compiler.ir.block_graph", "Work": "compiler.ir.block_graph", "Poly": "compiler.ir.poly",
    "Precision": "compiler.ir.precision", "PoolOption": "compiler.ir.pool_option",
    "Estimate": "compiler.ir.estimate",
    # inputs
    "ModelSpec": "compiler.inputs.model_spec", "preset_names": "compiler.inputs.model_spec",
    "resolve_model": "compiler.inputs.model_spec", "load_cluster": "compiler.inputs",
    "load_workload": "compiler.inputs",
    # the plan API (compiler.api): compile -> Plan; Plan.save / load / summary / run / serve / manifests
    "compile": "compiler.api", "Plan": "compiler.api", "ServicesPlan": "compiler.api", "CompileInputs": "compiler.api", "RunResult": "compiler.api",
    "estimate": "compiler.api", "pareto": "compiler.api", "Frontier": "compiler.api", "explain": "compiler.explanation",
    # the driver's passes and the plan file
    "Timings": "compiler.driver", "block_graph": "compiler.driver", "summarize": "compiler.trace.summarize",
    "load_plan": "compiler.plan.schema",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'compiler' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
