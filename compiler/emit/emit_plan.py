"""Emit the `Plan`: pools with their pipeline stages, transfers, predicted totals, solver report, baselines.

Before: the BlockGraph, cluster, workload, `Precision`, the placement `Instance`,
its `Solution` and the `Baseline`s. After: a `Plan` (`compiler.plan.schema`), the
validated value ``plan.json`` holds. Writing it is the caller's (the CLI's) job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import metadata

from compiler.plan.schema import (
    GAIN_METRICS, Baseline, CalibrationUsed, ClassResult, Draft, Plan, Pool, PoolClass, Predicted, SensitivityResult,
    SolverReport, Stage, Transfer,
)
from compiler.emit.intervals import (draws, gain_interval, paths_interval, throughput_interval, type_spreads,
                                     within_error)
from compiler.emit.serving import serve
from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.placement import Baseline as BaselineSolution
from compiler.ir.placement import Instance, Sensitivity, Solution, gain
from compiler.ir.pool_option import PoolOption
from compiler.ir.precision import Precision
from compiler.ir.prediction import Interval
from cost_models.comm import loaded_handoff_s
from cost_models.power import drawn_w

#: Pool roles of the two halves of a decode-af option, and the block roles each runs.
_AF_HALVES = (("a", "decode-attention", ("attn",)), ("f", "decode-ffn", ("embed", "ffn", "moe", "head")))
_PHASES_OF = {"colocated": ["prefill", "decode"], "prefill": ["prefill"], "decode": ["decode"]}


def emit_plan(graph: BlockGraph, cluster: Cluster, workload: Workload, precision: Precision, inst: Instance,
              sol: Solution, baselines: list[BaselineSolution], sensitivity: list[Sensitivity] = (), *,
              draft_graph: BlockGraph | None = None, served_model_name: str | None = None) -> Plan:
    """The plan of a solved placement; `draft_graph` is the drafter's (``speculative:``) when a pool drafts.
    `served_model_name` is the model name requests give its engines (default: the model's; a service's name when
    several models share a fleet, `compiler.services`)."""
    options = list(inst.options)
    used = sol.used()
    pools, pool_of = _pools(graph, inst, sol, used, draft_graph)
    latencies = class_latencies(inst, sol)
    out_tps = sol.output_tokens_per_s(inst.classes)
    spreads = type_spreads(inst, sol)
    sampled = draws(spreads)
    predicted = _predicted(inst, sol, latencies, out_tps, throughput_interval(inst, sol, spreads, sampled))
    plan = Plan(
        gimletc_version=_version(), model=graph.model, model_sha256=graph.config_sha256, dtype=precision.weights,
        kv_dtype=precision.kv, dense_dtype=precision.dense, cluster=cluster.name, power_budget_w=inst.power_budget_w,
        inventory={t: n for t, n in inst.inventory if n > 0}, workload=workload.name,
        mean_input_len=workload.mean_input_len,
        mean_output_len=workload.mean_output_len, slo_ttft_ms=workload.slo.ttft_ms, slo_tpot_ms=workload.slo.tpot_ms,
        pools=[p.model_copy(update={"engine": cluster.engine(p.device)}) for p in pools],
        transfers=(_kv_transfers(inst, sol, used, pool_of) + _activation_transfers(graph, sol, used, pool_of)
                   + _draft_transfers(inst, sol, used, pool_of)),
        classes=[_class_result(workload, inst, sol, c, latencies.get(c.name), pool_of) for c in inst.classes],
        predicted=predicted,
        solver=SolverReport(status=sol.status, objective=sol.objective.name, objective_value=sol.objective.value,
                            bound=sol.objective.bound, gap=sol.objective.gap, variables=sol.variables,
                            constraints=sol.constraints, options=len(options), pruning=sol.objective.pruning),
        baselines=[baseline_result(b, sol, predicted, inst, spreads, sampled) for b in baselines],
        sensitivity=[SensitivityResult(factor=m.factor, change=m.change, objective_change=m.objective_change,
                                       changes_pools=m.changes_pools, pools_added=list(m.pools_added),
                                       pools_removed=list(m.pools_removed), solve_gap=m.solve_gap)
                     for m in sensitivity],
        cost_budget_per_hour=inst.cost_budget_per_hour, fleet_design=list(inst.designed),
        devices_used=sol.devices(), prices_per_hour=dict(inst.prices_per_hour),
        price_sources={t: src for t, _p in inst.prices_per_hour if (src := cluster.price_source(t))},
        power_basis=cluster.power_basis, pue=cluster.pue,
        unbounded_devices={t: s.basis for t, s in sorted(spreads.items()) if not s.bounded and t in sol.devices()},
        calibrations=calibrations_used(cluster, sorted({(t, cluster.engine(t)) for t in sol.devices()})),
    )
    return serve(plan, cluster, workload, moe=graph.expert_params > 0, model_source=_model_source(graph.model),
                 served_model_name=served_model_name)


def calibrations_used(cluster: Cluster, pairs: list[tuple[str, str]]) -> list[CalibrationUsed]:
    """The calibrations behind the predictions of `pairs` (device, engine): the cluster's profile where it has an
    entry for a pair, else an engine record saved on that device, each with its file's sha256."""
    import hashlib

    from compiler.ir.calibration import cached_profile, engine_record_path

    out = []
    covered: set[tuple[str, str]] = set()
    if cluster.calibration is not None:
        prof = cached_profile(cluster.calibration)  # read (and checked) when the options were costed
        covered = {p for p in pairs if prof.entry(*p) is not None}
        out.append(CalibrationUsed(kind="profile", name=prof.name, path=prof.path, sha256=prof.sha256,
                                   covers=[f"{d}/{e}" for d, e in sorted(covered)]))
    for device, engine in pairs:
        path = engine_record_path(device, engine)
        if (device, engine) in covered or not path.is_file():
            continue
        out.append(CalibrationUsed(kind="engine record", name=path.stem, path=str(path),
                                   sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                                   covers=[f"{device}/{engine}"]))
    return out


