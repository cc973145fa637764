"""Serving engines as data: what a scheduler adds to the hardware's step time, per engine.

An `Engine` holds what physics leaves open once a step's work is costed on a
device (`cost_models.roofline`): the launch gaps CUDA graphs do not hide (a
time per block and per call a block makes), the host time every engine step
costs (scheduling, sampling bookkeeping) and its share per running sequence,
whether the host overlaps the device ([Note: overlap scheduling]), the
latency a request spends in the front end before the scheduler sees it (HTTP,
tokenisation, detokenisation of the first token), and how the engine batches
prefill work (its per-step token budget). The times are fitted on measured
serving sweeps (`tools/fidelity_sweeps.py --fit`, see
[Note: serving calibration]); the budgets and the overlap are the engines'
documented defaults.

``generic`` is what a pool gets when the cluster file names no engine: the
family's own step and block overheads (`cost_models.derates`), no
per-sequence or front-end time, and the budget the three engines share. An
engine's own overheads replace the family's (`Engine.applied_to`); the kernels'
efficiencies are the device's, whichever engine runs on it
([Note: one efficiency per device] in `cost_models.derates`). Every number says
where it came from in `provenance`.

Each engine's own numbers (its fitted times, documented budget and overlap,
with their sources) are its module's ``costs`` in `backends.engines`, made
with `fitted`; `backends.engines.engine_costs` finds them by name. This module
is the arithmetic on them.

>>> GENERIC.prefill_budget_tokens
8192
>>> vllm = fitted("vllm", "budget source", "overlap source", "mixing source", overlap_since=(0, 14))
>>> at_version(vllm, "0.12.0").overlap, at_version(vllm, "0.14.1").overlap
(False, True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from compiler.ir.calibration import Calibration
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.prediction import Spread
from cost_models.derates import Derate, derate_for

#: The per-step token budget TensorRT-LLM, vLLM and SGLang all default to on data-center GPUs (each engine's own
#: source is in its module): the generic engine's.
SHARED_BUDGET_SOURCE = ("https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/"
                        "tuning-max-batch-size-and-max-num-tokens.html (max_num_tokens 8192)")
#: The KV cache's share of the memory that weights and the runtime reserve leave, for engines that size their cache from
#: the free memory: vLLM's gpu_memory_utilization and TensorRT-LLM's kv_cache_free_gpu_mem_fraction both default to 0.9.
KV_MEMORY_FRACTION = 0.9
KV_MEMORY_SOURCE = ("vLLM's gpu_memory_utilization and TensorRT-LLM's kv_cache_free_gpu_mem_fraction both default to 0.9 "
                    "(the engines' documented defaults; [Note: KV memory] in cost_models/serving.py)")
SWEEP_FIT = ("fitted by `tools/fidelity_sweeps.py --fit` on aiconfigurator's measured serving sweeps "
             "(systems/silicon_sample.csv of aiconfigurator-core 0.12.0 on PyPI, agg mode): {rows}")


@dataclass(frozen=True, slots=True)
class Engine:
    """A serving engine's scheduling costs. Times in seconds; None means "the device family's derate"."""

    name: str
    step_overhead_s: float | None = None  # fixed host time per engine step
    block_overhead_s: float | None = None  # per block per step: launches and syncs CUDA graphs do not hide
    op_overhead_s: float | None = None  # per call a block makes per step: the shortest a kernel takes
    seq_overhead_s: float = 0.0  # per running sequence per step (sampling, bookkeeping)
    request_overhead_s: float = 0.0  # front end: HTTP, tokenisation, first detokenisation (added to TTFT)
    sync_fraction: float = 0.0  # closed loop, engines that mix prefill into decode steps: share arriving in waves
    admission_fraction: float = 0.0  # closed loop only: share of the time between completions a new request waits
    prefill_budget_tokens: int = 8192  # tokens one step may carry (decodes and prefill chunks together)
    max_batch: int = 2048  # sequences one replica schedules at once
    kv_memory_fraction: float = KV_MEMORY_FRACTION  # KV cache's share of the memory weights and reserve leave
    overlap: bool = False  # the host prepares step n+1 while the device runs step n ([Note: overlap scheduling])
    mixes_prefill: bool = True  # prompt work shares steps with running decodes ([Note: waves], `wave_share`)
    #: The first release whose default is overlap scheduling, for engines whose older releases step synchronously
    #: (`at_version`; the source under "overlap" in `provenance`).
    overlap_since: tuple[int, ...] | None = None
    # Set only by an engine record (`gimletc calibrate --engine`): its kernels' efficiencies as measured on the
    # device `calibrated_on`, which `served_derate` applies on that device alone ([Note: engine records]).
    compute_eff: float | None = None
    fp8_compute_eff: float | None = None
    mem_eff: float | None = None
    calibrated_on: str | None = None
    # Set with them: how far its leave-one-out predictions of the points it was fitted on landed, per metric
    # (`cost_models.spreads.METRICS`); the intervals of every prediction on `calibrated_on` ([Note: prediction
    # intervals] in compiler/ir/prediction.py).
    spreads: tuple[tuple[str, Spread], ...] = ()
    provenance: tuple[tuple[str, str], ...] = field(default=())

    def source(self, name: str) -> str:
        return dict(self.provenance).get(name, "")

    def step_s(self, device_s: float, host_s: float) -> float:
        """One step's wall time from its device time and its host time; see [Note: overlap scheduling].

        [Note: overlap scheduling] An engine that overlaps scheduling prepares
        step n+1 on the host (scheduling, sampling bookkeeping, stop checks)
        while the device runs step n, so a step costs the longer of the two,
        not their sum: TensorRT-LLM's PyTorch backend and SGLang by default,
        vLLM from v0.14 (sources under "overlap" in `provenance`; `at_version`
        turns it off for older releases). Launch gaps between kernels
        (per block, per call) are device time and stay whatever the host does.
        The price is latency: the next step is already scheduled when a
        request arrives, so it waits one more step before its prefill starts
        (`lookahead_steps`; "the scheduler operates one step ahead of the
        current execution", https://github.com/vllm-project/vllm/pull/19970).
        """
        return max(device_s, host_s) if self.overlap else device_s + host_s

    @property
    def wave_share(self) -> float:
        """Share of closed-loop requests that arrive in lock-step waves; see [Note: waves].

        [Note: waves] C benchmark clients with identical request lengths start
        together, so their first prompts form one wave. An engine that runs
        prefill batches apart from decodes and prefers them (SGLang by default:
        ``enable_mixed_chunk`` False, `get_next_batch_to_run` runs a waiting
        prefill before the decode batch) prefills the whole wave while every
        decode waits, so the wave decodes in lock-step, finishes in the same
        step and comes back whole: the wave never disperses (share 1, from
        the scheduler's rule, not fitted). An engine that mixes prompt chunks
        into decode steps (TensorRT-LLM's in-flight batching, vLLM's chunked
        prefill) starts each request decoding as soon as its own prompt is
        done, so the wave spreads over its prefill steps and partly dissolves:
        one share for all such engines (`sync_fraction`), fitted on their rows
        together, since it is a property of the benchmark's clients and of
        mixing, not of one engine's code.

        Identical lengths are what keeps a wave together. Where the benchmark
        draws each request's lengths from a range (``vllm bench serve
        --random-range-ratio``, InferenceX's 0.8: outputs of 819 to 1,024
        tokens), a wave's requests finish over hundreds of steps and their
        clients' next prompts arrive spread out: after the first round no
        wave is left, under either kind of engine (`cost_models.load.assemble`,
        ``lockstep=False``; ``gimletc estimate --lengths vary``).
        """
        return self.sync_fraction if self.mixes_prefill else 1.0

    @property
    def lookahead_steps(self) -> float:
        """Steps already scheduled ahead of a new request: one behind overlap scheduling, else none."""
        return 1.0 if self.overlap else 0.0

    def applied_to(self, derate: Derate) -> Derate:
        """The device's derate with this engine's per-step, per-block and per-call overheads where it has its own;
        the efficiencies stay the device's ([Note: one efficiency per device] in `cost_models.derates`)."""
        fields = ("step_overhead_s", "block_overhead_s", "op_overhead_s")
        changes = {k: getattr(self, k) for k in fields if getattr(self, k) is not None}
        if not changes:
            return derate
        who = f"engine {self.name}" + (f" as measured on {self.calibrated_on}" if self.calibrated_on else "")
        return replace(derate, **changes, provenance=f"{derate.provenance}; {', '.join(sorted(changes))} of {who}")


