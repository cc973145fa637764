"""Benchmark `gimletc inspect`: cold (empty trace cache) and warm, per model.

Each run is a fresh `gimletc inspect MODEL --json` process, as a user runs it.
Baseline, measured in the same run: a bare interpreter start that imports
`compiler` (the floor every command pays). For the first model it also times
a full-depth trace (depth folding off) to show what folding saves.

    .venv/bin/python tools/bench_inspect.py [MODEL ...] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "deepseek-v3")


def _run(args: list[str], cache: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "GIMLETC_CACHE_DIR": cache})
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    return elapsed


def _full_depth_trace(model: str) -> float:
    code = ("import time,sys; from compiler.inputs.model_spec import resolve_model; from compiler.trace.export import trace, "
            "quiet_export_logs; from compiler.trace.partition import partition; t=time.perf_counter();\n"
            f"with quiet_export_logs(): partition(trace(resolve_model({model!r}), fold=False))\n"
            "print(time.perf_counter()-t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per model (median reported)")
    parser.add_argument("--full-depth", action="store_true", help="also time an unfolded trace of the first model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        base = statistics.median(_run(["-c", "import compiler"], cache) for _ in range(3))
        print(f"baseline (python -c 'import compiler'): {base:.2f} s")
        print(f"{'model':18} {'cold s':>8} {'warm s':>8} {'cold/base':>10} {'warm/base':>10} {'cold/warm':>10}")
        for model in args.models:
            cold = _run(["-m", "compiler.cli", "inspect", model, "--json"], cache)
            warm = statistics.median(_run(["-m", "compiler.cli", "inspect", model, "--json"], cache)
                                     for _ in range(args.repeat))
            print(f"{model:18} {cold:8.2f} {warm:8.2f} {cold / base:10.1f} {warm / base:10.1f} {cold / warm:10.1f}")
        if args.full_depth:
            model = args.models[0]
            full = _full_depth_trace(model)
            print(f"{model}: full-depth trace+partition (no folding) {full:.1f} s")


if __name__ == "__main__":
    main()
