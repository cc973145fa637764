"""``gimletc compile``: trace -> partition -> cost -> place -> emit, in one driver.

Named, timed steps (`compiler.pipeline.Timings`): ``trace`` and ``partition``
(cached BlockGraph), ``inputs`` (cluster and workload files), ``cost``
(`compiler.pool_options`), ``place`` (`compiler.place`, CP-SAT), ``baselines``
(greedy and best homogeneous, same cost model) and ``emit`` (`compiler.plan`).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Callable

from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput, Infeasible
from compiler.pipeline import Timings, block_graph
from compiler.place import Instance, Solution, greedy, greedy_rate, solve
from compiler.plan import Baseline, Plan, Pool, Predicted, SolverReport, Stage, Transfer
from compiler.pool_options import PoolOption, enumerate_options

log = logging.getLogger(__name__)


def parse_power(text: str) -> float:
    """``200kW`` / ``1.5MW`` / ``50000W`` / ``50000`` -> watts."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(mw|kw|w)?\s*", text.lower())
    if not m:
        raise BadInput(f"--power-budget {text!r}: expected a number with an optional unit, e.g. 200kW or 1.5MW")
    value = float(m.group(1)) * {"mw": 1e6, "kw": 1e3, "w": 1.0, None: 1.0}[m.group(2)]
    if value <= 0:
        raise BadInput(f"--power-budget {text!r}: must be positive")
    return value


@dataclass
class CompileResult:
    plan: Plan
    solution: Solution
    options: list[PoolOption]
    instance: Instance
    graph: BlockGraph
    timings: Timings = field(default_factory=Timings)


def build_instance(graph: BlockGraph, cluster, workload, options: list[PoolOption], dtype: str,
                   power_budget_w: float | None) -> Instance:
    from cost_models.comm import kv_handoff_s
    from cost_models.serving import kv_bytes_per_sequence

    kv_dtype = "fp8" if dtype == "fp4" else dtype
    kv = kv_bytes_per_sequence(graph, workload.mean_input_len, kv_dtype)
    types = sorted(cluster.inventory())
    links = tuple(((a, b), cluster.link(a, b)[0]) for a in types for b in types if a < b)
    handoff = tuple(((a, b), kv_handoff_s(kv, bw_bytes_per_s=cluster.link(a, b)[0],
                                          latency_s=cluster.link(a, b)[1], layers=graph.num_layers))
                    for a in types for b in types)
    arrival = workload.arrival_rate_per_s if workload.arrival_rate_per_s != "maximise" else None
    ttft = workload.slo.ttft_ms / 1e3 if workload.slo.ttft_ms else None
    return Instance(tuple(options), tuple(sorted(cluster.inventory().items())), power_budget_w, kv, links, handoff,
                    ttft, arrival)


def compile_plan(model: str, cluster_path: str, workload_path: str, *, power_budget_w: float | None = None,
                 objective: str = "throughput", slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
                 dtype: str = "bf16", time_limit_s: float = 60.0, baselines: bool = True,
                 progress: Callable[[str], None] | None = None) -> CompileResult:
    from compiler.fleet import load_cluster, load_workload

    note = progress or (lambda _m: None)
    timings = Timings()
    with timings.step("inputs"):  # first: a bad file fails before any tracing
        cluster = load_cluster(cluster_path)
        workload = load_workload(workload_path)
        if slo_ttft_ms is not None or slo_tpot_ms is not None:
            slo = workload.slo.model_copy(update={k: v for k, v in (("ttft_ms", slo_ttft_ms), ("tpot_ms", slo_tpot_ms))
                                                  if v is not None})
            workload = workload.model_copy(update={"slo": slo})
    graph = block_graph(model, timings=timings, progress=progress)
    _warn_context(model, workload)
    budget = power_budget_w if power_budget_w is not None else cluster.power_budget_w
    note(f"costing pools for {graph.model} on {cluster.name}")
    with timings.step("cost"):
        try:
            options, _skipped = enumerate_options(graph, cluster, workload, dtype=dtype)
        except BadInput as e:
            raise Infeasible(f"memory: {e}") from None
        inst = build_instance(graph, cluster, workload, options, dtype, budget)
    note(f"solving the placement ({len(options)} pool options) with CP-SAT")
    with timings.step("place"):
        hint = greedy(inst)  # a baseline; not a solver hint: on 2 workers a hint made CP-SAT ~12x slower here
        sol = solve(inst, objective, time_limit_s=time_limit_s)
        if sol.status == "infeasible":
            raise Infeasible(explain_infeasible(graph, inst, sol, workload))
    with timings.step("baselines"):
        base = _baselines(inst, sol, hint, workload.mean_output_len, time_limit_s) if baselines else []
    with timings.step("emit"):
        plan = _plan(graph, cluster, workload, inst, sol, options, base, dtype, objective)
    return CompileResult(plan, sol, options, inst, graph, timings)


