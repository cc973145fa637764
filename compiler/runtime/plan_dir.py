"""Open a plan directory for execution: verify every hash, validate the plan, read the model config.

Nothing here executes plan code or unpickles: JSON and safetensors only. Generated
stage programs are read later through `compiler.emit.manifest.verified_text`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.emit.manifest import verify_manifest
from compiler.emit.plan import Plan, Stage, load_plan
from compiler.emit.transfers import validate_transfers
from compiler.ir.errors import BadInput


@dataclass(frozen=True)
class PlanDir:
    root: Path
    plan: Plan
    manifest: dict
    config: dict[str, Any]

    def stage(self, pool: str, index: int) -> Stage:
        return next(p for p in self.plan.pools if p.name == pool).stages[index]

    @property
    def eos_token_id(self) -> int | None:
        eos = self.config.get("eos_token_id")
        return eos[0] if isinstance(eos, list) else eos


def open_plan_dir(root: str | Path) -> PlanDir:
    root = Path(root)
    manifest = verify_manifest(root)
    if not manifest.get("runnable"):
        raise BadInput(f"plan {root} cannot run: {manifest.get('reason')}")
    plan = load_plan(root)
    for pool in plan.pools:
        for stage in pool.stages:
            if stage.execution is None:
                raise BadInput(f"plan {root}: pool {pool.name} stage {stage.index} has no stage programs; recompile")
            for rank in stage.execution.ranks:
                if rank.weights is None:
                    raise BadInput(f"plan {root}: {rank.program} has no weight shard; recompile with --weights DIR")
    validate_transfers(plan)
    config = json.loads((root / "model" / "config.json").read_text())
    return PlanDir(root, plan, manifest, config)
