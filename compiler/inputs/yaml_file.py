"""Reading input YAML files into validated, frozen pydantic models, with one-line errors.

`load_yaml` turns every failure (missing file, YAML syntax, a key given twice,
a wrong field) into one `BadInput` line naming the file, the field path and
the fix, with "did you mean" for misspelt fields; no traceback reaches a user.
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from compiler.ir.errors import BadInput


class Frozen(BaseModel):
    """Base of every input model: immutable, and unknown fields are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


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


def _first_problem(model: type[BaseModel], e: ValidationError) -> str:
    """Pydantic's first error as ``a.b[2].c: what is wrong and what to do``, plus how many more."""
    errors = e.errors(include_url=False)
    err = errors[0]
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
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{path}: {message}{more}" if path else f"{message}{more}"


def _field_path(loc: tuple[Any, ...]) -> str:
    """``("devices", 2, "count")`` -> ``devices[2].count``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
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
