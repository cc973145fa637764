"""``gimletc explain DIR [BLOCK|POOL]``: why each block went where (`compiler.explanation`).

For each pool (or the pools that run BLOCK): the best option of its kind on every device type with its
requests/s per kW, the constraints that bind, and what would change the choice (the placement re-solved without
it, the runner-up's margin, the sensitivity moves). A block also gets its step time on each candidate device.
Re-costs from the inputs the compile recorded in ``DIR/report/inputs.json`` (``--cluster``/``--workload``
override them). Every number is a prediction.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from compiler.cli import options


def register(sub) -> None:
    p = sub.add_parser("explain", help="why each block of a compiled plan went where, and what would change it",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("plan", metavar="DIR", help="plan directory written by gimletc compile --out DIR")
    p.add_argument("target", nargs="?", metavar="BLOCK|POOL",
                   help="a pool (pool0) or a block (L3.attn, decode/L3.attn, embed); default: every pool")
    p.add_argument("--cluster", metavar="FILE", help="cluster file to re-cost with (default: the compile's)")
    p.add_argument("--workload", metavar="FILE", help="workload file to re-cost with (default: the compile's)")
    p.add_argument("--no-resolve", action="store_true",
                   help="skip re-solving the placement without each pool (faster; no 'without ...' lines)")
    options.add_json(p, "the explanation")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.explanation import explain, render_text

    result = explain(args.plan, args.target, inputs=options.plan_inputs(args), resolve=not args.no_resolve)
    if args.json:
        json.dump(dataclasses.asdict(result), sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(result))
    return 0
