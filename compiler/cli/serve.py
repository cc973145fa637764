"""``gimletc serve DIR``: an OpenAI-compatible HTTP server over a running plan (`compiler.runtime.serve`).

Also here: ``--workers``, shared with ``gimletc run`` (`add_worker_options`): where the plan's workers come from.
"""

from __future__ import annotations

import argparse

from compiler.cli import options

WORKERS_HELP = ("local: start one worker process per stage instance here; external: start none, listen on "
                "MASTER_PORT (default 29500) and wait for workers started elsewhere (Kubernetes pods running "
                "`python -m compiler.runtime.worker --plan DIR` with the contract's environment); auto (default): "
                "external when RANK=0 and WORLD_SIZE are set in the environment, as the manifests set them for the "
                "driver, else local")


def add_worker_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", choices=("auto", "local", "external"), default="auto", help=WORKERS_HELP)
    p.add_argument("--start-timeout-s", type=options.positive_float, default=None,
                   help="how long to wait for every worker to be ready (default 120 local, 600 external)")
    p.add_argument("--stage-timeout-s", type=options.positive_float, default=15.0,
                   help="a stage that does not answer within this long fails the run (default 15)")


def engine_options(args: argparse.Namespace) -> dict:
    """`compiler.runtime.engine.Engine` keyword arguments from `add_worker_options`' flags."""
    from compiler.runtime.launch import wants_external

    external = args.workers == "external" or (args.workers == "auto" and wants_external())
    return {"external": external, "start_timeout_s": args.start_timeout_s, "stage_timeout_s": args.stage_timeout_s}


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a compiled plan over an OpenAI-compatible HTTP API",
                       description="Start the plan's workers (or wait for them, --workers external) and serve "
                                   "/v1/completions, /v1/chat/completions (SSE streaming), /v1/models, /health and "
                                   "/metrics (Prometheus).")
    p.add_argument("plan", metavar="DIR", help="plan directory written by gimletc compile --out DIR")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=options.port, default=8000, help="port, 1 to 65535 (default 8000)")
    add_worker_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.runtime.serve import serve

    def ready(url: str) -> None:
        print(f"gimletc: serving {args.plan} at {url} (OpenAI API under {url}/v1; Ctrl-C stops it)", flush=True)

    return serve(args.plan, host=args.host, port=args.port, on_ready=ready, **engine_options(args))
