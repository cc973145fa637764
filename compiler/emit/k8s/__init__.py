"""Kubernetes manifests of a plan (``DIR/k8s/``): `manifests` builds the objects, `write_manifests` writes them.

- `objects`: typed builders of each Kubernetes object (no templates).
- `manifests`: plan -> ``{file name: object}`` (see [Note: how a plan deploys] there).
- `yaml_text`: deterministic YAML with YAML 1.1 booleans quoted, one object per file.
"""

from compiler.emit.k8s.manifests import MODES, manifests
from compiler.emit.k8s.yaml_text import write_manifests

__all__ = ["MODES", "manifests", "write_manifests"]
