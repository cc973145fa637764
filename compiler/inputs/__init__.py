"""What the user hands the compiler: a model, a cluster file and a workload file.

- `model_spec`: a preset name, a Hugging Face ``config.json`` or ``module:callable`` -> `ModelSpec`
  (presets ship under ``presets/``).
- `cluster`: the fleet (`Cluster`); `workload`: the traffic (`Workload`); `trace`: request traces
  binned into workload classes.
- `yaml_file`: reading either file with one-line errors that name file, field and fix.

Importing this package loads pydantic and the backend registry, not torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.inputs.yaml_file import load_yaml
from compiler.ir.errors import BadInput


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster YAML file; any problem raises one-line `BadInput`."""
    return load_yaml(Cluster, path, "cluster", "examples/clusters/")


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload YAML file; any problem raises one-line `BadInput`.

    A workload that names a ``trace`` comes back with the trace binned into classes
    (`compiler.inputs.trace`) and, when the trace has timestamps and the file asks for
    ``maximise``, the trace's arrival rate.
    """
    workload = load_yaml(Workload, path, "workload", "examples/workloads/")
    if workload.trace is None:
        return workload
    from compiler.inputs.trace import bin_trace, read_trace

    spec = workload.trace
    trace_path = Path(spec.path) if Path(spec.path).is_absolute() else Path(path).parent / spec.path
    classes, rate = bin_trace(read_trace(trace_path), spec.classes)
    update: dict[str, Any] = {"classes": classes, "trace": None}
    if rate is not None and spec.use_timestamps and workload.arrival_rate_per_s == "maximise":
        update["arrival_rate_per_s"] = rate
    from pydantic import ValidationError

    try:
        return Workload.model_validate({**workload.model_dump(), **update})
    except ValidationError as e:  # e.g. timestamps 1e-300 s apart: a rate no fleet sees
        err = e.errors(include_url=False)[0]
        where = ".".join(str(k) for k in err["loc"])
        raise BadInput(f"trace {trace_path}: binned into a workload whose {where} is invalid ({err['msg']}); check "
                       "the trace's token counts and timestamps") from None


def schemas() -> dict[str, dict[str, Any]]:
    """JSON Schemas of the input files, for ``gimletc schema``."""
    from compiler.inputs.services import ServicesFile

    return {"cluster": Cluster.model_json_schema(), "workload": Workload.model_json_schema(),
            "services": ServicesFile.model_json_schema()}


__all__ = ["Cluster", "Workload", "load_cluster", "load_workload", "schemas"]
