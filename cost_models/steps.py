"""What one engine step takes on one replica of a `Deployment`: its time split into compute, memory,
communication and overhead (`StepTime`), from the blocks it runs (`blocks_time`, on the roofline), the
tensor-parallel all-reduces and pipeline hops, and the engine's per-step and per-sequence overheads.

- `step`: one engine step carrying decodes and a prefill chunk together (weights read once): blocks,
  TP all-reduces, PP hops with micro-batches in flight, the engine's step and per-sequence overheads.
- `decode_step`, `prefill_time`: the two pure cases of `step`.
- `moe_expert_parallel_step`: a MoE block's step split over expert-parallel devices.

Every time here is a prediction; nothing is measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from compiler.ir.block_graph import Block, BlockGraph
from cost_models.comm import all_to_all_s, allreduce_s, p2p_s
from cost_models.roofline import BlockTime, block_time, step_block_time
from cost_models.engines import Engine
from cost_models.serving import MEMO_ENTRIES, Deployment, MemoryPlan, block_groups, graph_memo, memory_plan


@dataclass(frozen=True, slots=True)
class StepTime:
    """One engine step of one replica and its parts."""

    time_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    @property
    def bound(self) -> str:
        parts = {"compute": self.compute_s, "memory": self.memory_s, "communication": self.comm_s,
                 "overhead": self.overhead_s}
        return max(parts, key=parts.get)


def blocks_time(graph: BlockGraph, dep: Deployment, phase: str, point: dict[str, float], plan: MemoryPlan,
                roles: tuple[str, ...] | None = None) -> BlockTime:
    """Sum of block times of a phase (optionally only some roles) on one tp-sharded replica (memoised: the
    attention/FFN search costs the same group at the same point many times)."""
    memo = graph_memo(graph).setdefault("blocks_time", {})
    key = (dep.device, dep.tp, dep.kv_shards, dep.precision, dep.derate, phase, tuple(sorted(point.items())),
           plan.weight_tiers, plan.kv_tiers, roles)
    hit = memo.get(key)
    if hit is not None:
        return hit
    total = comp = mem = over = 0.0
    for b, n in block_groups(graph, phase, roles):
        t: BlockTime = block_time(b, point, dep.device, precision=dep.precision, derate=dep.derate,
                                  shards=dep.tp, tiers=plan.weight_tiers, kv_tiers=plan.kv_tiers,
                                  kv_shards=dep.kv_shards)
        total += n * t.time_s
        comp += n * t.compute_s
        mem += n * t.memory_s
        over += n * t.overhead_s
    if len(memo) >= MEMO_ENTRIES:
        memo.clear()
    memo[key] = out = BlockTime(total, comp, mem, over)
    return out


@dataclass(frozen=True, slots=True)
class Batch:
    """What one engine step carries: `decodes` sequences one token each, and prefill chunks.

    ``prefill_tokens`` prompt tokens of ``prefill_requests`` requests are computed this step,
    after ``prefill_before`` tokens of each already cached on average (0: whole prompts; a later
    chunk, or verified draft tokens, attend to those too: [Note: causal prefill] in `cost_models.roofline`).
    The head computes logits at each request's last position only, as serving engines do
    (context logits are off by default: ``return_context_logits`` in TensorRT-LLM,
    https://nvidia.github.io/TensorRT-LLM/features/additional-outputs.html; vLLM samples at
    ``logits_indices``); ``every_logit`` computes them at every position (speculative verification).
    """

    decodes: float = 0.0
    context: float = 0.0
    prefill_tokens: float = 0.0
    prefill_requests: float = 1.0
    prefill_before: float = 0.0
    every_logit: bool = False

    @property
    def sequences(self) -> float:
        return self.decodes + (self.prefill_requests if self.prefill_tokens else 0.0)


def _twins(graph: BlockGraph) -> dict[str, Block]:
    """Prefill block by name: the prefill twin of each decode block (memoised with the block groups)."""
    memo = graph_memo(graph)
    if "twins" not in memo:
        memo["twins"] = {b.name: b for b in graph.phase_blocks("prefill")}
    return memo["twins"]


#: Shortest prompt chunk a pipeline splits one prompt into (assumption: below a few hundred tokens a chunk's
#: matmuls no longer fill the device, and more chunks only add per-step overhead).
MIN_PIPELINE_CHUNK_TOKENS = 256


def pipeline_micro_batches(batch: Batch, pp: int) -> float:
    """Micro-batches a `pp`-stage replica keeps in flight for `batch`; see [Note: pipelines that fill]."""
    if pp == 1:
        return 1.0
    if batch.decodes:
        return min(float(pp), max(1.0, batch.decodes))
    if batch.prefill_requests >= 2:
        return batch.prefill_requests
    prompt = batch.prefill_tokens / max(batch.prefill_requests, 1.0)
    return min(float(pp), max(1.0, prompt / MIN_PIPELINE_CHUNK_TOKENS))


def step(graph: BlockGraph, dep: Deployment, batch: Batch, plan: MemoryPlan, *,
         micro_batches: float | None = None) -> StepTime:
    """One engine step of one tp x pp replica carrying `batch`; see [Note: one weight read per step].

    [Note: pipelines that fill] A pp-stage replica keeps `m` micro-batches in
    flight (`pipeline_micro_batches`; ``micro_batches=1`` runs the stages one
    after another). One micro-batch's pass takes every stage in turn plus the
    hops between them; a stage is busy for 1/pp of the blocks per micro-batch.
    Prefill micro-batches (one prompt each, or chunks of one long prompt) do
    not wait for each other: the batch takes ``pass + (m - 1) x stage``, the
    bubble formula, so compute-bound prefill nears pp times the throughput of
    running the stages one after another. A decode micro-batch needs its token
    from the last stage before its next step, so a step takes
    ``max(m x stage, pass)``: with m = min(pp, B) groups of sequences, a
    memory-bound step is no faster (each micro-batch streams its stage's
    weights again); the gain is that pp times the sequences fit the same step.
    Times returned are per device: a device's compute and memory busy time
    over the step (what power reads), the step's wall time.
    """
    memo = graph_memo(graph).setdefault("step", {})  # [Note: step memo]
    key = (dep, batch, plan, micro_batches)
    hit = memo.get(key)
    if hit is None:
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        hit = memo[key] = _step(graph, dep, batch, plan, micro_batches)
    return hit


#: [Note: step memo] Costing one device type evaluates the same engine step about twice (70B on the mixed fleet:
#: 565 calls, 288 distinct, for one type's options): the closed-loop curves of a replica shape at several batch caps
#: share their smaller batches. `step` keeps each one per graph, keyed by value (deployment, batch, memory plan),
#: so a sensitivity move that re-costs a type with one factor moved misses it and one that restores it hits.


def _step(graph: BlockGraph, dep: Deployment, batch: Batch, plan: MemoryPlan, micro_batches: float | None) -> StepTime:
    if dep.buckets is not None:
        batch = dep.buckets.pad(batch)
    m = micro_batches if micro_batches is not None else pipeline_micro_batches(batch, dep.pp)
    if dep.pp == 1:
        m = 1.0
    one = _pass(graph, dep, _slice(batch, m), plan)
    stage = (one.blocks_s + one.tp_comm_s) / dep.pp
    if batch.decodes:
        time = max(m * stage, m * one.host_s, one.time_s)
    else:
        time = one.time_s + (m - 1) * max(stage, one.host_s)
    per_device = m / dep.pp
    return StepTime(time, per_device * one.compute_s, per_device * one.memory_s,
                    per_device * (one.tp_comm_s + one.hops_s), per_device * one.block_overhead_s + m * one.host_s)


def _slice(batch: Batch, m: float) -> Batch:
    """One of `m` equal micro-batches of `batch`: groups of sequences, whole prompts, or chunks of prompts.

    A prompt cut into chunks of c tokens has (prompt - c) / 2 tokens cached before a chunk on average, so the
    chunks together do its causal attention.
    """
    if m <= 1:
        return batch
    tokens = batch.prefill_tokens / m
    requests = batch.prefill_requests / m
    if not batch.prefill_tokens or requests >= 1:
        return replace(batch, decodes=batch.decodes / m, prefill_tokens=tokens, prefill_requests=max(requests, 1.0))
    prompt = batch.prefill_tokens / batch.prefill_requests
    return replace(batch, decodes=batch.decodes / m, prefill_tokens=tokens, prefill_requests=1.0,
                   prefill_before=batch.prefill_before + (prompt - tokens) / 2)


@dataclass(frozen=True, slots=True)
class _Pass:
    """One micro-batch through every stage of a replica, and its parts."""

    blocks_s: float  # every block's time, on one tp shard
    compute_s: float
    memory_s: float
    block_overhead_s: float
    tp_comm_s: float
    hops_s: float
    host_s: float  # the engine's scheduling of this micro-batch
    engine: Engine

    @property
    def time_s(self) -> float:
        return self.engine.step_s(self.blocks_s + self.tp_comm_s + self.hops_s, self.host_s)


def _pass(graph: BlockGraph, dep: Deployment, batch: Batch, plan: MemoryPlan) -> _Pass:
    decode_point = {"B": batch.decodes, "L": batch.context}
    prefill_point = None
    if batch.prefill_tokens:
        per_request = batch.prefill_tokens / batch.prefill_requests
        prefill_point = {"B": batch.prefill_requests, "S": per_request}
    twins = _twins(graph) if batch.decodes and prefill_point else {}
    comp = mem = over = total = 0.0
    for b, n in block_groups(graph, "decode" if batch.decodes else "prefill"):
        parts, before = [], []
        if batch.decodes:
            parts.append((b, decode_point))
            before.append(0.0)
        if prefill_point is not None:
            last_only = b.role == "head" and not batch.every_logit
            parts.append((twins[b.name] if batch.decodes else b, {**prefill_point, "S": 1.0} if last_only
                          else prefill_point))
            before.append(batch.prefill_before)
        t: BlockTime = step_block_time(parts, dep.device, precision=dep.precision, derate=dep.derate, shards=dep.tp,
                                       tiers=plan.weight_tiers, kv_tiers=plan.kv_tiers, prefill_before=before,
                                       kv_shards=dep.kv_shards)
        total, comp, mem, over = total + n * t.time_s, comp + n * t.compute_s, mem + n * t.memory_s, over + n * t.overhead_s
    residual = 0.0
    for phase, point in (("decode", decode_point if batch.decodes else None), ("prefill", prefill_point)):
        edge = graph.residual_edge(phase) if point is not None else None
        residual += edge.act_bytes(**point) if edge is not None else 0.0
    host = dep.step_overhead_s + dep.engine.seq_overhead_s * batch.sequences
    return _Pass(total, comp, mem, over, _tp_comm_s(graph, dep, batch, residual), _hops_s(dep, residual), host,
                 dep.engine)


def _tp_comm_s(graph: BlockGraph, dep: Deployment, batch: Batch, residual: float) -> float:
    """Megatron-style TP all-reduces the residual stream each block hands on (embed, attention, FFN/MoE)."""
    link = dep.device.scale_up or dep.device.scale_out
    if dep.tp == 1 or link is None:
        return 0.0
    phase = "decode" if batch.decodes else "prefill"
    edges = sum(1 for e in graph.edges if e.phase == phase and e.kind == "activation")
    return edges * allreduce_s(residual, dep.tp, bw_bytes_per_s=link.bw_bytes_per_s * dep.derate.link_eff,
                               latency_s=link.latency_s)


def _hops_s(dep: Deployment, residual: float) -> float:
    """The pp - 1 stage boundaries: over the scale-up link inside a scale-up domain, over scale-out (Ethernet
    between wafer-scale systems, the NIC between servers) where the next stage sits in another domain."""
    if dep.pp == 1:
        return 0.0
    up, out = dep.device.scale_up, dep.device.scale_out
    crossing = dep.pp - 1 if up is None else min(dep.pp - 1, math.ceil(dep.group / up.domain_devices) - 1)
    total = 0.0
    for link, hops in ((up, dep.pp - 1 - crossing), (out or up, crossing)):
        if hops and link is not None:
            total += hops * p2p_s(residual, bw_bytes_per_s=link.bw_bytes_per_s * dep.derate.link_eff,
                                  latency_s=link.latency_s)
    return total


def decode_step(graph: BlockGraph, dep: Deployment, batch: float, context: float,
                plan: MemoryPlan | None = None, *, micro_batches: float | None = None) -> StepTime:
    """One decode step: `batch` sequences, each with `context` cached tokens, one new token each."""
    plan = plan or memory_plan(graph, dep, graph.kv_bytes_per_sequence(context, dep.precision) * batch / dep.kv_devices)
    return step(graph, dep, Batch(decodes=batch, context=context), plan, micro_batches=micro_batches)


def prefill_time(graph: BlockGraph, dep: Deployment, batch: float, prompt: float, *, chunk_tokens: int | None = None,
                 plan: MemoryPlan | None = None, micro_batches: float | None = None, before: float = 0.0) -> StepTime:
    """Prefill `batch` prompts of `prompt` tokens, each after `before` tokens already cached (a prefix-cache hit);
    with `chunk_tokens`, in chunks of that many tokens.

    A chunked prefill does the same work plus one step overhead per extra chunk (the chunks' causal attention
    adds up to the whole prompt's).
    """
    plan = plan or memory_plan(graph, dep, graph.kv_bytes_per_sequence(prompt, dep.precision) * batch / dep.kv_devices)
    whole = step(graph, dep, Batch(prefill_tokens=batch * prompt, prefill_requests=batch, prefill_before=before), plan,
                 micro_batches=micro_batches)
    if not chunk_tokens or chunk_tokens >= prompt * batch:
        return whole
    extra = (math.ceil(prompt * batch / chunk_tokens) - 1) * dep.step_overhead_s
    return StepTime(whole.time_s + extra, whole.compute_s, whole.memory_s, whole.comm_s, whole.overhead_s + extra)


def moe_expert_parallel_step(graph: BlockGraph, block: Block, dep: Deployment, point: dict[str, float],
                             ep: int) -> float:
    """A MoE block's step with its experts split over `ep` devices (expert parallelism).

    Each device holds E/ep experts and computes the tokens routed to them (1/ep
    of the work under uniform routing); tokens are dispatched to their experts
    and combined back with two all-to-alls of ``tokens x k x hidden`` activations.
    """
    work = block_time(block, point, dep.device, precision=dep.precision, derate=dep.derate, shards=ep)
    link = dep.device.scale_up or dep.device.scale_out
    inbound = next(e for e in graph.edges if e.dst == block.name and e.phase == block.phase and e.kind == "activation")
    routed = inbound.act_bytes(**point) * block.experts_per_token  # each token's hidden state goes to k experts
    a2a = all_to_all_s(routed, ep, bw_bytes_per_s=link.bw_bytes_per_s * dep.derate.link_eff, latency_s=link.latency_s)
    return work.time_s + 2 * a2a
