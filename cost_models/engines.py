"""Serving engines as data: what a scheduler adds to the hardware's step time, per engine.

An `Engine` holds what physics leaves open once a step's work is costed on a
device (`cost_models.roofline`): the fixed host time every engine step costs
(scheduling, sampling, kernel launches not hidden by CUDA graphs), a time per
sequence per step (sampling and bookkeeping of each running request), the
latency a request spends in the front end before the scheduler sees it (HTTP,
tokenisation, detokenisation of the first token), and how the engine batches
prefill work (its per-step token budget). Those four times are fitted on
measured serving sweeps (`tools/fidelity_sweeps.py --fit`, see
[Note: serving calibration]); the budgets are the engines' documented defaults.

``generic`` is what a pool gets when the cluster file names no engine: the
family's own step and block overheads (`cost_models.derates`), no
per-sequence or front-end time, and the budget the three engines share. An
engine's own overheads replace the family's (`Engine.applied_to`). Every number says
where it came from in `provenance`.

>>> engine("vllm").prefill_budget_tokens
8192
>>> engine("tgi")
Traceback (most recent call last):
...
ValueError: unknown serving engine 'tgi'; use one of generic, sglang, trtllm, vllm
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cost_models.derates import Derate

TRTLLM_DEFAULTS = ("https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/"
                   "tuning-max-batch-size-and-max-num-tokens.html (max_num_tokens 8192)")
VLLM_DEFAULTS = ("https://docs.vllm.ai/en/stable/configuration/optimization.html (V1 API server on data-center GPUs: "
                 "max_num_batched_tokens 8192 with chunked prefill)")
SGLANG_DEFAULTS = ("https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py "
                   "(chunked_prefill_size 8192 on 80+ GB GPUs; max_prefill_tokens 16384)")
SWEEP_FIT = ("fitted by `tools/fidelity_sweeps.py --fit` on ../shared/reference/serving_sweeps.csv "
             "(aiconfigurator silicon_sample.csv, agg mode): {rows}")


@dataclass(frozen=True, slots=True)
class Engine:
    """A serving engine's scheduling costs. Times in seconds; None means "the device family's derate"."""

    name: str
    step_overhead_s: float | None = None  # fixed host time per engine step
    block_overhead_s: float | None = None  # per block per step: launches and syncs CUDA graphs do not hide
    seq_overhead_s: float = 0.0  # per running sequence per step (sampling, bookkeeping)
    request_overhead_s: float = 0.0  # front end: HTTP, tokenisation, first detokenisation (added to TTFT)
    sync_fraction: float = 0.0  # closed-loop benchmarks only: share of requests that arrive in lock-step waves
    admission_fraction: float = 0.0  # closed loop only: share of the time between completions a new request waits
    prefill_budget_tokens: int = 8192  # tokens one step may carry (decodes and prefill chunks together)
    max_batch: int = 2048  # sequences one replica schedules at once
    provenance: tuple[tuple[str, str], ...] = field(default=())

    def source(self, name: str) -> str:
        return dict(self.provenance).get(name, "")

    def applied_to(self, derate: Derate) -> Derate:
        """The device family's derate with this engine's per-step and per-block overheads where it has its own."""
        changes = {k: getattr(self, k) for k in ("step_overhead_s", "block_overhead_s") if getattr(self, k) is not None}
        if not changes:
            return derate
        return replace(derate, **changes, provenance=f"{derate.provenance}; overheads of engine {self.name}")


_GENERIC_SOURCE = "assumption: no engine named; the device family's step overhead and no extra scheduler cost"

#: What the two-level sweep fit shares across engines: the step costs of one step on Hopper GPUs.
_SHARED = dict(step_overhead_s=1.262e-3, block_overhead_s=6.173e-6, seq_overhead_s=2.691e-5)
_SHARED_SOURCE = SWEEP_FIT.format(rows="all 842 rows, shared by the three engines")


def _fitted(name: str, budget_source: str, **own: float) -> Engine:
    sources = {k: _SHARED_SOURCE for k in _SHARED}
    sources.update({k: SWEEP_FIT.format(rows=f"the {name} rows") for k in own})
    sources["prefill_budget_tokens"] = budget_source
    return Engine(name, **_SHARED, **own, provenance=tuple(sorted(sources.items())))


ENGINES: dict[str, Engine] = {
    "generic": Engine("generic", provenance=(
        ("step_overhead_s", "the device family's derate (cost_models/derates.py)"),
        ("seq_overhead_s", _GENERIC_SOURCE), ("request_overhead_s", _GENERIC_SOURCE),
        ("prefill_budget_tokens", "the default all three measured engines share: " + TRTLLM_DEFAULTS))),
    "trtllm": _fitted("trtllm", TRTLLM_DEFAULTS, request_overhead_s=0.1341, sync_fraction=0.1803,
                      admission_fraction=0.01),
    "vllm": _fitted("vllm", VLLM_DEFAULTS, request_overhead_s=0.02962, sync_fraction=0.1974, admission_fraction=0.01),
    "sglang": _fitted("sglang", SGLANG_DEFAULTS, request_overhead_s=0.3128, sync_fraction=0.6015,
                      admission_fraction=1.0),
}
GENERIC = ENGINES["generic"]


def engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown serving engine {name!r}; use one of {', '.join(sorted(ENGINES))}") from None
