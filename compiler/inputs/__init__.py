"""What the user hands the compiler: a model, a cluster file and a workload file.

- `model_spec`: a preset name, a Hugging Face ``config.json`` or ``module:callable`` -> `ModelSpec`
  (presets ship under ``presets/``).
- `cluster`: the fleet (`Cluster`); `workload`: the traffic (`Workload`).
- `yaml_file`: reading either file with one-line errors that name file, field and fix.

Importing this package loads pydantic and the backend registry, not torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.inputs.yaml_file import load_yaml


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster YAML file; any problem raises one-line `BadInput`."""
    return load_yaml(Cluster, path, "cluster", "examples/clusters/")


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload YAML file; any problem raises one-line `BadInput`."""
    return load_yaml(Workload, path, "workload", "examples/workloads/")


def schemas() -> dict[str, dict[str, Any]]:
    """JSON Schemas of the two input files, for ``gimletc schema``."""
    return {"cluster": Cluster.model_json_schema(), "workload": Workload.model_json_schema()}


__all__ = ["Cluster", "Workload", "load_cluster", "load_workload", "schemas"]
