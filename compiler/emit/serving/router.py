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

from compiler.plan.schema import ClassRoute, Plan, Pool, Router
from compiler.emit.serving.launch import PLAN_MOUNT, PORT

INSTANCE = "gimletc"
VLLM_ROUTER_RELEASE = "0.1.17"  # the vllm-router on PyPI that `gimletc deploy --local` installs
SGLANG_ROUTER_RELEASE = "0.3.2"


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
    served = [p for p in plan.pools if p.launch is not None and p.launch.engine != "external"]
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
    engine = engines[0]
    if engine == "vllm":
        argv = ["vllm-router", "--host", "0.0.0.0", "--port", str(PORT)]
        if pd:
            decoders = sum(p.replicas for p in decode)
            # power_of_two needs two decode engines to choose between (vllm-router refuses it with one)
            argv += ["--vllm-pd-disaggregation", "--prefill-policy", "cache_aware", "--decode-policy",
                     "power_of_two" if decoders >= 2 else "round_robin"]
            connector = next((p.launch.kv_connector for p in first if p.launch.kv_connector), None)
            if connector is not None and connector.name == "NixlConnector":
                argv += ["--kv-connector", "nixl"]
            argv += _pd_urls(first, decode)
        else:
            argv += ["--policy", "cache_aware", "--worker-urls"] + [u for p in first for u in replica_urls(p)]
        return Router(router="vllm-router", version=VLLM_ROUTER_RELEASE, image=None, command=argv, port=PORT,
                      mode="pd" if pd else "aggregated", policy="cache_aware", routes=class_routes,
                      expresses_plan=expresses, notes=notes + ["image: none published; pip install vllm-router in "
                                                               "any Python image"])
    if engine == "sglang":
        argv = ["python3", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(PORT)]
        if pd:
            argv += ["--pd-disaggregation", *_pd_urls(first, decode)]
        else:
            argv += ["--worker-urls"] + [u for p in first for u in replica_urls(p)]
        return Router(router="sglang-router", version=SGLANG_ROUTER_RELEASE, image=None, command=argv, port=PORT,
                      mode="pd" if pd else "aggregated", policy="cache_aware", routes=class_routes,
                      expresses_plan=expresses, notes=notes)
    argv = ["trtllm-serve", "disaggregated", "-c", f"{PLAN_MOUNT}/engines/disaggregated.yaml"]
    return Router(router="trtllm-disaggregated", version=served[0].launch.version, image=served[0].launch.image,
                  command=argv, port=PORT, mode="pd" if pd else "aggregated", policy="round_robin",
                  routes=class_routes, expresses_plan=expresses,
                  files={"engines/disaggregated.yaml": _trtllm_disaggregated(first, decode)}, notes=notes)


def gateway_argv(binary: str, host: str, port: int) -> list[str]:
    """vllm-router in inference-gateway mode, in front of several services' routers: routes each request by its
    model, with no retries and no circuit breaker, so an engine's answer (a 404 for an unknown model) passes
    through as it gave it. ``deploy --local`` ([Note: one gateway for many services] in `compiler.deploy.services`)
    and the engines target's services gateway (`compiler.emit.k8s.model_routing`) run it.

    >>> gateway_argv("vllm-router", "0.0.0.0", 8000)[:2]
    ['vllm-router', '--enable-igw']
    """
    return [binary, "--enable-igw", "--host", host, "--port", str(port), "--policy", "round_robin",
            "--disable-retries", "--disable-circuit-breaker"]


def _pd_urls(prefill: list[Pool], decode: list[Pool]) -> list[str]:
    """``--prefill URL ... --decode URL ...``: every replica of each pool, in the plan's order (both routers)."""
    return ([a for p in prefill for u in replica_urls(p) for a in ("--prefill", u)]
            + [a for p in decode for u in replica_urls(p) for a in ("--decode", u)])


def _trtllm_disaggregated(context: list[Pool], generation: list[Pool]) -> str:
    """``trtllm-serve disaggregated``'s configuration: the context (prefill) and generation (decode) servers."""
    lines = ["hostname: 0.0.0.0", f"port: {PORT}"]
    for key, pools in (("context_servers", context), ("generation_servers", generation)):
        urls = [u.removeprefix("http://") for p in pools for u in replica_urls(p)]
        lines += [f"{key}:", f"  num_instances: {len(urls)}", "  urls:"] + [f"    - {u}" for u in urls]
    return "\n".join(lines) + "\n"
