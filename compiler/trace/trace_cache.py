"""The on-disk cache of traced BlockGraphs, and of the transformers config facts stage programs need.

[Note: trace cache] Tracing a full-size model takes seconds; its result, the
BlockGraph, is a pure function of the model config, the traced phases, the
torch and transformers versions and gimletc's own tracing and accounting code.
The cache key hashes all of these, so a changed rule or library re-traces.
Entries are JSON (loading runs no code) written atomically; an unreadable
entry is ignored and replaced, and a read-only cache only costs a warning.
`config_facts` caches the same way what emitting a plan reads from
transformers (the config with its defaults filled in, the RoPE scaling), so a
compile whose trace is cached never imports torch or transformers (3 s).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Callable
from importlib import metadata
from pathlib import Path

from compiler.inputs.model_spec import ModelSpec
from compiler.ir.block_graph import BlockGraph
from compiler.ir.files import atomic_write_text, cache_dir

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parents[2]
#: Source files outside ``compiler/trace/`` whose change invalidates cached traces. Every module of
#: ``compiler/trace/`` counts too, found by listing the folder, so a new pass that changes what is traced (as
#: `compiler.trace.absorbed_mla` did) cannot be left out of the key.
_TRACE_CODE = ("cost_models/op_accounting.py", "compiler/ir/block_graph.py", "compiler/ir/poly.py",
               "compiler/ir/precision.py", "compiler/inputs/model_spec.py")


def trace_sources() -> tuple[str, ...]:
    """The source files the cache key hashes, relative to the repository root, in a fixed order."""
    package = sorted(p.relative_to(_ROOT).as_posix() for p in (_ROOT / "compiler" / "trace").glob("*.py"))
    return (*package, *_TRACE_CODE)


def _code_fingerprint() -> str:
    h = hashlib.sha256()
    for rel in trace_sources():
        h.update(rel.encode())
        h.update((_ROOT / rel).read_bytes())
    for dist in ("torch", "transformers"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=missing".encode())
    return h.hexdigest()


def cache_key(spec: ModelSpec, phases: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    h.update(spec.sha256.encode())
    h.update(",".join(phases).encode())
    h.update(_code_fingerprint().encode())
    return h.hexdigest()[:32]


def entry_path(spec: ModelSpec, phases: tuple[str, ...]) -> Path | None:
    """Where `spec`'s trace is cached; None for ``module:callable`` models, whose code can change under one name."""
    if spec.kind == "callable":
        return None
    return cache_dir() / "traces" / f"{cache_key(spec, phases)}.json"


def load(path: Path) -> BlockGraph | None:
    try:
        return BlockGraph.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring unreadable trace cache entry %s (%s)", path, e)
        return None


def store(path: Path, graph: BlockGraph) -> None:
    try:
        atomic_write_text(path, graph.dumps())
    except OSError as e:  # a read-only cache must not fail the command
        log.warning("could not write trace cache %s (%s)", path, e)


def config_facts(spec: ModelSpec, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`compute()` (facts of `spec` that transformers derives from its config), cached per config,
    transformers version and emitting code (``compiler/emit/weights.py`` computes the RoPE scaling)."""
    h = hashlib.sha256(spec.sha256.encode())
    try:
        h.update(f"transformers={metadata.version('transformers')}".encode())
    except metadata.PackageNotFoundError:
        h.update(b"transformers=missing")
    h.update((_ROOT / "compiler/emit/weights.py").read_bytes())
    path = cache_dir() / "configs" / f"{h.hexdigest()[:32]}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable config cache entry %s (%s)", path, e)
    text = json.dumps(compute(), sort_keys=True)
    try:
        atomic_write_text(path, text)
    except OSError as e:
        log.warning("could not write config cache %s (%s)", path, e)
    return json.loads(text)  # what a warm run reads, exactly (JSON has no tuples or integer keys)
