"""Attention/FFN disaggregated decode as MegaScale-Infer runs it: M:N groups, ping-pong micro-batches.

One replica of this kind is `M` attention groups (each ``attn.tp`` devices
holding the attention weights and the KV of its own sequences) and `N` FFN
groups (each ``ffn.tp`` devices). A MoE's experts are split over the N groups
(expert parallel: each token goes to the groups holding its k experts); a
dense FFN is replicated on each (data parallel). Embedding and head run on
the FFN side. Both sides may be the same device type. Every time is a
prediction of the roofline (`cost_models.roofline`).

[Note: attention/FFN ping-pong] Each attention group splits its ``b``
sequences into ``m`` micro-batches. Per layer a micro-batch goes attention ->
link -> FFN -> link -> attention, and while it is away the attention group
computes the next one. With ``ta``, ``tf`` one micro-batch's attention and
FFN time on one group and ``tc`` one direction's transfer, a layer takes
``max(m x max(ta, tf, tc), ta + tf + 2 tc)``: the ring's slowest stage once
per micro-batch, unless the ring is too short to hide a round trip; m = 1 is
the serial schedule, the sum. A step is L layers plus the embedding and head
plus the engine's scheduling. (MegaScale-Infer, Zhu et al. 2025,
https://arxiv.org/abs/2504.02263, section 4.2: ``(Ta + Te + 2 Tc) + Tf (mL - 1)``
with Tf = max(Ta, Te), the same schedule once the pipeline is full.) An FFN
group sees the tokens of all M attention groups at once (``M b / m`` per
micro-batch; ``/ N`` for a dense FFN): experts batch many more tokens than any
one attention group holds, which is where the per-device gain comes from, and
the link carries every token's hidden state twice per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler.ir.block_graph import BlockGraph
from cost_models.comm import allreduce_s, p2p_s
from cost_models.roofline import BlockTime
from cost_models.serving import Deployment, MemoryPlan, block_groups, memory_plan
from cost_models.steps import blocks_time

ATTN_ROLES = ("attn",)
FFN_ROLES = ("ffn", "moe")
EDGE_ROLES = ("embed", "head")


@dataclass(frozen=True, slots=True)
class AFShape:
    """One attention/FFN decode replica: M attention groups, N FFN groups, m micro-batches in flight.

    ``link_bw_bytes_per_s`` is what one device sends or receives with across the seam (its NIC, or the
    scale-up link when the whole replica sits in one scale-up domain); ``pool_link_bw_bytes_per_s`` caps
    all the replica's seam traffic at once (the aggregate between two pools; infinite inside one).
    """

    attn: Deployment  # one attention group (pp 1)
    ffn: Deployment  # one FFN group (pp 1)
    attn_groups: int
    ffn_groups: int
    micro_batches: int
    link_bw_bytes_per_s: float
    link_latency_s: float
    pool_link_bw_bytes_per_s: float = float("inf")

    @property
    def attn_devices(self) -> int:
        return self.attn_groups * self.attn.group

    @property
    def ffn_devices(self) -> int:
        return self.ffn_groups * self.ffn.group

    @property
    def devices(self) -> int:
        return self.attn_devices + self.ffn_devices


@dataclass(frozen=True, slots=True)
class AFStep:
    """One decode step of an `AFShape` replica with ``b`` sequences per attention group, and its parts.

    ``attn_s``, ``ffn_s``, ``transfer_s`` are per layer and per micro-batch (transfer: one direction);
    ``attn_busy`` and ``ffn_busy`` are one device's compute and memory time over the whole step (power);
    ``seam_bytes`` is what crosses between the two sides in one step, both directions.
    """

    time_s: float
    attn_s: float
    ffn_s: float
    transfer_s: float
    attn_busy: BlockTime
    ffn_busy: BlockTime
    seam_bytes: float
    attn_plan: MemoryPlan
    ffn_plan: MemoryPlan

    @property
    def bound(self) -> str:
        """Which stage of the ring sets the pace ("attention", "ffn" or "transfer")."""
        parts = {"attention": self.attn_s, "ffn": self.ffn_s, "transfer": self.transfer_s}
        return max(parts, key=parts.get)


def is_moe(graph: BlockGraph) -> bool:
    return any(b.experts for b, _n in block_groups(graph, "decode", ("moe",)))


def ffn_side(graph: BlockGraph, shape: AFShape) -> Deployment:
    """What FFN blocks are costed on: a MoE's experts over all N groups' devices, a dense FFN on one group."""
    if is_moe(graph):
        return replace(shape.ffn, count=shape.ffn_devices, tp=shape.ffn.tp * shape.ffn_groups)
    return shape.ffn


def af_plans(graph: BlockGraph, shape: AFShape, batch: float, kv_tokens: float) -> tuple[MemoryPlan, MemoryPlan]:
    """Memory of one attention group (attention weights, the KV of `batch` sequences of `kv_tokens`) and of
    one FFN-side device (FFN or its share of the experts, embedding, head)."""
    return _attn_plan(graph, shape, batch, kv_tokens), _ffn_plan(graph, shape)


def _attn_plan(graph: BlockGraph, shape: AFShape, batch: float, kv_tokens: float) -> MemoryPlan:
    kv = graph.kv_bytes_per_sequence(kv_tokens, shape.attn.precision) * batch / shape.attn.group
    return memory_plan(graph, shape.attn, kv, roles=ATTN_ROLES)


def _ffn_plan(graph: BlockGraph, shape: AFShape) -> MemoryPlan:
    return memory_plan(graph, ffn_side(graph, shape), 0.0, roles=FFN_ROLES + EDGE_ROLES)


def af_decode_step(graph: BlockGraph, shape: AFShape, batch: float, context: float, *,
                   memo: dict | None = None) -> AFStep:
    """One decode step with `batch` sequences per attention group at `context` cached tokens; see
    [Note: attention/FFN ping-pong].

    `memo` (a dict the caller keeps) holds each side's costing between calls: an M:N search costs one
    attention group at a handful of micro-batch sizes and one FFN group at a handful of pooled token counts,
    across hundreds of shapes. It is keyed by the deployments' identity, so it must not outlive them (one
    search's `shape.attn` and `shape.ffn` objects)."""
    memo = {} if memo is None else memo
    time, ta, tf, tc, attn, ffn, edges, plan_a, plan_f, seam = _af_step(graph, shape, batch, context, memo)
    m = shape.micro_batches
    return AFStep(time, ta, tf, tc, _times(attn, m), _times(ffn, m, edges), seam, plan_a, plan_f)