_GENERIC_SOURCE = "assumption: no engine named; the device family's step overhead and no extra scheduler cost"

#: What the sweep fit shares across engines: the step costs of one step on Hopper GPUs. Host time per step, per
#: running sequence and the per-block overhead end at the lower bounds of the fit (behind overlap scheduling, all
#: rows but vLLM <= 0.12, a fixed host cost is mostly hidden); what a step pays beyond its kernels grows with its
#: calls. Per call, the launch floor: each kernel costs a few microseconds however little it computes, less but
#: not nothing inside a CUDA graph (https://developer.nvidia.com/blog/cuda-graphs/), so a step of many small kernels
#: (MoE routing, per-layer norms) has a floor in proportion to its calls. The host time per running sequence was
#: fitted at 15 us while a chunked prompt's last chunk was costed as a full step; costed as the tokens it carries
#: ([Note: a prompt's last chunk] in cost_models/load.py) it is back at its floor.
#: The kernels' efficiencies on the H100 and H200 are the devices' (`cost_models.derates.DEVICE_EFFS`, fitted on
#: the same rows), not the engines'.
_SHARED = dict(step_overhead_s=1e-05, block_overhead_s=1e-07, op_overhead_s=4.924e-07, seq_overhead_s=1e-08)
_SHARED_SOURCE = SWEEP_FIT.format(rows="all 842 rows, shared by the three engines")


