"""Benchmark `gimletc compile` on the mixed example fleet: cold (empty trace cache) and warm.

Each run is a fresh `gimletc compile MODEL --cluster examples/clusters/mixed.yaml --workload
examples/workloads/mix.yaml --no-onnx --out DIR --json` process (the goal: 405B within 15 s
cold, 70B within 10 s). Reported: wall time cold and warm, the cold run's time per pass (from
DIR/status.json), when plan.json was first written ([Note: plan first] in compiler/cli/compile.py), status
and gap from plan.json. Baseline measured in the same run: a bare interpreter that imports `compiler`; with
``--against REV``, also the cold compile of that revision (a git worktree, run in the same process), and the
ratios plan-first / REV-cold and everything / REV-cold.

    .venv/bin/python tools/bench_compile.py [--workload FILE] [--against REV] [--no-sensitivity] [MODEL ...]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mixtral-8x7b")


def _run(args: list[str], cache: str, cwd: Path = REPO) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "GIMLETC_CACHE_DIR": cache})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    return time.perf_counter() - start, proc.stdout


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
    print(f"{'model':16} {'cold s':>7} {'plan s':>7} {'warm s':>7} {'warm/base':>9} {'status':>8} {'gap %':>6} "
          f"{'options':>7}" + (f" {'old cold s':>10} {'plan/old':>8} {'all/old':>8}" if old_tree else ""))
    passes = []
    for model in args.models:
        cmd = ["-m", "compiler.cli", "compile", model, "--cluster", "examples/clusters/mixed.yaml",
               "--workload", args.workload, "--no-onnx", *(["--no-sensitivity"] if args.no_sensitivity else []),
               "--out", out, "--json"]
        old = None
        if old_tree is not None:
            with tempfile.TemporaryDirectory() as old_cache, tempfile.TemporaryDirectory() as old_out:
                old, _ = _run(cmd[:-3] + ["--out", old_out, "--json"], old_cache, cwd=old_tree)
        cold, _ = _run(cmd, cache)
        status = json.loads((Path(out) / "status.json").read_text())
        placed = status.get("marks_s", {}).get("plan.json written", float("nan"))
        passes.append((model, status["timings_s"]))
        warm, stdout = _run(cmd, cache)
        plan = json.loads(stdout)
        s = plan["solver"]
        line = (f"{model:16} {cold:7.1f} {placed:7.1f} {warm:7.1f} {warm / base:9.0f} {s['status']:>8} "
                f"{100 * s['gap']:6.3f} {s['options']:7d}")
        if old is not None:
            line += f" {old:10.1f} {placed / old:8.2f} {cold / old:8.2f}"
        print(line)
    print("\ncold run, seconds per pass:")
    for model, steps in passes:
        print(f"  {model:16} " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items() if v >= 0.05))


if __name__ == "__main__":
    main()