def af_step_s(graph: BlockGraph, shape: AFShape, batch: float, context: float, memo: dict) -> float:
    """`af_decode_step`'s time alone (what an M:N search ranks shapes by), with the same `memo`."""
    return _af_step(graph, shape, batch, context, memo)[0]


def _af_step(graph: BlockGraph, shape: AFShape, batch: float, context: float, memo: dict) -> tuple:
    """`af_decode_step`'s parts: (time, ta, tf, tc, the attention side's blocks, the FFN side's, its embedding and
    head, the two memory plans, the bytes across the seam)."""
    m, layers = shape.micro_batches, graph.num_layers
    a, f = id(shape.attn), id(shape.ffn)
    plan_a = _kept(memo, ("plan a", a, batch, context), lambda: _attn_plan(graph, shape, batch, context))
    plan_f = _kept(memo, ("plan f", f, shape.ffn_groups), lambda: _ffn_plan(graph, shape))
    ffn_dep = _kept(memo, ("ffn dep", f, shape.ffn_groups), lambda: ffn_side(graph, shape))
    moe = _kept(memo, ("moe",), lambda: is_moe(graph))
    micro = batch / m
    pooled = shape.attn_groups * micro / (1 if moe else shape.ffn_groups)  # tokens one FFN costing sees
    per_token = _kept(memo, ("per token", context), lambda: graph.residual_edge("decode").act_bytes(B=1, L=context))
    attn, ta = _kept(memo, ("attn", a, batch, m, context), lambda: _side(
        graph, shape.attn, shape.attn, ATTN_ROLES, micro, context, plan_a, per_token))
    ffn, tf = _kept(memo, ("ffn", f, shape.ffn_groups, pooled, context), lambda: _side(
        graph, ffn_dep, shape.ffn, FFN_ROLES, pooled, context, plan_f, per_token))
    fanout = _kept(memo, ("fanout", shape.ffn_groups), lambda: min(_experts_per_token(graph), shape.ffn_groups)
                   if moe else 1)  # groups each token visits
    tc = _transfer_s(shape, per_token, micro, fanout)
    layer = max(m * max(ta, tf, tc), ta + tf + 2 * tc)
    tokens = shape.attn_groups * batch
    edge_tokens = tokens / (1 if moe else shape.ffn_groups)
    edges = _kept(memo, ("edges", f, shape.ffn_groups, edge_tokens, context), lambda: blocks_time(
        graph, ffn_dep, "decode", {"B": edge_tokens, "L": context}, plan_f, EDGE_ROLES))
    host = max(shape.attn.step_overhead_s, shape.ffn.step_overhead_s) + shape.attn.engine.seq_overhead_s * batch
    time = shape.attn.engine.step_s(layers * layer + edges.time_s, host)
    return time, ta, tf, tc, attn, ffn, edges, plan_a, plan_f, 2 * layers * tokens * per_token * fanout