def _model_source(model: str) -> str | None:
    """Where a preset's config came from (a Hugging Face URL names the checkpoint engines load)."""
    from compiler.inputs.model_spec import preset_names, preset_provenance

    return preset_provenance(model).get("source") if model in preset_names() else None


@dataclass(frozen=True, slots=True)
class ClassLatency:
    """One class end to end, on the worst pool (or prefill -> decode path) it is routed to."""

    ttft_p50_s: float
    ttft_p_s: float
    tpot_p50_s: float
    tpot_p_s: float
    options: tuple[str, ...]
    ttft_p_interval: Interval = Interval(0.0, math.inf)  # 80% interval of ttft_p_s ([Note: prediction intervals])
    tpot_p_interval: Interval = Interval(0.0, math.inf)


#: A KV flow below this many requests/s is left out of the plan: its hand-offs, the latencies of its path and
#: plan.json's transfers. It is what summary.md prints as 0.00 req/s: a trickle an optimum may route either way
#: at no cost to its objective (alternative optima of the flows), not traffic to serve.
NEGLIGIBLE_REQUESTS_PER_S = 0.005


def live_flows(sol: Solution) -> list[tuple[tuple[str, str, str], float]]:
    """The solution's KV flows ((class, prefill option, decode type), req/s) of at least
    `NEGLIGIBLE_REQUESTS_PER_S`."""
    return [(key, rate) for key, rate in sol.flows if rate >= NEGLIGIBLE_REQUESTS_PER_S]


def solved_handoffs(inst: Instance, sol: Solution) -> dict[tuple[str, str, str], float]:
    """Each KV flow's hand-off, per (class, from type, to type), at its link's solved utilisation (the KV bytes/s
    the solution moves over it, of its bandwidth) and the class's percentile ([Note: hand-offs]); negligible
    flows left out (`live_flows`)."""
    by_key = {o.key: o for o in sol.options}
    moved: dict[tuple[str, str], float] = {}
    for (c, p_key, t), rate in live_flows(sol):
        pair = (by_key[p_key].kv_device, t)
        moved[pair] = moved.get(pair, 0.0) + rate * inst.target(c).kv_bytes
    out = {}
    for (c, p_key, t), _rate in live_flows(sol):
        a = by_key[p_key].kv_device
        utilisation = min(moved[(a, t)] / inst.link_bw(a, t), 0.999)
        out[(c, a, t)] = loaded_handoff_s(inst.transfer(c, a, t), inst.servers(a, t), utilisation,
                                          inst.target(c).percentile)
    return out


