"""How wrong are predictions under load? The closed-loop serving model against measured serving sweeps.

Runs `cost_models.load.closed_loop` (what ``gimletc estimate --concurrency C``
predicts) on every row of ../shared/reference/serving_sweeps.csv: C
closed-loop clients on one replica of ``tp`` devices, fixed input and output
lengths, the row's engine (TensorRT-LLM, vLLM, SGLang) as its release runs by
default (`cost_models.engines.at_version`: overlap scheduling or not). Prints median APE of
TTFT and TPOT by model, device and engine group.

    .venv/bin/python tools/fidelity_sweeps.py [--fit] [--loo] [--loo-by model,device,engine] [--json] [--worst N]
                                              [--answered]

``--fit`` fits each engine's scheduler costs (`cost_models.engines.Engine`: step_overhead_s,
block_overhead_s, op_overhead_s, seq_overhead_s, request_overhead_s, and the closed-loop admission_fraction and
sync_fraction; bounds in `params`), and the efficiencies the engines' kernels reach on these GPUs (compute_eff,
mem_eff and fp8_compute_eff, one set for all engines, the best of `KERNEL_EFFS`), with the shared fitter
(`compiler.calibrate.fit.fit_fields`), and prints them to paste into cost_models/engines.py. ``--loo`` reports
leave-one-group-out error: each model x device x engine group is predicted with everything fitted on the other
groups only; ``--loo-by model,device,engine`` leaves every group of one model (one device, one engine) out at
once, the test of a model, GPU or engine the fit never saw, and names the worst of them. The fit has three levels: the step costs (per step, per block, per call, per running sequence) are
shared by all engines, fitted on all rows; each engine's front end and admission are fitted on its own rows; the
wave share of the engines that mix prefill into decode steps (TensorRT-LLM, vLLM) is one, fitted on their rows
together, and SGLang, which does not, keeps waves whole ([Note: waves] in cost_models/engines.py). Only this file's
rows are used: the other rows of its source are held out to measure the model (see
../shared/reference/serving_sweeps.md). On two cores ``--fit`` takes about 4 minutes and ``--loo`` about 31
minutes more (every set of efficiencies is fitted per held-out group).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_CSV = REPO.parent / "shared" / "reference" / "serving_sweeps.csv"
ENGINE_OF = {"trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}


def step_params():
    """What the step time depends on, shared by every engine (CUDA graphs, kernel launches, sampling on the GPU):
    fitted once on all rows, with physical bounds (lower bounds stand for "none")."""
    from compiler.calibrate.fit import Param

    return (Param("step_overhead_s", 1e-5, 20e-3, grid_lo=1e-4),  # host time per step: 0.1-20 ms
            Param("block_overhead_s", 1e-7, 100e-6, grid_lo=1e-6),  # per block per step: up to 0.1 ms
            Param("op_overhead_s", 1e-9, 5e-6, grid_lo=1e-8),  # per call per step: up to a kernel launch, 5 us
            Param("seq_overhead_s", 1e-8, 200e-6, grid_lo=1e-7))  # per running sequence per step: up to 0.2 ms


def engine_params():
    """What differs between engines' schedulers and front ends: fitted per engine."""
    from compiler.calibrate.fit import Param

    return (Param("request_overhead_s", 1e-4, 1.0, grid_lo=1e-3),  # front end: up to a second
            Param("admission_fraction", 0.01, 1.0, grid_lo=0.05))  # closed loop: wait for the next completion


def wave_params():
    """The closed-loop wave share of engines that mix prefill into decode steps: one for all of them, fitted on
    their rows together ([Note: waves] in cost_models/engines.py; an engine that does not mix keeps waves whole)."""
    from compiler.calibrate.fit import Param

    return (Param("sync_fraction", 0.01, 1.0, grid_lo=0.05),)  # a share in (0, 1]


def params():
    return step_params() + engine_params() + wave_params()


def load_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def group(row: dict) -> tuple[str, str, str]:
    return row["model"], row["device"], row["backend"]


def devices(row: dict) -> int:
    """The devices the row ran on: its ``tp``, except where the source multiplied it by the expert parallelism.

    The 30 GPT-OSS-120B / H200 / TensorRT-LLM rows whose id names ``tp2_ep2``,
    ``tp4_ep4`` and ``tp8_ep8`` carry tp 4, 16 and 64 (the source's
    ``tp_size``, with ``moe_tp_size`` x ``moe_ep_size`` = ``tp_size``). They ran
    on 2, 4 and 8 GPUs, experts spread over the same GPUs as attention: at each
    concurrency their TPOT is within 3.3% of the ``tpN_ep1`` rows of the same N
    (for example ``tp2_ep2`` c8 6.84 ms, ``tp2_ep1`` c8 6.83 ms, ``tp4_ep1`` c8
    6.05 ms), where 4 and 16 GPUs would be far faster.
    """
    tp = int(row["tp"])
    named = re.search(r"_tp(\d+)_ep(\d+)_\d+$", row["id"])
    if named and int(named[1]) * int(named[2]) == tp and int(named[2]) > 1:
        return int(named[1])
    return tp


