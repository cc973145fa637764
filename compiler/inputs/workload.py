"""The workload file: what a provider serves. Request classes with length distributions and shares,
prefix-cache reuse, an arrival rate (or ``maximise``), and latency targets.

A frozen pydantic model that rejects unknown fields; `compiler.inputs.load_workload`
turns every failure into one line naming file, field and fix.

>>> w = Workload(name="chat", classes=[{"name": "chat", "share": 1, "input_len": 1024,
...                                     "output_len": {"mean": 256, "max": 1024}}])
>>> w.kv_tokens_per_request_mean, w.kv_tokens_per_request_max
(1280.0, 2048)
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from compiler.inputs.yaml_file import Frozen

class Length(Frozen):
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


class RequestClass(Frozen):
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


class Slo(Frozen):
    """Latency targets; an absent target is not constrained."""

    ttft_ms: float | None = Field(default=None, gt=0, description="time to first token, milliseconds")
    tpot_ms: float | None = Field(default=None, gt=0, description="time per output token after the first, ms")


class Workload(Frozen):
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
