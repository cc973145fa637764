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

from compiler.plan.schema import KvConnector, Plan, Pool, RuntimeNeed
from compiler.emit.serving.connectors import Connector, choose
from compiler.emit.serving.launch import LaunchInputs, budget, launch, model_reference
from compiler.emit.serving.router import router_for
from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.engine_platform import EnginePlatform
from compiler.ir.errors import BadInput
from compiler.ir.placement import Instance
from compiler.ir.pool_option import PoolOption
from cost_models.buckets import Buckets

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
                  if not isinstance(_join(pa, pb), str))
    return replace(inst.with_options([o for o in inst.options if engines_run(o)]), kv_pairs=pairs)


def engines_run(option: PoolOption) -> bool:
    """Whether a public engine runs `option` as a pool of its own: not an attention/FFN split, not a drafter."""
    return option.kind != "decode-af" and "draft_device" not in dict(option.detail)


def serve(plan: Plan, cluster: Cluster, workload: Workload, *, moe: bool, model_source: str | None,
          served_model_name: str | None = None) -> Plan:
    """`plan` with launches, connectors, router and runtime needs (see the module docstring); its engines answer
    to `served_model_name` (default: the plan's model)."""
    platforms = {p.name: platform_of(p.device, cluster.engine(p.device)) for p in plan.pools}
    needs = _feature_needs(plan)
    pairs = _kv_pairs(plan, platforms)
    block_sizes = _block_sizes(pairs, platforms)
    connectors, kv_needs = _connectors(pairs, platforms, block_sizes)
    needs += kv_needs
    model = model_reference(plan.model, model_source)

    def launched(every_class: bool) -> Plan:
        pools = []
        for p in plan.pools:
            if p.role in _AF_ROLES or p.role == "drafter":
                pools.append(p)
                continue
            entry = cluster.entry(p.device)
            classes = _launch_classes(p, workload, every_class=every_class)
            max_len = max(c.input_len.max + c.output_len.max for c in classes)
            buckets = Buckets.for_classes(max_len, [c.input_len.mean for c in classes],
                                          [c.input_len.mean + c.output_len.mean for c in classes])
            inputs = LaunchInputs(pool=p.name, tp=p.tp, pp=p.pp, batch=p.batch, budget=budget(p), model=model,
                                  served_model_name=served_model_name or plan.model, dtype=plan.dtype,
                                  kv_dtype=plan.kv_dtype, moe=moe, max_model_len=max_len,
                                  block_size=block_sizes[p.name], image=entry.image, endpoints=entry.endpoints,
                                  buckets=buckets if platforms[p.name].static_shapes else None)
            pools.append(p.model_copy(update={"launch": launch(platforms[p.name], inputs, connectors.get(p.name))}))
        return plan.model_copy(update={"pools": pools, "needs_runtime": needs})

    served = launched(every_class=False)
    router = router_for(served)
    if router is not None and not router.expresses_plan:
        # The router balances every class over all pools of a role: a pool sized for its own classes' lengths
        # would refuse the others' prompts (HTTP 400 past --max-model-len), so size every pool for every class.
        served = launched(every_class=True)
        router = router_for(served)
    return served.model_copy(update={"router": router})


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


def _join(src: EnginePlatform, dst: EnginePlatform) -> Connector | str:
    """`connectors.choose` for a prefill platform and a decode platform."""
    return choose(src.engine, src.platform, dst.engine, dst.platform)


def _kv_pairs(plan: Plan, platforms: dict[str, EnginePlatform]) -> dict[tuple[str, str], Connector | str]:
    """Each ``(source, destination)`` pool pair the plan moves KV over, with its connector or why none joins it."""
    pairs = sorted({(t.src_pool, t.dst_pool) for t in plan.transfers if t.kind == "kv"})
    return {(src, dst): _join(platforms[src], platforms[dst]) for src, dst in pairs}


def _connectors(pairs: dict[tuple[str, str], Connector | str], platforms: dict[str, EnginePlatform],
                block_sizes: dict[str, int]) -> tuple[dict[str, KvConnector], list[RuntimeNeed]]:
    """Each prefill and decode pool's connector, from `connectors.choose` on every KV pair it is part of."""
    rows: dict[str, Connector] = {}
    peers: dict[str, list[str]] = {}
    needs = []
    for (src, dst), row in pairs.items():
        a, b = platforms[src], platforms[dst]
        if isinstance(row, str):
            feature = ("external-kv" if "external" in (a.platform, b.platform) else
                       "cross-vendor-kv" if a.platform != b.platform else "kv-without-connector")
            needs.append(RuntimeNeed(feature=feature, pools=[src, dst], why=f"{src} -> {dst}: {row}"))
            continue
        for pool, peer in ((src, dst), (dst, src)):
            rows.setdefault(pool, row)
            peers.setdefault(pool, []).append(peer)
    producers = {src for src, _dst in pairs}
    out = {}
    for pool, row in rows.items():
        mine = platforms[pool]
        layouts = {mine.kv_layout} | {platforms[q].kv_layout for q in peers[pool]}
        out[pool] = KvConnector(name=row.name, role="kv_producer" if pool in producers else "kv_consumer",
                                peers=sorted(peers[pool]), buffer_device=row.buffer_device,
                                block_size=block_sizes[pool],
                                layout=mine.kv_layout if len(layouts) == 1 else "permute", rules=row.all_rules())
    return out, needs


def _block_sizes(pairs: dict[tuple[str, str], Connector | str], platforms: dict[str, EnginePlatform]) -> dict[str, int]:
    """Each pool's platform block size, raised to the largest of every pool its connectors reach (one size per
    pair); the pairs no public connector joins need the reference runtime and share no block size."""
    linked = {pool: {pool} for pool in platforms}
    for (src, dst), row in pairs.items():
        if not isinstance(row, str) and linked[src] is not linked[dst]:
            group = linked[src] | linked[dst]
            for pool in group:
                linked[pool] = group
    return {pool: max(platforms[q].kv_block_size for q in group) for pool, group in linked.items()}


def _launch_classes(pool: Pool, workload: Workload, *, every_class: bool = False) -> list:
    """The classes `pool` is launched for: those routed to it (every class if none is, or when `every_class`: a
    router that cannot route by class sends any of them)."""
    routed = {c.name for c in pool.predicted_classes}
    return [c for c in workload.classes if c.name in routed and not every_class] or list(workload.classes)
