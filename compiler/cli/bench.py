"""``gimletc bench DIR``: closed-loop load through a running local deployment, measured beside the plan's
predictions (`compiler.deploy.bench`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from compiler.cli import options
from compiler.cli.console import output


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure a running deployment under closed-loop load",
                       description="Send closed-loop streaming completions (C clients, each sending its next request "
                                   "when the previous ends) through the router of `gimletc deploy DIR --local` with "
                                   "the openai client, and print measured TTFT, TPOT and throughput beside the "
                                   "plan's predictions. TPOT is the engines' own (their /metrics histograms, "
                                   "scraped before and after each run), TTFT the client's; percentiles come with "
                                   "the number of requests behind them. Prompts are new random token ids every "
                                   "bench (no prefix-cache hits); a warm-up round is left out. Exits 4 when any "
                                   "request failed.")
    p.add_argument("plan", metavar="DIR", help="plan directory of a running `gimletc deploy DIR --local`")
    p.add_argument("--concurrency", type=options.positive_int, default=1, help="closed-loop clients (default 1)")
    p.add_argument("--requests", type=options.positive_int, default=None,
                   help="requests per run (default 4 x concurrency, at least 10: enough for a p90)")
    p.add_argument("--repeat", type=options.positive_int, default=1,
                   help="runs of --requests each, with the spread between them (default 1)")
    p.add_argument("--warmup", type=options.nonneg_int, default=None,
                   help="requests sent first and left out (default: one per client)")
    p.add_argument("--seed", type=options.nonneg_int, default=None,
                   help="seed of the random prompts (default: a new one each bench, printed)")
    p.add_argument("--input-len", type=options.positive_int, default=None,
                   help="prompt tokens (default: the plan's mean prompt)")
    p.add_argument("--output-len", type=options.positive_int, default=None,
                   help="output tokens (default: the plan's mean output)")
    p.add_argument("--request-timeout-s", type=options.positive_float, default=30.0,
                   help="a request with no answer within this long fails (default 30)")
    p.add_argument("--max-failures", type=options.nonneg_int,
                   default=0, help="stop once more requests than this failed (default 0: at the first failure)")
    p.add_argument("--url", default=None, help="router URL (default: from DIR/deploy/endpoints.json)")
    options.add_json(p, "the figures")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import secrets

    from compiler.cli.console import progress_for
    from compiler.deploy.bench import bench, endpoints, engines_of
    from compiler.plan.checks import load_plan
    from compiler.ir.errors import RuntimeFailure

    plan = load_plan(args.plan)
    info = endpoints(args.plan) if args.url is None else {"router": args.url, "served_model_name": plan.model}
    config = json.loads((Path(args.plan) / "model" / "config.json").read_text())
    input_len = args.input_len or max(1, round(plan.mean_input_len))
    output_len = args.output_len or max(1, round(plan.mean_output_len))
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)  # [Note: fresh prompts]
    requests = args.requests or max(10, 4 * args.concurrency)
    warmup = args.concurrency if args.warmup is None else args.warmup
    engines = engines_of(info, {p.name: p.role for p in plan.pools})
    out = bench(info["router"], info["served_model_name"], engines, concurrency=args.concurrency,
                requests=requests, input_len=input_len, output_len=output_len, vocab_size=config["vocab_size"],
                seed=seed, repeat=args.repeat, warmup=warmup, request_timeout_s=args.request_timeout_s,
                max_failures=args.max_failures, note=progress_for(args) or (lambda _m: None))
    measured = out["measured"]
    result = {"concurrency": args.concurrency, "input_len": input_len, "output_len": output_len,
              "requests_per_run": requests, "repeat": args.repeat, "warmup_requests": warmup, "seed": seed,
              "measured": measured, "runs": out["runs"], "spread": out["spread"],
              "predicted": _predicted(plan, args.concurrency, input_len, output_len)}
    result["inside"] = inside(result)
    output(result, args.json, _print)
    if measured["failed"]:
        raise RuntimeFailure(f"{measured['failed']} of {measured['requests']} requests failed: "
                             f"{'; '.join(measured['errors'])}")
    return 0


def _predicted(plan, concurrency: int, input_len: int, output_len: int) -> dict:
    """The plan's prediction at this bench's load (`compiler.api.predict_load`), each figure with its 80% interval."""
    from compiler.api import predict_load

    out = predict_load(plan, concurrency=concurrency, input_len=input_len, output_len=output_len)
    return {**out, "prediction": f"of the cost model at this load ({out['how']}), with 80% intervals"}


#: The measured figure each predicted one is compared with.
COMPARED = (("ttft_ms", "ttft_ms_p50"), ("tpot_ms", "tpot_ms_p50"), ("output_tokens_per_s", "output_tokens_per_s"))


def inside(result: dict) -> dict[str, bool | None]:
    """Whether each measured figure lies inside its prediction's 80% interval (None: nothing measured)."""
    out: dict[str, bool | None] = {}
    for key, measured in COMPARED:
        value = result["measured"].get(measured)
        lo, hi = result["predicted"][key]["interval"]
        out[key] = None if value is None else lo <= value <= (hi if hi is not None else float("inf"))
    return out