def class_latencies(inst: Instance, sol: Solution) -> dict[str, ClassLatency]:
    """Each served class's predicted latency at the solved utilisations: colocated pools directly; a prefill ->
    decode path as the prefill TTFT, plus the KV hand-off at its link's solved load, plus the wait for a decode
    slot."""
    by_key = {o.key: o for o in sol.options}
    util = {o.key: sol.utilisation(o) for o, _n in sol.used()}
    handoffs = solved_handoffs(inst, sol)
    out: dict[str, ClassLatency] = {}
    for c in inst.classes:
        paths: list[tuple[float, float, float, float, tuple[str, ...], Interval, Interval]] = []
        for (cls, key), _rate in sol.served:
            o = by_key[key]
            if cls == c.name and o.kind == "colocated":
                _u, t50, tp, p50, pp = o.service(cls).at(util[key])
                paths.append((t50, tp, p50, pp, (key,), o.spread("ttft").of(tp), o.spread("tpot").of(pp)))
        for (cls, p_key, t), _rate in live_flows(sol):
            if cls != c.name:
                continue
            p = by_key[p_key]
            _u, pf50, pfp, _x, _y = p.service(cls).at(util[p_key])
            handoff = handoffs[(cls, p.kv_device, t)]
            for (cls2, d_key), _r in sol.served:
                d = by_key[d_key]
                if cls2 == cls and d.receives_kv and d.kv_device == t:
                    _u, w50, wp, p50, pp = d.service(cls).at(util[d_key])
                    prefill, wait = p.spread("ttft").of(pfp), d.spread("tpot").of(wp)
                    ttft = Interval(prefill.lo + handoff + wait.lo, prefill.hi + handoff + wait.hi)
                    paths.append((pf50 + handoff + w50, pfp + handoff + wp, p50, pp, (p_key, d_key), ttft,
                                  d.spread("tpot").of(pp)))
        if paths:
            out[c.name] = ClassLatency(max(p[0] for p in paths), max(p[1] for p in paths), max(p[2] for p in paths),
                                       max(p[3] for p in paths), tuple(sorted({k for p in paths for k in p[4]})),
                                       Interval(max(p[5].lo for p in paths), max(p[5].hi for p in paths)),
                                       Interval(max(p[6].lo for p in paths), max(p[6].hi for p in paths)))
    return out


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


def _pools(graph: BlockGraph, inst: Instance, sol: Solution, used: list[tuple[PoolOption, int]],
           draft_graph: BlockGraph | None) -> tuple[list[Pool], dict[str, list[str]]]:
    """One pool per used option (two for decode-af: attention and FFN; two for a drafted decode: the target
    and its drafter), and each option's pool names."""
    pools: list[Pool] = []
    pool_of: dict[str, list[str]] = {}
    for i, (o, n) in enumerate(used):
        name = f"pool{i}"
        util = sol.utilisation(o)
        drawn = drawn_w(idle_w=o.idle_w, full_w=o.power_w, replicas=n, load=util * n)  # [Note: drawn power]
        classes = _pool_classes(o, sol.served_on(o.key), util)
        worst = lambda index: max((getattr(c, index) for c in classes if getattr(c, index) is not None),  # noqa: E731
                                  default=None)
        ttft, tpot = worst("ttft_slo_percentile_ms"), worst("tpot_slo_percentile_ms")
        wait = worst("slot_wait_slo_percentile_ms")
        bounds = {k: _bounds(o.spread(m).of(v)) for k, m, v in (("ttft_ms", "ttft", ttft), ("tpot_ms", "tpot", tpot),
                                                                ("slot_wait_ms", "tpot", wait)) if v is not None}
        common = dict(batch=o.batch, option=o.key,
                      predicted_requests_per_s=sum(sol.served_on(o.key).values()),
                      predicted_ttft_ms=ttft, predicted_tpot_ms=tpot, predicted_slot_wait_ms=wait,
                      predicted_utilisation=util, predicted_classes=classes, predicted_intervals=bounds,
                      interval_basis={m: s.basis for m, s in o.spreads})
        if o.kind == "decode-af":
            for (suffix, role, roles), (dev, per, replicas) in zip(_AF_HALVES, _af_halves(o, n)):
                pools.append(Pool(name=f"{name}{suffix}", role=role, device=dev, devices_per_replica=per, tp=per,
                                  pp=1, replicas=replicas, phases=["decode"],
                                  stages=stages(graph, dev, 1, ["decode"], roles),
                                  predicted_power_w=drawn * per * replicas / (n * o.devices_per_replica),
                                  **common))
            pool_of[o.key] = [f"{name}a", f"{name}f"]
            continue
        phases = _PHASES_OF[o.kind]
        d = dict(o.detail)
        if "draft_device" in d:  # [Note: speculative decoding placement] in cost_models.speculative
            pools += _drafted(graph, draft_graph, o, n, name, common, drawn)
            pool_of[o.key] = [name, f"{name}d"]
            continue
        (dev, per), = o.devices
        pools.append(Pool(name=name, role=o.kind, device=dev, devices_per_replica=per, tp=o.tp, pp=o.pp,
                          replicas=n, phases=phases, stages=stages(graph, dev, o.pp, phases, None),
                          predicted_power_w=drawn, **common))
        pool_of[o.key] = [name]
    return pools, pool_of


