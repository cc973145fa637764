"""Assemble the placement `Instance`: costed options, the request classes' targets, and what links and KV
hand-offs cost between device types.

Before: the BlockGraph, cluster, workload, costed `PoolOption`s, `Precision` and
power budget. After: an `Instance` (`compiler.ir.placement`), pure data the ILP reads.
"""

from __future__ import annotations

from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.placement import ClassTarget, Instance
from compiler.ir.pool_option import PoolOption
from compiler.ir.precision import Precision
from cost_models.comm import kv_handoff_s


def class_targets(graph: BlockGraph, workload: Workload, precision: Precision) -> tuple[ClassTarget, ...]:
    """Each class's share, SLO targets in seconds, and the KV a request of it hands from prefill to decode."""
    out = []
    for c in workload.classes:
        slo = workload.class_slo(c)
        out.append(ClassTarget(c.name, c.share, slo.ttft_ms / 1e3 if slo.ttft_ms else None,
                               slo.tpot_ms / 1e3 if slo.tpot_ms else None,
                               graph.kv_bytes_per_sequence(c.input_len.mean, precision), c.output_len.mean))
    return tuple(out)


def build_instance(graph: BlockGraph, cluster: Cluster, workload: Workload, options: list[PoolOption],
                   precision: Precision, power_budget_w: float | None) -> Instance:
    classes = class_targets(graph, workload, precision)
    types = sorted(cluster.inventory())
    links = tuple(((a, b), cluster.link(a, b)[0]) for a in types for b in types if a < b)
    handoff = tuple(((c.name, a, b), kv_handoff_s(c.kv_bytes, bw_bytes_per_s=cluster.link(a, b)[0],
                                                  latency_s=cluster.link(a, b)[1], layers=graph.num_layers))
                    for c in classes for a in types for b in types)
    arrival = workload.arrival_rate_per_s if workload.arrival_rate_per_s != "maximise" else None
    return Instance(tuple(options), tuple(sorted(cluster.inventory().items())), power_budget_w, classes, links,
                    handoff, arrival)
