"""Benchmark `gimletc compile` on the mixed example fleet: cold (empty trace cache) and warm.

Each run is a fresh `gimletc compile MODEL --cluster examples/clusters/mixed.yaml --workload
examples/workloads/chat.yaml --out DIR --json` process. Reported: wall time, the solver's own
time for the main solve (from the summary), status and gap from plan.json. Baseline measured in
the same run: a bare interpreter that imports `compiler`.

    .venv/bin/python tools/bench_compile.py [MODEL ...]
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


def _run(args: list[str], cache: str) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "GIMLETC_CACHE_DIR": cache})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    return time.perf_counter() - start, proc.stdout


def main() -> None:
    models = sys.argv[1:] or DEFAULT_MODELS
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        base = statistics.median(_run(["-c", "import compiler"], cache)[0] for _ in range(3))
        print(f"baseline (python -c 'import compiler'): {base:.2f} s")
        print(f"{'model':16} {'cold s':>7} {'warm s':>7} {'warm/base':>9} {'status':>8} {'gap %':>6} {'options':>7}")
        for model in models:
            cmd = ["-m", "compiler.cli", "compile", model, "--cluster", "examples/clusters/mixed.yaml",
                   "--workload", "examples/workloads/chat.yaml", "--out", out, "--json"]
            cold, _ = _run(cmd, cache)
            warm, stdout = _run(cmd, cache)
            plan = json.loads(stdout)
            s = plan["solver"]
            print(f"{model:16} {cold:7.1f} {warm:7.1f} {warm / base:9.0f} {s['status']:>8} {100 * s['gap']:6.3f} "
                  f"{s['options']:7d}")


if __name__ == "__main__":
    main()
