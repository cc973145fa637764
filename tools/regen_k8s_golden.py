"""Regenerate the golden Kubernetes manifests: ``python tools/regen_k8s_golden.py [--plans]``.

Reads tests/emit/k8s_golden/plan.json and cluster.yaml and rewrites
tests/emit/k8s_golden/expected/ (the gimletc target), and reads
tests/emit/orchestrator_golden/plan-nvidia.json with cluster-nvidia.yaml and
rewrites tests/emit/orchestrator_golden/expected/<target>/ for every engine
target (engines, dynamo, llm-d, kserve). Each folder is replaced as a whole.
``--plans`` first recompiles the orchestrator plans (plan-nvidia.json,
plan-mixed.json: llama-3.1-70b on examples/clusters/{nvidia,mixed}.yaml for
examples/workloads/chat.yaml; about a minute) and copies their cluster files.
Review the diff before committing it: the golden tests compare byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.emit.k8s import manifests, write_manifests  # noqa: E402
from compiler.plan.checks import load_plan  # noqa: E402
from compiler.inputs import load_cluster  # noqa: E402
from tests.emit.test_k8s_manifests import golden_view  # noqa: E402

GOLDEN = REPO / "tests" / "emit" / "k8s_golden"
ORCHESTRATORS = REPO / "tests" / "emit" / "orchestrator_golden"
ENGINE_TARGETS = ("engines", "dynamo", "llm-d", "kserve")
PLANS = ("nvidia", "mixed")


def compile_plans() -> None:
    """Recompile the orchestrator golden plans with this checkout's gimletc."""
    for fleet in PLANS:
        cluster = REPO / "examples" / "clusters" / f"{fleet}.yaml"
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "compiler.cli", "compile", "llama-3.1-70b", "--cluster",
                            str(cluster), "--workload", str(REPO / "examples" / "workloads" / "chat.yaml"),
                            "--out", tmp, "--no-report", "--no-sensitivity", "--no-onnx", "--manifests", "none",
                            "-q"], check=True, cwd=REPO)
            shutil.copyfile(Path(tmp) / "plan.json", ORCHESTRATORS / f"plan-{fleet}.json")
        shutil.copyfile(cluster, ORCHESTRATORS / f"cluster-{fleet}.yaml")
        print(f"wrote {ORCHESTRATORS / f'plan-{fleet}.json'}")


def main(argv: list[str]) -> int:
    if "--plans" in argv:
        compile_plans()
    objects = golden_view(manifests(load_plan(GOLDEN / "plan.json"), load_cluster(GOLDEN / "cluster.yaml")))
    paths = write_manifests(objects, GOLDEN / "expected")
    print(f"wrote {len(paths)} files to {GOLDEN / 'expected'}")
    plan = load_plan(ORCHESTRATORS / "plan-nvidia.json")
    cluster = load_cluster(ORCHESTRATORS / "cluster-nvidia.yaml")
    for target in ENGINE_TARGETS:
        paths = write_manifests(manifests(plan, cluster, target=target), ORCHESTRATORS / "expected" / target)
        print(f"wrote {len(paths)} files to {ORCHESTRATORS / 'expected' / target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
