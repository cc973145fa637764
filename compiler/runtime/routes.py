"""Serving units and routes: which workers a request's prefill and decode steps visit, in which order.

Before: a plan. After: `Unit`s. A unit is where a request lives from prompt to
last token: a colocated pool replica (prefill and decode on the same workers),
or a decode replica (a ``decode`` pool replica, or a ``decode-attention``
replica with its ``decode-ffn`` partner) fed by the prefill pools whose KV
transfers point at it. A `Route` is a phase's blocks in model order grouped
into hops: consecutive blocks on the same stage instance form one hop, so a
pipeline of pp stages is pp hops, and attention/FFN disaggregation alternates
between the two pools' workers every layer. A unit whose pool has a ``draft``
block also has a `DraftRoute` (`compiler.runtime.speculative`).

>>> hop = Hop(ranks=(1, 2), blocks=("embed", "L0.attn"), pool="p", stage=0)
>>> hop.as_json()
{'ranks': [1, 2], 'blocks': ['embed', 'L0.attn']}
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.plan.schema import Plan, Pool, TransferDetail
from compiler.plan.topology import by_stage
from compiler.ir.errors import BadInput
from compiler.runtime.speculative import DraftRoute, drafter_of


@dataclass(frozen=True, slots=True)
class Hop:
    ranks: tuple[int, ...]
    blocks: tuple[str, ...]
    pool: str
    stage: int

    def as_json(self) -> dict:
        return {"ranks": list(self.ranks), "blocks": list(self.blocks)}


@dataclass(frozen=True, slots=True)
class Unit:
    """A place requests are served: decode members (pool, replica) and the prefill sources that feed them."""

    name: str
    decode: tuple[tuple[str, int], ...]
    decode_route: tuple[Hop, ...]
    prefill: tuple[tuple[tuple[str, int], tuple[Hop, ...]], ...]  # ((pool, replica), route) per source
    batch: int
    kv: TransferDetail | None  # the hand-off from prefill; None when colocated
    kv_dst_pool: str | None
    draft: DraftRoute | None = None  # speculative decoding: the drafter replica that drafts for this unit


def _order(block: str) -> tuple[int, int]:
    if block == "embed":
        return (0, 0)
    if block == "head":
        return (1 << 30, 0)
    layer, kind = block[1:].split(".")
    return (1 + int(layer), 0 if kind == "attn" else 1)


def route(plan: Plan, members: list[tuple[str, int]], phase: str) -> tuple[Hop, ...]:
    """The hops of `phase` over the stage instances of `members` ((pool, replica) pairs)."""
    stages = by_stage(plan)
    pools = {p.name: p for p in plan.pools}
    placed = []
    for pool_name, replica in members:
        for stage in pools[pool_name].stages:
            for name in stage.blocks:
                ph, block = name.split("/", 1)
                if ph == phase:
                    placed.append((_order(block), block, pool_name, replica, stage.index))
    placed.sort()
    hops: list[Hop] = []
    for _, block, pool_name, replica, index in placed:
        ranks = tuple(w.rank for w in stages[(pool_name, replica, index)])
        if hops and hops[-1].ranks == ranks:
            hops[-1] = Hop(ranks, hops[-1].blocks + (block,), pool_name, index)
        else:
            hops.append(Hop(ranks, (block,), pool_name, index))
    if not hops or hops[0].blocks[0] != "embed" or hops[-1].blocks[-1] != "head":
        raise BadInput(f"plan: the {phase} route over {members} does not run embed .. head; recompile the plan")
    return tuple(hops)


def _partner(plan: Plan, attention: Pool) -> Pool:
    names = [t.dst_pool for t in plan.transfers if t.kind == "activation" and t.src_pool == attention.name]
    pools = {p.name: p for p in plan.pools}
    if not names:
        raise BadInput(f"plan: decode-attention pool {attention.name} has no activation transfer to an FFN pool")
    return pools[names[0]]


def units(plan: Plan) -> list[Unit]:
    """Every serving unit of the plan, in pool order."""
    for pool in plan.pools:
        if pool.draft is not None and pool.role not in ("colocated", "decode", "decode-attention"):
            raise BadInput(f"plan: pool {pool.name} ({pool.role}) has a draft block; only colocated, decode and "
                           f"decode-attention pools decode; recompile the plan")
    out: list[Unit] = []
    for pool in plan.pools:
        if pool.role == "colocated":
            for r in range(pool.replicas):
                members = [(pool.name, r)]
                out.append(Unit(f"{pool.name}/r{r}", tuple(members), route(plan, members, "decode"),
                                (((pool.name, r), route(plan, members, "prefill")),), pool.batch, None, None,
                                drafter_of(plan, pool, r, lambda m, ph: route(plan, m, ph))))
        elif pool.role in ("decode", "decode-attention"):
            sources = [t for t in plan.transfers if t.kind == "kv" and t.dst_pool == pool.name]
            if not sources:
                raise BadInput(f"plan: decode pool {pool.name} receives KV from no prefill pool")
            feeders = []
            pools = {p.name: p for p in plan.pools}
            for t in sources:
                for r in range(pools[t.src_pool].replicas):
                    feeders.append(((t.src_pool, r), route(plan, [(t.src_pool, r)], "prefill")))
            for r in range(pool.replicas):
                members = [(pool.name, r)]
                if pool.role == "decode-attention":  # M attention replicas share one FFN replica (M:N)
                    partner = _partner(plan, pool)
                    members.append((partner.name, r * partner.replicas // pool.replicas))
                out.append(Unit(f"{pool.name}/r{r}", tuple(members), route(plan, members, "decode"), tuple(feeders),
                                pool.batch, sources[0].detail, pool.name,
                                drafter_of(plan, pool, r, lambda m, ph: route(plan, m, ph))))
    if not out:
        raise BadInput("plan: no pool decodes (no colocated, decode or decode-attention pool); recompile the plan")
    return out


def handoff_pairs(plan: Plan, unit: Unit, source: tuple[str, int]) -> list[dict]:
    """The KV head pairs of `unit`'s transfer from prefill replica `source`, as worker ranks."""
    stages = by_stage(plan)
    src_pool, src_replica = source
    dst_replica = dict(unit.decode)[unit.kv_dst_pool]
    detail = next(t.detail for t in plan.transfers
                  if t.kind == "kv" and t.src_pool == src_pool and t.dst_pool == unit.kv_dst_pool)
    out = []
    for p in detail.pairs:
        src = stages[(src_pool, src_replica, p.src_stage)][p.src_tp_rank].rank
        dst = stages[(unit.kv_dst_pool, dst_replica, p.dst_stage)][p.dst_tp_rank].rank
        out.append({"src": src, "dst": dst, "layers": p.layers, "heads": p.kv_heads})
    return out
