"""Regenerate the golden Kubernetes manifests: ``python tools/regen_k8s_golden.py``.

Reads tests/emit/k8s_golden/plan.json and cluster.yaml and rewrites
tests/emit/k8s_golden/expected/ (the folder is replaced as a whole). Review the
diff before committing it: the golden test compares against these files byte
for byte.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.emit.k8s import manifests, write_manifests  # noqa: E402
from compiler.emit.plan import load_plan  # noqa: E402
from compiler.inputs import load_cluster  # noqa: E402
from tests.emit.test_k8s_manifests import golden_view  # noqa: E402

GOLDEN = REPO / "tests" / "emit" / "k8s_golden"


def main() -> int:
    objects = golden_view(manifests(load_plan(GOLDEN / "plan.json"), load_cluster(GOLDEN / "cluster.yaml")))
    paths = write_manifests(objects, GOLDEN / "expected")
    print(f"wrote {len(paths)} files to {GOLDEN / 'expected'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