def _drafted(graph: BlockGraph, draft_graph: BlockGraph | None, o: PoolOption, n: int, name: str,
             common: dict, drawn: float) -> list[Pool]:
    """A drafted decode option's target pool (with its `draft` block) and drafter pool, one drafter replica per
    target replica (compiler/runtime/speculative.py pairs replica r with drafter r % replicas); `drawn` (the
    option's predicted draw) is shared by devices."""
    if draft_graph is None:
        raise ValueError(f"option {o.key} drafts but emit_plan was given no draft graph")
    d = dict(o.detail)
    target = o.tp * o.pp
    share = lambda devices: drawn * devices / o.devices_per_replica  # noqa: E731
    draft = Draft(pool=f"{name}d", model=d["draft_model"], model_sha256=draft_graph.config_sha256, k=d["draft_k"],
                  predicted_acceptance_rate=d["draft_acceptance"])
    return [Pool(name=name, role="decode", device=o.kv_device, devices_per_replica=target, tp=o.tp, pp=o.pp,
                 replicas=n, phases=["decode"], stages=stages(graph, o.kv_device, o.pp, ["decode"], None),
                 predicted_power_w=share(target), draft=draft, **common),
            Pool(name=f"{name}d", role="drafter", device=d["draft_device"], devices_per_replica=d["draft_tp"],
                 tp=d["draft_tp"], pp=1, replicas=n, phases=["prefill", "decode"],
                 stages=stages(draft_graph, d["draft_device"], 1, ["prefill", "decode"], None),
                 predicted_power_w=share(d["draft_tp"]), **common)]


def _af_halves(o: PoolOption, n: int) -> tuple[tuple[str, int, int], ...]:
    """(device, devices per replica, replicas) of the attention and FFN pools of `n` replicas of decode-af
    option `o`: M attention groups per replica, one FFN pool replica holding all N FFN groups (a MoE's experts
    split over them, so the runtime sees one wider FFN group); attention replica r pairs with FFN replica
    r // M ([Note: attention/FFN ping-pong] in `cost_models.af`)."""
    d = dict(o.detail)
    return ((o.kv_device, o.tp, n * d["attn_groups"]), (d["ffn_device"], d["ffn_tp"] * d["ffn_groups"], n))


