"""Build a `Plan` by hand from pool shapes: for tests, benchmarks and users who want a placement the solver did not pick.

Before: a BlockGraph and a list of `PoolShape`s. After: a `Plan` with those pools
(stages from `compiler.emit.emit_plan.stages`), a KV transfer from every
prefill pool to every decode / decode-attention pool, and hidden-state transfers
between each decode-attention pool and the decode-ffn pool listed after it.
A shape with ``draft`` names a ``drafter`` pool (stages over `draft_graph`, the
draft model's blocks): the pool gets a `Draft` block with ``draft_k`` and a
``draft`` transfer runs from the drafter to the pool holding its decode
``embed`` (see [Note: speculative decoding] in compiler/runtime/speculative.py).
Predicted numbers are zero and the solver report says ``feasible`` with
``objective: handmade``: nothing here is a prediction of the cost model.

>>> PoolShape("p", "prefill", tp=2).devices
2
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.emit.emit_plan import stages
from compiler.plan.schema import Draft, Plan, Pool, Predicted, SolverReport, Transfer
from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput

_PHASES = {"colocated": ["prefill", "decode"], "prefill": ["prefill"], "decode": ["decode"],
           "decode-attention": ["decode"], "decode-ffn": ["decode"], "drafter": ["prefill", "decode"]}
_ROLES = {"decode-attention": ("attn",), "decode-ffn": ("embed", "ffn", "moe", "head")}


@dataclass(frozen=True, slots=True)
class PoolShape:
    name: str
    role: str
    tp: int = 1
    pp: int = 1
    device: str = "cpu-host"
    replicas: int = 1
    batch: int = 8
    draft: str | None = None  # the drafter pool that drafts for this one (speculative decoding)
    draft_k: int = 3
    draft_acceptance_rate: float | None = None  # an assumed α, reported as the prediction

    @property
    def devices(self) -> int:
        return self.tp * self.pp


def handmade_plan(graph: BlockGraph, shapes: list[PoolShape], *, dtype: str = "bf16",
                  draft_graph: BlockGraph | None = None) -> Plan:
    if draft_graph is None and any(s.role == "drafter" for s in shapes):
        raise BadInput("handmade_plan: a drafter pool needs draft_graph (the draft model's BlockGraph)")
    pools = []
    for s in shapes:
        own = draft_graph if s.role == "drafter" else graph
        draft = None if s.draft is None else Draft(pool=s.draft, model=draft_graph.model,
                                                   model_sha256=draft_graph.config_sha256, k=s.draft_k,
                                                   predicted_acceptance_rate=s.draft_acceptance_rate)
        pools.append(Pool(name=s.name, role=s.role, device=s.device, devices_per_replica=s.devices,
                          replicas=s.replicas, tp=s.tp, pp=s.pp, batch=s.batch, phases=_PHASES[s.role],
                          stages=stages(own, s.device, s.pp, _PHASES[s.role], _ROLES.get(s.role)), option="handmade",
                          predicted_requests_per_s=0.0, predicted_power_w=0.0, draft=draft))
    transfers = []
    for src in pools:
        if src.role != "prefill":
            continue
        for dst in pools:
            if dst.role in ("decode", "decode-attention"):
                transfers.append(Transfer(kind="kv", src_pool=src.name, dst_pool=dst.name,
                                          predicted_requests_per_s=0.0, predicted_bytes_per_s=0.0,
                                          predicted_latency_ms=0.0))
    for i, a in enumerate(pools):
        f = next((p for p in pools[i + 1:] if p.role == "decode-ffn"), None)
        if a.role == "decode-attention" and f is not None:
            transfers.append(Transfer(kind="activation", src_pool=a.name, dst_pool=f.name,
                                      predicted_requests_per_s=0.0, predicted_bytes_per_s=0.0,
                                      predicted_latency_ms=0.0))
    for i, p in enumerate(pools):
        if p.draft is not None:
            embeds = p if p.role != "decode-attention" else next(f for f in pools[i + 1:] if f.role == "decode-ffn")
            transfers.append(Transfer(kind="draft", src_pool=p.draft.pool, dst_pool=embeds.name,
                                      predicted_requests_per_s=0.0, predicted_bytes_per_s=0.0,
                                      predicted_latency_ms=0.0))
    inventory: dict[str, int] = {}
    for s in shapes:
        inventory[s.device] = inventory.get(s.device, 0) + s.devices * s.replicas
    return Plan(gimletc_version="handmade", model=graph.model, model_sha256=graph.config_sha256, dtype=dtype,
                kv_dtype=dtype, cluster="handmade", power_budget_w=None, inventory=inventory, workload="handmade",
                mean_input_len=0.0, mean_output_len=0.0, slo_ttft_ms=None, slo_tpot_ms=None, pools=pools,
                transfers=transfers,
                predicted=Predicted(requests_per_s=0.0, output_tokens_per_s=0.0, power_w=0.0, provisioned_power_w=0.0,
                                    output_tokens_per_s_per_w=0.0, worst_ttft_ms=None, worst_tpot_ms=None),
                solver=SolverReport(status="feasible", objective="handmade", objective_value=0.0, bound=0.0, gap=0.0,
                                    variables=0, constraints=0, options=0),
                baselines=[])
