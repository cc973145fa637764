"""``gimletc compile --services FILE``: several models on one fleet (`compiler.services`).

Writes, into DIR: ``services.json`` (the joint placement: each service's rate, power and devices, the solver's
status and gap, the baselines), ``summary.md``, and one folder per service holding that service's
``plan.json`` and ``k8s/`` as a single-model compile writes them (every plan command reads it:
``gimletc explain DIR/chat``, ``gimletc deploy DIR/chat``). ``status.json`` records how the run ended.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from compiler.cli.console import check_out_dir, progress_for, seconds, timings_line
from compiler.ir.files import atomic_write_text

#: What a services compile writes into DIR besides one folder per service (removed before a run).
OUTPUTS = ("services.json", "summary.md")


def run(args: argparse.Namespace) -> int:
    from compiler.cli import run as run_command
    from compiler.cli.status import clear, recorded
    from compiler.driver import Timings
    from compiler.inputs.services import load_services
    from compiler.services import compile_services

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
            wrote += write(result, out, args.manifests, cluster=args.cluster, power_budget_w=args.power_budget,
                           calibration=args.calibration, deployable=args.deployable,
                           artifacts=run_command.artifact_options(args))
        timings.marks["everything written"] = time.perf_counter() - started
    if args.json:
        print((out / "services.json").read_text(encoding="utf-8"), end="")
    else:
        from rich.console import Console

        console = Console()
        console.print((out / "summary.md").read_text(encoding="utf-8"), markup=False, highlight=False)
        console.print(f"[dim]{timings_line(timings.as_dict())}; solve {seconds(result.solution.wall_s)}. "
                      f"wrote {out / 'services.json'}, {out / 'summary.md'} and a plan folder per service. All "
                      "metrics are predictions.[/dim]", soft_wrap=False)
    return 0


def write(result, out: Path, target: str, *, cluster: str, power_budget_w: float | None = None,
          calibration: str | None = None, deployable: bool = False, artifacts=None) -> list[str]:
    """Every file of a services compile; returns them relative to `out`. Each service's folder records the
    inputs it was compiled from (``report/inputs.json``; `cluster` and the budget flags given)."""
    from compiler.cli.compile import write_manifests
    from compiler.compile_inputs import INPUTS_FILE, REPORT_DIR, CompileInputs
    from compiler.emit.artifacts import Options, write_plan_dir

    artifacts = artifacts or Options()

    wrote = []
    for part in result.parts:
        folder = out / part.name
        folder.mkdir(parents=True, exist_ok=True)
        # plan.json with what the reference runtime and deploy --local read (stage programs, shards, model/)
        written = write_plan_dir(result.plans[part.name], part.spec.model, folder, artifacts)
        wrote.append(f"{part.name}/plan.json")
        record = folder / REPORT_DIR / INPUTS_FILE  # what `explain` and `replan` re-cost the service from, alone
        record.parent.mkdir(exist_ok=True)
        atomic_write_text(record, CompileInputs.of(
            part.spec.model, cluster, part.spec.workload, power_budget_w=power_budget_w, objective=result.objective,
            dtype=part.spec.dtype, kv_dtype=part.spec.kv_dtype, calibration=calibration,
            deployable=deployable).to_json())
        wrote.append(f"{part.name}/{REPORT_DIR}/{INPUTS_FILE}")
        result.plans[part.name] = written
        wrote += [f"{part.name}/{p}" for p in write_manifests(written, part.prep, folder, target)]
    document = services_document(result)
    atomic_write_text(out / "services.json", json.dumps(document, indent=2, sort_keys=False) + "\n")
    atomic_write_text(out / "summary.md", summary(document))
    return wrote + ["services.json", "summary.md"]


def services_document(result) -> dict:
    """``services.json``: deterministic (no wall-clock times), every figure a prediction."""
    from compiler.services import gain

    sol, objective = result.solution, result.objective
    total_w = sol.provisioned_w or 1.0
    services = []
    for part in result.parts:
        share, plan = result.shares[part.name], result.plans[part.name]
        iv = plan.predicted.intervals
        services.append({
            "name": part.name, "model": plan.model, "workload": plan.workload, "dtype": part.spec.dtype,
            "weight": part.spec.weight, "floor_requests_per_s": part.floor_per_s if part.has_floor else None,
            "predicted_requests_per_s": plan.predicted.requests_per_s,
            "predicted_requests_per_s_interval": iv.get("requests_per_s"),
            "predicted_output_tokens_per_s": plan.predicted.output_tokens_per_s,
            "predicted_output_tokens_per_s_interval": iv.get("output_tokens_per_s"),
            "predicted_power_w": round(share.power_w, 3), "provisioned_power_w": share.provisioned_w,
            "share_of_provisioned_power": round(share.provisioned_w / total_w, 6),
            "devices": share.devices(), "pools": [p.name for p in plan.pools],
            "worst_ttft_ms": plan.predicted.worst_ttft_ms, "worst_tpot_ms": plan.predicted.worst_tpot_ms,
            "binds": "its floor" if part.has_floor and share.requests_per_s <= part.floor_per_s * (1 + 1e-6)
            else "the shared fleet",
            "plan": f"{part.name}/plan.json",
        })
    baselines = [{"name": b.name, "status": b.status, "objective_value": b.objective,
                  "requests_per_s": dict(b.requests_per_s), "provisioned_power_w": b.provisioned_w,
                  "plan_gain": gain(objective, sol.objective.value, b), "note": b.note} for b in result.baselines]
    inst = result.instance
    return {
        "name": result.file.name, "cluster": result.parts[0].prep.cluster.name, "objective": objective,
        "objective_quantity": "weighted requests_per_s" if objective == "throughput" else sol.objective.quantity,
        "power_budget_w": inst.power_budget_w, "inventory": dict(inst.inventory),
        "solver": {"status": sol.status, "objective_value": sol.objective.value, "bound": sol.objective.bound,
                   "gap": sol.objective.gap, "variables": sol.variables, "constraints": sol.constraints,
                   "options": len(sol.options)},
        "predicted": {"output_tokens_per_s": round(sum(s["predicted_output_tokens_per_s"] for s in services), 6),
                      "power_w": round(sol.power_w, 3), "provisioned_power_w": sol.provisioned_w,
                      "devices": sol.devices()},
        "services": services, "baselines": baselines,
        "note": "every figure is a prediction of gimletc's cost model; each service's plan.json carries its "
                "intervals and assumptions. Services on one device type are separate replicas on separate devices.",
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def summary(doc: dict) -> str:
    """``summary.md`` of a services compile: the gain over the baselines a platform team would use, first."""
    from compiler.emit.report.figures import with_interval

    s = doc["solver"]
    by = {b["name"]: b for b in doc["baselines"]}
    lead = [f"{name}: {_pct(by[name]['plan_gain'])}" for name in ("proportional-slices", "greedy-type") if name in by]
    lines = [f"# {doc['name']}: {len(doc['services'])} services on {doc['cluster']}", ""]
    budget = f"{doc['power_budget_w'] / 1e3:,.1f} kW budget" if doc["power_budget_w"] else "no power budget"
    lines += [f"One placement of every service ({budget}, objective {doc['objective']}: "
              f"{doc['objective_quantity']}). Predicted; 80% intervals in brackets.", ""]
    if lead:
        lines += ["**The joint placement over what a platform team would otherwise do** (same cost model, same "
                  "fleet and power): " + ", ".join(lead) + ".", ""]
    lines += ["| service | model | weight | floor req/s | req/s | output tok/s | kW provisioned (share) | devices | "
              "binds |", "|---|---|---|---|---|---|---|---|---|"]
    for v in doc["services"]:
        devices = ", ".join(f"{n} {t}" for t, n in v["devices"].items())
        floor = "-" if v["floor_requests_per_s"] is None else f"{v['floor_requests_per_s']:g}"
        lines.append(f"| {v['name']} | {v['model']} | {v['weight']:g} | {floor} | "
                     f"{with_interval(v['predicted_requests_per_s'], v['predicted_requests_per_s_interval'], ',.2f')} | "
                     f"{with_interval(v['predicted_output_tokens_per_s'], v['predicted_output_tokens_per_s_interval'], ',.0f')} | "
                     f"{v['provisioned_power_w'] / 1e3:,.1f} ({v['share_of_provisioned_power']:.0%}) | {devices} | "
                     f"{v['binds']} |")
    p = doc["predicted"]
    lines += ["", f"All services: {p['output_tokens_per_s']:,.0f} output tokens/s, {p['power_w'] / 1e3:,.1f} kW "
              f"drawn, {p['provisioned_power_w'] / 1e3:,.1f} kW provisioned.", "",
              "| baseline | status | objective | plan gain | note |", "|---|---|---|---|---|"]
    for b in doc["baselines"]:
        value = "-" if b["objective_value"] is None else f"{b['objective_value']:,.2f}"
        lines.append(f"| {b['name']} | {b['status']} | {value} | {_pct(b['plan_gain'])} | {b['note']} |")
    lines += ["", "single-type baselines buy as many devices of one type as the budget pays for (buying advice, "
              "not the fleet owned).", "",
              f"Solver: MILP (HiGHS), {s['status']}, objective {s['objective_value']:,.4g}, bound {s['bound']:,.4g}, "
              f"gap {100 * s['gap']:.3f}%, {s['variables']} variables, {s['constraints']} constraints, "
              f"{s['options']} pool options.", "",
              "Each service's pools, classes and intervals: its folder's plan.json (`gimletc explain DIR/<service>`).",
              ""]
    return "\n".join(lines)
