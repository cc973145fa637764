"""Kubernetes manifests of a plan (``DIR/k8s/``): `manifests` builds a target's objects, `write_manifests` writes
them.

- `targets`: the targets (`TARGETS`: engines, dynamo, llm-d, kserve, gimletc) and the entry point `manifests`.
- `engines`, `dynamo`, `llm_d`, `kserve`: the public-engine targets; `engine_pod` what they share.
- `manifests`: the reference runtime's workers (target ``gimletc``; see [Note: how a plan deploys] there).
- `pool_deployment`: how each pool deploys (device resource, node size, scheduling), for every target.
- `objects`: typed builders of each Kubernetes object (no templates).
- `yaml_text`: deterministic YAML with YAML 1.1 booleans quoted, one object per file.
"""

from compiler.emit.k8s.manifests import MODES
from compiler.emit.k8s.targets import DEFAULT_TARGET, TARGETS, manifests
from compiler.emit.k8s.yaml_text import write_manifests

__all__ = ["DEFAULT_TARGET", "MODES", "TARGETS", "manifests", "write_manifests"]
