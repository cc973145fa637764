"""Serving a plan on public engines: each pool's engine launch, the KV connectors, the router, and what only
the reference runtime runs.

Before: a `Plan` without ``launch``, ``router`` or ``needs_runtime``, the
`Cluster` it was compiled for (each entry's ``engine``, ``image`` and
``endpoints``) and the `Workload` (the longest request of each class). After:
the same plan with every pool's `EngineLaunch` (`launch`), its `KvConnector`
where it hands KV to or takes KV from another pool (`connectors`), the
`Router` in front (`router`) and the `RuntimeNeed`s: features of the plan that
no public engine runs, each naming its pools. Same inputs, same bytes.

A pool's engine is its cluster entry's ``engine``; ``generic`` (the cost
model's engine-neutral overheads) deploys on the backend's default engine
(`Backend.engines`, first entry), and a named engine the backend has no build
for is a `BadInput` naming the entry and the engines it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from compiler.emit.plan import KvConnector, Plan, Pool, RuntimeNeed
from compiler.emit.serving.connectors import Connector, choose
from compiler.emit.serving.launch import LaunchInputs, launch, model_reference
from compiler.emit.serving.router import router_for
from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.engine_platform import EnginePlatform
from compiler.ir.errors import BadInput
from compiler.ir.placement import Instance

#: Pool roles no public engine serves as a pool of its own ([Note: attention/FFN ping-pong] in cost_models.af).
_AF_ROLES = ("decode-attention", "decode-ffn")


def platform_of(device_id: str, engine: str) -> EnginePlatform:
    """The engine build a pool of `device_id` runs for the cluster entry's `engine` (``generic``: the default).

    >>> platform_of("amd-mi300x", "generic").platform
    'rocm'
    >>> platform_of("amd-mi300x", "trtllm")
    Traceback (most recent call last):
    ...
    compiler.ir.errors.BadInput: cluster file: devices[amd-mi300x].engine: trtllm does not run on amd devices; use one of vllm, sglang (or generic)
    """
    from backends.registry import backend_of, device

    backend = backend_of(device(device_id))
    if not backend.engines:
        raise BadInput(f"cluster file: devices[{device_id}]: backend {backend.family} declares no serving engine")
    if engine == "generic":
        return backend.engines[0]
    for p in backend.engines:
        if p.engine == engine:
            return p
    raise BadInput(f"cluster file: devices[{device_id}].engine: {engine} does not run on {backend.family} devices; "
                   f"use one of {', '.join(p.engine for p in backend.engines)} (or generic)")


def deployable(inst: Instance, engine_of: Callable[[str], str]) -> Instance:
    """`inst` restricted to what the named engines run (``compile --deployable``): no attention/FFN split and no
    drafter pools (`RuntimeNeed` features), and KV moves only between device types a connector joins
    (`Instance.kv_pairs`). `engine_of` gives each device type's cluster-file engine."""
    platforms = {t: platform_of(t, engine_of(t)) for t, _n in inst.inventory}
    pairs = tuple((a, b) for a, pa in sorted(platforms.items()) for b, pb in sorted(platforms.items())
                  if not isinstance(choose(pa.engine, pa.platform, pb.engine, pb.platform), str))
    options = [o for o in inst.options if o.kind != "decode-af" and "draft_device" not in dict(o.detail)]
    return replace(inst.with_options(options), kv_pairs=pairs)


def serve(plan: Plan, cluster: Cluster, workload: Workload, *, moe: bool, model_source: str | None) -> Plan:
    """`plan` with launches, connectors, router and runtime needs (see the module docstring)."""
    platforms = {p.name: platform_of(p.device, cluster.engine(p.device)) for p in plan.pools}
    needs = _feature_needs(plan)
    connectors, kv_needs = _connectors(plan, platforms)
    needs += kv_needs
    model = model_reference(plan.model, model_source)
    pools = []
    for p in plan.pools:
        if p.role in _AF_ROLES or p.role == "drafter":
            pools.append(p)
            continue
        entry = cluster.entry(p.device)
        inputs = LaunchInputs(model=model, served_model_name=plan.model, dtype=plan.dtype, kv_dtype=plan.kv_dtype,
                              moe=moe, max_model_len=_max_model_len(p, workload), block_size=_block_size(
                                  p.name, plan, platforms), image=entry.image, endpoints=entry.endpoints)
        pools.append(p.model_copy(update={"launch": launch(p, platforms[p.name], inputs, connectors.get(p.name))}))
    served = plan.model_copy(update={"pools": pools, "needs_runtime": needs})
    return served.model_copy(update={"router": router_for(served)})


