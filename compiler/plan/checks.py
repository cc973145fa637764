"""Loading ``plan.json`` (`load_plan`), and what a loaded plan must satisfy beyond its JSON Schema, checked
before anything runs or deploys.

The schema (`compiler.plan.schema.Plan`) fixes types; these checks fix meaning:
catalog device ids, positive counts, a pipeline stage per ``pp`` numbered in
order, devices per replica that split evenly over the workers
(`compiler.plan.topology`), unique pool names, and transfers between pools the
plan has. A plan edited by hand (or tampered with) fails here with `BadInput`
naming the file and field, instead of deep inside the runtime or the manifests.

>>> import json, pathlib
>>> from compiler.plan.schema import Plan
>>> plan = Plan.model_validate_json(pathlib.Path("tests/emit/k8s_golden/plan.json").read_text())
>>> check_plan(plan, "plan.json")
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

from pydantic import ValidationError

from backends.registry import device
from compiler.plan.schema import SCHEMA_VERSION, Plan, Pool
from compiler.ir.errors import BadInput

#: Far beyond any fleet; keeps the worker table (one entry per device) small enough to build.
MAX_DEVICES = 1_000_000


def check_plan(plan: Plan, where: str) -> None:
    """Raise `BadInput` (``plan WHERE: field: problem; fix``) at the first inconsistency."""
    def fail(field: str, problem: str) -> None:
        raise BadInput(f"plan {where}: field {field}: {problem}; recompile the plan rather than edit it")

    for device_id, count in plan.inventory.items():
        _known(device_id, field_path(("inventory", device_id)), fail)
        if not 1 <= count <= MAX_DEVICES:
            fail(field_path(("inventory", device_id)), f"{count} devices is out of range (1 to {MAX_DEVICES:,})")
    names = [p.name for p in plan.pools]
    total = 0
    for i, pool in enumerate(plan.pools):
        if pool.name in names[:i]:
            fail(f"pools[{i}].name", f"{pool.name!r} names two pools (pools[{names.index(pool.name)}] too)")
        total += _check_pool(pool, f"pools[{i}]", fail)
        if total > MAX_DEVICES:
            fail(f"pools[{i}].replicas", f"the pools hold more than {MAX_DEVICES:,} devices")
    for i, t in enumerate(plan.transfers):
        for end in ("src_pool", "dst_pool"):
            if getattr(t, end) not in names:
                fail(f"transfers[{i}].{end}", f"no pool is named {getattr(t, end)!r}")


def field_path(loc: Iterable[Any]) -> str:
    """``("pools", 2, "tp")`` -> ``pools[2].tp``; a key that is not a plain name is quoted, so the path is one line.

    >>> field_path(("pools", 2, "tp")), field_path(("inventory", "a b"))
    ('pools[2].tp', "inventory['a b']")
    """
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{str(part)!r}]"
    return out


def _known(device_id: str, field: str, fail) -> None:
    try:
        device(device_id)
    except BadInput as e:
        fail(field, str(e))


def _check_pool(pool: Pool, at: str, fail) -> int:
    """Check one pool; returns its device count."""
    _known(pool.device, f"{at}.device", fail)
    for field in ("replicas", "devices_per_replica", "tp", "pp", "batch"):
        value = getattr(pool, field)
        if not 1 <= value <= MAX_DEVICES:
            fail(f"{at}.{field}", f"{value} is out of range (1 to {MAX_DEVICES:,})")
    if len(pool.stages) != pool.pp:
        fail(f"{at}.stages", f"{len(pool.stages)} stages but pp is {pool.pp}")
    for k, stage in enumerate(pool.stages):
        if stage.index != k:
            fail(f"{at}.stages[{k}].index", f"{stage.index}; stages are numbered 0 to {pool.pp - 1} in order")
        _known(stage.device, f"{at}.stages[{k}].device", fail)
    workers = pool.tp * pool.pp
    if pool.devices_per_replica % workers:
        fail(f"{at}.devices_per_replica", f"{pool.devices_per_replica} devices do not split over tp x pp = "
                                          f"{workers} workers")
    return pool.replicas * pool.devices_per_replica


def load_plan(path: str | Path) -> Plan:
    """Read and validate ``plan.json`` (a file or the plan directory): its schema, then its meaning
    (`compiler.plan.checks`). Any problem is one `BadInput` naming the file and the field."""
    path = Path(path)
    if path.is_dir():
        path = path / "plan.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"plan {path}: not found; run `gimletc compile ... --out DIR` first") from None
    except OSError as e:
        raise BadInput(f"plan {path}: cannot read ({e.strerror or e}); give the plan directory or its plan.json") from None
    except UnicodeDecodeError as e:
        raise BadInput(f"plan {path}: not UTF-8 text (byte {e.start}); recompile the plan") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"plan {path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except (ValueError, RecursionError) as e:  # e.g. a number of more than 4300 digits, nesting too deep
        raise BadInput(f"plan {path}: not a plan ({type(e).__name__}: {str(e)[:80]}); recompile the plan") from None
    if not isinstance(data, dict):
        raise BadInput(f"plan {path}: expected a JSON object, got {type(data).__name__}; recompile the plan")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise BadInput(f"plan {path}: schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}; "
                       f"recompile it with this gimletc")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise BadInput(f"plan {path}: field {field_path(err['loc']) or '(top level)'}: {err['msg']}; "
                       "recompile the plan") from None
    check_plan(plan, str(path))
    return plan
