"""Emit the `Plan`: pools with their pipeline stages, transfers, predicted totals, solver report, baselines.

Before: the BlockGraph, cluster, workload, `Precision`, the placement `Instance`,
its `Solution` and the `Baseline`s. After: a `Plan` (`compiler.emit.plan`), the
validated value ``plan.json`` holds. Writing it is the caller's (the CLI's) job.
"""

from __future__ import annotations

import math
from importlib import metadata

from compiler.emit.plan import Baseline, Plan, Pool, Predicted, SolverReport, Stage, Transfer
from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.placement import Baseline as BaselineSolution
from compiler.ir.placement import Instance, Solution
from compiler.ir.pool_option import PoolOption
from compiler.ir.precision import Precision

#: Pool roles of the two halves of a decode-af option, and the block roles each runs.
_AF_HALVES = (("a", "decode-attention", ("attn",)), ("f", "decode-ffn", ("embed", "ffn", "moe", "head")))
_PHASES_OF = {"colocated": ["prefill", "decode"], "prefill": ["prefill"], "decode": ["decode"]}


def emit_plan(graph: BlockGraph, cluster: Cluster, workload: Workload, precision: Precision, inst: Instance,
              sol: Solution, baselines: list[BaselineSolution]) -> Plan:
    options = list(inst.options)
    used = sol.used(options)
    pools, pool_of = _pools(graph, used)
    out_tps = sol.requests_per_s * workload.mean_output_len
    return Plan(
        gimletc_version=_version(), model=graph.model, model_sha256=graph.config_sha256, dtype=precision.weights,
        kv_dtype=precision.kv, cluster=cluster.name, power_budget_w=inst.power_budget_w,
        inventory=dict(inst.inventory), workload=workload.name, mean_input_len=workload.mean_input_len,
        mean_output_len=workload.mean_output_len, slo_ttft_ms=workload.slo.ttft_ms, slo_tpot_ms=workload.slo.tpot_ms,
        pools=pools, transfers=_kv_transfers(inst, sol, used, pool_of) + _activation_transfers(graph, used, pool_of),
        predicted=_predicted(inst, sol, used, out_tps),
        solver=SolverReport(status=sol.status, objective=sol.objective.name, objective_value=sol.objective.value,
                            bound=sol.objective.bound, gap=sol.objective.gap, variables=sol.variables,
                            constraints=sol.constraints, options=len(options)),
        baselines=[_baseline(b, workload.mean_output_len, out_tps) for b in baselines],
    )


def _version() -> str:
    try:
        return metadata.version("gimletc")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def stages(graph: BlockGraph, device: str, pp: int, phases: list[str], roles: tuple[str, ...] | None) -> list[Stage]:
    """The blocks of `phases` (of `roles`, default all) split into `pp` contiguous layer ranges."""
    layers = graph.num_layers
    out = []
    for k in range(pp):
        lo, hi = k * layers // pp, (k + 1) * layers // pp
        names = []
        for phase in phases:
            for b in graph.phase_blocks(phase):
                if roles is not None and b.role not in roles:
                    continue
                inside = (b.layer is not None and lo <= b.layer < hi) or (b.role == "embed" and k == 0) or (
                    b.role == "head" and k == pp - 1)
                if inside:
                    names.append(f"{phase}/{b.name}")
        out.append(Stage(index=k, device=device, blocks=names))
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _pools(graph: BlockGraph, used: list[tuple[PoolOption, int]]) -> tuple[list[Pool], dict[str, list[str]]]:
    """One pool per used option (two for decode-af: attention and FFN), and each option's pool names."""
    pools: list[Pool] = []
    pool_of: dict[str, list[str]] = {}
    for i, (o, n) in enumerate(used):
        name = f"pool{i}"
        common = dict(replicas=n, batch=o.batch, option=o.key, predicted_requests_per_s=o.rate_per_s * n,
                      predicted_ttft_ms=_ms(o.ttft_s), predicted_tpot_ms=_ms(o.tpot_s))
        if o.kind == "decode-af":
            total = o.devices_per_replica
            for (suffix, role, roles), (dev, per) in zip(_AF_HALVES, o.devices):
                pools.append(Pool(name=f"{name}{suffix}", role=role, device=dev, devices_per_replica=per, tp=per,
                                  pp=1, phases=["decode"], stages=stages(graph, dev, 1, ["decode"], roles),
                                  predicted_power_w=o.power_w * n * (per / total), **common))
            pool_of[o.key] = [f"{name}a", f"{name}f"]
            continue
        phases = _PHASES_OF[o.kind]
        (dev, per), = o.devices
        pools.append(Pool(name=name, role=o.kind, device=dev, devices_per_replica=per, tp=o.tp, pp=o.pp,
                          phases=phases, stages=stages(graph, dev, o.pp, phases, None),
                          predicted_power_w=o.power_w * n, **common))
        pool_of[o.key] = [name]
    return pools, pool_of