def _feature_needs(plan: Plan) -> list[RuntimeNeed]:
    out = []
    af = [p.name for p in plan.pools if p.role in _AF_ROLES]
    if af:
        out.append(RuntimeNeed(feature="attention-ffn-split", pools=af,
                               why="decode attention and FFN on separate pools exchanging hidden states every layer: "
                                   "no public engine runs this split"))
    for p in plan.pools:
        if p.draft is None:
            continue
        drafter = next(d for d in plan.pools if d.name == p.draft.pool)
        out.append(RuntimeNeed(
            feature="drafter-on-other-silicon", pools=[p.name, drafter.name],
            why=f"{p.name} verifies drafts of {p.draft.model} from {drafter.name} on {drafter.device}: engines run "
                "a draft model inside the target's own engine, not in a pool of its own"))
    return out


def _kv_pairs(plan: Plan) -> list[tuple[str, str]]:
    return sorted({(t.src_pool, t.dst_pool) for t in plan.transfers if t.kind == "kv"})


def _connectors(plan: Plan, platforms: dict[str, EnginePlatform]) -> tuple[dict[str, KvConnector], list[RuntimeNeed]]:
    """Each prefill and decode pool's connector, from `connectors.choose` on every KV pair it is part of."""
    rows: dict[str, Connector] = {}
    peers: dict[str, list[str]] = {}
    needs = []
    for src, dst in _kv_pairs(plan):
        a, b = platforms[src], platforms[dst]
        row = choose(a.engine, a.platform, b.engine, b.platform)
        if isinstance(row, str):
            feature = ("external-kv" if "external" in (a.platform, b.platform) else
                       "cross-vendor-kv" if a.platform != b.platform else "kv-without-connector")
            needs.append(RuntimeNeed(feature=feature, pools=[src, dst], why=f"{src} -> {dst}: {row}"))
            continue
        for pool, peer in ((src, dst), (dst, src)):
            rows.setdefault(pool, row)
            peers.setdefault(pool, []).append(peer)
    out = {}
    for pool, row in rows.items():
        mine = platforms[pool]
        layouts = {mine.kv_layout} | {platforms[q].kv_layout for q in peers[pool]}
        role = "kv_producer" if any(src == pool for src, _dst in _kv_pairs(plan)) else "kv_consumer"
        rules = row.all_rules()
        layout = mine.kv_layout if len(layouts) == 1 else "permute"
        out[pool] = KvConnector(name=row.name, role=role, peers=sorted(peers[pool]), buffer_device=row.buffer_device,
                                block_size=_block_size(pool, plan, platforms),
                                layout=layout, rules=rules)
    return out, needs


def _joined_pairs(plan: Plan, platforms: dict[str, EnginePlatform]) -> list[tuple[str, str]]:
    """The KV pairs a public connector joins (the others need the reference runtime and share no block size)."""
    return [(s, d) for s, d in _kv_pairs(plan) if not isinstance(choose(
        platforms[s].engine, platforms[s].platform, platforms[d].engine, platforms[d].platform), str)]


def _block_size(pool: str, plan: Plan, platforms: dict[str, EnginePlatform]) -> int:
    """The platform's block size, raised to the largest of every pool its connectors reach (one size per pair)."""
    linked = {pool}
    changed = True
    while changed:
        changed = False
        for src, dst in _joined_pairs(plan, platforms):
            if (src in linked) != (dst in linked):
                linked |= {src, dst}
                changed = True
    return max(platforms[p].kv_block_size for p in linked)


def _max_model_len(pool: Pool, workload: Workload) -> int:
    """The longest prompt plus output of the classes routed to `pool` (every class if none is)."""
    routed = {c.name for c in pool.predicted_classes}
    classes = [c for c in workload.classes if c.name in routed] or list(workload.classes)
    return max(c.input_len.max + c.output_len.max for c in classes)
