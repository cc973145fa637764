"""Who runs what: the table of every process that executes a plan, and the worker contract.

[Note: worker contract]
A plan runs as one driver plus one worker process per stage instance (pool x
replica x pipeline stage x tensor-parallel rank). Every worker runs the same
program, locally or as a Kubernetes pod::

    python -m compiler.runtime.worker --plan DIR      (also: gimletc worker DIR)

Rendezvous is torch.distributed ``env://``. Each worker reads:

- ``MASTER_ADDR``, ``MASTER_PORT``: where the driver (rank 0) listens;
- ``WORLD_SIZE``: ``1 + len(worker_table(plan))``;
- ``GIMLETC_POOL``: the pool name from ``plan.json`` (``pools[].name``);
- ``GIMLETC_REPLICA``: the replica index within that pool (0-based);
- ``GIMLETC_WORKER_INDEX``: the worker's index within one replica, stage-major
  and tp-rank-minor: ``stage * tp + tp_rank`` (0-based).

The worker derives its global rank with `rank_of` (from `worker_table`); if
``RANK`` is also set it must agree, else the worker exits with an error. Rank 0
is always the driver (``gimletc run`` / ``gimletc serve``). Ranks are numbered
in plan order: pools as listed, then replicas, then stages, then tp ranks.

>>> from compiler.plan.schema import Pool, Stage
>>> pool = Pool(name="pool0", role="colocated", device="cpu-host", devices_per_replica=2, replicas=1, tp=2, pp=1,
...             batch=4, phases=["prefill", "decode"], stages=[Stage(index=0, device="cpu-host", blocks=[])],
...             option="x", predicted_requests_per_s=1.0, predicted_power_w=1.0)
>>> [(w.rank, w.name) for w in workers_of([pool])]
[(1, 'pool0/r0/s0/tp0'), (2, 'pool0/r0/s0/tp1')]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from compiler.ir.errors import BadInput

if TYPE_CHECKING:
    from compiler.plan.schema import Plan, Pool

DRIVER_RANK = 0


@dataclass(frozen=True, slots=True)
class Worker:
    """One stage-worker process of a plan."""

    rank: int
    pool: str
    replica: int
    worker_index: int
    stage: int
    tp_rank: int
    tp: int
    device: str
    role: str

    @property
    def name(self) -> str:
        """``pool/r{replica}/s{stage}/tp{tp_rank}``: how errors and reports name the stage instance."""
        return f"{self.pool}/r{self.replica}/s{self.stage}/tp{self.tp_rank}"


def workers_of(pools: Iterable[Pool]) -> tuple[Worker, ...]:
    """Every worker of `pools` in rank order (rank 0, the driver, is not listed)."""
    out: list[Worker] = []
    for pool in pools:
        for replica in range(pool.replicas):
            for stage in pool.stages:
                for t in range(pool.tp):
                    out.append(Worker(rank=len(out) + 1, pool=pool.name, replica=replica,
                                      worker_index=stage.index * pool.tp + t, stage=stage.index, tp_rank=t,
                                      tp=pool.tp, device=stage.device, role=pool.role))
    return tuple(out)


def worker_table(plan: Plan) -> tuple[Worker, ...]:
    """Every worker of `plan`, in rank order (ranks 1..N)."""
    return workers_of(plan.pools)


def world_size(plan: Plan) -> int:
    return 1 + len(worker_table(plan))


def rank_of(plan: Plan, pool: str, replica: int, worker_index: int) -> int:
    """The global rank of a worker named by the contract's environment variables."""
    table = worker_table(plan)
    for w in table:
        if (w.pool, w.replica, w.worker_index) == (pool, replica, worker_index):
            return w.rank
    pools = sorted({w.pool for w in table})
    raise BadInput(f"GIMLETC_POOL={pool!r} GIMLETC_REPLICA={replica} GIMLETC_WORKER_INDEX={worker_index}: no such "
                   f"worker in the plan (pools: {', '.join(pools)}); check the launcher's environment")


def rank_from_env(plan: Plan, env: Mapping[str, str] = os.environ) -> int:
    """Read the contract's variables (see [Note: worker contract]) and return this worker's rank."""
    try:
        pool = env["GIMLETC_POOL"]
        replica, index = int(env["GIMLETC_REPLICA"]), int(env["GIMLETC_WORKER_INDEX"])
    except KeyError as e:
        raise BadInput(f"environment variable {e.args[0]} is not set; a worker needs GIMLETC_POOL, GIMLETC_REPLICA "
                       f"and GIMLETC_WORKER_INDEX (see compiler/plan/topology.py)") from None
    except ValueError:
        raise BadInput("GIMLETC_REPLICA and GIMLETC_WORKER_INDEX must be integers") from None
    rank = rank_of(plan, pool, replica, index)
    if "RANK" in env and int(env["RANK"]) != rank:
        raise BadInput(f"RANK={env['RANK']} disagrees with the plan: {pool} replica {replica} worker {index} is "
                       f"rank {rank}; unset RANK or fix the launcher")
    if "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) != world_size(plan):
        raise BadInput(f"WORLD_SIZE={env['WORLD_SIZE']} but the plan has {world_size(plan)} processes "
                       f"(a driver and {world_size(plan) - 1} workers)")
    return rank


def by_stage(plan: Plan) -> dict[tuple[str, int, int], tuple[Worker, ...]]:
    """(pool, replica, stage) -> that stage's workers in tp-rank order."""
    out: dict[tuple[str, int, int], list[Worker]] = {}
    for w in worker_table(plan):
        out.setdefault((w.pool, w.replica, w.stage), []).append(w)
    return {k: tuple(v) for k, v in out.items()}
