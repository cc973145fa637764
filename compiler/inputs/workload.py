"""The workload file: what a provider serves. Request classes with length distributions and shares,
prefix-cache reuse, an arrival rate (or ``maximise``), and latency targets as percentiles.

A frozen pydantic model that rejects unknown fields; `compiler.inputs.load_workload`
turns every failure into one line naming file, field and fix.

Lengths are a bare integer (every request that long), ``{mean, max}``, or a
``{histogram: [[tokens, weight], ...]}``. Instead of ``classes`` a workload
may name a request ``trace`` (CSV or JSONL, one request per line, like the
public Azure LLM inference traces): `compiler.inputs.trace` bins it into
classes by prompt length. SLOs are percentiles (``percentile``, default 90);
a class may carry its own ``slo``, whose fields override the workload's.

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


class TraceSpec(Frozen):
    """A request trace to bin into classes (`compiler.inputs.trace`)."""

    path: str = Field(description="CSV or JSONL, one request per line; relative to the workload file")
    classes: int = Field(default=4, ge=1, le=16, description="classes to bin the requests into, by prompt length")
    use_timestamps: bool = Field(default=True, description="take the arrival rate from the trace's timestamps")

class Length(Frozen):
    """A token-length distribution: its mean and its maximum. A bare integer means mean = max;
    ``{histogram: [[tokens, weight], ...]}`` gives both from the histogram."""

    mean: float = Field(ge=1, description="mean length in tokens")
    max: int = Field(ge=1, description="longest request in tokens (sizes KV capacity)")

    @model_validator(mode="before")
    @classmethod
    def _bare_int_or_histogram(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"mean": value, "max": value}
        if isinstance(value, dict) and "histogram" in value:
            rest = set(value) - {"histogram"}
            if rest:
                raise ValueError(f"give a histogram or {{mean, max}}, not both (also got {', '.join(sorted(rest))})")
            return _from_histogram(value["histogram"])
        return value

    @model_validator(mode="after")
    def _mean_at_most_max(self) -> Length:
        if self.mean > self.max:
            raise ValueError(f"mean {self.mean:g} > max {self.max}; raise max to at least the mean")
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        as_object = handler(core_schema)
        return {"anyOf": [{"type": "integer", "minimum": 1, "description": "mean = max"}, as_object]}


def _from_histogram(rows: Any) -> dict[str, float]:
    """``[[tokens, weight], ...]`` -> ``{mean, max}``; a malformed histogram is a ValueError naming the row."""
    if not isinstance(rows, (list, tuple)) or not rows:
        raise ValueError("histogram: give a non-empty list of [tokens, weight] pairs")
    total = weighted = 0.0
    longest = 0
    for i, row in enumerate(rows):
        ok = isinstance(row, (list, tuple)) and len(row) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in row)
        if not ok or row[0] < 1 or row[1] < 0 or row[0] != int(row[0]):
            raise ValueError(f"histogram[{i}]: {row!r} is not [tokens >= 1 (whole), weight >= 0]")
        total += row[1]
        weighted += row[0] * row[1]
        longest = max(longest, int(row[0])) if row[1] > 0 else longest
    if total <= 0:
        raise ValueError("histogram: the weights sum to zero; give at least one positive weight")
    return {"mean": weighted / total, "max": longest}


class Slo(Frozen):
    """Latency targets at a percentile of requests; an absent target is not constrained."""

    ttft_ms: float | None = Field(default=None, gt=0, description="time to first token, milliseconds")
    tpot_ms: float | None = Field(default=None, gt=0, description="time per output token after the first, ms")
    percentile: float | None = Field(default=None, gt=0, lt=100,
                                     description="the percentile of requests the targets bind (default 90)")


DEFAULT_PERCENTILE = 90.0


#: How far fractional shares may sum from 1 (rounded thirds, 0.33 x 3, are 1% short) before they are a mistake.
SHARE_SUM_TOLERANCE = 0.011


class RequestClass(Frozen):
    """One kind of request: its share of traffic, lengths, prefix-cache reuse and, optionally, its own SLO."""

    name: str
    share: float = Field(gt=0, description="fraction of the traffic (the classes' shares sum to 1), or a whole-number "
                                           "weight (3 and 1: three quarters and one quarter)")
    input_len: Length = Field(description="prompt tokens: an integer, or {mean, max}")
    output_len: Length = Field(description="generated tokens: an integer, or {mean, max}")
    shared_prefix_len: int = Field(default=0, ge=0, description="tokens of a prefix shared across requests")
    prefix_hit_rate: float = Field(default=0.0, ge=0, le=1,
                                   description="fraction of requests whose shared prefix is already cached")
    slo: Slo | None = Field(default=None, description="this class's targets; unset fields take the workload's")

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


#: Per-token acceptance rate assumed when a workload drafts without giving one: Leviathan et al. 2023
#: (https://arxiv.org/abs/2211.17192, table 3) measure 0.55-0.8 for drafters 10-100x smaller than their
#: targets; 0.7 is the middle of that range (assumption for any given pair and traffic).
DEFAULT_ACCEPTANCE_RATE = 0.7
#: Tokens drafted per verification when not given: Chen et al. 2023 (https://arxiv.org/abs/2302.01318) draft
#: K = 4 for Chinchilla 70B from a 4B drafter (1.9-2.5x faster decoding).
DEFAULT_DRAFT_TOKENS = 4


class Speculative(Frozen):
    """Speculative decoding as a placement choice: a drafter model the placement may give its own pool."""

    drafter: str = Field(description="the draft model: a preset (e.g. llama-3.2-1b) or a config path; same "
                                     "vocabulary as the target")
    acceptance_rate: float = Field(default=DEFAULT_ACCEPTANCE_RATE, gt=0, lt=1,
                                   description="per-token probability the target accepts a drafted token")
    draft_tokens: int = Field(default=DEFAULT_DRAFT_TOKENS, ge=1, le=16,
                              description="tokens drafted per verification (k)")


class Workload(Frozen):
    """The traffic to serve: request classes, arrival rate and SLOs.

    Class shares are fractions that sum to 1 (within `SHARE_SUM_TOLERANCE`) or whole-number weights; either is
    normalised on load, so ``share`` values in a loaded workload sum to 1. Fractions that sum to something else
    (0.4 and 0.2) are an error: a class is likely missing.
    """

    name: str
    classes: tuple[RequestClass, ...] = Field(default=(), description="request classes (or give a trace)")
    trace: TraceSpec | None = Field(default=None, description="a request trace binned into classes instead")
    arrival_rate_per_s: Annotated[float, Field(gt=0)] | Literal["maximise"] = Field(
        default="maximise", description="requests per second, or 'maximise' for the highest sustainable rate")
    slo: Slo = Field(default_factory=Slo)
    speculative: Speculative | None = Field(
        default=None, description="let decode pools draft with a small model on a pool of its own")

    @model_validator(mode="after")
    def _classes_or_trace(self) -> Workload:
        if bool(self.classes) == (self.trace is not None):
            raise ValueError("give either classes or a trace (a trace is binned into classes), and exactly one")
        return self

    def class_slo(self, c: RequestClass) -> Slo:
        """`c`'s targets: its own where it sets them, else the workload's; the percentile defaults to 90."""
        own = c.slo or Slo()
        return Slo(ttft_ms=own.ttft_ms if own.ttft_ms is not None else self.slo.ttft_ms,
                   tpot_ms=own.tpot_ms if own.tpot_ms is not None else self.slo.tpot_ms,
                   percentile=own.percentile or self.slo.percentile or DEFAULT_PERCENTILE)

    @field_validator("classes")
    @classmethod
    def _normalise_shares(cls, classes: tuple[RequestClass, ...]) -> tuple[RequestClass, ...]:
        if not classes:
            return classes
        names = [c.name for c in classes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"class names must be unique; {', '.join(repr(n) for n in dupes)} repeats")
        total = sum(c.share for c in classes)
        if not all(float(c.share).is_integer() for c in classes) and abs(total - 1) > SHARE_SUM_TOLERANCE:
            listed = " + ".join(f"{c.share:g} ({c.name})" for c in classes)
            raise ValueError(f"share: {listed} = {total:.3g}; fractions of the traffic must sum to 1 (is a class "
                             "missing?): make them sum to 1, or give whole-number weights (e.g. 2 and 1)")
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
    def decode_context_mean(self) -> float:
        """Mean context a decode step attends to, weighted by output tokens (each class's decode steps)."""
        tokens = self._mean(lambda c: c.output_len.mean)
        return self._mean(lambda c: c.output_len.mean * (c.input_len.mean + c.output_len.mean / 2)) / tokens

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
