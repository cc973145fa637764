"""What every pool-option generator shares: request classes as the numbers they are costed at, the batch
grids, a replica's power, where an option reads its weights, and which device types can run a precision.

[Note: request classes] A mix is never collapsed to a mean request. A class's
prompt length, decode context (its input plus half its output) and output
length cost its steps; its longest request decides where it fits, so a
200K-token class limits only the pools it can be routed to. An option's batch
is a number of sequences; every class it serves fits that batch on its own, so
any mix of those classes fits too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from backends.registry import backend_of, device
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.pool_option import ClassService
from compiler.ir.precision import Precision
from cost_models.load import RequestShape
from cost_models.power import step_power_w
from cost_models.roofline import TierSplit
from cost_models.serving import Deployment, StepTime

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PREFILL_BATCHES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class ClassDemand:
    """One request class as the numbers it is costed at; `percentile` is its SLO percentile (0-1)."""

    name: str
    shape: RequestShape
    percentile: float
    kv_mean_bytes: float  # one request's KV at the class's mean lengths
    kv_max_bytes: float  # ... at its longest prompt and output

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_mean_bytes / self.shape.kv_tokens


def class_demands(graph: BlockGraph, workload: Workload, precision: Precision) -> list[ClassDemand]:
    out = []
    for c in workload.classes:
        shape = RequestShape(c.input_len.mean, c.output_len.mean, c.prefill_tokens_mean)
        out.append(ClassDemand(
            c.name, shape, workload.class_slo(c).percentile / 100,
            graph.kv_bytes_per_sequence(shape.kv_tokens, precision),
            graph.kv_bytes_per_sequence(c.input_len.max + c.output_len.max, precision)))
    return out


def unsupported(device_id: str, precision: Precision) -> list[str]:
    """Why `device_id` cannot store weights at `precision` (empty when it can)."""
    spec = device(device_id)
    return backend_of(spec).unsupported_reasons(spec, precision.weights)


def replica_power(dep: Deployment, step: StepTime) -> float:
    """Mean draw of one replica's devices over `step`."""
    return dep.group * step_power_w(dep.device, time_s=step.time_s, compute_s=step.compute_s, memory_s=step.memory_s)


def usable_services(services: list[ClassService]) -> tuple[ClassService, ...]:
    """The services a placement can use: a positive, finite rate."""
    return tuple(s for s in services if s.rate_per_s > 0 and math.isfinite(s.rate_per_s))


def tiers_text(tiers: TierSplit) -> str:
    """'sram' when one tier holds everything, else 'sram 44% + dram 56%': where an option reads its weights."""
    if len(tiers.fractions) == 1:
        return tiers.fractions[0][0]
    return " + ".join(f"{name} {share:.0%}" for name, share in tiers.fractions)
