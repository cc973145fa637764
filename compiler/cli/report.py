"""``gimletc report DIR``: draw a plan directory's pictures and timeline; and ``compile``'s report options and step.

[Note: the report in the background] What a user reads first waits for no picture. ``gimletc compile`` writes
``plan.json``, then ``report/summary.md``, ``report/report.json`` (the numbers behind the pictures, the frontier
among them) and ``report/inputs.json`` (`write`); once the plan directory is whole, it starts ``python -m
compiler.cli report DIR`` in a process of its own (`start`) and prints its summary. That process re-reads the
plan from disk (``plan.json``, the frontier from ``report.json``, the BlockGraph from the trace cache: JSON, no
pickle) and draws ``timeline.json``, ``roofline.png``, ``power.png`` and ``pareto.png`` with matplotlib
(`compiler.api.draw_report`), a few seconds after the compile has returned: in a folder of its own inside
``report/``, renamed into place when all are drawn, so the same inputs give the same bytes once it is done. Its
errors go to ``report/drawing.log`` (`DRAWING_LOG`), which is there while it draws and removed when it is done;
a failure leaves the traceback and the one-line error in it. ``--wait-for-report`` waits for it (tests and
scripts that read the pictures); ``gimletc report DIR`` draws them in the foreground, again or for the first
time (a plan compiled with ``--no-report`` gets the whole report). A directory compiled again while its pictures
are drawn gets none of them: ``report.json`` changed, and the new compile draws its own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from compiler.cli import options

#: TPOT targets of the report's frontier (`compiler.api.REPORT_POINTS`, repeated so --help loads nothing).
REPORT_POINTS = 3
#: Inside DIR/report/: the drawing's errors (`compiler.compile_inputs.REPORT_DIR`, repeated likewise).
REPORT_DIR, DRAWING_LOG = "report", "drawing.log"
#: What the drawing writes into DIR/report/ (`compiler.emit.report.draw`; pareto.png only with a frontier).
DRAWN = ("pareto.png", "roofline.png", "power.png", "timeline.json")
#: Seconds ``--wait-for-report`` waits for the drawing (a few, at most a minute, on a big plan).
WAIT_LIMIT_S = 600.0


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="draw a compiled plan's pictures and timeline (compile draws them in the background)",
        description="Draw DIR/report/'s timeline.json, roofline.png, power.png and pareto.png from DIR/plan.json "
                    "and the numbers in DIR/report/report.json, as gimletc compile does in a process of its own "
                    "after it has written plan.json and summary.md. A plan compiled with --no-report gets the "
                    "whole report (its frontier solved afresh when DIR/report/inputs.json records the inputs). "
                    "Errors also go to DIR/report/drawing.log.")
    p.add_argument("plan", metavar="DIR", help="plan directory written by gimletc compile --out DIR")
    p.add_argument("--report-points", type=options.nonneg_int, default=REPORT_POINTS, metavar="N",
                   help=f"TPOT targets of the frontier, when DIR has no report.json (default {REPORT_POINTS})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import traceback

    from compiler.api import draw_report

    root = Path(args.plan)
    log = root / REPORT_DIR / DRAWING_LOG
    try:
        files = draw_report(root, points=args.report_points)
    except Exception:
        _append(log, traceback.format_exc())
        raise
    log.unlink(missing_ok=True)
    if files:
        print(f"wrote {root / REPORT_DIR}/ ({', '.join(sorted(f.name for f in files))}). All metrics are "
              "predictions.")
    else:
        print(f"drew nothing: {root} was compiled again meanwhile, and that compile draws its own pictures")
    return 0


def _append(log: Path, text: str) -> None:
    try:
        with log.open("a", encoding="utf-8") as f:
            f.write(text)
    except OSError:
        pass  # no report folder (DIR is not a plan directory): the terminal has the error


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-report", action="store_true",
                   help="skip DIR/report/ (summary.md, report.json, and the pictures and timeline drawn after)")
    p.add_argument("--report-points", type=options.nonneg_int, default=REPORT_POINTS, metavar="N",
                   help=f"TPOT targets of the report's frontier, pareto.png (default {REPORT_POINTS}; 0 skips it)")
    p.add_argument("--wait-for-report", action="store_true",
                   help="wait for the report's pictures and timeline (drawn in the background after plan.json and "
                        "summary.md are written; errors in DIR/report/drawing.log) and fail if they fail")


def inputs_of(args: argparse.Namespace):
    """The compile's inputs as `compiler.api.CompileInputs` (absolute paths), from its flags."""
    from compiler.api import CompileInputs

    return CompileInputs.of(args.model, args.cluster, args.workload, power_budget_w=args.power_budget,
                            objective=args.objective, slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms,
                            dtype=args.dtype, kv_dtype=args.kv_dtype, time_limit_s=args.time_limit,
                            cost_budget_per_hour=getattr(args, "cost_budget", None),
                            deployable=getattr(args, "deployable", False),
                            calibration=getattr(args, "calibration", None))


def write(plan, result, args: argparse.Namespace, out: Path, timings, progress=None) -> list[str]:
    """Write ``out/report/``'s summary, numbers and inputs for the plan as written (the pictures: `start`);
    returns its files relative to `out`."""
    if args.no_report:
        return []
    from compiler.api import write_report

    with timings.step("report"):
        paths = write_report(plan, out, graph=result.prepared.graph, inputs=inputs_of(args),
                             points=args.report_points, progress=progress, compilation=result, pictures=False)
    return [str(p.relative_to(out)) for p in paths]


def start(out: Path) -> subprocess.Popen | None:
    """Start drawing the pictures of the whole plan directory `out` in a process of its own, its errors to
    ``report/drawing.log`` ([Note: the report in the background]); None, with the reason in that log, when it
    cannot start."""
    import compiler

    log = out / REPORT_DIR / DRAWING_LOG
    # the same compiler package as this process's, wherever it was imported from
    path = [str(Path(compiler.__file__).resolve().parent.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    try:
        with log.open("w", encoding="utf-8"), log.open("a", encoding="utf-8") as errors:  # emptied, then appended to
            return subprocess.Popen([sys.executable, "-m", "compiler.cli", "-q", "report", str(out.resolve())],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                                    env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
                                    start_new_session=True)  # outlives this process and its terminal
    except OSError as e:
        _append(log, f"gimletc: error: could not start drawing the report ({e}); `gimletc report {out}` draws it\n")
        return None


def wait(child: subprocess.Popen | None, out: Path) -> list[str]:
    """Wait for `start`'s drawing of `out` (at most `WAIT_LIMIT_S`); returns the files it drew, relative to `out`.
    Raises `GimletError` naming ``report/drawing.log`` when it failed."""
    from compiler.ir.errors import GimletError

    log = out / REPORT_DIR / DRAWING_LOG
    try:
        code = child.wait(WAIT_LIMIT_S) if child is not None else None
    except subprocess.TimeoutExpired:
        child.kill()
        code = child.wait()
        _append(log, f"gimletc: error: stopped after {WAIT_LIMIT_S:.0f} s\n")
    if code != 0:
        said = log.read_text(encoding="utf-8").strip().splitlines() if log.exists() else []
        raise GimletError(f"report: drawing the pictures failed ({said[-1] if said else f'exit code {code}'}); the "
                          f"whole message is in {log}; plan.json and report/summary.md are written; "
                          f"`gimletc report {out}` draws them again")
    return [f"{REPORT_DIR}/{name}" for name in DRAWN if (out / REPORT_DIR / name).is_file()]
