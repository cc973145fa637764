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
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_layers_point_one_way():
    """compiler.ir <- cost_models <- backends <- compiler passes: lower layers never import higher ones."""
    allowed = {
        "compiler/ir": ("compiler.ir",),
        "cost_models": ("compiler.ir", "cost_models"),
        "backends": ("compiler.ir", "cost_models", "backends"),
    }
    for folder, ok in allowed.items():
        for path in (REPO / folder).rglob("*.py"):
            for name in _imports(path):
                if name.split(".")[0] in ("compiler", "cost_models", "backends"):
                    assert name.startswith(ok), f"{path.relative_to(REPO)} imports {name}"


def test_ir_is_standard_library_only():
    import sys

    for path in (REPO / "compiler" / "ir").rglob("*.py"):
        for name in _imports(path):
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top in ("compiler", "__future__"), f"{path.name}: {name}"
