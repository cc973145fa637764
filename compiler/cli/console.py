"""How every command talks to the terminal: JSON or a rendered table, progress lines, number formats, and
checking an output path before any work is done."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from compiler.ir.errors import BadInput


def gimletc_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("gimletc")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def output(value: Any, as_json: bool, render: Callable[[Any], None] | None) -> int:
    """Print `value` as JSON (sorted keys) or through its renderer; every command ends here."""
    if as_json or render is None:
        json.dump(value, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        render(value)
    return 0


def progress_printer(enabled: bool) -> Callable[[str], None] | None:
    """A callback printing ``… message`` to stderr, for long passes; None when disabled or stderr is no terminal."""
    if not enabled or not sys.stderr.isatty():
        return None
    from rich.console import Console

    console = Console(stderr=True)
    return lambda msg: console.print(f"[dim]… {msg}[/dim]")


def progress_for(args: argparse.Namespace) -> Callable[[str], None] | None:
    """Progress unless ``--json``, ``-q`` or ``-v`` was given (and only on a terminal): under ``-v`` the passes log
    the same lines, with each step's time."""
    return progress_printer(not getattr(args, "json", False) and not getattr(args, "quiet", False)
                            and not getattr(args, "verbose", False))


def si(value: float, unit: str = "") -> str:
    """``1.5e9`` -> ``1.5G`` (3 significant digits), with an optional unit.

    >>> si(70.55e9, "B"), si(512)
    ('70.5GB', '512')
    """
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}{unit}"
    return f"{value:.3g}{unit}"


def seconds(value: float) -> str:
    """``0.0042`` -> ``4.2 ms``, ``0.479`` -> ``479 ms``, ``7.976`` -> ``7.98 s``, ``95`` -> ``1 min 35 s``.

    >>> seconds(0.0042), seconds(0.479), seconds(7.976), seconds(95)
    ('4.2 ms', '479 ms', '7.98 s', '1 min 35 s')
    """
    if value < 1:
        ms = value * 1e3
        return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"
    if value < 60:
        return f"{value:.3g} s"
    return f"{int(value // 60)} min {round(value % 60)} s"


def timings_line(steps: Mapping[str, float]) -> str:
    """``{"trace": 7.98, "place": 4.51}`` -> ``times: trace 7.98 s, place 4.51 s (total 12.5 s)``.

    Steps under a millisecond are left out.

    >>> timings_line({"inputs": 0.0001, "trace": 7.976, "place": 4.506})
    'times: trace 7.98 s, place 4.51 s (total 12.5 s)'
    """
    shown = [f"{name} {seconds(s)}" for name, s in steps.items() if s >= 1e-3]
    return f"times: {', '.join(shown) or 'none'} (total {seconds(sum(steps.values()))})"


def fitted_tables(title: str, columns: list[tuple[str, str]], rows: list[list[str]], width: int,
                  keys: int = 1, **table_options: Any) -> list[Any]:
    """`rows` as one rich Table if it fits `width` columns, else as several, each repeating the first `keys`.

    Cells are never cut: ids stay whole, and a table too wide for the terminal
    is split rather than squeezed (only a table's last column may wrap).
    `table_options` go to every `rich.table.Table` (box, padding, ...).
    """
    from rich.table import Table

    def cell(text: str) -> int:
        return max((len(line) for line in text.split("\n")), default=0)

    need = [max(cell(columns[c][0]), *(cell(r[c]) for r in rows)) + 3 if rows else 0 for c in range(len(columns))]
    groups: list[list[int]] = [list(range(keys))]
    for c in range(keys, len(columns)):
        if len(groups[-1]) > keys and sum(need[i] for i in groups[-1]) + need[c] + 1 > width:
            groups.append(list(range(keys)))
        groups[-1].append(c)

    def table(cols: list[int], part: str) -> Any:
        t = Table(title=f"{title}{part}", title_justify="left", **table_options)
        for i, c in enumerate(cols):
            name, justify = columns[c]
            t.add_column(name, justify=justify, no_wrap=i < len(cols) - 1, overflow="fold")
        for r in rows:
            t.add_row(*(r[c] for c in cols))
        return t

    if len(groups) == 1:
        return [table(groups[0], "")]
    return [table(cols, f" ({i}/{len(groups)})") for i, cols in enumerate(groups, start=1)]


def check_out_dir(path: str, flag: str = "--out") -> Path:
    """Create `path` if needed and prove it writable now, before any tracing or solving; else `BadInput`."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise BadInput(f"{flag} {path}: is a file, not a directory; give a directory to write into")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".gimletc-write-check-"):
            pass
    except OSError as e:
        raise BadInput(f"{flag} {path}: cannot write there ({e.strerror or e}); choose a writable directory") from None
    return out


def check_out_file(path: str, flag: str = "--out") -> Path:
    """Prove `path` can be written now (without truncating an existing file); else `BadInput`."""
    out = Path(path)
    if out.is_dir():
        raise BadInput(f"{flag} {path}: is a directory; give a file name, e.g. {Path(path) / 'out.csv'}")
    existed = out.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a"):
            pass
    except OSError as e:
        raise BadInput(f"{flag} {path}: cannot write there ({e.strerror or e}); choose a writable path") from None
    if not existed:
        os.unlink(out)
    return out
