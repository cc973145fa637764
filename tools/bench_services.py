"""Benchmark ``gimletc compile --services``: fleets of 1, 5, 10 and 20 services on one 12-device-type fleet.

Each size places the first N services of `SERVICES` (presets from Llama-3.2-1B to Llama-3.1-405B, one to three
request classes each, every workload ``maximise`` with a floor) on a cluster of 12 device types from the catalog
under a power budget, through `compiler.services.compile_services` in this process, as ``gimletc compile
--services`` runs it. The cluster, workload and services files are written into a temporary directory.

Reported per size: the plan-written time (wall time of `compile_services` without baselines: cost every service's
pool options, one joint solve, emit each plan) and its CPU time (steadier than wall time on a shared machine), and
the time with the baselines (then `service_baselines`, the call compile makes after the plan, timed on the same
prepared services; ``--baseline-time-limit`` may give its solves their own limit); where the time goes (costing,
the joint solve); the joint solve's status and gap, its variables and pool options; and the greedy-type
baseline's shortfall against the joint plan, both solved in the same run with the same cost model at the same
power: ``plan_gain`` (the joint objective over greedy-type's, as services.json reports it) and the shortfall
``1 - 1/plan_gain``. A size whose joint solve finds no placement within its limit is a row with status ``none``
and the message. Each model is traced once before the first size (warm trace cache), so no size pays for
tracing. Times vary with the machine's load; nothing is asserted on them (STYLE.md: benchmarks print, tests do
not time).

    .venv/bin/python tools/bench_services.py [--sizes 1,5,10,20] [--time-limit 60] [--baseline-time-limit S]
                                        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: The fleet: 12 device types of the catalog (`gimletc backends`), in whole nodes: 542 kW on the footing the
#: budget counts (node power per device, a cluster file's default; 357.6 kW of accelerators at TDP).
FLEET = (("nvidia-a100-sxm-80gb", 32), ("nvidia-l40s", 32), ("nvidia-h100-sxm", 32), ("nvidia-h200-sxm", 32),
         ("nvidia-b200", 32), ("amd-mi300x", 32), ("amd-mi325x", 32), ("amd-mi355x", 32), ("aws-trn2", 32),
         ("intel-gaudi3", 32), ("cerebras-cs3", 4), ("dmatrix-corsair", 32))
#: The budget binds: it switches on less than half of the fleet.
POWER_BUDGET_KW = 250

#: Request classes the services draw from (lengths as in examples/workloads/; each fits every model it is given to).
CLASSES = {
    "chat": {"input_len": {"mean": 1024, "max": 4096}, "output_len": {"mean": 256, "max": 1024},
             "slo": {"ttft_ms": 1000, "tpot_ms": 50}},
    "summarize": {"input_len": {"mean": 8192, "max": 16384}, "output_len": {"mean": 256, "max": 512},
                  "slo": {"ttft_ms": 4000, "tpot_ms": 60}},
    "long-generation": {"input_len": 512, "output_len": {"mean": 4096, "max": 8192}, "slo": {"tpot_ms": 40}},
    "documents": {"input_len": {"mean": 24000, "max": 32000}, "output_len": {"mean": 256, "max": 512},
                  "slo": {"ttft_ms": 8000, "tpot_ms": 80}},
}

#: (service, preset, its classes, floor in req/s). Sizes take a prefix; the first five already span 1B to 405B.
#: Every service has a floor, so none is starved for the more valuable ones.
SERVICES = (
    ("chat-70b", "llama-3.1-70b", ("chat", "summarize", "long-generation"), 5),
    ("chat-1b", "llama-3.2-1b", ("chat",), 20),
    ("assist-8b", "llama-3.1-8b", ("chat", "summarize"), 10),
    ("reason-32b", "qwen3-32b", ("chat", "long-generation"), 2),
    ("frontier-405b", "llama-3.1-405b", ("chat",), 1),
    ("moe-8x7b", "mixtral-8x7b", ("chat", "documents"), 5),
    ("moe-30b", "qwen3-30b-a3b", ("long-generation",), 5),
    ("agent-120b", "gpt-oss-120b", ("chat", "summarize"), 5),
    ("docs-235b", "qwen3-235b-a22b", ("summarize",), 2),
    ("moe-8x22b", "mixtral-8x22b", ("chat",), 2),
    ("legacy-8b", "llama-3-8b", ("chat",), 10),
    ("write-70b", "llama-3.3-70b", ("long-generation", "chat"), 2),
    ("docs-7b", "qwen2.5-7b-instruct-1m", ("documents",), 2),
    ("stories-8b", "llama-3.1-8b", ("long-generation",), 5),
    ("docs-70b", "llama-3.1-70b", ("documents",), 1),
    ("think-32b", "qwen3-32b", ("summarize", "long-generation"), 2),
    ("write-120b", "gpt-oss-120b", ("long-generation",), 2),
    ("digest-1b", "llama-3.2-1b", ("summarize",), 10),
    ("legacy-70b", "llama-3-70b", ("chat",), 2),
    ("mixed-30b", "qwen3-30b-a3b", ("chat", "summarize", "long-generation"), 5),
)
#: Class shares when a service has one, two or three classes.
SHARES = {1: (1.0,), 2: (0.7, 0.3), 3: (0.6, 0.25, 0.15)}
DTYPE = "fp8"  # every type of the fleet runs fp8 weights (d-Matrix Corsair has no bf16 rate)


def _mean(length) -> float:
    return length if isinstance(length, (int, float)) else length["mean"]


def weight(preset: str, classes: tuple[str, ...]) -> float:
    """What one request/s of a service is worth: the price of its mean request at a price per token proportional
    to the model's active parameters (cost-plus pricing, so that no service is worth serving only because its
    model is small): billions of active parameters (the preset's published count) times thousands of mean tokens
    per request (Llama-3.2-1B chat: 1.24 x 1.28 = 1.587)."""
    from compiler.inputs.model_spec import preset_provenance

    active_b = preset_provenance(preset)["params_active_published"] / 1e9
    tokens = sum(s * (_mean(CLASSES[c]["input_len"]) + _mean(CLASSES[c]["output_len"]))
                 for c, s in zip(classes, SHARES[len(classes)]))
    return round(active_b * tokens / 1e3, 3)


def write_inputs(folder: Path, size: int) -> tuple[Path, Path]:
    """The cluster file and a services file of the first `size` services (with their workloads) in `folder`."""
    cluster = folder / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "name": "twelve-types", "power_budget_kw": POWER_BUDGET_KW,
        "devices": [{"device": d, "count": n} for d, n in FLEET],
        "default_link": {"bandwidth_gb_per_s": 50, "latency_us": 20}}, sort_keys=False), encoding="utf-8")
    services = []
    for name, preset, classes, floor in SERVICES[:size]:
        workload = folder / f"{name}.yaml"
        workload.write_text(yaml.safe_dump({
            "name": name, "arrival_rate_per_s": "maximise",
            "classes": [{"name": c, "share": s, **CLASSES[c]} for c, s in zip(classes, SHARES[len(classes)])]},
            sort_keys=False), encoding="utf-8")
        services.append({"name": name, "model": preset, "workload": workload.name, "dtype": DTYPE,
                         "weight": weight(preset, classes), "min_rate_per_s": floor})
    path = folder / f"services-{size}.yaml"
    path.write_text(yaml.safe_dump({"name": f"bench-{size}", "services": services}, sort_keys=False),
                    encoding="utf-8")
    return cluster, path


def warm_traces(size: int) -> None:
    """Trace every model the largest size uses once, so the timed runs read the trace cache."""
    from compiler.driver import block_graph

    for preset in dict.fromkeys(s[1] for s in SERVICES[:size]):
        block_graph(preset)


def bench(size: int, folder: Path, time_limit_s: float, baseline_limit_s: float) -> dict:
    """One size: `compile_services` without its baselines (the plan), then the baselines it would run after it
    (`service_baselines`, on the same prepared services), each timed; what `table` prints."""
    from compiler.driver import Timings
    from compiler.ir.errors import Infeasible
    from compiler.services import compile_services, gain, service_baselines

    cluster, path = write_inputs(folder, size)
    row: dict = {"services": size, "classes": sum(len(s[2]) for s in SERVICES[:size]), "device_types": len(FLEET),
                 "power_budget_kw": POWER_BUDGET_KW, "time_limit_s": time_limit_s}
    timings = Timings()
    start, cpu = time.perf_counter(), time.process_time()
    try:
        result = compile_services(str(path), str(cluster), time_limit_s=time_limit_s, baselines=False,
                                  timings=timings)
    except Infeasible as e:  # no placement found within the limit (or none exists): the row says which
        result, row["error"] = None, str(e)
    row["plan_written_s"] = round(time.perf_counter() - start, 2)
    row["plan_cpu_s"] = round(time.process_time() - cpu, 2)  # this process's, HiGHS's threads included
    steps: dict[str, float] = {}
    for name, s in timings.steps:  # cost runs once per service; place and emit once
        steps[name] = steps.get(name, 0.0) + s
    row.update(cost_s=round(steps.get("cost", 0.0), 2), place_s=round(steps.get("place", 0.0), 2))
    if result is None:
        return {**row, "status": "none", "gap": None, "with_baselines_s": None, "baselines_s": None}
    sol = result.solution
    start = time.perf_counter()
    baselines = {b.name: b for b in service_baselines(result.parts, result.objective, time_limit_s=baseline_limit_s)}
    row["baselines_s"] = round(time.perf_counter() - start, 2)
    row["with_baselines_s"] = round(row["plan_written_s"] + row["baselines_s"], 2)
    greedy = baselines["greedy-type"]
    plan_gain = gain(result.objective, sol.objective.value, greedy)
    return {
        **row, "status": sol.status, "gap": sol.objective.gap, "variables": sol.variables,
        "constraints": sol.constraints, "options": len(result.instance.options), "options_solved": len(sol.options),
        "objective": sol.objective.value, "bound": sol.objective.bound,
        "greedy_type_status": greedy.status, "greedy_type_objective": greedy.objective,
        "plan_gain_greedy_type": plan_gain,
        "greedy_type_shortfall": None if not plan_gain else 1 - 1 / plan_gain,
        "plan_gain_proportional_slices": gain(result.objective, sol.objective.value, baselines["proportional-slices"]),
        "baselines": {b.name: {"status": b.status, "objective": b.objective, "note": b.note}
                      for b in baselines.values()},
        "requests_per_s": {p.name: round(result.shares[p.name].requests_per_s, 3) for p in result.parts},
    }


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


HEAD = (f"{'services':>8} {'classes':>7} {'plan s':>7} {'cpu s':>7} {'+base s':>7} {'cost s':>7} {'place s':>7} "
        f"{'status':>8} {'gap %':>6} {'vars':>6} {'options':>7} {'vs greedy':>9} {'shortfall':>9} {'vs slices':>9}")


def line(r: dict) -> str:
    """One size's row of the table under `HEAD`."""
    short = "-" if r.get("greedy_type_shortfall") is None else f"{100 * r['greedy_type_shortfall']:.1f}%"
    gap = "-" if r["gap"] is None else f"{100 * r['gap']:.3f}"
    return (f"{r['services']:>8} {r['classes']:>7} {_s(r['plan_written_s']):>7} {_s(r.get('plan_cpu_s')):>7} "
            f"{_s(r['with_baselines_s']):>7} "
            f"{_s(r['cost_s']):>7} {_s(r['place_s']):>7} {r['status']:>8} {gap:>6} {r.get('variables', '-'):>6} "
            f"{r.get('options', '-'):>7} {_x(r.get('plan_gain_greedy_type')):>9} {short:>9} "
            f"{_x(r.get('plan_gain_proportional_slices')):>9}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,5,10,20", help="numbers of services, comma-separated (at most "
                                                             f"{len(SERVICES)})")
    parser.add_argument("--time-limit", type=float, default=60.0, help="the joint solve's limit in seconds, as "
                                                                       "compile's --time-limit (default 60)")
    parser.add_argument("--baseline-time-limit", type=float, help="each baseline solve's limit (default: "
                                                                  "--time-limit, as compile runs them)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if max(sizes) > len(SERVICES) or min(sizes) < 1:
        parser.error(f"sizes run from 1 to {len(SERVICES)}")
    baseline_limit_s = args.baseline_time_limit if args.baseline_time_limit is not None else args.time_limit
    print(f"fleet: {len(FLEET)} device types, {sum(n for _d, n in FLEET)} devices, {POWER_BUDGET_KW} kW budget; "
          f"services in {DTYPE}; joint solve limit {args.time_limit:g} s, baselines {baseline_limit_s:g} s",
          flush=True)
    warm_traces(max(sizes))
    rows = []
    print(HEAD, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            rows.append(bench(size, Path(tmp), args.time_limit, baseline_limit_s))
            print(line(rows[-1]) + (f"  ({rows[-1]['error']})" if "error" in rows[-1] else ""), flush=True)
    print("\nplan s: compile_services without baselines (cost every service's pools, one joint solve, emit each "
          "plan), wall; cpu s: the same in this process's CPU time (steadier on a shared machine); "
          "+base s: and then the baselines compile runs (service_baselines). vs greedy: the joint objective "
          "over the greedy-type baseline's (shortfall: what greedy leaves of it, 1 - 1/gain); vs slices: over "
          "proportional slices. Every model traced once before the first size.")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
