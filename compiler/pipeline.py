"""The compile driver: named phases, their timings, and the on-disk trace cache.

Every command runs the same ordered steps and stops where it needs to:
``resolve -> trace -> partition`` (``gimletc inspect``); ``compiler.compile``
continues with ``cost``, ``place`` and ``emit``. Each step is timed.

[Note: trace cache] Tracing a full-size model takes seconds; its result, the
BlockGraph, is a pure function of the model config, the traced phases, the
torch and transformers versions and gimletc's own tracing and accounting code.
The cache key hashes all of these, so a changed rule or library re-traces.
Entries are JSON (loading runs no code) written atomically; an unreadable
entry is ignored and replaced.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

from compiler.ir.block_graph import BlockGraph
from compiler.ir.paths import cache_dir
from compiler.model_spec import ModelSpec, resolve_model

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parent.parent
#: Source files whose change invalidates cached traces.
_TRACE_CODE = ("compiler/trace.py", "compiler/partition.py", "cost_models/op_accounting.py",
               "compiler/ir/block_graph.py", "compiler/ir/poly.py")


@dataclass
class Timings:
    """Wall time per named step, in the order the steps ran."""

    steps: list[tuple[str, float]] = field(default_factory=list)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.steps.append((name, time.perf_counter() - start))

    def as_dict(self) -> dict[str, float]:
        return {name: round(s, 3) for name, s in self.steps}


def _code_fingerprint() -> str:
    h = hashlib.sha256()
    for rel in _TRACE_CODE:
        h.update((_ROOT / rel).read_bytes())
    for dist in ("torch", "transformers"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=missing".encode())
    return h.hexdigest()


def trace_cache_key(spec: ModelSpec, phases: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    h.update(spec.sha256.encode())
    h.update(",".join(phases).encode())
    h.update(_code_fingerprint().encode())
    return h.hexdigest()[:32]


def _load_cached(path: Path) -> BlockGraph | None:
    try:
        return BlockGraph.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring unreadable trace cache entry %s (%s)", path, e)
        return None


def _store(path: Path, graph: BlockGraph) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(graph.dumps())
        os.replace(tmp, path)
    except OSError as e:  # a read-only cache must not fail the command
        log.warning("could not write trace cache %s (%s)", path, e)


def block_graph(model: str | ModelSpec, *, phases: tuple[str, ...] = ("prefill", "decode"), use_cache: bool = True,
                timings: Timings | None = None, progress: Callable[[str], None] | None = None) -> BlockGraph:
    """Resolve, trace and partition `model` (or load the cached result).

    >>> g = block_graph("llama-tiny")   # doctest: +SKIP
    >>> g.num_layers                    # doctest: +SKIP
    2
    """
    timings = timings or Timings()
    note = progress or (lambda _msg: None)
    with timings.step("resolve"):
        spec = model if isinstance(model, ModelSpec) else resolve_model(model)
    cacheable = use_cache and spec.kind != "callable"  # a callable's code can change under the same name
    path = cache_dir() / "traces" / f"{trace_cache_key(spec, phases)}.json" if cacheable else None
    if path is not None:
        with timings.step("cache"):
            cached = _load_cached(path)
        if cached is not None:
            return cached.with_model(spec.name)
    from compiler.partition import partition
    from compiler.trace import quiet_export_logs, trace

    note(f"tracing {spec.name} ({', '.join(phases)}) with torch.export on the meta device")
    with quiet_export_logs():
        with timings.step("trace"):
            traced = trace(spec, phases)
        note(f"partitioning {spec.name} into blocks")
        with timings.step("partition"):
            graph = partition(traced)
    if path is not None:
        _store(path, graph)
    return graph