#: The wave share of engines that mix prefill into decode steps ([Note: waves]).
MIXED_WAVE_SHARE = 0.1582
_MIXED_WAVE_SOURCE = SWEEP_FIT.format(rows="the rows of engines that mix prefill into decodes, together (trtllm, vllm, "
                                           "and sglang where launched with mixed chunks)")


_UNSEEN_SOURCE = ("not fitted: none of the {name} rows launched as gimletc launches it can move it (`pins` in "
                  "compiler/fidelity/sweeps.py); the fit's lower bound, none, an assumption")


def fitted(name: str, budget_source: str, overlap_source: str, mixing_source: str, *, mixes_prefill: bool = True,
           unseen: tuple[str, ...] = (), overlap_since: tuple[int, ...] | None = None, **own: float) -> Engine:
    """An engine whose step costs the sweep fit pins: the costs it shares with the others (`_SHARED`), its `own`
    fitted ones (those in `unseen` no row could move: their lower bound), overlap scheduling by default (off
    before `overlap_since`), the budget, overlap and mixing rules with their sources."""
    sources = {k: _SHARED_SOURCE for k in _SHARED}
    sources.update({k: (_UNSEEN_SOURCE if k in unseen else SWEEP_FIT).format(name=name, rows=f"the {name} rows")
                    for k in own})
    sources["prefill_budget_tokens"] = budget_source
    sources["overlap"] = overlap_source
    sources["mixes_prefill"] = mixing_source
    sources["kv_memory_fraction"] = KV_MEMORY_SOURCE
    own = {**own, "sync_fraction": MIXED_WAVE_SHARE}  # read only where the engine mixes (launched so, or by default)
    sources["sync_fraction"] = _MIXED_WAVE_SOURCE
    return Engine(name, **_SHARED, **own, overlap=True, mixes_prefill=mixes_prefill, overlap_since=overlap_since,
                  provenance=tuple(sorted(sources.items())))


GENERIC = Engine("generic", provenance=(
    ("kv_memory_fraction", KV_MEMORY_SOURCE), ("step_overhead_s", "the device family's derate (cost_models/derates.py)"),
    ("seq_overhead_s", _GENERIC_SOURCE), ("request_overhead_s", _GENERIC_SOURCE), ("overlap", _GENERIC_SOURCE),
    ("prefill_budget_tokens", "the default all three measured engines share: " + SHARED_BUDGET_SOURCE)))


def served_derate(family: str, calibration: Calibration | None, served_by: Engine, device_id: str | None = None) -> Derate:
    """The derate a device of `family` (`device_id`: that device, with its own efficiencies where it has them) runs
    at under `served_by`: the device's (or its measured `calibration`) with the engine's overheads
    (`Engine.applied_to`). An engine calibrated on this very device brings its kernels' efficiencies too: they were
    measured there ([Note: engine records])."""
    derate = served_by.applied_to(derate_for(family, calibration, device_id))
    here = device_id or (calibration.device_id if calibration is not None else None)
    measured_here = here is not None and served_by.calibrated_on == here
    return with_measured_kernels(served_by, derate) if measured_here else derate


def with_measured_kernels(engine: Engine, derate: Derate) -> Derate:
    """`derate` with the kernel efficiencies `engine`'s record measured on `engine.calibrated_on`, where it has them."""
    effs = {k: getattr(engine, k) for k in ("compute_eff", "fp8_compute_eff", "mem_eff") if getattr(engine, k) is not None}
    if not effs:
        return derate
    return replace(derate, **effs, provenance=f"{derate.provenance}; {', '.join(sorted(effs))} of engine {engine.name} "
                                              f"as measured on {engine.calibrated_on}")


