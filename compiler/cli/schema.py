"""``gimletc schema``: the JSON Schemas of the cluster, workload, services and plan files."""

from __future__ import annotations

import argparse

from compiler.cli import options
from compiler.cli.console import output


def register(sub) -> None:
    p = sub.add_parser("schema", help="print the JSON Schemas of the cluster, workload, services and plan files")
    options.add_json(p, "the schemas (the default: they are JSON)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.plan.schema import Plan
    from compiler.inputs import schemas

    return output({**schemas(), "plan": Plan.model_json_schema()}, True, None)
