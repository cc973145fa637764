"""``gimletc worker DIR``: run one stage worker (the same program as ``python -m compiler.runtime.worker --plan DIR``).

The worker contract (environment variables, ranks) is in compiler/plan/topology.py.
"""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("worker", help="run one stage worker of a plan (launched by run/serve or Kubernetes)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("plan", metavar="DIR", help="plan directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.runtime.worker import main

    return main(["--plan", args.plan])
