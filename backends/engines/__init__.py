"""Serving engines as plug-ins, found as `backends.registry` finds silicon: the built-in modules, then the
``gimletc.engines`` entry points. Each module holds everything about its engine (`backends.engines.base`);
no other module compares an engine's name (tests/backends/test_engines.py checks the tree).

>>> serving_engine("sglang").display
'SGLang'
>>> serving_engine("tgi")
Traceback (most recent call last):
...
compiler.ir.errors.BadInput: unknown serving engine 'tgi'; use one of vllm, sglang, trtllm, external
"""

from __future__ import annotations

import importlib
import logging
from functools import lru_cache
from importlib import metadata

from backends.engines.base import ServingEngine
from compiler.ir.errors import BadInput

log = logging.getLogger(__name__)

BUILTIN = ("vllm", "sglang", "trtllm", "external")
ENTRY_POINT_GROUP = "gimletc.engines"


@lru_cache(maxsize=1)
def serving_engines() -> tuple[ServingEngine, ...]:
    """Every engine: the built-in ones in `BUILTIN`'s order, then the plug-ins by entry-point name."""
    found: list[ServingEngine] = [importlib.import_module(f"backends.engines.{m}").ENGINE for m in BUILTIN]
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            plugin = ep.load()
        except Exception as e:  # a broken plugin must not take the others down
            log.warning("skipping serving-engine plugin %s (%s: %s)", ep.name, type(e).__name__, e)
            continue
        found.append(plugin() if isinstance(plugin, type) else plugin)
    names = [e.name for e in found]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise BadInput(f"serving engines registered twice: {sorted(dupes)}; uninstall the duplicate plugin")
    return tuple(found)


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