def release(version: str) -> tuple[int, ...]:
    """A release's numbers, to compare with others: "0.5.6.post2" -> (0, 5, 6, 2); () when it has none.

    >>> release("0.5.6.post2")[:3] >= (0, 5, 6), release("gpt-oss-dev")
    (True, ())
    """
    return tuple(int(p) for p in re.findall(r"\d+", version))


def at_version(found: Engine, version: str) -> Engine:
    """`found` as release `version` (e.g. "0.12.0") runs by default; unparsable versions are the current one."""
    since = found.overlap_since
    numbers = release(version)[:2]
    if since is None or len(numbers) < 2 or numbers >= since:
        return found
    return replace(found, overlap=False)


# ------------------------------------------------------------------------------------------ engine records

#: The `Engine` fields an engine calibration record holds (`gimletc calibrate --device D --engine E`); a profile's
#: (``calibrate --from``) may hold ``fp8_compute_eff`` too.
RECORD_FIELDS = ("step_overhead_s", "block_overhead_s", "op_overhead_s", "seq_overhead_s", "request_overhead_s",
                 "sync_fraction", "admission_fraction", "prefill_budget_tokens", "max_batch", "overlap",
                 "mixes_prefill", "compute_eff", "mem_eff")


def fitted_against(device: DeviceSpec, base: Derate) -> dict[str, Any]:
    """What an engine record's efficiencies and overheads are relative to: the device's peaks and bandwidth and the
    derate it ran at before the engine's own fields replaced some ([Note: engine records])."""
    return {"peak_flops_per_s": dict(device.peak_flops_per_s), "mem_bw_bytes_per_s": device.memory[0].bw_bytes_per_s,
            "derate": base.provenance}


def engine_record(fitted: Engine, device: DeviceSpec, base: Derate) -> dict[str, Any]:
    """The record of `fitted` measured on `device` at derate `base` (`compiler.ir.calibration.save_engine_record`
    writes it)."""
    return {"device": device.id, "engine": fitted.name, "fitted_against": fitted_against(device, base),
            "fields": {k: getattr(fitted, k) for k in RECORD_FIELDS}, "provenance": dict(fitted.provenance)}


def calibrated_engine(base: Engine, record: dict[str, Any] | None, device: DeviceSpec,
                      calibration: Calibration | None, refresh: str | None = None) -> Engine | None:
    """Engine `base` as `gimletc calibrate --device D --engine NAME` measured it on `device` (its `record`, as
    `compiler.ir.calibration.load_engine_record` reads it), or None where there is none or it is unreadable.
    Raises `ValueError` where the device changed under it.

    [Note: engine records] A record holds an engine's step costs and its kernels'
    efficiencies fitted on one device, with the device's peaks and derate they are
    relative to (`fitted_against`). The efficiencies are shares of those peaks and
    the overheads sit on top of that derate, so the record holds only while they
    stand: a later ``gimletc calibrate --device D`` (new peaks, a new derate) makes
    it stale, and a stale record is refused with the command that refreshes it
    rather than read against numbers it was not fitted on. A fresh record's
    efficiencies apply on that device even though the device has a calibration of
    its own (which otherwise keeps its own efficiencies, `served_derate`).

    A record (or a `compiler.ir.calibration.ProfileEntry`, as ``to_json`` writes it) may carry ``spreads``: how far
    its held-out points landed, the intervals of every prediction made with it ([Note: prediction intervals] in
    compiler/ir/prediction.py). `refresh` is the command that makes a new one (default: ``calibrate --engine``).
    """
    if record is None:
        return None
    try:
        values = {k: record["fields"][k] for k in RECORD_FIELDS}
        fp8 = record["fields"].get("fp8_compute_eff")
        against, sources = record["fitted_against"], dict(record.get("provenance", {}))
        spreads = tuple(sorted((m, Spread.from_json(v)) for m, v in (record.get("spreads") or {}).items()))
    except (ValueError, KeyError, TypeError):
        return None
    name = base.name
    path = f"the {name} record of {device.id}"
    now = fitted_against(device, derate_for(device.family, calibration))
    if against != now:
        changed = ", ".join(k for k in now if against.get(k) != now[k])
        refresh = refresh or f"gimletc calibrate --device {device.id} --engine {name}"
        raise ValueError(f"{path}: engine {name} was calibrated on {device.id} against other device numbers "
                         f"({changed} changed since); rerun `{refresh}` (or delete {path} to use the shipped {name} "
                         f"costs)")
    return replace(base, **values, fp8_compute_eff=fp8, calibrated_on=device.id, spreads=spreads,
                   provenance=tuple(sorted({**dict(base.provenance), **sources}.items())))
