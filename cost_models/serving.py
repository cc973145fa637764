"""A deployment and what one replica of it holds: the `Deployment` value, its memory and its batch limits.

A `Deployment` is ``count`` devices of one type running ``count / (tp*pp)``
replicas of a ``tp``-way tensor-parallel, ``pp``-stage pipeline. Every number
here is a prediction from the BlockGraph (work) and the device's specs;
nothing is measured.

- `memory_plan`: weights and KV per device, which tier holds them, how many tokens of KV fit.
- `devices_to_hold`: the fewest devices whose memory holds a model's weights.
- `max_batch`: largest batch for a KV length distribution, paged (block size) vs contiguous;
  `sequences_that_fit`: the largest batch of one length a replica's KV cache holds.
- `block_groups`: the distinct blocks of a phase with their multiplicity (each costed once).

What a step of the engine takes is `cost_models.steps`; the static shapes a Neuron engine compiles,
`cost_models.buckets`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from compiler.ir.block_graph import Block, BlockGraph
from compiler.ir.device_spec import DeviceSpec
from compiler.ir.precision import Precision
from cost_models.buckets import Buckets
from cost_models.derates import Derate
from cost_models.engines import GENERIC, KV_MEMORY_FRACTION, Engine
from cost_models.roofline import TierSplit

#: Share of the memory left after weights and runtime reserve that the KV cache takes, for an engine that sizes its
#: cache from free memory (TensorRT-LLM's kv_cache_free_gpu_mem_fraction and vLLM's gpu_memory_utilization both
#: default to 0.9); each engine's own is `Engine.kv_memory_fraction` ([Note: KV memory]).
KV_FREE_FRACTION = KV_MEMORY_FRACTION
#: Memory a runtime keeps for its context, workspace and activations, as a share of capacity (assumption).
RUNTIME_RESERVE_FRACTION = 0.02
#: Tokens per KV page in a paged cache (vLLM's default block size).
PAGE_TOKENS = 16


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


_GROUPS: dict[int, tuple[BlockGraph, dict]] = {}
#: Entries a graph's memo of block times keeps before it starts over (bounds memory across many compiles).
MEMO_ENTRIES = 200_000


def graph_memo(graph: BlockGraph) -> dict:
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
    memo = graph_memo(graph)
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
