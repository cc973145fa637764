"""Assemble the placement `Instance`: costed options, the request classes' targets, what links and KV
hand-offs cost between device types, and what devices cost in dollars.

Before: the BlockGraph, cluster, workload, costed `PoolOption`s, `Precision` and
power budget. After: an `Instance` (`compiler.ir.placement`), pure data the ILP reads.

`single_type_fleets` poses the iso-power and iso-cost questions ([Note: baselines]):
each device type alone, as many as one budget buys, costed like any other fleet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection

from compiler.inputs.cluster import Cluster
from compiler.inputs.workload import Workload
from compiler.ir.block_graph import BlockGraph
from compiler.ir.errors import BadInput
from compiler.ir.placement import ClassTarget, Instance
from compiler.ir.pool_option import PoolOption
from compiler.ir.precision import Precision
from cost_models.comm import kv_handoff_s, link_cap, link_servers, loaded_handoff_s, transfer_bw


def class_targets(graph: BlockGraph, workload: Workload, precision: Precision) -> tuple[ClassTarget, ...]:
    """Each class's share, SLO targets in seconds, and the KV a request of it hands from prefill to decode."""
    out = []
    for c in workload.classes:
        slo = workload.class_slo(c)
        out.append(ClassTarget(c.name, c.share, slo.ttft_ms / 1e3 if slo.ttft_ms else None,
                               slo.tpot_ms / 1e3 if slo.tpot_ms else None,
                               graph.kv_bytes_per_sequence(c.input_len.mean, precision), c.output_len.mean,
                               slo.percentile / 100))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class LinkQueue:
    """A link as the hand-offs see it ([Note: hand-offs] in `cost_models.comm`)."""

    bw_bytes_per_s: float  # everything the link carries at once
    per_transfer_bytes_per_s: float  # one transfer: the slower NIC, or the link
    latency_s: float
    servers: int  # transfers at once at full speed
    cap: float  # the utilisation it runs at most at

    def transfer_s(self, kv_bytes: float, layers: int) -> float:
        """One request's KV over this link, unloaded."""
        return kv_handoff_s(kv_bytes, bw_bytes_per_s=self.per_transfer_bytes_per_s, latency_s=self.latency_s,
                            layers=layers)

    def handoff_s(self, kv_bytes: float, layers: int, utilisation: float, percentile: float) -> float:
        """One request's KV hand-off at `utilisation`: the transfer plus its `percentile` wait for the link."""
        return loaded_handoff_s(self.transfer_s(kv_bytes, layers), self.servers, utilisation, percentile)


def link_queues(cluster: Cluster, classes: tuple[ClassTarget, ...]) -> dict[tuple[str, str], LinkQueue]:
    """Each ordered pair of the cluster's device types (a type with itself: its fabric) as a `LinkQueue`, capped
    at the strictest percentile the classes bind."""
    types = sorted(cluster.inventory())
    percentile = max((c.percentile for c in classes), default=0.9)
    out = {}
    for a in types:
        for b in types:
            bw, latency = cluster.link(a, b)
            rate = transfer_bw(cluster.nic(a)[0], cluster.nic(b)[0], bw)
            servers = link_servers(bw, rate)
            out[(a, b)] = LinkQueue(bw, rate, latency, servers, link_cap(servers, percentile))
    return out


def build_instance(graph: BlockGraph, cluster: Cluster, workload: Workload, options: list[PoolOption],
                   precision: Precision, power_budget_w: float | None) -> Instance:
    classes = class_targets(graph, workload, precision)
    inventory = cluster.inventory()
    queues = link_queues(cluster, classes)
    pairs = sorted((a, b) for a, b in queues if a <= b)
    handoff = tuple(((c.name, a, b), q.handoff_s(c.kv_bytes, graph.num_layers, q.cap, c.percentile))
                    for c in classes for (a, b), q in sorted(queues.items()))
    arrival = workload.arrival_rate_per_s if workload.arrival_rate_per_s != "maximise" else None
    prices = tuple((t, p) for t in sorted(inventory) if (p := cluster.price_per_hour(t)) is not None)
    return Instance(tuple(options), tuple(sorted(inventory.items())), power_budget_w, classes,
                    tuple((pair, queues[pair].bw_bytes_per_s) for pair in pairs), handoff, arrival,
                    prices_per_hour=prices, cost_budget_per_hour=cluster.cost_budget_per_hour,
                    designed=tuple(sorted(cluster.designed())),
                    link_caps=tuple((pair, queues[pair].cap) for pair in pairs),
                    link_servers=tuple((pair, queues[pair].servers) for pair in pairs),
                    transfer_s=tuple(((c.name, a, b), q.transfer_s(c.kv_bytes, graph.num_layers))
                                     for c in classes for (a, b), q in sorted(queues.items())))


def single_type_fleets(graph: BlockGraph, cluster: Cluster, workload: Workload, precision: Precision,
                       names: Collection[str] | None = None) -> list[tuple[str, Instance | str]]:
    """``(name, Instance)`` per device type and budget: ``iso-power:<t>`` when the cluster has a power budget,
    ``iso-cost:<t>`` when it has a cost budget, each the type alone with as many devices as that budget buys
    (`Cluster.alone`), its options costed for that count; only those named in `names` where given. A question
    that cannot be posed (the budget buys none, the type cannot hold the model, no price) comes back as the reason
    instead of an Instance."""
    from compiler.cost.pool_options import enumerate_options

    budgets = [b for b, set_ in (("power", cluster.power_budget_w), ("cost", cluster.cost_budget_per_hour)) if set_]
    out: list[tuple[str, Instance | str]] = []
    for budget in budgets:
        for t in cluster.inventory():
            name = f"iso-{budget}:{t}"
            if names is not None and name not in names:
                continue
            alone = cluster.alone(t, budget)
            if budget == "cost" and alone.price_per_hour(t) is None:
                out.append((name, f"{t} has no price: set price_per_hour on its entry in the cluster file"))
                continue
            count = alone.budget_bound(t)
            if count < 1:
                out.append((name, f"the {budget} budget buys no {t}"))
                continue
            try:
                options, _skipped = enumerate_options(graph, alone, workload, precision)
            except BadInput as e:
                out.append((name, f"{count} x {t}: {e}"))
                continue
            out.append((name, build_instance(graph, alone, workload, options, precision, alone.power_budget_w)))
    return out
