"""A cached trace is reused only while the code that made it is unchanged ([Note: trace cache]).

The expectation is read from the source, not from `trace_cache`: the gimletc modules that tracing imports,
followed transitively from the entry the driver calls (`compiler.trace.concurrent`), must all be hashed.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from compiler.trace import trace_cache

REPO = Path(__file__).resolve().parents[2]
#: Modules tracing imports whose change cannot change a trace: error messages only.
CANNOT_CHANGE_A_TRACE = {"compiler/ir/errors.py"}


def _local_imports(rel: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse((REPO / rel).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("compiler", "cost_models"):
            candidates = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names if a.name.split(".")[0] in ("compiler", "cost_models")]
        else:
            continue
        for dotted in candidates:
            path = dotted.replace(".", "/") + ".py"
            if (REPO / path).exists():
                found.add(path)
    return found


def _imported_by_tracing() -> set[str]:
    seen, todo = set(), ["compiler/trace/concurrent.py"]
    while todo:
        rel = todo.pop()
        if rel not in seen:
            seen.add(rel)
            todo.extend(_local_imports(rel))
    return seen


def test_every_module_tracing_imports_is_in_the_key():
    imported = _imported_by_tracing()
    assert "compiler/trace/absorbed_mla.py" in imported  # the walk follows imports made inside functions
    missing = imported - set(trace_cache.trace_sources()) - CANNOT_CHANGE_A_TRACE
    assert not missing, f"cached traces would survive a change to {sorted(missing)}"


def test_changing_the_traced_form_changes_the_key(tmp_path, monkeypatch):
    """Editing the module that rewrites MLA decode (or any traced code) gives every model a new key."""
    from compiler.inputs.model_spec import resolve_model

    spec = resolve_model("deepseek-v3-tiny")
    for rel in trace_cache.trace_sources():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    monkeypatch.setattr(trace_cache, "_ROOT", tmp_path)
    before = trace_cache.cache_key(spec, ("prefill", "decode"))
    assert trace_cache.cache_key(spec, ("prefill", "decode")) == before  # deterministic
    edited = tmp_path / "compiler/trace/absorbed_mla.py"
    edited.write_text(edited.read_text() + "\n# the traced form changed\n")
    after_edit = trace_cache.cache_key(spec, ("prefill", "decode"))
    assert after_edit != before
    (tmp_path / "compiler/trace/new_pass.py").write_text("# a new trace pass\n")  # found by listing the folder
    assert trace_cache.cache_key(spec, ("prefill", "decode")) not in (before, after_edit)
