"""Compile the shipped examples and fingerprint every file they write, to show a restructuring changed no plan.

    python tools/compare_plans.py OUT                # compile into OUT/<example>/, write OUT/digests.json
    python tools/compare_plans.py OUT --against OLD  # the same, then list each file whose bytes differ from OLD's

Each example is the README's compile of a preset on a shipped cluster (every cluster file, the chat
workload; dmatrix at fp8 as its README line says), the cpu_pd example and the services example. Besides
what compile writes (plan.json, summary.md, the engines target's k8s/), each plan is rendered by every
other manifest target (dynamo, llm-d, kserve, gimletc), so a change to any engine's launch, router or
manifests shows. Report pictures and timelines are left out (drawn in the background, not part of the plan
contract), as is status.json (it records wall times).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHAT = "examples/workloads/chat.yaml"
EXAMPLES = {
    **{f"chat-{c}": ["llama-3.1-70b", "--cluster", f"examples/clusters/{c}.yaml", "--workload", CHAT]
       for c in ("mixed", "nvidia", "amd", "trainium", "gaudi", "cerebras", "two_tier")},
    "chat-dmatrix": ["llama-3.1-8b", "--cluster", "examples/clusters/dmatrix.yaml", "--workload", CHAT,
                     "--dtype", "fp8"],
    "cpu_pd": ["llama-mini", "--cluster", "examples/cpu_pd/cluster.yaml", "--workload",
               "examples/cpu_pd/workload.yaml"],
    "services": ["--services", "examples/services/services.yaml", "--cluster", "examples/clusters/mixed.yaml",
                 "--time-limit", "120"],
}
OTHER_TARGETS = ("dynamo", "llm-d", "kserve", "gimletc")
LEFT_OUT = ("status.json", ".png", ".svg", ".html", "timeline")


def compile_all(out: Path) -> None:
    for name, args in EXAMPLES.items():
        print(f"compiling {name}", flush=True)
        done = subprocess.run([sys.executable, "-m", "compiler.cli", "compile", *args, "--out", str(out / name),
                               "--no-onnx", "--no-report", "-q"], cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{name}: compile failed\n{done.stderr[-3000:]}")
        for plan_dir in sorted(p.parent for p in (out / name).rglob("plan.json")):
            render(plan_dir, args)


def render(plan_dir: Path, args: list[str]) -> None:
    """Every other manifest target of the plan in `plan_dir`, as YAML text under `plan_dir`/targets/<target>/."""
    from compiler.emit.k8s.targets import manifests
    from compiler.emit.k8s.yaml_text import write_manifests
    from compiler.inputs import load_cluster
    from compiler.plan.checks import load_plan

    plan = load_plan(plan_dir)
    cluster = load_cluster(REPO / args[args.index("--cluster") + 1])
    for target in OTHER_TARGETS:
        write_manifests(manifests(plan, cluster, target=target), plan_dir / "targets" / target)


def digests(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "digests.json" and not any(x in str(p) for x in LEFT_OUT)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--against", type=Path, help="an earlier OUT to compare with")
    args = ap.parse_args()
    compile_all(args.out)
    mine = digests(args.out)
    (args.out / "digests.json").write_text(json.dumps(mine, indent=1, sort_keys=True) + "\n")
    print(f"{len(mine)} files fingerprinted in {args.out}/digests.json")
    if args.against is None:
        return
    theirs = json.loads((args.against / "digests.json").read_text())
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    for k in differ:
        print(f"differs: {k}" if k in mine and k in theirs else f"only in {'OUT' if k in mine else 'OLD'}: {k}")
    print(f"{len(differ)} of {len(mine | theirs)} files differ")
    raise SystemExit(1 if differ else 0)


if __name__ == "__main__":
    main()
