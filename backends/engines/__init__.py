"""Serving engines as plug-ins, found as `backends.registry` finds silicon: the built-in modules, then the
``gimletc.engines`` entry points. Each module holds everything about its engine (`backends.engines.base`);
no other module compares an engine's name (tests/backends/test_engines.py checks the tree).

>>> serving_engine("sglang").display
'SGLang'
>>> serving_engine("tgi")
Traceback (most recent call last):
...
compiler.ir.errors.BadInput: unknown serving engine 'tgi'; use one of vllm, sglang, trtllm, optimum-habana, external
>>> engine_costs("vllm", "0.12.0").overlap, engine_costs("vllm").overlap
(False, True)
"""

from __future__ import annotations

import importlib
from functools import lru_cache

from backends.engines.base import ServingEngine
from backends.plugins import with_plugins
from cost_models.engines import GENERIC as GENERIC_COSTS
from cost_models.engines import Engine, at_version
from compiler.ir.errors import BadInput

BUILTIN = ("vllm", "sglang", "trtllm", "optimum_habana", "external")
#: The engine-neutral costs a pool gets when its cluster entry names no engine (`cost_models.engines.GENERIC`).
GENERIC = "generic"
ENTRY_POINT_GROUP = "gimletc.engines"


@lru_cache(maxsize=1)
def serving_engines() -> tuple[ServingEngine, ...]:
    """Every engine: the built-in ones in `BUILTIN`'s order, then the plug-ins by entry-point name."""
    return with_plugins([importlib.import_module(f"backends.engines.{m}").ENGINE for m in BUILTIN],
                        ENTRY_POINT_GROUP, "serving engine", lambda e: e.name)


def find(name: str) -> ServingEngine | None:
    """The engine called `name`, or None (``generic``, the cost model's engine-neutral overheads, is none)."""
    return next((e for e in serving_engines() if e.name == name), None)


def serving_engine(name: str) -> ServingEngine:
    """The engine called `name`; an unknown name lists the known ones."""
    found = find(name)
    if found is None:
        raise BadInput(f"unknown serving engine {name!r}; use one of {', '.join(e.name for e in serving_engines())}")
    return found


def displays(engines: list[ServingEngine] | tuple[ServingEngine, ...]) -> str:
    """Their names as people write them, as a list in prose: "vLLM, SGLang and TensorRT-LLM"."""
    names = [e.display for e in engines]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def costed_names() -> list[str]:
    """The names a cluster entry's or a measurement's ``engine`` may take: ``generic`` and every engine costed
    under its own name, sorted."""
    return sorted([GENERIC] + [e.name for e in serving_engines() if e.costs is not None])


def engine_costs(name: str, version: str | None = None) -> Engine:
    """The step costs of engine `name` (``generic``: the engine-neutral ones); with `version`, as that release runs
    by default (`cost_models.engines.at_version`). An unknown name lists the known ones."""
    if name == GENERIC:
        return GENERIC_COSTS
    found = find(name)
    if found is None or found.costs is None:
        raise BadInput(f"unknown serving engine {name!r}; use one of {', '.join(costed_names())}")
    return found.costs if version is None else at_version(found.costs, version)


def all_costs() -> dict[str, Engine]:
    """Every engine's step costs by name, ``generic`` first (what the sweep fitter fits and scores)."""
    return {GENERIC: GENERIC_COSTS, **{e.name: e.costs for e in serving_engines() if e.costs is not None}}