def _warn_context(model: str, workload) -> None:
    """Costs extrapolate past a model's trained context; say so rather than refuse (long-context variants exist)."""
    from compiler.model_spec import resolve_model

    limit = resolve_model(model).config.get("max_position_embeddings") if ":" not in model else None
    if limit and workload.kv_tokens_per_request_max > limit:
        log.warning("workload %s reaches %d tokens per request, beyond %s's max_position_embeddings (%d); "
                    "costs are extrapolated for a long-context variant", workload.name,
                    workload.kv_tokens_per_request_max, model, limit)


def _baselines(inst: Instance, sol: Solution, hint: dict[str, int], mean_out: float,
               time_limit_s: float) -> list[Baseline]:
    plan_tps = sol.requests_per_s * mean_out
    out = []
    power = {o.key: o.power_w for o in inst.options}  # predicted draw, as the plan reports
    g_tps = greedy_rate(inst, hint) * mean_out
    out.append(Baseline(name="greedy", output_tokens_per_s=g_tps, power_w=sum(power[k] * n for k, n in hint.items()),
                        plan_ratio=plan_tps / g_tps if g_tps else math.inf))
    for t, _count in inst.inventory:
        sub = replace(inst, options=tuple(o for o in inst.options if set(o.device_types) == {t}))
        if not sub.options:
            continue
        s = solve(sub, "throughput", time_limit_s=time_limit_s, tie_break=False)
        if s.status == "infeasible":
            continue
        tps = s.requests_per_s * mean_out
        out.append(Baseline(name=f"homogeneous:{t}", output_tokens_per_s=tps, power_w=s.power_w,
                            plan_ratio=plan_tps / tps if tps else math.inf))
    return out


def explain_infeasible(graph: BlockGraph, inst: Instance, sol: Solution, workload) -> str:
    """Name each binding constraint family with the number that would make it feasible."""
    reasons = []
    for family in sol.binding:
        if family == "power" and inst.power_budget_w is not None:
            free = solve(replace(inst, arrival_rate_per_s=inst.arrival_rate_per_s or 1e-3), "power",
                         families=[f for f in ("inventory", "slo", "link", "demand")], tie_break=False)
            need = f"{free.provisioned_w / 1e3:.1f} kW" if free.status != "infeasible" else "more than the fleet has"
            within = " and meet the SLOs" if "slo" in sol.binding else ""
            reasons.append(f"power budget {inst.power_budget_w / 1e3:.1f} kW < {need} needed to hold "
                           f"{graph.model} weights on the cheapest pools that fit{within}")
        elif family == "slo":
            tpots = [o for o in inst.options if o.tpot_s is not None]
            ttfts = [o for o in inst.options if o.ttft_s is not None]
            if workload.slo.tpot_ms and tpots:
                best = min(tpots, key=lambda o: o.tpot_s)
                if best.tpot_s * 1e3 > workload.slo.tpot_ms:
                    reasons.append(f"TPOT SLO {workload.slo.tpot_ms:g} ms < {best.tpot_s * 1e3:.1f} ms, the fastest "
                                   f"any pool achieves ({best.key})")
            if workload.slo.ttft_ms and ttfts:
                best = min(ttfts, key=lambda o: o.ttft_s)
                if best.ttft_s * 1e3 > workload.slo.ttft_ms:
                    reasons.append(f"TTFT SLO {workload.slo.ttft_ms:g} ms < {best.ttft_s * 1e3:.1f} ms, the fastest "
                                   f"any pool achieves ({best.key})")
            if not reasons:
                reasons.append("SLO: no combination of pools meets TTFT and TPOT together (KV hand-off included)")
        elif family == "demand" and inst.arrival_rate_per_s is not None:  # when maximising, demand is "serve any"
            free = solve(replace(inst, arrival_rate_per_s=None), "throughput", families=["inventory", "power", "slo",
                                                                                         "link"], tie_break=False)
            most = free.requests_per_s if free.status != "infeasible" else 0.0
            reasons.append(f"arrival rate {inst.arrival_rate_per_s:g} req/s > {most:.2f} req/s, the most this "
                           f"cluster serves within its budget and SLOs")
        elif family == "inventory":
            reasons.append("inventory: the pools that meet the other constraints need more devices than the cluster has")
        elif family == "link":
            reasons.append("link: the links between pools cannot carry the KV hand-off traffic")
    return "infeasible: " + "; ".join(reasons or ["no placement satisfies the constraints"])


def _stages(graph: BlockGraph, device: str, pp: int, phases: list[str], roles: tuple[str, ...] | None) -> list[Stage]:
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