def _kept(memo: dict, key: tuple, compute):
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _side(graph: BlockGraph, costed: Deployment, group: Deployment, roles: tuple[str, ...], tokens: float,
          context: float, plan: MemoryPlan, per_token: float) -> tuple[BlockTime, float]:
    """One side's blocks at `tokens` per micro-batch, and its time per layer with the tensor-parallel
    all-reduce of `group` (the FFN side of a MoE is costed over all its groups' devices, reduced within one)."""
    t = blocks_time(graph, costed, "decode", {"B": tokens, "L": context}, plan, roles)
    return t, t.time_s / graph.num_layers + _tp_allreduce_s(group, per_token * tokens)


def _experts_per_token(graph: BlockGraph) -> int:
    return max(b.experts_per_token for b, _n in block_groups(graph, "decode", ("moe",)))


def _times(t: BlockTime, m: int, once: BlockTime | None = None) -> BlockTime:
    """A device's busy time over a step: `m` micro-batches of `t`, plus `once` (the embedding and head)."""
    extra = once or BlockTime(0.0, 0.0, 0.0, 0.0)
    return BlockTime(m * t.time_s + extra.time_s, m * t.compute_s + extra.compute_s, m * t.memory_s + extra.memory_s,
                     m * t.overhead_s + extra.overhead_s)


def _tp_allreduce_s(dep: Deployment, nbytes: float) -> float:
    """The all-reduce a tensor-parallel group runs on its block's output, once per layer and micro-batch."""
    link = dep.device.scale_up or dep.device.scale_out
    if dep.tp == 1 or link is None:
        return 0.0
    return allreduce_s(nbytes, dep.tp, bw_bytes_per_s=link.bw_bytes_per_s * dep.derate.link_eff,
                       latency_s=link.latency_s)


def _transfer_s(shape: AFShape, per_token: float, micro: float, fanout: int) -> float:
    """One direction of one micro-batch's hidden states: an attention group sends its tokens, an FFN group
    receives its share of every group's, and the pools' link carries them all."""
    eff = shape.attn.derate.link_eff
    bw, lat = shape.link_bw_bytes_per_s * eff, shape.link_latency_s
    sent = micro * per_token * fanout
    received = shape.attn_groups * micro * per_token * fanout / shape.ffn_groups
    total = shape.attn_groups * sent
    return max(p2p_s(sent, bw_bytes_per_s=bw * shape.attn.group, latency_s=lat),
               p2p_s(received, bw_bytes_per_s=bw * shape.ffn.group, latency_s=lat),
               total / (shape.pool_link_bw_bytes_per_s * eff))