def _pool_classes(o: PoolOption, served: dict[str, float], util: float) -> list[PoolClass]:
    """Each class on option `o` at utilisation `util`.

    [Note: no TTFT on a decode pool] A pool that takes KV from a prefill pool does not produce the first token of
    the requests it decodes: their TTFT is the class's, end to end (prefill, hand-off, the wait for a decode
    slot: `ClassResult`). What the decode pool adds to it is that wait, reported as ``slot_wait_*`` (a queue of
    its decode steps: its TPOT's spread), and its TTFT fields are empty, in plan.json, summary.md and the
    CLI's pool table alike, each saying why (`compiler.emit.report.figures.DECODE_TTFT_NOTE`).
    """
    out = []
    for c, rate in sorted(served.items()):
        _u, t50, tp, p50, pp = o.service(c).at(util)
        decodes = o.kind != "prefill"
        first = not o.receives_kv  # colocated and prefill pools produce the first token
        ttft = dict(ttft_p50_ms=t50 * 1e3, ttft_slo_percentile_ms=tp * 1e3,
                    ttft_slo_percentile_interval_ms=_bounds(o.spread("ttft").of(tp * 1e3))) if first else \
            dict(ttft_p50_ms=None, ttft_slo_percentile_ms=None, slot_wait_p50_ms=t50 * 1e3,
                 slot_wait_slo_percentile_ms=tp * 1e3,
                 slot_wait_slo_percentile_interval_ms=_bounds(o.spread("tpot").of(tp * 1e3)))
        out.append(PoolClass(name=c, requests_per_s=rate, **ttft,
                             tpot_p50_ms=p50 * 1e3 if decodes else None,
                             tpot_slo_percentile_ms=pp * 1e3 if decodes else None,
                             tpot_slo_percentile_interval_ms=_bounds(o.spread("tpot").of(pp * 1e3)) if decodes
                             else None))
    return out


def _bounds(interval: Interval) -> list[float | None]:
    """An interval as plan.json writes it (`Bounds`), rounded to 6 significant digits like the figures beside it."""
    lo, hi = interval.to_json()
    return [float(f"{lo:.6g}"), None if hi is None else float(f"{hi:.6g}")]


def _kv_transfers(inst: Instance, sol: Solution, used: list[tuple[PoolOption, int]],
                  pool_of: dict[str, list[str]]) -> list[Transfer]:
    """Each class's KV flow from a prefill option to a decode type, split over the decode pools on that type in
    proportion to the class's requests each decodes."""
    by_key = {o.key: o for o in sol.options}
    handoffs = solved_handoffs(inst, sol)
    out: dict[tuple[str, str], list[float]] = {}
    for (c, p_key, t), rate in live_flows(sol):
        sinks = [(d_key, r) for (cc, d_key), r in sol.served if cc == c and by_key[d_key].receives_kv
                 and by_key[d_key].kv_device == t]
        decoded = sum(r for _k, r in sinks)
        for d_key, r in sinks:
            share = rate * r / decoded
            entry = out.setdefault((p_key, d_key), [0.0, 0.0, 0.0])
            entry[0] += share
            entry[1] += share * inst.target(c).kv_bytes
            entry[2] = max(entry[2], handoffs[(c, by_key[p_key].kv_device, t)])
    return [Transfer(kind="kv", src_pool=pool_of[p][0], dst_pool=pool_of[d][0], predicted_requests_per_s=r,
                     predicted_bytes_per_s=b, predicted_latency_ms=lat * 1e3)
            for (p, d), (r, b, lat) in sorted(out.items()) if r >= NEGLIGIBLE_REQUESTS_PER_S]


def _activation_transfers(graph: BlockGraph, sol: Solution, used: list[tuple[PoolOption, int]],
                          pool_of: dict[str, list[str]]) -> list[Transfer]:
    """Hidden states to the FFN pool and back, every layer of every decode step of a decode-af option."""
    out = []
    seam = graph.residual_edge("decode")
    for o, n in used:
        if o.kind == "decode-af":
            util = sol.utilisation(o)
            step_s = o.classes[0].at(util)[3]
            per_step = 2 * graph.num_layers * seam.act_bytes(B=max(1.0, util * o.batch), L=1)
            out.append(Transfer(kind="activation", src_pool=pool_of[o.key][0], dst_pool=pool_of[o.key][1],
                                predicted_requests_per_s=sum(sol.served_on(o.key).values()),
                                predicted_bytes_per_s=per_step * n / step_s, predicted_latency_ms=0.0))
    return out


