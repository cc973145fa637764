"""Benchmark small work against the price of its imports: ratios from one run.

Three timings, each a fresh process, all in this run (this machine's speed varies; the ratios are the result):

- baseline: a bare ``python -c 'import torch, transformers, ortools'``, the imports any compile pays (median of 3);
- tiny: the README's quick-start compile, ``gimletc compile llama-tiny --cluster examples/tiny_split/cluster.yaml
  --workload examples/tiny_split/workload.yaml --out DIR``, with a cold (empty) trace cache; goal <= 4x baseline;
- infeasible: ``gimletc compile llama-3.1-8b --cluster examples/clusters/nvidia.yaml --workload
  examples/workloads/chat.yaml --power-budget 200W --out DIR``, warm (its trace cached by one run first), which
  must exit 3 from a lower bound; goal <= 1.5x baseline.

Also printed: the tiny compile's time per pass (its DIR/status.json). Nothing is asserted on time in tests
(STYLE.md: benchmarks print ratios); this prints PASS/MISS against the goals.

    .venv/bin/python tools/bench_small.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = ["compile", "llama-tiny", "--cluster", "examples/tiny_split/cluster.yaml", "--workload",
        "examples/tiny_split/workload.yaml"]
INFEASIBLE = ["compile", "llama-3.1-8b", "--cluster", "examples/clusters/nvidia.yaml", "--workload",
              "examples/workloads/chat.yaml", "--power-budget", "200W"]
GOALS = {"tiny": 4.0, "infeasible": 1.5}


def _timed(args: list[str], cache: str, expect: int = 0) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "GIMLETC_CACHE_DIR": cache, "PYTHONWARNINGS": "ignore"})
    took = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(args)} exited {proc.returncode}, expected {expect}:\n{proc.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each compile (the median is reported)")
    args = parser.parse_args()
    gimletc = ["-m", "compiler.cli"]
    with tempfile.TemporaryDirectory() as work:
        base = statistics.median(_timed(["-c", "import torch, transformers, ortools"], work) for _ in range(3))
        tiny, passes = [], {}
        for i in range(args.repeat):
            cache, out = f"{work}/cold-cache-{i}", f"{work}/tiny-{i}"
            tiny.append(_timed([*gimletc, *TINY, "--out", out], cache))
            passes = json.loads(Path(out, "status.json").read_text())["timings_s"]
        warm = f"{work}/warm-cache"
        _timed([*gimletc, *INFEASIBLE, "--out", f"{work}/x"], warm, expect=3)  # traces the 8B once
        infeasible = [_timed([*gimletc, *INFEASIBLE, "--out", f"{work}/x"], warm, expect=3)
                      for _ in range(args.repeat)]
    results = {"tiny": statistics.median(tiny), "infeasible": statistics.median(infeasible)}
    print(f"baseline (python -c 'import torch, transformers, ortools'): {base:.2f} s")
    for name, seconds in results.items():
        ratio = seconds / base
        verdict = "PASS" if ratio <= GOALS[name] else "MISS"
        print(f"{name:>10}: {seconds:6.2f} s = {ratio:.2f}x baseline (goal <= {GOALS[name]}x) {verdict}")
    print("tiny compile, seconds per pass: " + ", ".join(f"{k} {v:.2f}" for k, v in passes.items() if v >= 0.01))


if __name__ == "__main__":
    main()
