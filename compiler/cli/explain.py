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
    from pathlib import Path

    from compiler.explanation import explain, render_text

    root = Path(args.plan)
    if (root / "services.json").is_file():  # a services plan (compile --services): each service in the placement
        if args.target:
            from compiler.ir.errors import BadInput

            raise BadInput(f"{args.plan} is a services plan: explain one service's pools with gimletc explain "
                           f"{root / '<service>'} {args.target}")
        text = services_text(root)
        sys.stdout.write(json.dumps(json.loads((root / "services.json").read_text()), indent=1) + "\n"
                         if args.json else text)
        return 0
    shared = root.resolve().parent / "services.json"
    result = explain(args.plan, args.target, inputs=options.plan_inputs(args), resolve=not args.no_resolve)
    if args.json:
        json.dump(dataclasses.asdict(result), sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        if shared.is_file():
            sys.stdout.write(f"note: this service shares its fleet with the others of {shared}: the slack below is "
                             f"the whole fleet's as if it ran alone; what the others hold and what binds each: "
                             f"gimletc explain {root.resolve().parent}\n\n")
        sys.stdout.write(render_text(result))
    return 0


def services_text(root) -> str:
    """Each service of a services plan: its rate, its share of the power, its pools and what binds it
    (``services.json`` and each service's ``plan.json``; predictions)."""
    from compiler.plan.checks import load_plan

    doc = json.loads((root / "services.json").read_text(encoding="utf-8"))
    budget = f"{doc['power_budget_w'] / 1e3:,.1f} kW budget" if doc["power_budget_w"] else "no power budget"
    lines = [f"{doc['name']}: {len(doc['services'])} services placed together on {doc['cluster']} ({budget}), "
             f"objective {doc['objective']} ({doc['objective_quantity']}); all numbers are predictions",
             f"shared limits reached: {', '.join(doc['tight']) or 'none'}", ""]
    for s in doc["services"]:
        floor = f", floor {s['floor_requests_per_s']:g} req/s" if s["floor_requests_per_s"] else ""
        lines.append(f"{s['name']} ({s['model']}, weight {s['weight']:g}{floor}): {s['predicted_requests_per_s']:,.2f} "
                     f"req/s on {', '.join(f'{n} {t}' for t, n in s['devices'].items())}, "
                     f"{s['provisioned_power_w'] / 1e3:,.1f} kW provisioned ({s['share_of_provisioned_power']:.0%} "
                     f"of the placement's); bound by {s['binds']}")
        for p in load_plan(root / s["name"]).pools:
            lines.append(f"  {p.name}: {p.role} on {p.device}, {p.replicas} x {p.devices_per_replica} devices, "
                         f"tp{p.tp} pp{p.pp}, {p.predicted_requests_per_s:,.2f} req/s at "
                         f"{p.predicted_utilisation:.0%} utilisation")
    lines += ["", f"each service's pools in depth: gimletc explain {root}/<service>"]
    return "\n".join(lines) + "\n"