def _draft_transfers(inst: Instance, sol: Solution, used: list[tuple[PoolOption, int]],
                     pool_of: dict[str, list[str]]) -> list[Transfer]:
    """Drafted tokens from each drafter pool to its target pool (and the verdicts back), per output token."""
    out = []
    for o, _n in used:
        if len(pool_of[o.key]) == 2 and o.kind == "decode":
            served = sol.served_on(o.key)
            tokens = sum(rate * inst.target(c).output_len for c, rate in served.items())
            out.append(Transfer(kind="draft", src_pool=pool_of[o.key][1], dst_pool=pool_of[o.key][0],
                                predicted_requests_per_s=sum(served.values()),
                                predicted_bytes_per_s=tokens * o.link_bytes_per_token, predicted_latency_ms=0.0))
    return out


def _class_result(workload: Workload, inst: Instance, sol: Solution, c, lat: ClassLatency | None,
                  pool_of: dict[str, list[str]]) -> ClassResult:
    slo = workload.class_slo(next(k for k in workload.classes if k.name == c.name))
    ms = lambda s: None if s is None else s * 1e3  # noqa: E731
    central = lat is not None and (c.ttft_slo_s is None or lat.ttft_p_s <= c.ttft_slo_s * (1 + 1e-9)) and (
        c.tpot_slo_s is None or lat.tpot_p_s <= c.tpot_slo_s * (1 + 1e-9))
    meets = lat is not None and (c.ttft_slo_s is None or lat.ttft_p_interval.hi <= c.ttft_slo_s * (1 + 1e-9)) and (
        c.tpot_slo_s is None or lat.tpot_p_interval.hi <= c.tpot_slo_s * (1 + 1e-9))
    return ClassResult(
        name=c.name, share=c.share, requests_per_s=dict(sol.class_requests_per_s).get(c.name, 0.0),
        slo_ttft_ms=slo.ttft_ms, slo_tpot_ms=slo.tpot_ms, slo_percentile=slo.percentile,
        ttft_p50_ms=ms(lat.ttft_p50_s if lat else None), ttft_slo_percentile_ms=ms(lat.ttft_p_s if lat else None),
        tpot_p50_ms=ms(lat.tpot_p50_s if lat else None), tpot_slo_percentile_ms=ms(lat.tpot_p_s if lat else None),
        meets_slo=bool(meets), meets_slo_at_estimate=bool(central),
        ttft_slo_percentile_interval_ms=_bounds(lat.ttft_p_interval.scaled(1e3)) if lat else None,
        tpot_slo_percentile_interval_ms=_bounds(lat.tpot_p_interval.scaled(1e3)) if lat else None,
        pools=sorted({name for k in (lat.options if lat else ()) for name in pool_of[k]}))


def _predicted(inst: Instance, sol: Solution, latencies: dict[str, ClassLatency], out_tps: float,
               tokens: Interval) -> Predicted:
    ttfts = [lat.ttft_p_s for lat in latencies.values()]
    tpots = [lat.tpot_p_s for lat in latencies.values() if lat.tpot_p_s]
    scale = lambda v: tokens.scaled(v / out_tps) if out_tps and v is not None else None  # noqa: E731
    per_s = sol.requests_per_s
    intervals = {"requests_per_s": scale(per_s), "output_tokens_per_s": tokens,
                 "output_tokens_per_s_per_w": scale(out_tps / sol.power_w if sol.power_w else None),
                 "output_tokens_per_s_per_provisioned_w": scale(out_tps / sol.provisioned_w if sol.provisioned_w
                                                               else None),
                 "output_tokens_per_dollar": scale(_per_dollar(out_tps, sol.cost_per_hour)),
                 "worst_ttft_ms": Interval(max(lat.ttft_p_interval.lo for lat in latencies.values()),
                                           max(lat.ttft_p_interval.hi for lat in latencies.values())).scaled(1e3)
                 if latencies else None,
                 "worst_tpot_ms": Interval(max(lat.tpot_p_interval.lo for lat in latencies.values() if lat.tpot_p_s),
                                           max(lat.tpot_p_interval.hi for lat in latencies.values() if lat.tpot_p_s)
                                           ).scaled(1e3) if tpots else None,
                 "power_w": _power_interval(sol)}
    return Predicted(intervals={k: _bounds(v) for k, v in intervals.items() if v is not None},requests_per_s=sol.requests_per_s, output_tokens_per_s=out_tps, power_w=sol.power_w,
                     provisioned_power_w=sol.provisioned_w,
                     output_tokens_per_s_per_w=out_tps / sol.power_w if sol.power_w else 0.0,
                     worst_ttft_ms=max(ttfts) * 1e3 if ttfts else None,
                     worst_tpot_ms=max(tpots) * 1e3 if tpots else None,
                     output_tokens_per_s_per_provisioned_w=out_tps / sol.provisioned_w if sol.provisioned_w else 0.0,
                     cost_per_hour=sol.cost_per_hour, output_tokens_per_dollar=_per_dollar(out_tps, sol.cost_per_hour))


