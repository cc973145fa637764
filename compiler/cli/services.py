"""``gimletc compile --services FILE``: several models on one fleet (`compiler.services`).

Writes, into DIR: ``services.json`` (the joint placement: each service's rate, power and devices, the solver's
status and gap, the baselines), ``summary.md``, one folder per service holding that service's
``plan.json`` and ``k8s/`` as a single-model compile writes them (every plan command reads it:
``gimletc explain DIR/chat``, ``gimletc deploy DIR/chat``), and ``k8s/`` beside them: routing by model across
the services (`compiler.emit.k8s.model_routing`; ``kubectl apply -k DIR/k8s`` deploys every service with it).
``status.json`` records how the run ended.
"""

from __future__ import annotations

import argparse
import time

from compiler.cli.console import check_out_dir, progress_for, seconds, timings_line

#: What a services compile writes into DIR besides one folder per service (removed before a run).
OUTPUTS = ("services.json", "summary.md", "k8s")


def run(args: argparse.Namespace) -> int:
    from compiler.cli import run as run_command
    from compiler.cli.status import clear, recorded
    from compiler.driver import Timings
    from compiler.inputs.services import load_services
    from compiler.services import compile_services, write_services

    if args.model or args.workload:
        from compiler.ir.errors import BadInput

        raise BadInput("--services places the models and workloads its file names: drop "
                       + " and ".join(x for x, given in (("MODEL", args.model), ("--workload", args.workload))
                                      if given))
    out = check_out_dir(args.out)
    names = tuple(s.name for s in load_services(args.services).services)  # a bad file fails before anything
    clear(out, OUTPUTS + names)
    timings, wrote = Timings(), []
    started = time.perf_counter()
    with recorded(out, "compile", timings, wrote, OUTPUTS + names):
        result = compile_services(args.services, args.cluster, objective=args.objective,
                                  power_budget_w=args.power_budget, cost_budget_per_hour=args.cost_budget,
                                  calibration=args.calibration, deployable=args.deployable,
                                  time_limit_s=args.time_limit, progress=progress_for(args), timings=timings)
        with timings.step("write"):
            wrote += write_services(result, out, args.manifests, cluster=args.cluster, power_budget_w=args.power_budget,
                           calibration=args.calibration, deployable=args.deployable,
                           artifacts=run_command.artifact_options(args))
        timings.marks["everything written"] = time.perf_counter() - started
    if args.json:
        print((out / "services.json").read_text(encoding="utf-8"), end="")
    else:
        from rich.console import Console

        console = Console()
        routing = "" if args.manifests == "none" else f" and {out / 'k8s'} (routing by model)"
        console.print((out / "summary.md").read_text(encoding="utf-8"), markup=False, highlight=False)
        console.print(f"[dim]{timings_line(timings.as_dict())}; solve {seconds(result.solution.wall_s)}. "
                      f"wrote {out / 'services.json'}, {out / 'summary.md'}, a plan folder per service{routing}. "
                      "All metrics are predictions.[/dim]", soft_wrap=False)
    return 0
