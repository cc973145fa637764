"""``gimletc replan DIR --metrics SRC``: re-plan a running deployment from its engines' metrics, with the fewest
moves (`compiler.replan`). Advisory: it prints what it would change; ``--out DIR2`` writes the next plan,
``--apply`` acts on a local deployment (`compiler.deploy.local`)."""

from __future__ import annotations

import argparse
import re
import sys
import time

from compiler.cli import options
from compiler.replan.settings import COOLDOWN_GAIN, COOLDOWN_WINDOWS, FORECAST_WEIGHT, MIN_GAIN, SLACK

DESCRIPTION = (
    "Read the running plan DIR and its engines' Prometheus metrics (vllm:/sglang: request counts, TTFT and TPOT "
    "histograms, prompt and output length histograms, queue gauges) from URLs, saved scrapes or folders of them. "
    "Over the last --window: recognise the workload's request classes by prompt length, measure each class's "
    "arrivals and lengths and each pool's TTFT and TPOT against the plan's cost model (correction factors, with "
    "their sample sizes); forecast the next window's rates (Holt's smoothing with trend, or the last window's "
    "where that replayed better); re-cost the "
    "measured workload, correct it, and re-solve the placement from the running one with the fewest moves. Prints "
    "the diff (pools scaled, added, removed; routing shares; the predicted gain and its standard error) and "
    "whether it clears the hysteresis (--min-gain and two standard errors, the forecast's replayed error among "
    "them; a move back of a change made in the last --cooldown windows needs --cooldown-gain more). Advisory by "
    "default: --out DIR2 writes the next plan directory with its manifests, --apply starts and stops the engines of a local deployment "
    "(gimletc deploy DIR --local). Every objective value and latency it prints beside a measurement is a "
    "prediction.")


