"""Open a plan directory for execution: verify every hash, validate the plan, read the model config.

Nothing here executes plan code or unpickles: JSON and safetensors only. Generated
stage programs are read later through `compiler.plan.manifest.verified_text`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.plan.manifest import verify_manifest
from compiler.plan.schema import Plan, Stage
from compiler.plan.checks import load_plan
from compiler.plan.transfers import validate_transfers
from compiler.ir.errors import BadInput


@dataclass(frozen=True)
class PlanDir:
    root: Path
    plan: Plan
    manifest: dict
    config: dict[str, Any]  # the plan's model
    draft_configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # drafter pool -> its draft model's

    def stage(self, pool: str, index: int) -> Stage:
        return next(p for p in self.plan.pools if p.name == pool).stages[index]

    def config_of(self, pool: str) -> dict[str, Any]:
        """The config of the model `pool` runs: a drafter pool's draft model, else the plan's model."""
        return self.draft_configs.get(pool, self.config)

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
    drafts = {}
    for pool in plan.pools:
        if pool.role == "drafter":
            drafts[pool.name] = json.loads((root / "drafts" / pool.name / "config.json").read_text())
            if drafts[pool.name].get("vocab_size") != config.get("vocab_size"):
                raise BadInput(f"plan {root}: drafter pool {pool.name}'s model has another vocab_size than the "
                               f"target's; recompile with a draft model of the target's family")
    return PlanDir(root, plan, manifest, config, drafts)
