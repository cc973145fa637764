"""Benchmark gimletc side by side with NVIDIA AIConfigurator on AIConfigurator's own question.

The question (AIConfigurator's `cli default`): Llama-3.1-70B on 64 H100 SXM under TensorRT-LLM, bf16, prompts of
1,024 tokens and answers of 256, TTFT within 1 s and TPOT within 50 ms: the most tokens/s the fleet serves.
gimletc gets it as a compile (a cluster of 64 nvidia-h100-sxm with engine trtllm and no power budget; one class of
exactly 1,024 -> 256 tokens with the same SLO; arrival rate maximise); AIConfigurator gets the preset's
config.json as a local model folder. Both run as fresh processes, in pairs, alternating which goes first, after
one warm-up of each (gimletc's trace cache and AIConfigurator's databases read once), so the two see the same
machine state. Reported: each tool's median wall time over the rounds, gimletc's time to plan.json (its status
marks), the paired ratio AIConfigurator / gimletc (median of the rounds' ratios), and both answers (tokens/s) with
their difference. Both answers are predictions of each tool's model; neither is a measurement. AIConfigurator runs
without ``--save-dir`` (its answer printed, no deployment files written), its fastest path; gimletc writes its whole
plan directory. With ``--save-dir`` AIConfigurator took 17.4 s where it took 13.3 s without (this machine,
2026-12-07).

AIConfigurator is not a dependency of gimletc: install it in a venv of its own first (its CLI is what runs here):

    python3 -m venv ~/.cache/gimletc/aiconfigurator-0.12.0
    ~/.cache/gimletc/aiconfigurator-0.12.0/bin/pip install aiconfigurator==0.12.0
    .venv/bin/python tools/bench_aiconfigurator.py [--rounds 3] [--aiconfigurator PATH] [--no-sensitivity]
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
DEFAULT_AIC = Path.home() / ".cache" / "gimletc" / "aiconfigurator-0.12.0" / "bin" / "aiconfigurator"
MODEL, GPUS, ISL, OSL, TTFT_MS, TPOT_MS = "llama-3.1-70b", 64, 1024, 256, 1000, 50

CLUSTER = f"""name: aic-question
devices:
  - {{device: nvidia-h100-sxm, count: {GPUS}, engine: trtllm}}
"""
WORKLOAD = f"""name: aic-question
arrival_rate_per_s: maximise
classes:
  - {{name: fixed, share: 1, input_len: {{mean: {ISL}, max: {ISL}}}, output_len: {{mean: {OSL}, max: {OSL}}}}}
slo: {{ttft_ms: {TTFT_MS}, tpot_ms: {TPOT_MS}}}
"""


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return wall, proc.stdout + proc.stderr


def _aic_answer(output: str) -> float:
    """AIConfigurator's chosen configuration's tokens/s, as its report prints it ("Best Throughput: N tokens/s")."""
    m = re.search(r"Best Throughput:\s*([\d,]+(?:\.\d+)?)\s*tokens/s", output)
    if m is None:
        raise SystemExit(f"no 'Best Throughput' line in AIConfigurator's output:\n{output[-3000:]}")
    return float(m.group(1).replace(",", ""))


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aiconfigurator", type=Path, default=DEFAULT_AIC, help=f"its CLI (default {DEFAULT_AIC})")
    parser.add_argument("--rounds", type=int, default=3, help="paired runs after the warm-up (default 3)")
    parser.add_argument("--no-sensitivity", action="store_true",
                        help="compile without the sensitivity analysis (AIConfigurator runs none)")
    args = parser.parse_args()
    if not args.aiconfigurator.exists():
        raise SystemExit(f"{args.aiconfigurator}: no AIConfigurator CLI there; install it in a venv of its own (this "
                         "file's docstring shows how) or pass --aiconfigurator PATH")
    sys.path.insert(0, str(REPO))
    from compiler.inputs.model_spec import resolve_model

    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        (work / "model").mkdir()
        (work / "model" / "config.json").write_text(json.dumps(resolve_model(MODEL).config, indent=1))
        (work / "cluster.yaml").write_text(CLUSTER)
        (work / "workload.yaml").write_text(WORKLOAD)
        env = {**os.environ, "GIMLETC_CACHE_DIR": str(work / "cache")}
        gimletc = [sys.executable, "-m", "compiler.cli", "compile", MODEL, "--cluster", str(work / "cluster.yaml"),
                   "--workload", str(work / "workload.yaml"), "--no-onnx", "--out", str(work / "plan"), "--json",
                   *(["--no-sensitivity"] if args.no_sensitivity else [])]
        aic = [str(args.aiconfigurator), "cli", "default", "--model-path", str(work / "model"), "--total-gpus",
               str(GPUS), "--system", "h100_sxm", "--backend", "trtllm", "--isl", str(ISL), "--osl", str(OSL),
               "--ttft", str(TTFT_MS), "--tpot", str(TPOT_MS)]

        def run_gimletc() -> tuple[float, float, float]:
            wall, out = _timed(gimletc, env, REPO)
            status = json.loads((work / "plan" / "status.json").read_text())
            plan = json.loads(out[:out.rindex("}") + 1])
            return wall, status["marks_s"]["plan.json written"], plan["predicted"]["output_tokens_per_s"]

        def run_aic() -> tuple[float, float]:
            wall, out = _timed(aic, env, work)
            return wall, _aic_answer(out)

        run_gimletc(), run_aic()  # warm-up: the trace cache, AIConfigurator's databases
        rounds = []
        for i in range(args.rounds):
            if i % 2 == 0:
                g, a = run_gimletc(), run_aic()
            else:
                a, g = run_aic(), run_gimletc()
            rounds.append((g, a))
            print(f"round {i + 1}: gimletc {g[0]:.2f} s (plan.json after {g[1]:.2f} s), {g[2]:,.0f} tokens/s; "
                  f"AIConfigurator {a[0]:.2f} s, {a[1]:,.0f} tokens/s; ratio {a[0] / g[0]:.2f}x", flush=True)
    g_wall = statistics.median(g[0] for g, _ in rounds)
    g_plan = statistics.median(g[1] for g, _ in rounds)
    a_wall = statistics.median(a[0] for _, a in rounds)
    ratio = statistics.median(a[0] / g[0] for g, a in rounds)
    g_answer, a_answer = rounds[-1][0][2], rounds[-1][1][1]
    print(f"\n{MODEL} on {GPUS} H100 SXM, TensorRT-LLM, {ISL} -> {OSL} tokens, TTFT {TTFT_MS} ms, TPOT {TPOT_MS} ms; "
          f"median of {len(rounds)} paired runs on this machine:")
    print(f"  gimletc compile{' --no-sensitivity' if args.no_sensitivity else ''}: {g_wall:.2f} s "
          f"(plan.json after {g_plan:.2f} s)")
    print(f"  AIConfigurator cli default: {a_wall:.2f} s")
    print(f"  AIConfigurator / gimletc: {ratio:.2f}x (paired); to plan.json: "
          f"{statistics.median(a[0] / g[1] for g, a in rounds):.2f}x")
    print(f"  answers (predictions): gimletc {g_answer:,.0f} tokens/s, AIConfigurator {a_answer:,.0f} tokens/s "
          f"({g_answer / a_answer - 1:+.1%})")


if __name__ == "__main__":
    main()
