"""The compiler's prefill/decode plan on real vLLM engines here, under closed-loop load, beside its predictions;
and the same plan on the reference runtime, as a ratio from one run.

    python tools/bench_deploy.py [--out DIR] [--concurrency 1,4,16] [--input-len 512] [--output-len 16]

Compiles llama-mini on examples/cpu_pd (or reuses DIR if it holds that plan), starts `gimletc deploy DIR
--local`, runs `gimletc bench` at each concurrency (4 x C requests each), stops the deployment, then runs
the same number of requests of the same lengths through the reference runtime (`compiler.runtime.engine`,
gloo workers) at the largest concurrency as one batch. Prints measured TTFT, TPOT and tokens/s beside the
plan's predictions (the cost model's, at the plan's solved operating point) and the ratio of the two
executors' tokens/s. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], cwd=REPO, capture_output=True, text=True,
                          **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/gimletc-bench-deploy")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=16)
    args = ap.parse_args()
    out = Path(args.out)
    levels = [int(c) for c in args.concurrency.split(",")]
    done = cli("compile", "llama-mini", "--cluster", "examples/cpu_pd/cluster.yaml", "--workload",
               "examples/cpu_pd/workload.yaml", "--out", str(out), "--no-report", "--no-sensitivity", "--no-onnx",
               "-q")
    assert done.returncode == 0, done.stderr
    deploy = subprocess.Popen([sys.executable, "-m", "compiler.cli", "deploy", str(out), "--local"], cwd=REPO,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.perf_counter()
    try:
        while not (out / "deploy" / "endpoints.json").exists():
            assert deploy.poll() is None, "deploy exited before it was ready"
            time.sleep(2)
        ready_s = time.perf_counter() - started
        rows = []
        for c in levels:
            r = cli("bench", str(out), "--concurrency", str(c), "--requests", str(4 * c), "--input-len",
                    str(args.input_len), "--output-len", str(args.output_len), "--warmup", str(c), "--json",
                timeout=1800)
            assert r.returncode == 0, r.stdout + r.stderr
            rows.append(json.loads(r.stdout))
    finally:
        os.killpg(deploy.pid, signal.SIGTERM)
        deploy.wait(timeout=120)
    ref_tps = reference_runtime(out, 4 * levels[-1], args.input_len, args.output_len)
    print(f"llama-mini, prompts {args.input_len} -> {args.output_len} tokens; engines ready after {ready_s:.0f} s")
    print(f"{'C':>3} {'TTFT p50 ms':>12} {'(pred.)':>9} {'TPOT p50 ms':>12} {'(pred.)':>9} {'tok/s':>8} "
          f"{'(pred.)':>9}")
    for row in rows:
        m, p = row["measured"], row["predicted"]
        print(f"{row['concurrency']:>3} {m['ttft_ms_p50']:>12.1f} {p['ttft_ms']['value']:>9.1f} "
              f"{m['tpot_ms_p50']:>12.2f} {p['tpot_ms']['value']:>9.2f} {m['output_tokens_per_s']:>8.1f} "
              f"{p['output_tokens_per_s']['value']:>9.1f}")
    last = rows[-1]["measured"]["output_tokens_per_s"]
    print(f"reference runtime, {4 * levels[-1]} requests as one batch: {ref_tps:.1f} output tokens/s; "
          f"vLLM deployment at C={levels[-1]} / reference runtime = {last / ref_tps:.2f}x")
    print("predictions are the plan's (cost model, uncalibrated unless `gimletc calibrate --device cpu-host` ran)")


def reference_runtime(root: Path, requests: int, input_len: int, output_len: int) -> float:
    """Output tokens/s of the plan's own stage workers on the same lengths (greedy, ignore_eos)."""
    from compiler.runtime.engine import Engine, Request

    rng = random.Random(0)
    vocab = json.loads((root / "model" / "config.json").read_text())["vocab_size"]
    reqs = [Request([rng.randrange(3, vocab) for _ in range(input_len)], max_new_tokens=output_len, ignore_eos=True)
            for _ in range(requests)]
    engine = Engine(str(root))
    try:
        start = time.perf_counter()
        engine.run(reqs)
        return sum(len(r.tokens) for r in reqs) / (time.perf_counter() - start)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