def clients(row: dict) -> int:
    """The row's closed-loop clients: its ``concurrency``, except where that holds a batch size.

    The 5 GPT-OSS-120B / H100 / TensorRT-LLM rows name c160 to c384 in their id (the source's
    ``silicon_concurrency`` says the same) and carry 40 to 160, the source's ``batch_size``. They ran the named
    number: with only the batch size running, the rest would wait a whole request (about 60 s) for a slot, where
    they measure 1.3 to 2.3 s to the first token, and TPOT would be a third of the 47 to 60 ms measured.
    """
    named = re.search(r"_c(\d+)_", row["id"])
    return max(int(row["concurrency"]), int(named[1]) if named else 0)


#: The kernel efficiencies (compute_eff, mem_eff, fp8_compute_eff) the fit tries for the engines on NVIDIA GPUs: the
#: family's derate (0.7 each, fitted on ../shared/reference/measurements.csv) and steps of 0.1 above it, and for FP8
#: matmuls (a share of the FP8 peak, twice the BF16 one on Hopper) 0.7 and steps of 0.1 below it. Each set costs every
#: row's steps again (`physics`); the engine costs are fitted at each, and the set whose fit scores best is kept.
KERNEL_EFFS = tuple((c, m, f) for c in (0.7, 0.8, 0.9) for m in (0.7, 0.8, 0.9) for f in (0.4, 0.5, 0.6, 0.7))


def physics(rows: list[dict], kernels: tuple[float, float, float] | None = None) -> list:
    """Each row's engine-independent `LoopSteps` (the step times on the device): costed once per row, with the
    engine's kernel efficiencies, or `kernels` (compute_eff, mem_eff, fp8_compute_eff) instead."""
    from compiler.cost.deployment import deployment
    from compiler.driver import block_graph, stored_precision
    from compiler.ir.precision import Precision
    from cost_models.derates import derate_for
    from cost_models.load import RequestShape, loop_steps

    graphs: dict = {}
    precisions: dict = {}
    adjust = None if kernels is None else (lambda d: replace(d, compute_eff=kernels[0], mem_eff=kernels[1],
                                                             fp8_compute_eff=kernels[2]))
    out = []
    for r in rows:
        if r["model"] not in graphs:
            graphs[r["model"]] = block_graph(r["model"])
        key = (r["model"], r["dtype"])
        if key not in precisions:
            precisions[key] = stored_precision(r["model"], Precision.of(r["dtype"]))
        tp = devices(r)
        dep = deployment(r["device"], tp, tp, 1, precisions[key], ENGINE_OF[r["backend"]], adjust)
        shape = RequestShape(int(r["input_len"]), int(r["output_len"]))
        family = derate_for(dep.device.family)  # the engine's own overheads are what the fit varies
        out.append((loop_steps(graphs[r["model"]], dep, clients(r), shape), family))
    return out


def row_engine(row: dict, engines: dict):
    """The row's engine as its release runs by default (`cost_models.engines.at_version`)."""
    from cost_models.engines import at_version

    return at_version(engines[ENGINE_OF[row["backend"]]], row["backend_version"])


def predict(steps, family, engine) -> tuple[float, float]:
    """(TTFT ms, TPOT ms) of one row's steps under `engine` on a device of derate `family`."""
    from cost_models.load import assemble

    loop = assemble(steps, engine, family)
    return loop.ttft_s * 1e3, loop.tpot_s * 1e3


def errors(rows: list[dict], phys: list, engines: dict) -> list[dict]:
    out = []
    for r, (steps, family_step) in zip(rows, phys):
        ttft, tpot = predict(steps, family_step, row_engine(r, engines))
        m_ttft, m_tpot = float(r["ttft_ms"]), float(r["tpot_ms"])
        out.append({"id": r["id"], "group": " / ".join(group(r)), "tp": devices(r), "concurrency": clients(r),
                    "input_len": r["input_len"], "output_len": r["output_len"],
                    "ttft_ms": m_ttft, "ttft_pred_ms": ttft, "ttft_ape": abs(ttft - m_ttft) / m_ttft * 100,
                    "tpot_ms": m_tpot, "tpot_pred_ms": tpot, "tpot_ape": abs(tpot - m_tpot) / m_tpot * 100})
    return out


