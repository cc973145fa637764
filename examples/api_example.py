"""The Python plan API in one script: compile, save, load, summary, manifests, run, estimate, pareto.

    python examples/api_example.py [OUT_DIR]

Compiles the tiny Llama preset on the three-accelerator example fleet, writes the plan directory (stage
programs, weights, Kubernetes manifests and the report) to OUT_DIR (default: a temporary folder), loads it back,
runs one prompt through it on this machine's CPUs, then costs one deployment and sweeps a small frontier.
Every performance number printed is a prediction of gimletc's cost model.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import compiler

HERE = Path(__file__).resolve().parent
CLUSTER = HERE / "tiny_split" / "cluster.yaml"
WORKLOAD = HERE / "tiny_split" / "workload.yaml"


def main(out: str) -> None:
    plan = compiler.compile("llama-tiny", CLUSTER, WORKLOAD, sensitivity=False)
    print(plan)
    print(f"predicted: {plan.predicted.output_tokens_per_s:,.0f} output tokens/s on "
          f"{sum(p.replicas * p.devices_per_replica for p in plan.pools)} devices")

    plan.save(out, onnx=False, report_points=2)  # plan.json, stages/, weights/, k8s/, report/
    plan = compiler.Plan.load(out)  # validated, nothing executed
    print(plan.summary().splitlines()[0])
    print(f"{len(plan.manifests()) - 1} Kubernetes objects; report: {sorted(p.name for p in (Path(out) / 'report').iterdir())}")

    result = plan.run([[1, 2, 3, 4]], max_new_tokens=8)  # a driver and one worker process per stage, here
    print(f"greedy tokens: {result.tokens[0]}")

    est = compiler.estimate("llama-tiny", "nvidia-h100-sxm", batch=8, input_len=256, output_len=64)
    print(f"llama-tiny on one H100 at batch 8: TTFT {est.ttft_ms:.2f} ms, TPOT {est.tpot_ms:.3f} ms (predicted; "
          f"any preset works, e.g. llama-3.1-8b, traced once)")

    frontier = compiler.pareto("llama-tiny", CLUSTER, WORKLOAD, points=2)
    best = max(frontier.points, key=lambda r: r["output_tokens_per_s_per_mw"])
    print(f"frontier: {len(frontier.points)} points; best {best['output_tokens_per_s_per_mw']:,.0f} output tokens/s "
          f"per MW at {best['tokens_per_s_per_user']:.0f} tokens/s per user ({best['curve']})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gimletc-api-"))
