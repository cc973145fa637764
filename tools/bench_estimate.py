"""Benchmark `gimletc estimate` on a warm model: one process per call, and many calls in one process.

Baseline, measured in the same run: a bare interpreter that imports `compiler`.

    .venv/bin/python tools/bench_estimate.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _proc(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], capture_output=True, check=True, cwd=REPO, env=dict(os.environ))
    return time.perf_counter() - start


def main() -> None:
    cmd = ["-m", "compiler.cli", "estimate", "llama-3.1-70b", "--device", "nvidia-h100-sxm", "--count", "4",
           "--batch", "max", "--json"]
    _proc(cmd)  # warm the trace cache
    base = statistics.median(_proc(["-c", "import compiler"]) for _ in range(3))
    cli = statistics.median(_proc(cmd) for _ in range(5))
    from compiler.driver import estimate
    from compiler.ir.precision import Precision

    bf16 = Precision.of("bf16")

    graphs: dict = {}
    estimate("llama-3.1-70b", device="nvidia-h100-sxm", count=4, tp=None, pp=1, precision=bf16, input_len=1024,
             output_len=256, batch="max", concurrency=None, graphs=graphs)
    start = time.perf_counter()
    n = 200
    for i in range(n):
        estimate("llama-3.1-70b", device="nvidia-h100-sxm", count=4, tp=None, pp=1, precision=bf16, input_len=512 + i,
                 output_len=256, batch=1 + i % 64, concurrency=None, graphs=graphs)
    per_call = (time.perf_counter() - start) / n
    print(f"baseline (python -c 'import compiler'): {base:.3f} s")
    print(f"gimletc estimate, warm, one process per call: {cli:.3f} s ({cli / base:.1f}x baseline)")
    print(f"estimate in one process (scenarios path): {per_call * 1e3:.2f} ms per call ({per_call / base:.4f}x baseline)")


if __name__ == "__main__":
    main()
