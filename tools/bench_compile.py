"""Benchmark `gimletc compile` on the mixed example fleet: cold (empty trace cache) and warm.

Each run is a fresh `gimletc compile MODEL --cluster examples/clusters/mixed.yaml --workload
examples/workloads/mix.yaml --no-onnx --out DIR --json` process (the goal: 405B within 15 s
cold, 70B within 10 s). Reported: wall time cold and warm, the cold run's time per pass (from
DIR/status.json), when plan.json was first written ([Note: plan first] in compiler/cli/compile.py), when the
report's pictures were drawn after the warm run returned ([Note: the report in the background] in
compiler/cli/report.py; each run waits for them before the next starts), status and gap from plan.json, and the
startup: the seconds a warm compile's own process spends importing (``python -X importtime``, its self times
summed; the forked children's lines dropped) and how many modules it imports. Baseline measured in the same run:
a bare interpreter that imports `compiler`; with ``--against REV``, also the cold compile of that revision (a git
worktree, run in the same process) and its warm compile's import time, and the ratios plan-first / REV-cold,
everything / REV-cold and import / REV-import.

    .venv/bin/python tools/bench_compile.py [--workload FILE] [--against REV] [--no-sensitivity] [MODEL ...]
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mixtral-8x7b")


#: `python -m compiler.cli ARGS` with the forked children's stderr (and so their -X importtime lines) dropped.
_MAIN_ONLY = ("import os, runpy, sys\n"
              "os.register_at_fork(after_in_child=lambda: os.dup2(os.open(os.devnull, os.O_WRONLY), 2))\n"
              "sys.argv = ['gimletc', *sys.argv[1:]]\n"
              "runpy.run_module('compiler.cli', run_name='__main__', alter_sys=True)\n")


def _run(args: list[str], cache: str, cwd: Path = REPO) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "GIMLETC_CACHE_DIR": cache})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    return time.perf_counter() - start, proc.stdout


def _drawn_s(out: str) -> float:
    """Seconds until the report's pictures of `out` are drawn (report/drawing.log gone; none before it existed)."""
    start = time.perf_counter()
    while (Path(out) / "report" / "drawing.log").exists():
        time.sleep(0.05)
    return time.perf_counter() - start


def _imports(cmd: list[str], cache: str, cwd: Path = REPO) -> tuple[float, int]:
    """(seconds, modules) the compile `cmd` (``-m compiler.cli ...``) imports in its own process."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", _MAIN_ONLY, *cmd[2:]], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "GIMLETC_CACHE_DIR": cache})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} under -X importtime failed:\n{proc.stderr[-3000:]}")
    self_us = [int(m.group(1)) for m in re.finditer(r"^import time:\s+(\d+) \|", proc.stderr, re.M)]
    return sum(self_us) / 1e6, len(self_us)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="examples/workloads/mix.yaml")
    parser.add_argument("--against", metavar="REV", help="also time a cold compile of this git revision")
    parser.add_argument("--no-sensitivity", action="store_true",
                        help="pass --no-sensitivity to every compile, this revision's and REV's: 'everything' without "
                             "the sensitivity analysis, whose moves differ between revisions (70B on the mix: 4 "
                             "at 897dd06, 40 since per-device counting)")
    parser.add_argument("models", nargs="*", default=list(DEFAULT_MODELS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out, \
            tempfile.TemporaryDirectory() as tree:
        if args.against:  # `python -m` puts the worktree first on sys.path: its own compiler package runs
            subprocess.run(["git", "worktree", "add", "--detach", tree, args.against], cwd=REPO, check=True,
                           capture_output=True)
        try:
            _bench(args, cache, out, Path(tree) if args.against else None)
        finally:
            if args.against:
                subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=REPO, capture_output=True)


def _bench(args, cache: str, out: str, old_tree: Path | None) -> None:
    base = statistics.median(_run(["-c", "import compiler"], cache)[0] for _ in range(3))
    print(f"baseline (python -c 'import compiler'): {base:.2f} s")
    print(f"{'model':16} {'cold s':>7} {'plan s':>7} {'warm s':>7} {'pics s':>7} {'warm/base':>9} {'status':>8} "
          f"{'gap %':>6} {'options':>7} {'import s':>8} {'modules':>7}"
          + (f" {'old cold s':>10} {'plan/old':>8} {'all/old':>8} {'old imp s':>9} {'imp/old':>7}" if old_tree else ""))
    passes = []
    for model in args.models:
        cmd = ["-m", "compiler.cli", "compile", model, "--cluster", "examples/clusters/mixed.yaml",
               "--workload", args.workload, "--no-onnx", *(["--no-sensitivity"] if args.no_sensitivity else []),
               "--out", out, "--json"]
        old = old_import = None
        if old_tree is not None:
            with tempfile.TemporaryDirectory() as old_cache, tempfile.TemporaryDirectory() as old_out:
                old_cmd = cmd[:-3] + ["--out", old_out, "--json"]
                old, _ = _run(old_cmd, old_cache, cwd=old_tree)
                _drawn_s(old_out)
                old_import, _ = _imports(old_cmd, old_cache, cwd=old_tree)  # warm: the cold run cached the trace
                _drawn_s(old_out)
        cold, _ = _run(cmd, cache)
        _drawn_s(out)
        status = json.loads((Path(out) / "status.json").read_text())
        placed = status.get("marks_s", {}).get("plan.json written", float("nan"))
        passes.append((model, status["timings_s"]))
        warm, stdout = _run(cmd, cache)
        pictures = warm + _drawn_s(out)
        imported, modules = _imports(cmd, cache)
        _drawn_s(out)
        plan = json.loads(stdout)
        s = plan["solver"]
        line = (f"{model:16} {cold:7.1f} {placed:7.1f} {warm:7.1f} {pictures:7.1f} {warm / base:9.0f} "
                f"{s['status']:>8} {100 * s['gap']:6.3f} {s['options']:7d} {imported:8.2f} {modules:7d}")
        if old is not None:
            line += (f" {old:10.1f} {placed / old:8.2f} {cold / old:8.2f} {old_import:9.2f} "
                     f"{imported / old_import:7.2f}")
        print(line)
    print("\ncold run, seconds per pass:")
    for model, steps in passes:
        print(f"  {model:16} " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items() if v >= 0.05))


if __name__ == "__main__":
    main()
