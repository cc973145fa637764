"""Built-in modules plus out-of-tree plug-ins found through an entry-point group: how both registries (silicon
backends, `backends.registry`; serving engines, `backends.engines`) are filled."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import TypeVar

from compiler.ir.errors import BadInput

log = logging.getLogger(__name__)

T = TypeVar("T")


def with_plugins(builtin: Sequence[T], group: str, what: str, key: Callable[[T], str]) -> tuple[T, ...]:
    """`builtin`, then each plug-in of entry-point `group` by entry-point name (a class is instantiated). A plug-in
    that fails to load is skipped with a warning (it must not take the others down); two entries with the same
    `key` are refused, naming them."""
    found = list(builtin)
    for ep in sorted(metadata.entry_points(group=group), key=lambda e: e.name):
        try:
            plugin = ep.load()
        except Exception as e:  # a broken plugin must not take the rest down
            log.warning("skipping %s plugin %s (%s: %s)", what, ep.name, type(e).__name__, e)
            continue
        found.append(plugin() if isinstance(plugin, type) else plugin)
    keys = [key(x) for x in found]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise BadInput(f"{what} {sorted(dupes)} registered twice; uninstall the duplicate plugin")
    return tuple(found)
