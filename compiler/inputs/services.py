"""The services file: several models served from one fleet (``gimletc compile --services FILE``).

Each service is a model (a preset, a Hugging Face ``config.json`` or ``module:callable``) with its own workload
file (classes, lengths, SLOs, and an arrival rate or ``maximise``), its dtypes, the weight of its requests/s
in the objective and, optionally, a minimum rate. Workload paths are relative to the services file.

>>> f = ServicesFile(name="platform", services=[{"name": "chat", "model": "llama-3.1-8b",
...                                               "workload": "chat.yaml", "min_rate_per_s": 5}])
>>> f.services[0].weight, f.services[0].dtype
(1.0, 'bf16')
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from compiler.inputs.yaml_file import Frozen, load_yaml
from compiler.ir.precision import DTYPE_BYTES, WEIGHT_DTYPES, Precision

#: A service's name becomes a plan folder, the Kubernetes namespace of its objects and the ``model`` requests give:
#: a DNS-1123 label.
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"
#: Names a plan folder already uses (`compiler.cli.compile.OUTPUTS`, the router's) and the namespace of the gateway
#: that routes by model (`compiler.emit.k8s.model_routing`): not a service's.
RESERVED = ("k8s", "stages", "weights", "onnx", "model", "report", "router", "deploy", "gimletc-gateway")


class Service(Frozen):
    """One model, the traffic it serves, and what it is worth against the others."""

    name: str = Field(pattern=NAME_PATTERN, description="lower-case letters, digits and '-' (at most 40): the "
                                                        "plan folder, the Kubernetes names and the model name "
                                                        "requests give")
    model: str = Field(description="a preset (gimletc backends --presets), a config.json path or module:callable")
    workload: str = Field(description="its workload YAML, relative to the services file (examples/workloads/)")
    dtype: str = Field(default="bf16", description=f"weight dtype: {', '.join(WEIGHT_DTYPES)}")
    kv_dtype: str | None = Field(default=None, description="KV-cache dtype (default: the weight dtype's)")
    weight: float = Field(default=1.0, ge=0, description="what one of its requests/s is worth in the objective "
                                                         "(0: served at its arrival or minimum rate, no more)")
    min_rate_per_s: float | None = Field(default=None, gt=0, description="requests/s it is served at least, when "
                                                                         "its workload says maximise")

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED:
            raise ValueError(f"{value!r} is a folder every plan directory has ({', '.join(RESERVED)}); name the "
                             "service otherwise")
        return value

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        if value not in WEIGHT_DTYPES:
            raise ValueError(f"{value!r} is not a weight dtype; use one of {', '.join(WEIGHT_DTYPES)}")
        return value

    @field_validator("kv_dtype")
    @classmethod
    def _kv_dtype(cls, value: str | None) -> str | None:
        if value is not None and value not in DTYPE_BYTES:
            raise ValueError(f"{value!r} is not a KV dtype; use one of {', '.join(DTYPE_BYTES)}")
        return value

    @property
    def precision(self) -> Precision:
        return Precision.of(self.dtype, self.kv_dtype)


class ServicesFile(Frozen):
    """The services one fleet serves, placed together."""

    name: str
    services: tuple[Service, ...] = Field(min_length=1, description="one entry per model served")

    @field_validator("services")
    @classmethod
    def _unique(cls, services: tuple[Service, ...]) -> tuple[Service, ...]:
        names = [s.name for s in services]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"service names must be unique; {', '.join(repr(n) for n in dupes)} repeats: rename one")
        return services


def load_services(path: str | Path) -> ServicesFile:
    """Read and validate a services YAML; workload paths come back absolute; any problem is one-line `BadInput`."""
    from compiler.ir.errors import BadInput

    parsed = load_yaml(ServicesFile, path, "services", "examples/services/")
    base = Path(path).resolve().parent
    services = []
    for i, s in enumerate(parsed.services):
        workload = Path(s.workload) if Path(s.workload).is_absolute() else base / s.workload
        if not workload.is_file():
            raise BadInput(f"{path}: services[{i}].workload: {s.workload!r} (service {s.name!r}) is not a file; give a "
                           "workload YAML path relative to the services file")
        services.append(s.model_copy(update={"workload": str(workload)}))
    return parsed.model_copy(update={"services": tuple(services)})
