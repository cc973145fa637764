"""Reading input YAML files into validated, frozen pydantic models, with one-line errors.

`load_yaml` turns every failure (missing file, YAML syntax, a key given twice,
a wrong field) into one `BadInput` line naming the file, the field path and
the fix, with "did you mean" for misspelt fields; no traceback reaches a user.
"""

from __future__ import annotations

import difflib
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from compiler.ir.errors import BadInput


#: No count, length, rate, power or bandwidth in an input file comes near this; beyond it floats lose whole units.
MAX_NUMBER = 1e15


class Frozen(BaseModel):
    """Base of every input model: immutable, unknown fields are errors, numbers finite and below `MAX_NUMBER`."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _sane_number(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
            shown = f"{value:.3g}" if isinstance(value, float) else f"a {len(str(abs(value)))}-digit number"
            raise ValueError(f"{shown} is larger than any real fleet or workload (limit {MAX_NUMBER:.0e}); "
                             "check the units")
        return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that rejects a key given twice in one mapping (YAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping; keep one", mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_yaml(model: type[Frozen], path: str | Path, kind: str, examples: str) -> Any:
    """Read `path` as a `kind` file into `model`; any problem raises one-line `BadInput` pointing at `examples`."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{where}: {kind} file not found; give the path to a {kind} YAML (see {examples})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{where}: cannot read the {kind} file ({type(e).__name__}: {e}); "
                       f"give a readable UTF-8 YAML file") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        raise BadInput(f"{where}: {_yaml_problem(e)}") from None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        fields = ", ".join(model.model_fields)
        raise BadInput(f"{where}: expected a mapping with fields {fields}, got {got}; see {examples}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise BadInput(f"{where}: {_first_problem(model, e)}") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"YAML syntax error{at}: {problem}; fix the indentation, colons or quoting there"


#: How many of the further problems a message lists after the first.
MORE_LISTED = 5


def _first_problem(model: type[BaseModel], e: ValidationError) -> str:
    """Pydantic's first error as ``a.b[2].c: what is wrong and what to do``, then the others (up to five)."""
    errors = e.errors(include_url=False)
    # A collection reported "too short" only because its failing items were dropped is no problem of its own.
    errors = [err for err in errors if not (err["type"] == "too_short" and any(
        len(o["loc"]) > len(err["loc"]) and tuple(o["loc"][:len(err["loc"])]) == tuple(err["loc"]) for o in errors))]
    first, rest = _describe(model, errors[0]), [_describe(model, err) for err in errors[1:]]
    if not rest:
        return first
    listed = " ".join(f"[{i}] {text}" for i, text in enumerate(rest[:MORE_LISTED], start=2))
    listed += " ..." if len(rest) > MORE_LISTED else ""
    return f"{first} (and {len(rest)} more problem{'s' if len(rest) > 1 else ''}: {listed})"


def _describe(model: type[BaseModel], err: Any) -> str:
    """One pydantic error as ``field.path: message``."""
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        known = list(_model_at(model, loc[:-1]).model_fields)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        message = f"unknown field; {hint}allowed here: {', '.join(known)}"
    elif err["type"] == "missing":
        message = "required field is missing; add it (`gimletc schema` shows every field)"
    elif err["type"] == "value_error":
        message = err["msg"].removeprefix("Value error, ")
    else:
        message = f"{err['msg']} (got {_short(err.get('input'))})"
    path = _field_path(loc)
    return f"{path}: {message}" if path else message


def _field_path(loc: tuple[Any, ...]) -> str:
    """``("devices", 2, "count")`` -> ``devices[2].count``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(part)):  # a user's odd key: shown quoted, one line
            out += f"[{str(part)!r}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The model class that a validation-error location points into (for listing its fields)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        field = current.model_fields.get(part)
        if field is None:
            break
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else model


def _unwrap(annotation: Any) -> Any:
    """The model class inside ``tuple[X, ...]``, ``list[X]``, ``X | None``; else the annotation."""
    for arg in typing.get_args(annotation) or ():
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return annotation


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
