"""How every command talks to the terminal: JSON or a rendered table, progress lines, number formats."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable


def output(value: Any, as_json: bool, render: Callable[[Any], None] | None) -> int:
    """Print `value` as JSON (sorted keys) or through its renderer; every command ends here."""
    if as_json or render is None:
        json.dump(value, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        render(value)
    return 0


def progress_printer(enabled: bool) -> Callable[[str], None] | None:
    """A callback printing ``… message`` to stderr, for long passes; None when disabled."""
    if not enabled:
        return None
    from rich.console import Console

    console = Console(stderr=True)
    return lambda msg: console.print(f"[dim]… {msg}[/dim]")


def si(value: float, unit: str = "") -> str:
    """``1.5e9`` -> ``1.5G`` (3 significant digits), with an optional unit.

    >>> si(70.55e9, "B"), si(512)
    ('70.5GB', '512')
    """
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}{unit}"
    return f"{value:.3g}{unit}"