def _plan(graph, cluster, workload, inst: Instance, sol: Solution, options, base, dtype, objective) -> Plan:
    pools: list[Pool] = []
    pool_of: dict[str, list[str]] = {}
    for i, (o, n) in enumerate(sol.used(options)):
        name = f"pool{i}"
        ms = lambda s: None if s is None else s * 1e3  # noqa: E731
        common = dict(replicas=n, batch=o.batch, option=o.key, predicted_requests_per_s=o.rate_per_s * n,
                      predicted_ttft_ms=ms(o.ttft_s), predicted_tpot_ms=ms(o.tpot_s))
        if o.kind == "decode-af":
            (ta, na), (tf, nf) = o.devices
            share = {ta: na / (na + nf), tf: nf / (na + nf)}
            pools.append(Pool(name=f"{name}a", role="decode-attention", device=ta, devices_per_replica=na, tp=na,
                              pp=1, phases=["decode"], stages=_stages(graph, ta, 1, ["decode"], ("attn",)),
                              predicted_power_w=o.power_w * n * share[ta], **common))
            pools.append(Pool(name=f"{name}f", role="decode-ffn", device=tf, devices_per_replica=nf, tp=nf, pp=1,
                              phases=["decode"], stages=_stages(graph, tf, 1, ["decode"], ("embed", "ffn", "moe", "head")),
                              predicted_power_w=o.power_w * n * share[tf], **common))
            pool_of[o.key] = [f"{name}a", f"{name}f"]
            continue
        phases = {"colocated": ["prefill", "decode"], "prefill": ["prefill"], "decode": ["decode"]}[o.kind]
        (dev, per), = o.devices
        pools.append(Pool(name=name, role=o.kind, device=dev, devices_per_replica=per, tp=o.tp, pp=o.pp,
                          phases=phases, stages=_stages(graph, dev, o.pp, phases, None),
                          predicted_power_w=o.power_w * n, **common))
        pool_of[o.key] = [name]
    transfers = _transfers(graph, inst, sol, options, pool_of)
    by_key = {o.key: o for o in options}
    ttfts = [by_key[p].ttft_s + inst.handoff(by_key[p].kv_device, t) for (p, t) in sol.flows]
    ttfts += [o.ttft_s for o, _ in sol.used(options) if o.kind == "colocated"]
    tpots = [o.tpot_s for o, _ in sol.used(options) if o.tpot_s is not None]
    out_tps = sol.requests_per_s * workload.mean_output_len
    try:
        version = metadata.version("gimletc")
    except metadata.PackageNotFoundError:
        version = "0+unknown"
    return Plan(
        gimletc_version=version, model=graph.model, model_sha256=graph.config_sha256, dtype=dtype,
        kv_dtype="fp8" if dtype == "fp4" else dtype, cluster=cluster.name, power_budget_w=inst.power_budget_w,
        inventory=dict(inst.inventory), workload=workload.name, mean_input_len=workload.mean_input_len,
        mean_output_len=workload.mean_output_len, slo_ttft_ms=workload.slo.ttft_ms, slo_tpot_ms=workload.slo.tpot_ms,
        pools=pools, transfers=transfers,
        predicted=Predicted(requests_per_s=sol.requests_per_s, output_tokens_per_s=out_tps, power_w=sol.power_w,
                            provisioned_power_w=sol.provisioned_w,
                            output_tokens_per_s_per_w=out_tps / sol.power_w if sol.power_w else 0.0,
                            worst_ttft_ms=max(ttfts) * 1e3 if ttfts else None,
                            worst_tpot_ms=max(tpots) * 1e3 if tpots else None),
        solver=SolverReport(status=sol.status, objective=objective, objective_value=sol.objective_value,
                            bound=sol.bound, gap=sol.gap, variables=sol.variables, constraints=sol.constraints,
                            options=len(options)),
        baselines=base,
    )


def _transfers(graph, inst: Instance, sol: Solution, options, pool_of) -> list[Transfer]:
    by_key = {o.key: o for o in options}
    used = sol.used(options)
    out = []
    for (p_key, t), rate in sorted(sol.flows.items()):
        sinks = [(o, n) for o, n in used if o.kind in ("decode", "decode-af") and o.kv_device == t]
        capacity = sum(o.rate_per_s * n for o, n in sinks)
        for o, n in sinks:
            share = rate * o.rate_per_s * n / capacity
            out.append(Transfer(kind="kv", src_pool=pool_of[p_key][0], dst_pool=pool_of[o.key][0],
                                predicted_requests_per_s=share, predicted_bytes_per_s=share * inst.kv_bytes_per_request,
                                predicted_latency_ms=inst.handoff(by_key[p_key].kv_device, t) * 1e3))
    for o, n in used:
        if o.kind == "decode-af":
            seam = next(e for e in graph.edges if e.phase == "decode" and e.kind == "activation"
                        and e.src.endswith(".attn"))
            per_step = 2 * graph.num_layers * seam.act_bytes(B=o.batch, L=1)
            steps_per_s = n / o.tpot_s
            out.append(Transfer(kind="activation", src_pool=pool_of[o.key][0], dst_pool=pool_of[o.key][1],
                                predicted_requests_per_s=o.rate_per_s * n, predicted_bytes_per_s=per_step * steps_per_s,
                                predicted_latency_ms=0.0))
    return out