def _power_interval(sol: Solution) -> Interval:
    """The plan's draw between its pools' idle and full-load draw: what no utilisation error can leave."""
    idle = sum(o.idle_w * n for o, n in sol.used())
    full = sum(o.power_w * n for o, n in sol.used())
    return Interval(min(idle, sol.power_w), max(full, sol.power_w))


def _per_dollar(tokens_per_s: float, cost_per_hour: float | None) -> float | None:
    return tokens_per_s * 3600 / cost_per_hour if cost_per_hour else None


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def baseline_result(b: BaselineSolution, sol: Solution, plan: Predicted, inst: Instance | None = None,
                    spreads: dict | None = None, sampled: list | None = None) -> Baseline:
    """One baseline as plan.json reports it: its numbers, and the plan's gain over it in the objective's terms
    (`compiler.ir.placement.gain`) and on each of `GAIN_METRICS`; with the plan's `inst`, its device types'
    `spreads` (`compiler.emit.intervals.type_spreads`) and their `sampled` factors (`draws`), their 80%
    intervals."""
    ok = b.feasible
    own = {"output_tokens_per_s": b.output_tokens_per_s if ok else None,
           "output_tokens_per_s_per_w": _ratio(b.output_tokens_per_s, b.power_w) if ok else None,
           "output_tokens_per_s_per_provisioned_w": _ratio(b.output_tokens_per_s, b.provisioned_w) if ok else None,
           "output_tokens_per_dollar": _per_dollar(b.output_tokens_per_s, b.cost_per_hour) if ok else None}
    gains = {m: gain("max", getattr(plan, m), own[m]) for m in GAIN_METRICS}
    value = b.objective.value if ok and b.objective is not None else None
    proven = value is not None and b.kind != "greedy"  # a heuristic has no bound
    plan_gain = gain(sol.objective.sense, sol.objective.value, value)
    gains_at = gain_interval(inst, sol, b, sampled, plan_gain) if inst is not None and spreads is not None else None
    own_at = None
    if ok and inst is not None and inst.arrival_rate_per_s is not None:  # it serves the given rate
        own_at = Interval(b.output_tokens_per_s, b.output_tokens_per_s)
    elif ok and spreads is not None and b.paths:
        own_at = paths_interval(b.paths, sampled, b.output_tokens_per_s)
    return Baseline(
        name=b.name, question=b.question, status=b.status, note=b.note, devices=dict(b.devices),
        requests_per_s=b.requests_per_s, output_tokens_per_s=b.output_tokens_per_s, power_w=b.power_w,
        provisioned_power_w=b.provisioned_w, cost_per_hour=b.cost_per_hour, **{m: own[m] for m in GAIN_METRICS[1:]},
        objective_value=value, objective_bound=b.objective.bound if proven else None,
        gap=b.objective.gap if proven else None, plan_gain=plan_gain, plan_gains=gains,
        beats_plan=plan_gain is not None and plan_gain < 1 - BEATS_TOLERANCE,
        output_tokens_per_s_interval=_bounds(own_at) if own_at else None,
        plan_gain_interval=_bounds(gains_at) if gains_at else None, within_error=within_error(gains_at),
        posed_power_w=b.posed_power_w)


#: A baseline beats the plan only by more than the solver's floating-point tolerance: the plan's tie-break keeps
#: its first stage's optimum within a relative 1e-6 ([Note: solver tolerances] in `compiler.place.ilp`), and a
#: baseline is solved to the same tolerance or valued exactly (greedy).
BEATS_TOLERANCE = 1e-5
