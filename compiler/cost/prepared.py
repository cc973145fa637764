"""The first half of a compile (`compiler.driver.prepare`): what every later pass reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compiler.cost.drafted import DraftModel
    from compiler.inputs import Cluster, Workload
    from compiler.ir.block_graph import BlockGraph
    from compiler.ir.placement import Instance
    from compiler.ir.pool_option import PoolOption
    from compiler.ir.precision import Precision


@dataclass(frozen=True)
class Prepared:
    """The first half of a compile: inputs, BlockGraph, costed options and the placement instance."""

    graph: BlockGraph
    cluster: Cluster
    workload: Workload
    precision: Precision
    options: tuple[PoolOption, ...]
    instance: Instance
    draft: DraftModel | None = None  # the workload's drafter, traced (``speculative:``)
    deployable: bool = False  # options restricted to what public engines run (``--deployable``)
