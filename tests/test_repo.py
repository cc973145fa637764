"""Repository contracts: the README's commands, CI, and the import layering."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_opens_with_two_commands_and_ci_runs_the_second():
    commands = readme_commands()
    assert len(commands) == 2
    assert "gimletc" in commands[0] and "pytest" in commands[1]
    assert "torch" not in commands[0] or "2.13.0" in commands[0]
    ci = (REPO / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()
    assert "requirements/constraints.txt" in commands[1]
    assert "torch==2.13.0" in (REPO / "requirements" / "constraints.txt").read_text()


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (function-level imports included)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _package(path: Path) -> str:
    """The layer a source file belongs to: ``compiler/trace``, ``compiler/driver.py``, ``cost_models``, ..."""
    rel = path.relative_to(REPO).parts
    if rel[0] == "compiler" and len(rel) > 2:
        return f"compiler/{rel[1]}"
    return "/".join(rel[:2]) if rel[0] == "compiler" else rel[0]


_OURS = ("compiler", "cost_models", "backends")
#: [Note: layering] What each layer may import of ours. The flow reads from the tree: ir <- cost_models <- backends
#: <- stages (inputs, trace, cost, place, emit, runtime, calibrate) <- driver <- cli. A stage imports only the
#: stages it needs; the placement sees only ir; the plan contract (compiler/plan: plan.json's schema, its checks,
#: the manifest) sits under every stage that writes or reads a plan, and the runtime reads only the plan directory.
_ALLOWED = {
    "compiler/ir": ("compiler.ir",),
    "cost_models": ("compiler.ir", "cost_models"),
    "backends": ("compiler.ir", "cost_models", "backends"),
    "compiler/inputs": ("compiler.ir", "cost_models", "backends", "compiler.inputs"),
    "compiler/trace": ("compiler.ir", "cost_models", "compiler.inputs", "compiler.trace"),
    # the pool options compute from values the inputs resolved (`compiler.inputs.served`): no registry of backends
    "compiler/cost": ("compiler.ir", "cost_models", "compiler.inputs", "compiler.cost"),
    "compiler/place": ("compiler.ir", "compiler.place"),
    # the plan contract (plan.json's schema, its checks, the directory's manifest): below every stage that reads it
    "compiler/plan": ("compiler.ir", "backends", "compiler.plan"),
    "compiler/emit": ("compiler.ir", "cost_models", "backends", "compiler.inputs", "compiler.trace", "compiler.plan",
                      "compiler.emit"),
    # the runtime reads a plan directory; it generates each stage's program as compile writes it
    "compiler/runtime": ("compiler.ir", "compiler.plan", "backends", "compiler.inputs", "compiler.emit.stage_programs",
                         "compiler.runtime"),
    # replan reads engines' metrics and a plan, and re-solves it with the driver's passes
    # ... and what it was compiled from (compiler.compile_inputs, standard library only); it re-costs a device
    # type as the sensitivity analysis does (compiler.sensitivity.recosted)
    "compiler/replan": ("compiler.ir", "compiler.plan", "cost_models", "backends", "compiler.inputs", "compiler.cost",
                        "compiler.place", "compiler.emit", "compiler.deploy", "compiler.replan", "compiler.driver",
                        "compiler.compile_inputs", "compiler.sensitivity", "compiler.services"),
    # deploy reads a plan directory, as the runtime does, and starts public engines on it
    "compiler/deploy": ("compiler.ir", "compiler.plan", "backends", "compiler.emit", "compiler.deploy"),
    # calibrate is a pipeline of its own: it reuses the driver's cached block_graph pass
    # ... and `calibrate --engine` starts an engine as deploy --local does and costs it as estimate does
    "compiler/calibrate": ("compiler.ir", "cost_models", "backends", "compiler.inputs", "compiler.trace",
                           "compiler.calibrate", "compiler.driver", "compiler.deploy", "compiler.cost"),
    "compiler/driver.py": ("compiler.ir", "compiler.plan", "cost_models", "backends", "compiler.inputs", "compiler.trace",
                           "compiler.cost", "compiler.place", "compiler.emit", "compiler.runtime",
                           "compiler.sensitivity"),
    # the sensitivity analysis re-costs and re-solves a prepared compile; the driver runs it
    "compiler/sensitivity.py": ("compiler.ir", "compiler.plan", "cost_models", "backends", "compiler.inputs", "compiler.cost",
                                "compiler.place", "compiler.emit"),
    # the Python API sits beside the CLI at the top ([Note: plan API layering] in compiler/api.py)
    "compiler/compile_inputs.py": ("compiler.ir",),
    "compiler/api.py": ("compiler.ir", "compiler.plan", "compiler.compile_inputs", "compiler.driver", "compiler.sweep", "compiler.emit",
                        "compiler.runtime", "compiler.inputs", "compiler.explanation", "compiler.services"),
    "compiler/explanation.py": ("compiler.ir", "compiler.plan", "cost_models", "compiler.compile_inputs", "compiler.driver",
                                "compiler.cost", "compiler.place", "compiler.emit"),
    # the frontier sweeps a prepared compile: the driver's passes, the placement, the emitted latencies
    "compiler/sweep.py": ("compiler.ir", "compiler.plan", "compiler.cost", "compiler.place", "compiler.emit", "compiler.driver",
                          "compiler.sweep"),
    # many models on one fleet: each service prepared as a compile prepares it, placed together, emitted each
    "compiler/services.py": ("compiler.ir", "compiler.plan", "compiler.inputs", "compiler.cost", "compiler.place", "compiler.emit",
                             "compiler.driver", "compiler.compile_inputs", "compiler.services"),
    # the fitter that makes the shipped constants: it costs measured rows as estimate does, with calibrate's fitter
    "compiler/fidelity": ("compiler.ir", "cost_models", "backends", "compiler.inputs", "compiler.cost",
                          "compiler.calibrate", "compiler.driver", "compiler.fidelity"),
    "compiler/__init__.py": (),
}
#: Third-party packages a layer must not import (the rest of its imports are free).
_FORBIDDEN_THIRD_PARTY = {
    "compiler/cost": ("torch", "transformers", "ortools"),
    "compiler/runtime": ("ortools",),
    "compiler/deploy": ("ortools", "torch", "transformers"),
    "cost_models": ("transformers", "ortools", "pydantic", "yaml"),  # torch only for its flop_counter formulas
}


def _sources():
    for top in _OURS:
        for path in sorted((REPO / top).rglob("*.py")):
            yield path, _package(path)


def test_layers_point_one_way():
    """See [Note: layering]: each layer imports only the layers below it, and nothing imports the CLI."""
    for path, layer in _sources():
        if layer == "compiler/cli":
            continue
        allowed = _ALLOWED[layer]
        for name in _imports(path):
            if name.split(".")[0] in _OURS and name != "compiler":
                assert name.startswith(allowed), f"{path.relative_to(REPO)} ({layer}) imports {name}"
            assert not name.startswith("compiler.cli"), f"{path.relative_to(REPO)} imports the CLI ({name})"


def _module_graph() -> dict[str, set[str]]:
    """Each module of ours (and each script of tools/, by its bare name as the scripts import each other) -> the
    modules of ours it imports at any depth; ``from pkg import sub`` counts as importing ``pkg.sub``."""
    paths = {}
    for top in _OURS:
        for path in (REPO / top).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            paths[name.removesuffix(".__init__")] = path
    paths |= {path.stem: path for path in (REPO / "tools").glob("*.py")}
    graph = {}
    for name, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & paths.keys()
                found |= subs | ({node.module} if len(subs) < len(node.names) else set())
        graph[name] = (found & paths.keys()) - {name}
    return graph


def test_no_import_circles_anywhere_including_tools():
    """No module reaches itself through what it imports (type-checking and function-level imports count too):
    a circle means two modules are one concept split, or one reaches up for what belongs lower."""
    graph = _module_graph()
    circles = []
    for start in sorted(graph):
        seen, stack = set(), [(start, (start,))]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join(path + (start,)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + (nxt,)))
        if circles:
            break
    assert not circles, circles[0]


def test_placement_imports_only_ir_and_ortools():
    """The placement sees pool options, never the model, the cost models or the vendors: the standard library,
    OR-Tools and numpy (what OR-Tools itself needs; the pruning compares options in arrays) only."""
    import sys

    for path in (REPO / "compiler" / "place").rglob("*.py"):
        for name in _imports(path):
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top in ("ortools", "numpy", "__future__") or \
                name.startswith(("compiler.ir", "compiler.place")), f"{path.name}: {name}"


#: Files that run inside a serving engine's own interpreter (its venv's torch), never imported by gimletc.
_ENGINE_SIDE = REPO / "compiler" / "deploy" / "engine_site"


def test_forbidden_third_party_imports():
    for path, layer in _sources():
        if _ENGINE_SIDE in path.parents:
            continue
        for name in _imports(path):
            assert name.split(".")[0] not in _FORBIDDEN_THIRD_PARTY.get(layer, ()), \
                f"{path.relative_to(REPO)} ({layer}) imports {name}"


def test_costing_looks_nothing_up_and_reads_no_files():
    """[Note: values flow down] The cost models and the pool options (compiler/cost) are arithmetic on values
    handed to them: a device id is resolved to its spec, its engine's costs and its calibration once, at the
    boundary (`compiler.inputs.served`). So neither imports a registry (`backends.registry`,
    `backends.engines`), the calibration store's readers or the cache paths, nor calls open(), a Path read or
    a json/yaml load."""
    banned_calls = {"open", "read_text", "read_bytes", "load", "loads", "safe_load"}
    paths = [*(REPO / "cost_models").rglob("*.py"), *(REPO / "compiler" / "cost").rglob("*.py")]
    for path in paths:
        where = path.relative_to(REPO)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                assert name not in banned_calls, f"{where} calls {name}() (line {node.lineno})"
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [a.name for a in node.names]
                assert not node.module.startswith(("backends.registry", "backends.engines", "compiler.ir.files")), \
                    f"{where} imports {node.module}"
                if node.module == "compiler.ir.calibration":
                    readers = [n for n in names if n.startswith(("load", "save", "cached", "profile"))]
                    assert not readers, f"{where} imports the calibration store's {readers}"
            if isinstance(node, ast.Import):
                assert not [a.name for a in node.names if a.name.startswith(("backends.", "compiler.ir.files"))], where


def test_no_module_imports_another_modules_private_names():
    for top in (*_OURS, "tools", "tests"):
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                    assert not private, f"{path.relative_to(REPO)} imports private {private} from {node.module}"


def test_import_compiler_is_cheap():
    """`import compiler` (and the CLI's parser) loads none of torch, ortools, pydantic or rich."""
    import subprocess
    import sys

    heavy = ("torch", "transformers", "ortools", "pydantic", "rich")
    code = ("import sys, compiler; compiler.__all__; "
            f"print(' '.join(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr


def test_ir_is_standard_library_only():
    import sys

    for path in (REPO / "compiler" / "ir").rglob("*.py"):
        for name in _imports(path):
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top in ("compiler", "__future__"), f"{path.name}: {name}"


def test_no_file_over_600_lines_and_no_function_over_80():
    """STYLE.md: split a file past ~600 lines; a function past 80 lines is split unless it says why in a note
    (``[Note:`` in its docstring)."""
    long_files, long_functions = [], []
    for top in ("compiler", "cost_models", "backends", "tools"):
        for path in sorted((REPO / top).rglob("*.py")):
            text = path.read_text()
            if len(text.splitlines()) > 600:
                long_files.append(f"{path.relative_to(REPO)}: {len(text.splitlines())}")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > 80 and "[Note:" not in (ast.get_docstring(node) or ""):
                        long_functions.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines}")
    assert not long_files and not long_functions, long_files + long_functions
