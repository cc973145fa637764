"""Transfers as plan operations: what each edge between pools carries, in which layout and dtype, how many bytes.

Before: a `Plan` whose stages carry `StageExec` (layers, tp, KV dtype and page
size). After: each `Transfer` gets a `TransferDetail`:

- ``kv`` edges carry ``kv_pages`` in the ``HND`` layout (KV heads, tokens, head
  dim, per layer, K then V). ``bytes_per_token`` is exact: 2 x layers x KV heads
  x head dim x the KV dtype's size; a request with an S-token prompt hands off
  exactly ``S * bytes_per_token`` bytes (the runtime counts them and a test
  compares). ``pairs`` lists, for every prefill rank and decode rank whose
  layers and KV-head ranges intersect, the layers and heads the first sends to
  the second, so prefill tp=4 -> decode tp=2 and the reverse are lists of
  pairs, not special cases (see [Note: KV head pairing]).
- ``activation`` edges (attention <-> FFN pools) carry ``hidden_states``
  (tokens x hidden) twice per layer per decode token.
- ``draft`` edges (a drafter pool -> the pool holding the target's decode
  ``embed``) carry ``draft_tokens``: int64 ids, 8 bytes per drafted token per
  receiving rank (see [Note: speculative decoding] in compiler/runtime/speculative.py).

[Note: KV head pairing]
Rank r of a tp=t stage holds KV heads [r*H/t, (r+1)*H/t). A prefill rank sends
a decode rank the intersection of their head ranges, for the intersection of
their layer ranges. Every head of every layer is sent exactly once, so bytes
do not depend on the tp pairing; with head-outer (HND) pages the slice is a
contiguous narrow of each layer's K and V.

Conversions are explicit: a sender whose KV dtype or layout differs from the
receiver's gets a ``cast`` / ``permute`` step (at the receiver) only when the
caller allows it; otherwise `validate_transfers` refuses the plan.
"""

from __future__ import annotations

from compiler.plan.schema import Conversion, HeadPair, Plan, Pool, Transfer, TransferDetail
from compiler.ir.errors import BadInput

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
TOKEN_ID_BYTES = 8  # draft tokens travel as int64 ids


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str) -> int:
    """Bytes of K and V one token leaves in every layer's cache."""
    return 2 * layers * kv_heads * head_dim * DTYPE_BYTES[dtype]


def _overlap(a: list[int], b: list[int]) -> list[int] | None:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return [lo, hi] if lo < hi else None


def head_pairs(src: Pool, dst: Pool) -> list[HeadPair]:
    """Every (prefill rank, decode rank) pair whose layers and KV heads intersect; see [Note: KV head pairing]."""
    pairs = []
    for s in src.stages:
        for d in dst.stages:
            if s.execution is None or d.execution is None:
                continue
            layers = _overlap(s.execution.layers, d.execution.layers)
            if layers is None:
                continue
            for sr in s.execution.ranks:
                for dr in d.execution.ranks:
                    heads = _overlap(sr.kv_heads, dr.kv_heads)
                    if heads is not None:
                        pairs.append(HeadPair(src_stage=s.index, src_tp_rank=sr.tp_rank, dst_stage=d.index,
                                              dst_tp_rank=dr.tp_rank, layers=layers, kv_heads=heads))
    return pairs


def _kv_dtype(pool: Pool) -> str:
    return next(s.execution.kv_dtype for s in pool.stages if s.execution is not None)


def _layout(pool: Pool) -> str:
    return next(s.execution.kv_layout for s in pool.stages if s.execution is not None)


def detail(plan: Plan, t: Transfer, *, layers: int, kv_heads: int, head_dim: int, hidden: int,
           allow_conversion: bool = False) -> TransferDetail:
    if t.kind == "draft":
        return TransferDetail(carries="draft_tokens", layout="N", dtype="int64", dst_dtype="int64",
                              bytes_per_token=TOKEN_ID_BYTES, crossings_per_token=1)
    pools = {p.name: p for p in plan.pools}
    src, dst = pools[t.src_pool], pools[t.dst_pool]
    s_dtype, d_dtype = _kv_dtype(src), _kv_dtype(dst)
    if t.kind == "activation":
        return TransferDetail(carries="hidden_states", layout="ND", dtype=s_dtype, dst_dtype=d_dtype,
                              bytes_per_token=hidden * DTYPE_BYTES[s_dtype], crossings_per_token=2 * layers)
    conversions = []
    if allow_conversion and s_dtype != d_dtype:
        conversions.append(Conversion(op="cast", src=s_dtype, dst=d_dtype, at="receiver"))
    if allow_conversion and _layout(src) != _layout(dst):
        conversions.append(Conversion(op="permute", src=_layout(src), dst=_layout(dst), at="receiver"))
    block = next(s.execution.kv_block_size for s in dst.stages if s.execution is not None)
    return TransferDetail(carries="kv_pages", layout=_layout(src), dtype=s_dtype, dst_dtype=d_dtype,
                          bytes_per_token=kv_bytes_per_token(layers, kv_heads, head_dim, s_dtype),
                          crossings_per_token=1, block_size=block, conversions=conversions,
                          pairs=head_pairs(src, dst))


def validate_transfers(plan: Plan) -> None:
    """Refuse KV edges whose dtype or layout differ without a conversion step, and pairings that miss heads."""
    pools = {p.name: p for p in plan.pools}
    for i, t in enumerate(plan.transfers):
        d = t.detail
        if d is None or d.carries != "kv_pages":
            continue
        where = f"plan.json transfers[{i}] ({t.src_pool} -> {t.dst_pool})"
        ops = {(c.op, c.src, c.dst) for c in d.conversions}
        if d.dtype != d.dst_dtype and ("cast", d.dtype, d.dst_dtype) not in ops:
            raise BadInput(f"{where}: KV dtype {d.dtype} is sent to a {d.dst_dtype} cache with no cast step; "
                           f"recompile so both pools use one KV dtype, or add a conversion to the plan")
        dst_layout = _layout(pools[t.dst_pool])
        if d.layout != dst_layout and ("permute", d.layout, dst_layout) not in ops:
            raise BadInput(f"{where}: KV layout {d.layout} meets a {dst_layout} cache with no permute step")
        covered = sum((p.layers[1] - p.layers[0]) * (p.kv_heads[1] - p.kv_heads[0]) for p in d.pairs)
        src_layers = sum(s.execution.layers[1] - s.execution.layers[0] for s in pools[t.src_pool].stages
                         if s.execution is not None)
        heads = pools[t.src_pool].stages[0].execution.ranks
        total_heads = heads[-1].kv_heads[1] - heads[0].kv_heads[0]
        if covered != src_layers * total_heads:
            raise BadInput(f"{where}: head pairs cover {covered} layer-heads of {src_layers * total_heads}; "
                           f"recompile the plan")