def _loss(rows: list[dict], phys: list, engines: dict) -> float:
    """Mean |log| error of TTFT plus twice that of TPOT (TPOT is what physics pins down)."""
    loss = 0.0
    for r, (steps, family) in zip(rows, phys):
        ttft, tpot = predict(steps, family, row_engine(r, engines))
        loss += abs(math.log(ttft / float(r["ttft_ms"]))) + 2 * abs(math.log(tpot / float(r["tpot_ms"])))
    return loss / len(rows)


#: Rounds of the two-level fit: the shared step costs are fitted given each engine's own, then those given the
#: shared ones; a second round lets each level see the other's fit rather than its starting values.
ROUNDS = 2


def fit(rows: list[dict], grid: dict, start: dict) -> tuple[dict, tuple[float, float]]:
    """Engines fitted on `rows`, and the kernel efficiencies they run at: each set of `grid` (`KERNEL_EFFS` ->
    `physics` of `rows`) scored by a one-round fit of the engine costs, the best set's costs fitted in full."""
    score = {k: _loss(rows, phys, _fit_costs(rows, phys, start, rounds=1, restarts=1)) for k, phys in grid.items()}
    best = min(grid, key=lambda k: (score[k], k))
    engines = _fit_costs(rows, grid[best], start)
    names = {ENGINE_OF[r["backend"]] for r in rows}
    return {n: replace(e, compute_eff=best[0], mem_eff=best[1], fp8_compute_eff=best[2], kernels_on="nvidia")
            if n in names else e
            for n, e in engines.items()}, best


def _fit_costs(rows: list[dict], phys: list, start: dict, rounds: int = ROUNDS, restarts: int = 2) -> dict:
    """Engine costs fitted on `rows` in three levels, alternated `rounds` times: the step costs shared by all
    engines, each engine's own, and the wave share of the engines that mix prefill into decodes. Each engine's own
    costs start at their lower bounds ("none"), so a held-out group's fit does not start from values fitted on it."""
    from compiler.calibrate.fit import fit_fields

    names = sorted({ENGINE_OF[r["backend"]] for r in rows})
    engines = {n: replace(start[n], **{p.name: p.lo for p in engine_params() + wave_params()}) for n in names}
    mixing = [n for n in names if engines[n].mixes_prefill]

    def subset(keep) -> tuple[list[dict], list]:
        idx = [i for i, r in enumerate(rows) if keep(ENGINE_OF[r["backend"]])]
        return [rows[i] for i in idx], [phys[i] for i in idx]

    for _ in range(rounds):
        shared = fit_fields(lambda c: (_loss(rows, phys, {n: replace(engines[n], **_fields(c, step_params()))
                                                          for n in names}), c),
                            engines[names[0]], step_params(), grid_points=4, restarts=restarts)
        engines = {n: replace(engines[n], **_fields(shared, step_params())) for n in names}
        for n in names:
            sub_rows, sub_phys = subset(lambda name, n=n: name == n)
            engines[n] = fit_fields(lambda c, n=n: (_loss(sub_rows, sub_phys, {n: c}), c), engines[n],
                                    engine_params(), grid_points=4, restarts=restarts)
        if mixing:
            sub_rows, sub_phys = subset(lambda name: name in mixing)
            waves = fit_fields(lambda c: (_loss(sub_rows, sub_phys, {n: replace(engines[n], **_fields(c, wave_params()))
                                                                     for n in mixing}), c),
                               engines[mixing[0]], wave_params(), grid_points=6, restarts=restarts)
            engines.update({n: replace(engines[n], **_fields(waves, wave_params())) for n in mixing})
    return {**start, **engines}


def _fields(engine, fitted) -> dict:
    return {p.name: getattr(engine, p.name) for p in fitted}


#: What a held-out fold leaves out: one model x device x engine group, or every group of one model, device or engine.
HOLD_OUT = {"group": group, "model": lambda r: group(r)[0], "device": lambda r: group(r)[1],
            "engine": lambda r: ENGINE_OF[r["backend"]]}


def held_out(rows: list[dict], grid: dict, key) -> list[dict]:
    """Each row predicted with everything fitted on the rows whose `key` differs. An engine left out entirely
    keeps its kernels at the fitted efficiencies and its own costs at the median of the fitted engines' (it has
    no rows to fit them on; its shipped values were fitted on them)."""
    from cost_models.engines import ENGINES

    out: list[dict] = []
    for value in sorted({key(r) for r in rows}):
        train = [i for i, r in enumerate(rows) if key(r) != value]
        test = [i for i, r in enumerate(rows) if key(r) == value]
        fitted, kernels = fit([rows[i] for i in train], {k: [p[i] for i in train] for k, p in grid.items()},
                              dict(ENGINES))
        seen = sorted({ENGINE_OF[rows[i]["backend"]] for i in train})
        for name in sorted({ENGINE_OF[rows[i]["backend"]] for i in test}) if seen else ():
            if name not in seen:
                prior = {p.name: statistics.median(getattr(fitted[n], p.name) for n in seen) for p in engine_params()}
                fitted[name] = replace(fitted[name], **prior, compute_eff=kernels[0], mem_eff=kernels[1],
                                       fp8_compute_eff=kernels[2], kernels_on="nvidia")
        out += errors([rows[i] for i in test], [grid[kernels][i] for i in test], fitted)
    return out


