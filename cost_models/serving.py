"""Serving-level model: memory, batching, prefill and decode on one deployment.

A `Deployment` is ``count`` devices of one type running ``count / (tp*pp)``
replicas of a ``tp``-way tensor-parallel, ``pp``-stage pipeline. Every time
here is a prediction from the BlockGraph (work) and the roofline (device);
nothing is measured.

Functions (each documented and tested on its own):
- `memory_plan`: weights and KV per device, which tier holds them, how many tokens of KV fit.
- `max_batch`: largest batch for a KV length distribution, paged (block size) vs contiguous;
  `sequences_that_fit`: the largest batch of one length a replica's KV cache holds.
- `step`: one engine step carrying decodes and a prefill chunk together (weights read once): blocks,
  TP all-reduces, PP hops with micro-batches in flight, the engine's step and per-sequence overheads.
- `decode_step`, `prefill_time`: the two pure cases of `step`.
- `prefix_cached_tokens`: prompt tokens left to compute after prefix-cache hits.
- `Buckets`: the static shapes an engine compiled (Neuron), which pad what a step computes.
- `moe_expert_parallel_step`: a MoE block's step split over expert-parallel devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from compiler.ir.block_graph import Block, BlockGraph
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.precision import Precision
from cost_models.comm import all_to_all_s, allreduce_s, p2p_s
from cost_models.derates import Derate
from cost_models.engines import GENERIC, KV_MEMORY_FRACTION, Engine
from cost_models.roofline import BlockTime, TierSplit, block_time, step_block_time

#: Share of the memory left after weights and runtime reserve that the KV cache takes, for an engine that sizes its
#: cache from free memory (TensorRT-LLM's kv_cache_free_gpu_mem_fraction and vLLM's gpu_memory_utilization both
#: default to 0.9); each engine's own is `Engine.kv_memory_fraction` ([Note: KV memory]).
KV_FREE_FRACTION = KV_MEMORY_FRACTION
#: Memory a runtime keeps for its context, workspace and activations, as a share of capacity (assumption).
RUNTIME_RESERVE_FRACTION = 0.02
#: Tokens per KV page in a paged cache (vLLM's default block size).
PAGE_TOKENS = 16


#: A bucket gimletc adds for a class is rounded up to a multiple of this many tokens (assumption: 128, the automatic
#: buckets' smallest, keeps the compiled shapes tile-aligned; NxD accepts any length).
BUCKET_ALIGN = 128


@dataclass(frozen=True, slots=True)
class Buckets:
    """The sequence lengths an engine compiled its programs for; see [Note: buckets].

    [Note: buckets] The Neuron compiler builds programs for static shapes, so
    NxD Inference (alone, and under vLLM through the vllm-neuron plugin)
    compiles one context-encoding program per prompt length in ``context`` and
    one token-generation program per sequence length in ``token``, and runs
    each request in the smallest that holds it, padded (feature guide,
    "Bucketing": https://github.com/aws-neuron/aws-neuron-sdk/blob/81ce03ae261e12925e53437a0f690478e6366155/
    libraries/nxd-inference/developer_guides/feature-guide.rst).
    A step computes a prompt at its context bucket's length and, decoding,
    attends over its token bucket's. Without lists the buckets are automatic:
    powers of two from 128 up to the longest sequence, and that length.

    Llama-3.3-70B's 10,000-token prompt on 16 Trainium2 ran in the 12,288
    program (V079's launch, cost_models/data/neuron_buckets.csv) and measured
    814 ms; padded, the fitted model predicts 851 ms, and 693 ms for the
    10,000 tokens alone. A 2,304-token decode context would run in the 4,096
    program (1.8x the KV read), so gimletc's own launch adds a bucket at each
    class's mean lengths (`Buckets.for_classes`, written by
    `compiler.emit.serving.launch`), and the placement costs that launch.

    Not modelled: a decode is padded at its mean context (a request crossing a
    bucket reads less before it); a chunk after cached tokens is not padded
    (NxD runs a prompt whole, `Buckets.budget`); the KV cache is sized by the
    tokens held, where NxD reserves a slot's whole sequence length.
    """

    context: tuple[int, ...]  # ascending (sorted here once, not at each padded step)
    token: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", tuple(sorted(self.context)))
        object.__setattr__(self, "token", tuple(sorted(self.token)))

    @classmethod
    def automatic(cls, max_len: int) -> "Buckets":
        """NxD Inference's automatic bucketing for sequences of at most `max_len` tokens (vLLM's
        ``--max-model-len``): powers of two from 128 below it, and `max_len` itself, for both programs."""
        lengths = tuple(1 << k for k in range(7, max(7, max_len.bit_length())) if 1 << k < max_len) + (max_len,)
        return cls(lengths, lengths)

    @classmethod
    def for_classes(cls, max_len: int, prompts: Sequence[float], sequences: Sequence[float]) -> "Buckets":
        """The buckets gimletc launches a Neuron pool with: the automatic ones for `max_len`, a context bucket at
        each class's mean prompt (`prompts`) and a token bucket at each one's mean prompt + output (`sequences`),
        rounded up to `BUCKET_ALIGN` tokens, so a request of a class's mean lengths is not padded to the next
        power of two (a 2,304-token decode context would be, 1.8x, by automatic buckets alone)."""
        auto = cls.automatic(max_len)
        align = lambda ts: tuple(min(max_len, -(-math.ceil(t) // BUCKET_ALIGN) * BUCKET_ALIGN) for t in ts)  # noqa: E731
        return cls(tuple({*auto.context, *align(prompts)}), tuple({*auto.token, *align(sequences)}))

    @staticmethod
    def fit(length: float, buckets: tuple[int, ...]) -> float:
        """The smallest of ascending `buckets` holding `length` tokens; `length` itself beyond the largest."""
        return float(next((b for b in buckets if b >= length), length))

    @property
    def budget(self) -> int:
        """Prompt tokens one step runs: the largest context bucket, so a prompt runs whole, never chunked."""
        return self.context[-1]

    def pad(self, batch: "Batch") -> "Batch":
        """`batch` as the compiled programs compute it: whole prompts at their context bucket, decodes over their
        token bucket."""
        prefill = batch.prefill_tokens
        if prefill and not batch.prefill_before:
            prefill = batch.prefill_requests * self.fit(prefill / batch.prefill_requests, self.context)
        context = self.fit(batch.context, self.token) if batch.decodes else batch.context
        return replace(batch, prefill_tokens=prefill, context=context)


@dataclass(frozen=True, slots=True)
class Deployment:
    device: DeviceSpec
    count: int
    derate: Derate
    tp: int = 1
    pp: int = 1
    precision: Precision = Precision.of("bf16")
    engine: Engine = GENERIC  # its per-step, -block and -call overheads are already in `derate` (`Engine.applied_to`)
    kv_heads: int | None = None  # the model's KV heads (None: the KV splits evenly over tp)
    buckets: Buckets | None = None  # the static shapes a step is padded to ([Note: buckets]); None: none

    @property
    def step_overhead_s(self) -> float:
        return self.derate.step_overhead_s

    @property
    def kv_shards(self) -> float:
        """Ways one sequence's KV splits over a stage's tp devices; see [Note: replicated KV heads].

        [Note: replicated KV heads] Tensor parallelism gives each of tp ranks
        heads / tp query heads and the KV heads they attend to. Where tp exceeds
        the KV heads, engines replicate them: vLLM's QKVParallelLinear (SGLang's
        is the same) gives each rank ``num_kv_heads = 1`` and each KV head
        ``num_kv_head_replicas = tp / kv_heads`` copies. Each rank then holds,
        writes and reads a whole head's KV per token and layer, so KV bytes per
        rank are ``max(kv_heads / tp, 1) x head_dim x 2 (K and V) x layers x
        dtype bytes`` per token, not ``kv_heads / tp`` of a head: the KV splits
        ``min(tp, kv_heads)`` ways, not tp, and a decode step's KV read per rank
        grows by ``tp / kv_heads``. Where tp does not divide the KV heads (a
        generic engine padding heads, as transformers-neuronx does), each rank
        holds ``ceil(kv_heads / tp)``. Query heads, and so attention FLOPs,
        still split tp ways. (The K and V projection weights are replicated too,
        2 x hidden x head_dim per layer per rank; that is not modelled: 2% of
        Llama-2-70B's weights per rank at tp 16.)
        """
        if not self.kv_heads:
            return float(self.tp)
        return self.kv_heads / math.ceil(self.kv_heads / self.tp)

    @property
    def kv_devices(self) -> float:
        """Devices one sequence's KV spreads over: `kv_shards` in each of pp stages (tp * pp without replication)."""
        return self.kv_shards * self.pp

    @property
    def replicas(self) -> int:
        return self.count // (self.tp * self.pp)

    @property
    def group(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Per device of one replica: bytes of weights, and what is left for KV, by tier."""

    weight_bytes: float
    usable_bytes: float
    kv_capacity_bytes: float
    weight_tiers: TierSplit
    kv_tiers: TierSplit

    @property
    def fits(self) -> bool:
        return self.kv_capacity_bytes > 0


def memory_plan(graph: BlockGraph, dep: Deployment, kv_bytes_hint: float = 0.0,
                roles: tuple[str, ...] | None = None) -> MemoryPlan:
    """Place one replica's weights (fastest serving tier first) and the KV it will hold.

    Weights (of the blocks in `roles`, default all) split evenly over the tp*pp
    devices of a replica. KV fills the fastest tier's room left after weights,
    then slower tiers; `kv_bytes_hint` (per device) decides the KV tier split.
    A tier that does not serve (`MemoryTier.serves`) holds neither.

    [Note: KV memory] What the KV cache may take is the engine's rule, not the
    device's: engines that size a paged cache from free memory (vLLM, SGLang,
    TensorRT-LLM) give it a share of what weights and the runtime reserve leave
    (0.9 by default, `KV_FREE_FRACTION`); optimum-habana's static generation
    allocates exactly batch x (input + output) tokens and holds nothing back.
    `Engine.kv_memory_fraction` carries the rule; the device's capacity is what
    its runtime reports (the Gaudi cards' hl-smi totals are 96 and 128 GiB).
    """
    if roles is None:
        weights = graph.weight_bytes(dep.precision) / dep.group
    else:
        weights = sum(b.weight_bytes(dep.precision) * n for b, n in block_groups(graph, "decode", roles)) / dep.group
    usable = dep.device.capacity_bytes * (1 - RUNTIME_RESERVE_FRACTION)
    left = weights
    w_frac, room = [], []
    for tier in dep.device.serving_tiers:
        cap = tier.capacity_bytes * (1 - RUNTIME_RESERVE_FRACTION)
        used = min(left, cap)
        if used > 0:
            w_frac.append((tier.name, used / weights))
        room.append((tier.name, dep.engine.kv_memory_fraction * (cap - used)))
        left -= used
    kv_left = kv_bytes_hint
    kv_frac = []
    for name, free in room:
        if kv_bytes_hint <= 0:
            break
        used = min(kv_left, free)
        if used > 0:
            kv_frac.append((name, used / kv_bytes_hint))
        kv_left -= used
    kv_tiers = TierSplit(tuple(kv_frac) or ((dep.device.memory[0].name, 1.0),))
    kv_capacity = dep.engine.kv_memory_fraction * (usable - weights) if left <= 0 else -left
    return MemoryPlan(weights, usable, kv_capacity, TierSplit(tuple(w_frac)), kv_tiers)


def devices_to_hold(weight_bytes: float, device: DeviceSpec, *, resident: bool = False) -> int:
    """Fewest devices whose memory, less the runtime reserve, holds `weight_bytes` (at least 1).

    `resident`: in the fastest tier alone (SRAM on a wafer or a Corsair card), the placement that never
    reads weights from a slower tier.
    """
    capacity = device.fast_capacity_bytes if resident else device.capacity_bytes
    return max(1, math.ceil(weight_bytes / (capacity * (1 - RUNTIME_RESERVE_FRACTION))))


def max_batch(capacity_bytes: float, kv_bytes_per_token: float, lengths: Sequence[int], *, max_len: int | None = None,
              paged: bool = True, page_tokens: int = PAGE_TOKENS) -> int:
    """Largest number of concurrent sequences whose KV fits `capacity_bytes`.

    Paged: each sequence holds ceil(len / page) pages of its actual length
    (mean over `lengths`). Contiguous: each reserves `max_len` tokens
    (default: the longest in `lengths`), as engines without paging must.
    """
    if capacity_bytes <= 0 or kv_bytes_per_token <= 0:
        return 0
    if paged:
        per_seq = sum(math.ceil(n / page_tokens) * page_tokens for n in lengths) / len(lengths)
    else:
        per_seq = max_len if max_len is not None else max(lengths)
    return int(capacity_bytes // (per_seq * kv_bytes_per_token))


def sequences_that_fit(graph: BlockGraph, dep: Deployment, tokens: int, plan: MemoryPlan | None = None) -> int:
    """Most sequences of `tokens` tokens whose KV one replica of `dep` holds (paged), with the weights in `plan`
    (default: the weights alone)."""
    plan = plan or memory_plan(graph, dep)
    seq_kv = graph.kv_bytes_per_sequence(tokens, dep.precision)
    return max_batch(plan.kv_capacity_bytes * dep.kv_devices, seq_kv / tokens, [tokens])


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


_GROUPS: dict[int, tuple[BlockGraph, dict]] = {}
#: Entries a graph's memo of block times keeps before it starts over (bounds memory across many compiles).
MEMO_ENTRIES = 200_000


def _memo(graph: BlockGraph) -> dict:
    """Per-graph memo (block groups, block times), dropped when a new graph reuses the id."""
    entry = _GROUPS.get(id(graph))
    if entry is None or entry[0] is not graph:
        entry = (graph, {})
        _GROUPS[id(graph)] = entry
    return entry[1]


def block_groups(graph: BlockGraph, phase: str, roles: tuple[str, ...] | None = None) -> list[tuple[Block, int]]:
    """Distinct blocks of a phase with their multiplicity: identical layers are costed once.

    [Note: grouped layers] An 80-layer model has one attention and one FFN block
    kind (two of each for sliding/full mixes), so costing a deployment takes a
    handful of roofline evaluations whatever the depth.
    """
    memo = _memo(graph)
    key = (phase, roles)
    if key not in memo:
        groups: dict[tuple, list] = {}
        for b in graph.phase_blocks(phase):
            if roles is not None and b.role not in roles:
                continue
            sig = (b.role, b.ops, b.attention, b.window_tokens, b.experts, b.experts_per_token)
            if sig in groups:
                groups[sig][1] += 1
            else:
                groups[sig] = [b, 1]
        memo[key] = [(b, n) for b, n in groups.values()]
    return memo[key]


def blocks_time(graph: BlockGraph, dep: Deployment, phase: str, point: dict[str, float], plan: MemoryPlan,
                roles: tuple[str, ...] | None = None) -> BlockTime:
    """Sum of block times of a phase (optionally only some roles) on one tp-sharded replica (memoised: the
    attention/FFN search costs the same group at the same point many times)."""
    memo = _memo(graph).setdefault("blocks_time", {})
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
    memo = _memo(graph)
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
    memo = _memo(graph).setdefault("step", {})  # [Note: step memo]
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


def prefix_cached_tokens(prompt: int, shared_prefix: int, hit_rate: float) -> float:
    """Prompt tokens still to compute when `hit_rate` of requests find their `shared_prefix` cached."""
    return prompt - hit_rate * min(shared_prefix, prompt)


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

