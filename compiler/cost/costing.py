"""What every pool-option generator shares: request classes as the numbers they are costed at, the batch
grids, a replica's power, an option's watts on the budget's footing, and where an option reads its weights.

[Note: request classes] A mix is never collapsed to a mean request. A class's
prompt length, decode context (its input plus half its output) and output
length cost its steps; its longest request decides where it fits, so a
200K-token class limits only the pools it can be routed to. An option's batch
is a number of sequences; every class it serves fits that batch on its own, so
any mix of those classes fits too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.ir.precision import Precision
from cost_models.load import RequestShape
from cost_models.power import device_basis_w, draw_on_basis_w, step_power_w
from cost_models.roofline import TierSplit
from cost_models.buckets import Buckets
from cost_models.serving import Deployment
from cost_models.steps import StepTime

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
    max_tokens: int  # its longest prompt plus output

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
            graph.kv_bytes_per_sequence(c.input_len.max + c.output_len.max, precision),
            c.input_len.max + c.output_len.max))
    return out


def pool_buckets(classes: list[ClassDemand]) -> Buckets:
    """The buckets a Neuron pool serving every class launches with ([Note: buckets], `Buckets.for_classes`; a pool
    the router sends fewer classes launches with its own classes', which changes no class's own buckets)."""
    return Buckets.for_classes(max(c.max_tokens for c in classes), [c.shape.input_len for c in classes],
                               [c.shape.input_len + c.shape.output_len for c in classes])


def replica_power(dep: Deployment, step: StepTime) -> float:
    """Mean draw of one replica's devices over `step`."""
    return dep.group * step_power_w(dep.device, time_s=step.time_s, compute_s=step.compute_s, memory_s=step.memory_s)


def on_basis(option: PoolOption, cluster: Cluster) -> PoolOption:
    """`option` with its watts on `cluster`'s budget footing ([Note: power basis] in `cost_models.power`): what it
    provisions (its devices' rated power there), its full-load draw and its idle draw. Options are costed on
    the chip footing (``power_w`` from the step, ``provisioned_w`` the devices' TDP); this is the one place
    they move to another, so every generator (plain, attention/FFN, drafted) agrees."""
    basis, pue = cluster.power_basis, cluster.pue_factor
    specs = [(cluster.spec(d), k) for d, k in option.devices]
    provisioned, idle = _rated_w(specs, basis, pue)
    return replace(option, power_w=draw_on_basis_w(option.power_w, specs, basis, pue), provisioned_w=provisioned,
                   idle_w=idle)


def with_node_power(option: PoolOption, devices: set[str], change: float, cluster: Cluster) -> PoolOption:
    """`option` (already on `cluster`'s basis) with the rated power of its `devices` moved by `change` (+0.2: 20% more):
    what a sensitivity move of an assumed node power does to what it provisions and draws. On ``chip`` a node
    power is not counted, so nothing moves."""
    basis, pue = cluster.power_basis, cluster.pue_factor
    if basis == "chip":
        return option
    moved = [(cluster.spec(d), k) for d, k in option.devices if d in devices]
    if not moved:
        return option
    full, idle = (w * change for w in _rated_w(moved, basis, pue))
    return replace(option, provisioned_w=option.provisioned_w + full, power_w=option.power_w + full,
                   idle_w=option.idle_w + idle)


def _rated_w(specs: list, basis: str, pue: float) -> tuple[float, float]:
    """The rated and idle watts on `basis` of `specs` (device spec, count) together."""
    rated = idle = 0.0
    for spec, k in specs:
        rated_w, idle_w = device_basis_w(spec, basis, pue)
        rated, idle = rated + k * rated_w, idle + k * idle_w
    return rated, idle


def usable_services(services: list[ClassService]) -> tuple[ClassService, ...]:
    """The services a placement can use: a positive, finite rate."""
    return tuple(s for s in services if s.rate_per_s > 0 and math.isfinite(s.rate_per_s))


def tiers_text(tiers: TierSplit) -> str:
    """'sram' when one tier holds everything, else 'sram 44% + dram 56%': where an option reads its weights."""
    if len(tiers.fractions) == 1:
        return tiers.fractions[0][0]
    return " + ".join(f"{name} {share:.0%}" for name, share in tiers.fractions)