def summary(errs: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for e in errs:
        groups.setdefault(e["group"], []).append(e)
    by = {g: {"rows": len(v), "ttft_median_ape": statistics.median(x["ttft_ape"] for x in v),
              "tpot_median_ape": statistics.median(x["tpot_ape"] for x in v)} for g, v in sorted(groups.items())}
    return {"rows": len(errs), "ttft_median_ape": statistics.median(e["ttft_ape"] for e in errs),
            "tpot_median_ape": statistics.median(e["tpot_ape"] for e in errs), "groups": by}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--fit", action="store_true", help="fit each engine on all its rows and print the values")
    parser.add_argument("--loo", action="store_true", help="leave-one-group-out error (fits per held-out group)")
    parser.add_argument("--loo-by", default="", metavar="KEYS",
                        help="comma-separated among model, device, engine: leave every group of one model (device, "
                             "engine) out at once; the fit is judged on the worst of them")
    parser.add_argument("--worst", type=int, default=5, help="worst groups to list (default 5)")
    parser.add_argument("--answered", action="store_true",
                        help="count the rows `gimletc estimate` answers and refuses (`tools/fidelity.py --answered`)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from cost_models.engines import ENGINES

    rows = load_rows(args.csv)
    if args.answered:
        from fidelity import print_answered

        print_answered([dict(r, file=args.csv.name) for r in rows], {})
        return
    keys = [k for k in args.loo_by.split(",") if k]
    if bad := [k for k in keys if k not in HOLD_OUT]:
        parser.error(f"--loo-by: {', '.join(bad)} is not one of {', '.join(HOLD_OUT)}")
    phys = physics(rows)
    engines = dict(ENGINES)
    report: dict = {}
    grid = {k: physics(rows, k) for k in KERNEL_EFFS} if args.fit or args.loo or keys else {}
    if args.fit:
        engines, kernels = fit(rows, grid, engines)
        phys = grid[kernels]
        report["fitted"] = {name: {p.name: getattr(engines[name], p.name) for p in params()
                                   if p not in wave_params() or engines[name].mixes_prefill}
                            | {"compute_eff": kernels[0], "mem_eff": kernels[1], "fp8_compute_eff": kernels[2]}
                            for name in sorted({ENGINE_OF[r["backend"]] for r in rows})}
    report["in_sample"] = summary(errors(rows, phys, engines))
    for key in (["group"] if args.loo else []) + keys:
        report[f"leave_one_{key}_out"] = summary(held_out(rows, grid, HOLD_OUT[key]))
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
        return
    if "fitted" in report:
        for name, values in report["fitted"].items():
            print(f"{name}: " + ", ".join(f"{k}={v:.4g}" for k, v in values.items()))
    for key in ("in_sample", *(f"leave_one_{k}_out" for k in HOLD_OUT)):
        if key not in report:
            continue
        s = report[key]
        print(f"\n{key.replace('_', ' ')}: {s['rows']} rows, median APE TTFT {s['ttft_median_ape']:.1f}%, "
              f"TPOT {s['tpot_median_ape']:.1f}%")
        for g, v in s["groups"].items():
            print(f"  {g:50s} {v['rows']:4d} rows  TTFT {v['ttft_median_ape']:6.1f}%  TPOT {v['tpot_median_ape']:6.1f}%")
        worst = sorted(s["groups"].items(), key=lambda kv: -(kv[1]["ttft_median_ape"] + kv[1]["tpot_median_ape"]))
        print("  worst: " + "; ".join(f"{g} (TTFT {v['ttft_median_ape']:.0f}%, TPOT {v['tpot_median_ape']:.0f}%)"
                                       for g, v in worst[:args.worst]))
    judged = [(k, report[f"leave_one_{k}_out"]) for k in keys]
    if judged:
        k, s = max(judged, key=lambda kv: kv[1]["ttft_median_ape"] + kv[1]["tpot_median_ape"])
        print(f"\nthe fit is judged on the worst held-out view: leave one {k} out, TTFT {s['ttft_median_ape']:.1f}%, "
              f"TPOT {s['tpot_median_ape']:.1f}%")


if __name__ == "__main__":
    main()
