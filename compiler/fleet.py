"""The validated inputs of ``gimletc compile``: a cluster file and a workload file.

A *cluster* is what a provider owns: device pools (catalog id, count, node
size), the aggregate bandwidth between pools, and a power budget. A *workload*
is what it serves: request classes with length distributions and shares,
prefix-cache reuse, an arrival rate (or ``maximise``), and latency targets.

Both are frozen pydantic models that reject unknown fields, so a typo such as
``power_budget_k`` fails instead of being ignored. `load_cluster` and
`load_workload` turn every failure (missing file, YAML syntax, a wrong field, an
unknown device) into one `BadInput` line naming the file, the field path and the
fix; no traceback reaches a user. `schemas` gives the JSON Schemas that
``gimletc schema`` prints.

Units are in the field names: the files speak in kW, GB/s (1e9 bytes/s), us and
ms; the methods hand the compiler SI units (W, bytes/s, s).

>>> c = Cluster(name="lab", devices=[{"device": "nvidia-h100-sxm", "count": 8}], power_budget_kw=10)
>>> c.inventory(), c.power_budget_w
({'nvidia-h100-sxm': 8}, 10000.0)
>>> w = Workload(name="chat", classes=[{"name": "chat", "share": 1, "input_len": 1024,
...                                     "output_len": {"mean": 256, "max": 1024}}])
>>> w.kv_tokens_per_request_mean, w.kv_tokens_per_request_max
(1280.0, 2048)
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backends import registry
from compiler.ir.errors import BadInput

GB = 1e9  # the files' GB/s are decimal gigabytes, as vendors quote them


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------------------------- cluster


class Inventory(_Frozen):
    """One device pool: how many of one catalog device the cluster owns."""

    device: str = Field(description="catalog id, as listed by `gimletc backends`")
    count: int = Field(ge=1, description="devices of this type (chips, cards or systems, per the catalog's form)")
    node_size: int | None = Field(
        default=None, ge=1, description="devices per node (scale-up domain); default: the catalog's devices_per_node")

    @field_validator("device")
    @classmethod
    def _known_device(cls, device_id: str) -> str:
        known = [d.id for d in registry.all_devices()]
        if device_id not in known:
            close = difflib.get_close_matches(device_id, known, n=3)
            hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
            raise ValueError(f"{device_id!r} is not a known device id; {hint}`gimletc backends` lists the ids")
        return device_id


class LinkSpeed(_Frozen):
    """Bandwidth and latency of a network path."""

    bandwidth_gb_per_s: float = Field(default=50.0, gt=0, description="aggregate bandwidth, GB/s (1e9 bytes/s)")
    latency_us: float = Field(default=20.0, ge=0, description="one-way latency per message, microseconds")


class LinkSpec(LinkSpeed):
    """The aggregate bandwidth available between two device pools (either direction)."""

    between: tuple[str, str] = Field(description="the two device ids this link joins (order does not matter)")
    bandwidth_gb_per_s: float = Field(gt=0, description="aggregate bandwidth between the pools, GB/s (1e9 bytes/s)")
    latency_us: float = Field(ge=0, description="one-way latency per message, microseconds")


class Cluster(_Frozen):
    """A fleet: device pools, links between pools, and a power budget.

    Pools not joined by an entry in ``links`` talk over ``default_link`` (the
    datacenter network). Within one pool devices use the catalog's scale-out link.
    """

    name: str
    power_budget_kw: float | None = Field(
        default=None, gt=0, description="power envelope in kW; none means unconstrained (a CLI flag may set it)")
    devices: tuple[Inventory, ...] = Field(min_length=1)
    links: tuple[LinkSpec, ...] = ()
    default_link: LinkSpeed = Field(
        default_factory=LinkSpeed, description="network between pools not listed in links")

    @field_validator("devices")
    @classmethod
    def _each_device_once(cls, devices: tuple[Inventory, ...]) -> tuple[Inventory, ...]:
        first: dict[str, int] = {}
        for i, inv in enumerate(devices):
            if inv.device in first:
                raise ValueError(f"{inv.device!r} is listed twice (devices[{first[inv.device]}] and devices[{i}]); "
                                 "merge them into one entry with the summed count")
            first[inv.device] = i
        return devices

    @model_validator(mode="after")
    def _links_join_owned_pools(self) -> Cluster:
        owned = {inv.device for inv in self.devices}
        seen: dict[frozenset[str], int] = {}
        for i, link in enumerate(self.links):
            for device_id in link.between:
                if device_id not in owned:
                    raise ValueError(f"links[{i}].between: {device_id!r} is not in devices; "
                                     f"add it to devices or name one of: {', '.join(sorted(owned))}")
            pair = frozenset(link.between)
            if len(pair) == 1:
                raise ValueError(f"links[{i}].between: both ends are {link.between[0]!r}; a pool's own network "
                                 "comes from the catalog, so list two different devices")
            if pair in seen:
                raise ValueError(f"links[{i}].between: {' <-> '.join(link.between)} is already given by "
                                 f"links[{seen[pair]}]; keep one of them")
            seen[pair] = i
        return self

    def inventory(self) -> dict[str, int]:
        """Device id -> count, in file order."""
        return {inv.device: inv.count for inv in self.devices}

    def node_size(self, device_id: str) -> int:
        """Devices per node for a pool: the file's ``node_size``, else the catalog's."""
        inv = self._pool(device_id)
        return inv.node_size if inv.node_size is not None else registry.device(device_id).devices_per_node

    def link(self, a: str, b: str) -> tuple[float, float]:
        """``(bandwidth_bytes_per_s, latency_s)`` between pools `a` and `b`, in either order.

        ``a == b`` gives one device's scale-out link from the catalog; a pair
        without an entry in ``links`` gets ``default_link``.
        """
        self._pool(a), self._pool(b)
        if a == b:
            out = registry.device(a).scale_out
            if out is not None:
                return out.bw_bytes_per_s, out.latency_s
            speed: LinkSpeed = self.default_link
        else:
            pair = frozenset((a, b))
            speed = next((link for link in self.links if frozenset(link.between) == pair), self.default_link)
        return speed.bandwidth_gb_per_s * GB, speed.latency_us / 1e6

    @property
    def power_budget_w(self) -> float | None:
        return None if self.power_budget_kw is None else self.power_budget_kw * 1e3

    def _pool(self, device_id: str) -> Inventory:
        for inv in self.devices:
            if inv.device == device_id:
                return inv
        raise BadInput(f"cluster {self.name!r} has no {device_id!r} pool; it has {', '.join(self.inventory())}")


# --------------------------------------------------------------------------------------------- workload


class Length(_Frozen):
    """A token-length distribution: its mean and its maximum. A bare integer means mean = max."""

    mean: int = Field(ge=1, description="mean length in tokens")
    max: int = Field(ge=1, description="longest request in tokens (sizes KV capacity)")

    @model_validator(mode="before")
    @classmethod
    def _bare_int(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"mean": value, "max": value}
        return value

    @model_validator(mode="after")
    def _mean_at_most_max(self) -> Length:
        if self.mean > self.max:
            raise ValueError(f"mean {self.mean} > max {self.max}; raise max to at least the mean")
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        as_object = handler(core_schema)
        return {"anyOf": [{"type": "integer", "minimum": 1, "description": "mean = max"}, as_object]}


class RequestClass(_Frozen):
    """One kind of request: its share of traffic, lengths and prefix-cache reuse."""

    name: str
    share: float = Field(gt=0, description="relative weight; shares are normalised to sum to 1")
    input_len: Length = Field(description="prompt tokens: an integer, or {mean, max}")
    output_len: Length = Field(description="generated tokens: an integer, or {mean, max}")
    shared_prefix_len: int = Field(default=0, ge=0, description="tokens of a prefix shared across requests")
    prefix_hit_rate: float = Field(default=0.0, ge=0, le=1,
                                   description="fraction of requests whose shared prefix is already cached")

    @model_validator(mode="after")
    def _prefix_fits_prompt(self) -> RequestClass:
        if self.shared_prefix_len > self.input_len.max:
            raise ValueError(f"shared_prefix_len: {self.shared_prefix_len} is longer than the longest prompt "
                             f"(input_len max {self.input_len.max}); the prefix is part of the prompt")
        return self

    @property
    def prefill_tokens_mean(self) -> float:
        """Prompt tokens computed per request after expected prefix-cache hits."""
        cached = self.prefix_hit_rate * min(self.shared_prefix_len, self.input_len.mean)
        return self.input_len.mean - cached


class Slo(_Frozen):
    """Latency targets; an absent target is not constrained."""

    ttft_ms: float | None = Field(default=None, gt=0, description="time to first token, milliseconds")
    tpot_ms: float | None = Field(default=None, gt=0, description="time per output token after the first, ms")


class Workload(_Frozen):
    """The traffic to serve: request classes, arrival rate and SLOs.

    Class shares are normalised on load, so ``share`` values in a loaded
    workload sum to 1.
    """

    name: str
    classes: tuple[RequestClass, ...] = Field(min_length=1)
    arrival_rate_per_s: Annotated[float, Field(gt=0)] | Literal["maximise"] = Field(
        default="maximise", description="requests per second, or 'maximise' for the highest sustainable rate")
    slo: Slo = Field(default_factory=Slo)

    @field_validator("classes")
    @classmethod
    def _normalise_shares(cls, classes: tuple[RequestClass, ...]) -> tuple[RequestClass, ...]:
        names = [c.name for c in classes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"class names must be unique; {', '.join(repr(n) for n in dupes)} repeats")
        total = sum(c.share for c in classes)
        return tuple(c.model_copy(update={"share": c.share / total}) for c in classes)

    @field_validator("arrival_rate_per_s", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        # Checked here so a bad value gives one clear message, not one per union member.
        if isinstance(value, str):
            if value.strip().lower() in ("maximise", "maximize"):
                return "maximise"
            raise ValueError(f"{value!r} is neither a rate nor 'maximise'; give requests/s (> 0) or 'maximise'")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{value!r} is not a rate; give requests/s (> 0) or 'maximise'")
        if value <= 0:
            raise ValueError(f"{value} requests/s; give a rate > 0, or 'maximise'")
        return value

    def _mean(self, of: typing.Callable[[RequestClass], float]) -> float:
        return sum(c.share * of(c) for c in self.classes)

    @property
    def mean_input_len(self) -> float:
        return self._mean(lambda c: c.input_len.mean)

    @property
    def mean_output_len(self) -> float:
        return self._mean(lambda c: c.output_len.mean)

    @property
    def max_input_len(self) -> int:
        return max(c.input_len.max for c in self.classes)

    @property
    def max_output_len(self) -> int:
        return max(c.output_len.max for c in self.classes)

    @property
    def mean_prefill_tokens(self) -> float:
        """Mean prompt tokens computed per request: input minus expected prefix-cache hits."""
        return self._mean(lambda c: c.prefill_tokens_mean)

    @property
    def kv_tokens_per_request_mean(self) -> float:
        return self.mean_input_len + self.mean_output_len

    @property
    def kv_tokens_per_request_max(self) -> int:
        """Largest context one request can reach (longest prompt + longest output, possibly of different classes)."""
        return self.max_input_len + self.max_output_len


# ---------------------------------------------------------------------------------------------- loading


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster YAML file; any problem raises one-line `BadInput`."""
    return _load(Cluster, path, "cluster", "examples/clusters/")


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload YAML file; any problem raises one-line `BadInput`."""
    return _load(Workload, path, "workload", "examples/workloads/")


def schemas() -> dict[str, dict[str, Any]]:
    """JSON Schemas of the two input files, for ``gimletc schema``."""
    return {"cluster": Cluster.model_json_schema(), "workload": Workload.model_json_schema()}


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


def _load(model: type[_Frozen], path: str | Path, kind: str, examples: str) -> Any:
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
