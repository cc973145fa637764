#!/usr/bin/env python
"""Write the Prometheus scrapes a compiled plan's engines would expose, for ``gimletc replan --metrics FOLDER``.

The engines are `compiler.replan.simulate`'s: each pool serves as the cost model predicts (no correction,
no noise unless ``--noise``), its requests sampled (Poisson counts, histograms drawn from the predicted
distributions). By default the traffic is the plan's own: each class at the rate plan.json predicts, so the
scrapes are what the plan expects to see and a replan on them moves nothing. ``--rates CLASS=R,...`` sends
other rates (requests/s; classes not named send none): the mix turned to documents, say, for which the
replan moves capacity. Written: ``--windows`` + 1 cumulative scrapes, ``--window`` apart (default 3 of 10
minutes, the replan's default window), as ``scrape-000.prom`` ...; each sample carries its time, so the
files' own times do not matter. Simulated from the cost model: predictions, not measurements.

    gimletc compile llama-3.1-8b --cluster examples/clusters/two_tier.yaml \
        --workload examples/replan/workload.yaml --out day/
    python tools/simulate_scrapes.py day/ --out day-scrapes/
    python tools/simulate_scrapes.py day/ --rates chat=1.5,docs=13.5 --out night-scrapes/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def parse_rates(text: str) -> dict[str, float]:
    """``chat=1.5,docs=13.5`` -> {"chat": 1.5, "docs": 13.5}; a malformed entry is an argparse error."""
    rates = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            rate = float(value) if sep and name else -1.0
        except ValueError:
            rate = -1.0
        if rate < 0:
            raise argparse.ArgumentTypeError(f"{item!r}: expected CLASS=REQUESTS_PER_S with a rate >= 0, e.g. "
                                             "chat=1.5,docs=13.5")
        rates[name.strip()] = rate
    return rates


def simulated_scrapes(plan_dir: str | Path, rates: dict[str, float] | None = None, *, windows: int = 3,
                      window_s: float = 600.0, noise: float = 0.0, seed: int = 0) -> list[str]:
    """The scrapes (Prometheus text) of the simulated engines of the plan in `plan_dir`, one before the first
    window and one after each; `rates` per class (requests/s; None: the plan's predicted rates)."""
    from compiler.compile_inputs import CompileInputs
    from compiler.driver import prepare
    from compiler.plan.checks import load_plan
    from compiler.ir.errors import BadInput
    from compiler.place.moves import base_key
    from compiler.replan.simulate import Deployment, SimClass, Truth

    plan = load_plan(plan_dir)
    inputs = CompileInputs.load(plan_dir)
    if inputs is None:
        raise BadInput(f"{plan_dir}: no report/inputs.json (compiled with --no-report?); compile it without "
                       "--no-report: the simulation costs the plan's pools from the inputs recorded there")
    prep = prepare(inputs.model, inputs.cluster, inputs.workload, power_budget_w=inputs.power_budget_w,
                   slo_ttft_ms=inputs.slo_ttft_ms, slo_tpot_ms=inputs.slo_tpot_ms, precision=inputs.precision(),
                   cost_budget_per_hour=inputs.cost_budget_per_hour, deployable=inputs.deployable,
                   calibration=inputs.calibration)
    w = prep.workload
    classes = [SimClass(c.name, c.input_len.mean, c.input_len.max, c.output_len.mean, c.output_len.max,
                        w.class_slo(c).ttft_ms / 1e3, w.class_slo(c).tpot_ms / 1e3, w.class_slo(c).percentile / 100)
               for c in w.classes]
    if rates is None:
        rates = {c.name: c.requests_per_s for c in plan.classes}
    unknown = sorted(set(rates) - {c.name for c in classes})
    if unknown:
        raise BadInput(f"--rates: no class {', '.join(unknown)} in {inputs.workload}; its classes are "
                       f"{', '.join(c.name for c in classes)}")
    sim = Deployment(plan, {base_key(o.key): o for o in prep.options}, classes, seed=seed)
    truth = Truth(noise=noise)
    texts = [sim.scrape()]
    for _ in range(windows):
        sim.step(rates, window_s, truth)
        texts.append(sim.scrape())
    return texts


def main(argv: list[str] | None = None) -> int:
    from compiler.cli.replan import duration_s
    from compiler.ir.errors import BadInput

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", help="the compiled plan directory (gimletc compile --out DIR)")
    ap.add_argument("--out", required=True, help="folder to write the scrapes to")
    ap.add_argument("--rates", type=parse_rates, default=None, metavar="CLASS=R,...",
                    help="requests/s per class (default: the rates plan.json predicts)")
    ap.add_argument("--windows", type=int, default=3, help="windows simulated (default 3)")
    ap.add_argument("--window", type=duration_s, default=600.0, help="each window's length (default 10m)")
    ap.add_argument("--noise", type=float, default=0.0,
                    help="each window, move each pool's latencies and each class's rate by up to this share")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.windows < 1:
        ap.error("--windows: give 1 or more (a rate needs two scrapes)")
    try:
        texts = simulated_scrapes(args.plan, args.rates, windows=args.windows, window_s=args.window,
                                  noise=args.noise, seed=args.seed)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (out / f"scrape-{i:03d}.prom").write_text(text, encoding="utf-8")
    print(f"wrote {len(texts)} scrapes ({args.windows} windows of {args.window:g} s) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