def _print(result: dict) -> None:
    from compiler.emit.report.figures import with_interval

    m, p = result["measured"], result["predicted"]
    fmt = lambda v, spec=".1f": "-" if v is None else format(v, spec)  # noqa: E731
    runs = f"{result['repeat']} runs of " if result["repeat"] > 1 else ""
    print(f"concurrency {result['concurrency']}, {runs}{result['requests_per_run']} requests of "
          f"{result['input_len']} -> {result['output_len']} tokens (seed {result['seed']}, "
          f"{result['warmup_requests']} warm-up left out): {m['succeeded']} succeeded, {m['failed']} failed")
    print(f"{'':22}{'measured (here)':>18}  {'predicted at this load (80%)':<32}inside")
    for (key, measured), label, spec in zip(COMPARED, ("TTFT p50 ms", "TPOT p50 ms", "output tokens/s"),
                                            (".1f", ".2f", ".1f")):
        inside_text = {True: "yes", False: "NO", None: "-"}[result["inside"][key]]
        print(f"{label:22}{fmt(m[measured], spec):>18}  "
              f"{with_interval(p[key]['value'], p[key]['interval'], spec):<32}{inside_text}")
    tpot = m["engine"]["tpot_ms"] if m["tpot_source"] == "engine" else m["client"]["tpot_ms"]
    for label, figure, source in (("TTFT", m["client"]["ttft_ms"], "client"), ("TPOT", tpot, m["tpot_source"])):
        print(f"{label} ms ({source}, {figure['n']} requests): p50 {fmt(figure['p50'], '.2f')}, "
              f"p90 {fmt(figure['p90'], '.2f')}, p99 {fmt(figure['p99'], '.2f')}")
    for role, figure in sorted(m["engine"].get("ttft_ms_by_role", {}).items()):
        print(f"  {role} engines' own TTFT ms ({figure['n']}): p50 {fmt(figure['p50'], '.2f')}")
    if len(result["runs"]) > 1:
        for i, r in enumerate(result["runs"], 1):
            print(f"  run {i}: TTFT p50 {fmt(r['ttft_ms_p50'])} ms, TPOT p50 {fmt(r['tpot_ms_p50'], '.2f')} ms "
                  f"({r['tpot_source']}), {fmt(r['output_tokens_per_s'])} tokens/s")
        for key, s in result["spread"].items():
            print(f"  spread of {key}: {fmt(s['min'], '.2f')} to {fmt(s['max'], '.2f')} "
                  f"({fmt(s['ratio'], '.2f')}x)")
    print(f"(predicted: {p['how']})")
    for w in m["warnings"]:
        print(f"warning: {w}")
    for e in m["errors"]:
        print(f"error: {e}")