def _kv_transfers(inst: Instance, sol: Solution, used: list[tuple[PoolOption, int]],
                  pool_of: dict[str, list[str]]) -> list[Transfer]:
    """Each KV flow from a prefill option to a decode type, split over that type's decode pools by capacity."""
    by_key = {o.key: o for o in inst.options}
    out = []
    for (p_key, t), rate in sol.flows:
        sinks = [(o, n) for o, n in used if o.receives_kv and o.kv_device == t]
        capacity = sum(o.rate_per_s * n for o, n in sinks)
        for o, n in sinks:
            share = rate * o.rate_per_s * n / capacity
            out.append(Transfer(kind="kv", src_pool=pool_of[p_key][0], dst_pool=pool_of[o.key][0],
                                predicted_requests_per_s=share, predicted_bytes_per_s=share * inst.kv_bytes_per_request,
                                predicted_latency_ms=inst.handoff(by_key[p_key].kv_device, t) * 1e3))
    return out


def _activation_transfers(graph: BlockGraph, used: list[tuple[PoolOption, int]],
                          pool_of: dict[str, list[str]]) -> list[Transfer]:
    """Hidden states to the FFN pool and back, every layer of every decode step of a decode-af option."""
    out = []
    seam = graph.residual_edge("decode")
    for o, n in used:
        if o.kind == "decode-af":
            per_step = 2 * graph.num_layers * seam.act_bytes(B=o.batch, L=1)
            steps_per_s = n / o.tpot_s
            out.append(Transfer(kind="activation", src_pool=pool_of[o.key][0], dst_pool=pool_of[o.key][1],
                                predicted_requests_per_s=o.rate_per_s * n, predicted_bytes_per_s=per_step * steps_per_s,
                                predicted_latency_ms=0.0))
    return out


def _predicted(inst: Instance, sol: Solution, used: list[tuple[PoolOption, int]], out_tps: float) -> Predicted:
    by_key = {o.key: o for o in inst.options}
    ttfts = [by_key[p].ttft_s + inst.handoff(by_key[p].kv_device, t) for (p, t), _rate in sol.flows]
    ttfts += [o.ttft_s for o, _ in used if o.kind == "colocated"]
    tpots = [o.tpot_s for o, _ in used if o.tpot_s is not None]
    return Predicted(requests_per_s=sol.requests_per_s, output_tokens_per_s=out_tps, power_w=sol.power_w,
                     provisioned_power_w=sol.provisioned_w,
                     output_tokens_per_s_per_w=out_tps / sol.power_w if sol.power_w else 0.0,
                     worst_ttft_ms=max(ttfts) * 1e3 if ttfts else None,
                     worst_tpot_ms=max(tpots) * 1e3 if tpots else None)


def _baseline(b: BaselineSolution, mean_output_len: float, plan_tps: float) -> Baseline:
    tps = b.requests_per_s * mean_output_len
    return Baseline(name=b.name, output_tokens_per_s=tps, power_w=b.power_w,
                    plan_ratio=plan_tps / tps if tps else math.inf)
