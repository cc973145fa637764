"""The plan's blocks on the rooflines of the devices they were placed on (predictions).

For every pool, each distinct block it runs (identical layers grouped, [Note: grouped layers]) is evaluated at
the pool's operating point: a prefill step of one mean-length prompt (B=1, S=mean input) and a decode step at
the pool's batch over the mean decode context (B=batch, L=mean input + half the mean output). A point is the
block's arithmetic intensity (FLOPs over bytes moved, per tensor-parallel shard) against the FLOP/s it reaches
(FLOPs over its roofline time, `cost_models.roofline.block_time`, with the derate of the pool's engine on its
device (`cost_models.engines.served_derate`) and the memory tiers
`cost_models.serving.memory_plan` assigns). A device's ceilings are its datasheet peak at the dtype the matmuls
run in and its fastest memory tier's bandwidth; the ridge is where they meet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from backends.engines import engine_costs
from backends.registry import device
from compiler.plan.schema import Plan, Pool
from compiler.ir.block_graph import Block, BlockGraph
from compiler.ir.calibration import load_calibration
from compiler.ir.precision import Precision
from cost_models.engines import served_derate
from cost_models.roofline import block_time, compute_peak
from cost_models.serving import Deployment, memory_plan

#: Block roles each half of a decode-af option holds (`compiler.emit.emit_plan`).
POOL_ROLES = {"decode-attention": ("attn",), "decode-ffn": ("embed", "ffn", "moe", "head")}


@dataclass(frozen=True, slots=True)
class Ceiling:
    """A device's roofline: datasheet peaks, and what the derate makes of them."""

    device: str
    dtype: str  # the dtype the matmuls run in (`cost_models.roofline.compute_peak`)
    peak_flops_per_s: float
    mem_bw_bytes_per_s: float  # fastest memory tier
    compute_eff: float
    mem_eff: float

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.peak_flops_per_s / self.mem_bw_bytes_per_s


@dataclass(frozen=True, slots=True)
class RooflinePoint:
    """One distinct block of a pool at the pool's operating point, per tensor-parallel shard."""

    pool: str
    device: str
    phase: str
    block: str  # the first of the identical blocks, e.g. ``L0.attn``
    role: str
    count: int  # identical blocks in the pool's stages
    point: tuple[tuple[str, float], ...]  # (B, S) or (B, L)
    flops: float
    bytes_moved: float
    time_s: float
    bound: str  # compute or memory

    @property
    def intensity_flops_per_byte(self) -> float:
        return self.flops / self.bytes_moved if self.bytes_moved else 0.0

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.time_s if self.time_s else 0.0


def operating_point(plan: Plan, pool: Pool, phase: str) -> dict[str, float]:
    """The step a pool's blocks are drawn at: one mean prompt (prefill), or the pool's batch (decode)."""
    if phase == "prefill":
        return {"B": 1.0, "S": float(max(1, round(plan.mean_input_len)))}
    return {"B": float(pool.batch), "L": float(max(1, round(plan.mean_input_len + plan.mean_output_len / 2)))}


def deployment_of(plan: Plan, pool: Pool) -> Deployment:
    """One replica of `pool` as the cost models see it: its engine on its device (`served_derate`), or this host's
    calibration."""
    spec, served_by = device(pool.device), engine_costs(pool.engine)
    derate = served_derate(spec.family, load_calibration(spec.id), served_by, spec.id)
    return Deployment(spec, pool.tp * pool.pp, derate,
                      pool.tp, pool.pp, Precision(plan.dtype, plan.kv_dtype, dense=plan.dense_dtype), served_by)


def pool_blocks(graph: BlockGraph, pool: Pool, phase: str) -> list[tuple[Block, int]]:
    """The distinct blocks of `phase` that `pool`'s stages run, each with how many identical ones there are."""
    groups: dict[tuple, list] = {}
    for stage in pool.stages:
        for name in stage.blocks:
            ph, _, block_name = name.partition("/")
            if ph != phase:
                continue
            try:
                b = graph.block(block_name, phase)
            except KeyError:  # a plan for another graph (hand-made): nothing to draw for this block
                continue
            sig = (b.role, b.attention, b.window_tokens, b.experts, b.ops)
            if sig in groups:
                groups[sig][1] += 1
            else:
                groups[sig] = [b, 1]
    return [(b, n) for b, n in groups.values()]


def ceilings(plan: Plan) -> list[Ceiling]:
    out = []
    drawn = [p for p in plan.pools if p.role != "drafter"]  # `roofline_points` draws no drafter's blocks
    for dev in sorted({p.device for p in drawn}):
        spec = device(dev)
        peak, dtype = compute_peak(spec, plan.dtype)
        derate = deployment_of(plan, next(p for p in drawn if p.device == dev)).derate
        out.append(Ceiling(dev, dtype, peak, spec.memory[0].bw_bytes_per_s, derate.matmul_eff(dtype), derate.mem_eff))
    return out


def roofline_points(plan: Plan, graph: BlockGraph) -> list[RooflinePoint]:
    """Every distinct block of every pool, at the pool's operating point (predictions)."""
    out = []
    for pool in plan.pools:
        if pool.role == "drafter":  # runs the draft model, whose blocks are not in `graph`
            continue
        dep = deployment_of(plan, pool)
        for phase in pool.phases:
            point = operating_point(plan, pool, phase)
            kv_hint = graph.kv_bytes_per_sequence(point.get("L", point.get("S", 1.0)), dep.precision) \
                * point["B"] / dep.group
            mem = memory_plan(graph, dep, kv_hint, POOL_ROLES.get(pool.role))
            for b, n in pool_blocks(graph, pool, phase):
                work = b.work(dep.precision, **point)
                t = block_time(b, point, dep.device, precision=dep.precision, derate=dep.derate, shards=dep.tp,
                               tiers=mem.weight_tiers, kv_tiers=mem.kv_tiers)
                out.append(RooflinePoint(pool.name, pool.device, phase, b.name, b.role, n, tuple(sorted(point.items())),
                                         work.flops / dep.tp, work.bytes / dep.tp, t.time_s, t.bound))
    return out


def to_json(ceils: list[Ceiling], points: list[RooflinePoint]) -> dict:
    return {"prediction": True,
            "ceilings": [{**asdict(c), "ridge_flops_per_byte": c.ridge_flops_per_byte} for c in ceils],
            "points": [{**asdict(p), "point": dict(p.point), "intensity_flops_per_byte": p.intensity_flops_per_byte,
                        "achieved_flops_per_s": p.achieved_flops_per_s} for p in points]}