def duration_s(text: str) -> float:
    """``10m`` / ``600s`` / ``1h`` / ``600`` -> seconds.

    >>> duration_s("10m"), duration_s("90s"), duration_s("1.5h"), duration_s("600")
    (600.0, 90.0, 5400.0, 600.0)
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(h|m|s)?\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration > 0 such as 10m, 600s or 1h")
    return float(m.group(1)) * {"h": 3600.0, "m": 60.0, "s": 1.0, None: 1.0}[m.group(2)]


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.1, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to below 1 (0.1 is 10%), got {text}")
    return value




def register(sub) -> None:
    p = sub.add_parser("replan", help="re-plan a running deployment from its engines' metrics, with the fewest moves",
                       description=DESCRIPTION)
    p.add_argument("plan", metavar="DIR", help="the running plan's directory (gimletc compile --out DIR)")
    p.add_argument("--metrics", action="append", required=True, metavar="URL|FILE|FOLDER",
                   help="engine metrics: an http(s) /metrics URL (scraped twice, --scrape-interval apart), a saved "
                        "scrape, or a folder of them; repeat for several engines; POOL=SRC names the pool of a "
                        "source whose samples name none")
    p.add_argument("--window", type=duration_s, default=600.0, metavar="DURATION",
                   help="how much of the latest metrics to measure over, e.g. 10m, 600s, 1h (default 10m)")
    p.add_argument("--max-moves", type=options.nonneg_int, default=None, metavar="N",
                   help="start or stop at most N engine replicas (a change of shape counts once; default: no limit)")
    p.add_argument("--min-gain", type=fraction, default=MIN_GAIN, metavar="FRACTION",
                   help=f"hysteresis: propose moves only for a predicted gain of at least this much, and above two "
                        f"standard errors of the measurements (default {MIN_GAIN:g})")
    p.add_argument("--cooldown", type=options.nonneg_int, default=COOLDOWN_WINDOWS, metavar="N",
                   help=f"anti-flap: for N windows after a replan changed a shape, moving that shape back needs "
                        f"--min-gain plus --cooldown-gain (default {COOLDOWN_WINDOWS}; 0: off; the changes are read "
                        "from DIR/report/replan.json, or a services plan's DIR/replan.json)")
    p.add_argument("--cooldown-gain", type=fraction, default=COOLDOWN_GAIN, metavar="FRACTION",
                   help=f"the extra predicted gain a move back within --cooldown needs (default {COOLDOWN_GAIN:g})")
    p.add_argument("--forecast-error-weight", type=options.nonneg_float, default=FORECAST_WEIGHT, metavar="W",
                   help=f"anti-flap: the gain's standard error includes each class's forecast rate moved by W times "
                        f"the one-step error its forecast replayed on the windows read (default {FORECAST_WEIGHT:g}; "
                        "0: off)")
    p.add_argument("--move-slack", type=fraction, default=SLACK, metavar="FRACTION",
                   help=f"give up at most this much of the reachable objective for fewer moves (default {SLACK:g})")
    p.add_argument("--forecast", choices=("auto", "holt", "none"), default="auto",
                   help="the next window's rates: holt (exponential smoothing with trend over the windows the "
                        "metrics hold), none (the last window's), or auto (default: per class, whichever of the two "
                        "had the smaller one-step error replayed on those windows; the last window's with fewer "
                        "than three)")
    p.add_argument("--scrape-interval", type=duration_s, default=60.0, metavar="DURATION",
                   help="seconds between the two scrapes of a URL source (default 60s)")
    p.add_argument("--out", metavar="DIR2", help="write the next plan directory here (plan.json, k8s/ manifests, "
                                                 "workload.yaml, report/replan.json, and autoscale/: a KEDA "
                                                 "ScaledObject per pool on its engines' queue and, where the pools "
                                                 "map to it, the Dynamo planner's config, within the power budget)")
    p.add_argument("--apply", action="store_true",
                   help="act: start and stop the engines of the local deployment of DIR (gimletc deploy DIR --local) "
                        "to match the next plan (needs --out)")
    p.add_argument("--cluster", metavar="FILE", help="cluster file (default: the compile's, report/inputs.json)")
    p.add_argument("--workload", metavar="FILE", help="workload file (default: the compile's, report/inputs.json)")
    options.add_calibration(p)
    p.add_argument("--time-limit", type=options.positive_float, default=60.0, metavar="S",
                   help="solver time limit per solve, seconds (default 60)")
    options.add_json(p, "the replan (measurements, factors, forecast, decision and diff)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from compiler.cli.console import check_out_dir
    from compiler.ir.errors import BadInput
    from compiler.replan.metrics import load, merged
    from compiler.replan.replan import replan

    if args.apply and not args.out:
        raise BadInput("--apply: give --out DIR2 too: the engines it starts run the plan written there")
    if args.out and Path(args.out).resolve() == Path(args.plan).resolve():
        raise BadInput(f"--out {args.out}: is the running plan's directory; give another one (DIR2): the running "
                       "plan stays what the deployment and the next replan compare against")
    from compiler.deploy.services import is_services_dir

    if is_services_dir(args.plan):  # several models on one fleet (compile --services)
        return run_services(args)
    if args.apply:
        from compiler.deploy.apply import check_running

        check_running(args.plan, args.out)
    inputs = options.plan_inputs(args, required=True)
    if args.calibration is not None:
        import dataclasses

        inputs = dataclasses.replace(inputs, calibration=args.calibration)
    out = check_out_dir(args.out) if args.out else None
    snaps = _snapshots(args, load, merged)
    settings = settings_of(args)
    progress = (lambda m: print(f"gimletc: {m}", file=sys.stderr)) if not (args.quiet or args.json) else None
    with tempfile.TemporaryDirectory(prefix="gimletc-replan-") as scratch:
        if out is not None:
            from compiler.cli.status import clear
            from compiler.replan.write import OUTPUTS

            clear(out, OUTPUTS)
        r = replan(args.plan, inputs, snaps, settings, workload_dir=out or Path(scratch), progress=progress)
        wrote, scaling = [], None
        if out is not None:
            from compiler.replan.write import autoscalers, write_replan_dir

            wrote = write_replan_dir(r, inputs, out)
            scaling = autoscalers(r)
    applied = None
    if args.apply:
        from compiler.deploy.apply import apply_local

        applied = apply_local(args.plan, out, act=r.decision.act, progress=progress)
    if args.json:
        from compiler.replan.write import summary_json

        sys.stdout.write(summary_json(r))
    else:
        sys.stdout.write(render(r, out, wrote, applied, scaling))
    return 0


def run_services(args: argparse.Namespace) -> int:
    """``gimletc replan DIR`` of a services plan ([Note: replanning many services] in compiler/replan/services.py):
    every service's engines read, each service's demand forecast, replicas moved between services."""
    import json
    import tempfile
    from pathlib import Path

    from compiler.cli.console import check_out_dir
    from compiler.ir.errors import BadInput
    from compiler.replan.metrics import load, merged
    from compiler.replan.services import replan_services

    unsupported = [flag for flag, given in (("--apply", args.apply), ("--cluster", args.cluster),
                                            ("--workload", args.workload), ("--calibration", args.calibration))
                   if given]
    if unsupported:
        raise BadInput(f"{', '.join(unsupported)}: not for a services plan yet; each service's folder records the "
                       "inputs it was compiled from")
    if args.out and Path(args.out).resolve() == Path(args.plan).resolve():
        raise BadInput(f"--out {args.out}: is the running plan's directory; give another one (DIR2)")
    out = check_out_dir(args.out) if args.out else None
    snaps = _snapshots(args, load, merged)
    settings = settings_of(args)
    progress = (lambda m: print(f"gimletc: {m}", file=sys.stderr)) if not (args.quiet or args.json) else None
    with tempfile.TemporaryDirectory(prefix="gimletc-replan-") as scratch:
        r = replan_services(args.plan, snaps, settings, workload_dir=out or Path(scratch), progress=progress)
        if out is not None:
            from compiler.compile_inputs import CompileInputs
            from compiler.services import write_services

            first = CompileInputs.load(Path(args.plan) / r.services[0].name)
            write_services(r.result, out, cluster=first.cluster, power_budget_w=first.power_budget_w,
                           calibration=first.calibration, deployable=first.deployable)
            (out / "replan.json").write_text(json.dumps(r.summary(), indent=1) + "\n", encoding="utf-8")
    if args.json:
        sys.stdout.write(json.dumps(r.summary(), indent=1) + "\n")
        return 0
    d = r.decision
    lines = [f"replan of {len(r.services)} services ({d.objective}); rates measured and forecast (predictions "
             "of the corrected cost model beside them):"]
    for c in r.services:
        lines.append(f"  {c.name}: measured {c.measured_requests_per_s:.3g} req/s, forecast "
                     f"{c.forecast_requests_per_s:.3g} req/s; devices {_devices_text(c.devices_before)} -> "
                     f"{_devices_text(c.devices_after)}")
    lines.append(f"{'MOVE' if d.act else 'STAY'}: {d.reason} ({d.moves} replica move(s))")
    if out is not None:
        lines.append(f"wrote {out}/ (services.json, summary.md, a plan folder per service, replan.json)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def settings_of(args: argparse.Namespace):
    """What the flags say a replan may move and what it takes to move (`compiler.replan.replan.Settings`)."""
    from compiler.replan.replan import Settings

    return Settings(window_s=args.window, max_moves=args.max_moves, min_gain=args.min_gain, slack=args.move_slack,
                    forecast=args.forecast, time_limit_s=args.time_limit, cooldown_windows=args.cooldown,
                    cooldown_gain=args.cooldown_gain, forecast_weight=args.forecast_error_weight)


def _devices_text(devices: dict) -> str:
    return ", ".join(f"{n} {t}" for t, n in devices.items()) or "none"


def _snapshots(args: argparse.Namespace, load, merged) -> list:
    """Every source's snapshots; a URL is scraped twice, --scrape-interval apart (counters need two)."""
    urls = [s for s in args.metrics if "://" in s]
    snaps = load(args.metrics)
    if urls:
        time.sleep(args.scrape_interval)
        snaps = merged(snaps + load(urls))
    return snaps


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def render(r, out, wrote: list[str], applied, scaling=None) -> str:
    """The replan as text: measurements, factors, decision, diff (plain columns: the same bytes every run)."""
    obs, d = r.observation, r.decision
    lines = [f"replan of {r.plan_dir}: {len(r.sources)} scrape(s), window {obs.seconds:.0f} s "
             f"({len(r.classes)} classes, {len(obs.pools)} pools)", "",
             "classes (measured over the window; forecast for the next window is a prediction):",
             _table(["class", "req/s", "forecast", "share", "+-", "prompt mean", "output mean"],
                    [[c.name, f"{c.measured_requests_per_s:.4g}", f"{c.forecast_requests_per_s:.4g}",
                      f"{c.share:.1%}", f"{c.share_se:.1%}", f"{c.input_mean:.0f}", f"{c.output_mean:.0f}"]
                     for c in r.classes]), r.forecast, "",
             "pools: measured mean latency / the plan's model at the measured load (prediction) / corrected "
             "prediction, ms; factor (requests measured); the TTFT factor is fitted to the service the engines "
             "measure (basis: prefill = admission to first token, ttft-queue = TTFT less the queue wait, ttft = "
             "TTFT with its queueing)",
             _table(["pool", "role", "device", "model util", "TTFT basis", "meas/pred/corr", "TTFT factor (n)",
                     "TPOT meas/pred/corr", "TPOT factor (n)", "throughput ratio"],
                    [[f.pool, f.role, f.device, f"{f.utilisation:.2f}", f.ttft.basis if f.ttft else "-", *_est(f.ttft),
                      *_est(f.tpot), "-" if f.throughput_ratio is None else f"{f.throughput_ratio:.2f}"]
                     for f in r.pools])]
    notes = [f"  {f.pool}: {f.note}" for f in r.pools if f.note]
    lines += notes
    queues = [f for f in r.pools if f.queue is not None]
    if queues:
        lines += ["queue wait before admission: measured mean +- s.e. / the queueing model's at the measured load "
                  "(prediction) / with the corrected service (prediction), ms; reported, not a factor",
                  _table(["pool", "measured", "+-", "model", "corrected", "measured/corrected"],
                         [[f.pool, _ms(f.queue.measured_s), _ms(f.queue.se_s), _ms(f.queue.predicted_s),
                           _ms(f.queue.corrected_s), f"{f.queue.ratio:.2f}"] for f in queues])]
    lines += ["", "correction factors (measured/modelled service time, the model's memory efficiency divided by "
              "'mem eff /' first; per shape, then per device type):",
              _table(["device", "shape", "mem eff /", "TTFT", "+-", "n", "TPOT", "+-", "n"],
                     [[f.device, f.shape or "(type)", f"{f.mem_eff_divisor:.3f}", f"{f.ttft:.3f}",
                       f"{f.ttft_rel_se:.1%}", f"{f.ttft_samples:.0f}", f"{f.tpot:.3f}", f"{f.tpot_rel_se:.1%}",
                       f"{f.tpot_samples:.0f}"] for f in r.factors]), ""]
    unit = d.quantity
    cur = "cannot serve it" if d.current_value is None else f"{d.current_value:.4g}"
    lines.append(f"objective {d.objective} ({unit}, predictions on the corrected costs): running placement {cur}, "
                 f"proposed {d.proposed_value:.4g} with {d.moves} move(s)"
                 + (f" (at most {d.max_moves})" if d.max_moves is not None else "")
                 + f", fresh compile {d.fresh_value:.4g} with {d.fresh_moves} move(s)")
    if d.gain is not None:
        lines.append(f"predicted gain {d.gain:+.1%} +- {d.gain_se:.1%} (one standard error); the proposal is "
                     f"{d.below_fresh:.1%} below the fresh compile's objective")
    lines += [f"decision: {d.reason}", ""]
    if r.changes:
        lines.append("pools (replicas per shape" + (", proposed but held" if not d.act else "") + "):")
        lines += [f"  {c.kind:8} {c.shape}: {c.before} -> {c.after}" for c in r.changes]
    if r.routes:
        lines.append("routing (share of each class's requests per shape" + (", proposed but held" if not d.act
                                                                             else "") + "):")
        lines += [f"  {x.cls} {x.side:6} {x.shape}: {x.before:.1%} -> {x.after:.1%}" for x in r.routes]
    if out is not None:
        lines.append(f"wrote {out}/ ({', '.join(wrote[:3])}, ...): the "
                     + ("proposed placement" if d.act else "running placement, re-routed, with corrected predictions"))
    if scaling is not None:
        _keda, ranges, planner, why = scaling
        if ranges:
            lines.append("autoscaling until the next replan (autoscale/keda: KEDA on each pool's engine queue; ranges "
                         "keep the power budget and inventory with every pool at its maximum):")
            lines += [f"  {x.pool}: {x.min_replicas}..{x.max_replicas} replicas (plan {x.replicas}), scale up above "
                      f"{x.waiting_per_replica} waiting per replica" for x in ranges]
        lines.append(f"Dynamo planner: autoscale/dynamo-planner.json (max_gpu_budget {planner['max_gpu_budget']})"
                     if planner is not None else f"Dynamo planner: none ({why})")
    if applied is not None:
        lines.append(applied)
    elif d.act:
        lines.append("advisory: nothing was changed; --out DIR2 --apply acts on a local deployment "
                     "(on Kubernetes: kubectl apply -k DIR2/k8s)")
    return "\n".join(lines) + "\n"


def _est(e) -> list[str]:
    if e is None:
        return ["-", "-"]
    return [f"{_ms(e.measured_s)}/{_ms(e.predicted_s)}/{_ms(e.corrected_s)}", f"{e.factor:.3f} ({e.samples:.0f})"]


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    fmt = "  " + "  ".join(f"{{:{w}}}" for w in widths)
    return "\n".join(fmt.format(*row).rstrip() for row in [header, *rows])
