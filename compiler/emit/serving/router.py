"""The router in front of a plan's engines: which public router, its command line, and what it cannot express.

Before: a `Plan` whose pools carry their `EngineLaunch`. After: a `Router`.
vLLM pools get vllm-router (its P/D mode, ``--vllm-pd-disaggregation``, when
the plan has prefill and decode pools: each request is prefilled on a prefill
engine, then decoded on a decode engine that loads the KV through the
connector); SGLang pools get sglang-router (``--pd-disaggregation``);
TensorRT-LLM pools get ``trtllm-serve disaggregated``, configured by a file.
Engines are addressed by the stable DNS names the manifests give each replica
(``http://<instance>-<pool>-<r>.<instance>-<pool>:8000``, a StatefulSet's pods;
`compiler.emit.k8s`), and `gimletc deploy --local` rewrites them to the local
ports it starts.

Public routers balance by load and cache, not by request class: a plan that
sends different classes to different pools is routed by the closest policy the
router has, ``expresses_plan`` is False and ``notes`` say what differs (llm-d's
inference scheduler comes closest, with a prefill threshold below which
prompts skip disaggregation; the ``llm-d`` manifests set it).
"""

from __future__ import annotations

from backends.engines import serving_engine
from backends.engines.base import PORT, Upstreams
from compiler.plan.schema import ClassRoute, Plan, Pool, Router

INSTANCE = "gimletc"


def replica_urls(pool: Pool, instance: str = INSTANCE) -> list[str]:
    """The URL of each replica of `pool` (a StatefulSet pod's stable name under its headless Service)."""
    svc = f"{instance}-{pool.name}"
    return [f"http://{svc}-{r}.{svc}:{pool.launch.port if pool.launch else PORT}" for r in range(pool.replicas)]


def routes(plan: Plan) -> list[ClassRoute]:
    """Where the plan sends each class: the share of its requests each pool prefills and decodes."""
    out = []
    for c in plan.classes:
        first = {p.name: pc.requests_per_s for p in plan.pools for pc in p.predicted_classes
                 if pc.name == c.name and p.role in ("colocated", "prefill")}
        then = {p.name: pc.requests_per_s for p in plan.pools for pc in p.predicted_classes
                if pc.name == c.name and p.role == "decode"}
        out.append(ClassRoute(name=c.name, prefill=_shares(first), decode=_shares(then)))
    return out


def _shares(rates: dict[str, float]) -> dict[str, float]:
    total = sum(rates.values())
    return {k: round(v / total, 6) for k, v in sorted(rates.items()) if v > 0} if total > 0 else {}


def router_for(plan: Plan) -> Router | None:
    """The router of `plan`'s engine pools (None when no pool runs on a public engine)."""
    served = [p for p in plan.pools if p.launch is not None and serving_engine(p.launch.engine).launchable]
    # a prefill or decode pool whose every KV pair lacks a connector would recompute (or never hand over) the KV
    unjoined = [p.name for p in served if p.role in ("prefill", "decode") and p.launch.kv_connector is None]
    served = [p for p in served if p.name not in unjoined]
    if not served:
        return None
    engines = sorted({p.launch.engine for p in served})
    first = [p for p in served if p.role in ("colocated", "prefill")]
    decode = [p for p in served if p.role == "decode"]
    pd = bool(decode) and any(p.role == "prefill" for p in first)
    class_routes = routes(plan)
    notes = [f"left out (no KV connector to any peer; see needs_runtime): {', '.join(unjoined)}"] if unjoined else []
    if len(engines) > 1:
        notes.append(f"pools run {', '.join(engines)}: one router per engine is needed; this one fronts "
                     f"{engines[0]} pools only")
        served = [p for p in served if p.launch.engine == engines[0]]
        first = [p for p in first if p in served]
        decode = [p for p in decode if p in served]
    distinct = {tuple(sorted(r.prefill)) + tuple(sorted(r.decode)) for r in class_routes}
    expresses = len(distinct) <= 1
    if not expresses:
        notes.append("the plan routes request classes to different pools; the router balances every request "
                     "over all pools of a role (closest policy: cache_aware); run one router per class group, "
                     "or the llm-d target, whose scheduler can skip disaggregation below a prompt length")
    if any(p.role == "colocated" for p in first) and pd:
        notes.append("colocated pools beside a prefill/decode split: the router's P/D mode sends every request "
                     "through prefill, so the colocated pools are left out of this router")
        first = [p for p in first if p.role == "prefill"]
    urls = Upstreams(pd=pd, first=[u for p in first for u in replica_urls(p)],
                     decode=[u for p in decode for u in replica_urls(p)],
                     kv_connector=next((p.launch.kv_connector.name for p in first if p.launch.kv_connector), None))
    made = serving_engine(engines[0]).router(urls, served[0].launch.image)
    if made is None:
        return None
    return Router(router=made.router, version=made.version, image=made.image, command=made.command, port=PORT,
                  mode="pd" if pd else "aggregated", policy=made.policy, routes=class_routes, expresses_plan=expresses,
                  files=made.files, notes=notes + made.notes)
