"""Assemble the placement `Instance`: costed options plus what links and KV hand-offs cost between types.

Before: the BlockGraph, cluster, workload, costed `PoolOption`s, `Precision` and
power budget. After: an `Instance` (`compiler.ir.placement`), pure data the ILP reads.
"""

from __future__ import annotations

from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.placement import Instance
from compiler.ir.pool_option import PoolOption
from compiler.ir.precision import Precision
from cost_models.comm import kv_handoff_s


def build_instance(graph: BlockGraph, cluster: Cluster, workload: Workload, options: list[PoolOption],
                   precision: Precision, power_budget_w: float | None) -> Instance:
    kv = graph.kv_bytes_per_sequence(workload.mean_input_len, precision)
    types = sorted(cluster.inventory())
    links = tuple(((a, b), cluster.link(a, b)[0]) for a in types for b in types if a < b)
    handoff = tuple(((a, b), kv_handoff_s(kv, bw_bytes_per_s=cluster.link(a, b)[0],
                                          latency_s=cluster.link(a, b)[1], layers=graph.num_layers))
                    for a in types for b in types)
    arrival = workload.arrival_rate_per_s if workload.arrival_rate_per_s != "maximise" else None
    ttft = workload.slo.ttft_ms / 1e3 if workload.slo.ttft_ms else None
    return Instance(tuple(options), tuple(sorted(cluster.inventory().items())), power_budget_w, kv, links, handoff,
                    ttft, arrival)
