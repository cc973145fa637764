"""``gimletc serve DIR``: an OpenAI-compatible HTTP server over a running plan (`compiler.runtime.serve`)."""

from __future__ import annotations

import argparse

from compiler.cli import options


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a compiled plan over an OpenAI-compatible HTTP API",
                       description="Start the plan's workers and serve /v1/completions, /v1/chat/completions "
                                   "(SSE streaming), /v1/models, /health and /metrics (Prometheus).")
    p.add_argument("plan", metavar="DIR", help="plan directory written by gimletc compile --out DIR")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=options.positive_int, default=8000, help="port (default 8000)")
    p.add_argument("--stage-timeout-s", type=options.positive_float, default=15.0,
                   help="a stage that does not answer within this long fails the server (default 15)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.runtime.serve import serve

    return serve(args.plan, host=args.host, port=args.port, stage_timeout_s=args.stage_timeout_s)
