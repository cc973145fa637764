"""Write a runnable plan directory: stage programs, weight shards, ``model/``, ONNX, transfers, manifest.

Before: a `Plan` (from `compiler.emit.emit_plan` or built by hand) and the model
spec it was compiled from. After, under ``DIR``::

    plan.json                      the plan, stages with `StageExec`, transfers with `TransferDetail`
    stages/{pool}/s{k}_tp{t}.py    generated stage programs (`compiler.emit.stage_programs`)
    weights/{pool}/s{k}_tp{t}.safetensors   their weight shards (`compiler.emit.weights`)
    onnx/{pool}/s{k}_tp{t}.onnx    ONNX of each stage rank, checked (`compiler.emit.onnx_export`)
    model/                         config.json + Hugging Face safetensors, or reference.json to --weights
    drafts/{pool}/                 the same for the draft model of a ``drafter`` pool (--draft-weights)
    manifest.json                  sha256 of every file above (`compiler.plan.manifest`)

Weights, ``model/`` and ONNX are written only when the run-dtype weights fit in
`max_weight_bytes` (or ``--weights`` names a checkpoint): a 70B plan gets
programs and transfers, not 280 GB of random numbers. A model family without
templates gets a plan whose manifest says ``runnable: false`` and why.
Replicas of a pool share one set of files. The same inputs give the same bytes.

[Note: one ONNX export per stage program] A stage program is a function of the model, its blocks, tp and the
rank; only its title (the pool's name and device, in the docstring) differs between pools that run the same
blocks, and the ONNX graph does not carry it. So the export (seconds each: torch.export, decompositions, the
optimizer, whatever the model's size) runs once per (model, blocks, tp, rank) and other pools copy its bytes:
two colocated pools of a tiny model on two device types export once, not twice.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.plan.manifest import write_manifest
from compiler.plan.schema import Plan, Pool, RankExec, Stage, StageExec
from compiler.emit.stage_programs import Shape, check_pool, shape_of, stage_program
from compiler.plan.transfers import DTYPE_BYTES, detail, validate_transfers
from compiler.ir.errors import BadInput, UnsupportedModel
from compiler.ir.files import atomic_write_text

log = logging.getLogger(__name__)

KV_BLOCK_SIZE = 16  # tokens per KV page
DEFAULT_MAX_WEIGHT_BYTES = 2e9


@dataclass(frozen=True)
class Options:
    """How to write the directory (the CLI's ``--weights``, ``--run-dtype``, ``--no-onnx``, seed)."""

    weights_dir: str | None = None
    run_dtype: str = "fp32"
    onnx: bool = True
    seed: int = 0
    max_weight_bytes: float = DEFAULT_MAX_WEIGHT_BYTES
    allow_kv_conversion: bool = False
    draft_weights_dir: str | None = None  # checkpoint of the drafter pools' draft model (default: seeded)


def _block_names(stage: Stage) -> list[str]:
    """The stage's blocks without phase prefixes, in order, each once (a colocated stage lists both phases)."""
    seen: list[str] = []
    for name in stage.blocks:
        block = name.split("/", 1)[-1]
        if block not in seen:
            seen.append(block)
    return seen


def _layers(blocks: list[str]) -> list[int]:
    nums = [int(b[1:].split(".")[0]) for b in blocks if b.startswith("L")]
    return [min(nums), max(nums) + 1] if nums else [0, 0]


def _param_count(shape: Shape, vocab: int) -> int:
    attn = shape.hidden * shape.head_dim * (2 * shape.heads + 2 * shape.kv_heads)
    ffn = 3 * shape.hidden * shape.intermediate * max(shape.experts, 1)
    return 2 * vocab * shape.hidden + shape.layers * (attn + ffn)


def _config(model: str, weights_dir: str | None) -> tuple[dict[str, Any], float]:
    """The model's transformers config as a dict (defaults filled in) and its RoPE attention scaling (cached:
    `compiler.trace.trace_cache.config_facts`)."""
    from compiler.inputs.model_spec import resolve_model
    from compiler.emit.weights import check_same_shape
    from compiler.trace.trace_cache import config_facts

    spec = resolve_model(model)
    if spec.kind == "callable":
        raise UnsupportedModel(f"model {model!r} is a module:callable; stage programs need a Hugging Face config")

    def compute() -> dict[str, Any]:
        from compiler.emit.weights import rope_of
        from compiler.inputs.model_spec import load_hf_config

        config_obj = load_hf_config(spec)
        return {"config": config_obj.to_dict(), "rope_attention_scaling": rope_of(config_obj)[1]}

    facts = config_facts(spec, compute)
    config = facts["config"]
    if weights_dir is not None:
        checkpoint = json.loads((Path(weights_dir) / "config.json").read_text())
        check_same_shape(config, checkpoint, weights_dir)
    return config, float(facts["rope_attention_scaling"])


def write_plan_dir(plan: Plan, model: str, out: str | Path, options: Options = Options()) -> Plan:
    """Write every artifact of `plan` under `out`; return the plan as written to ``out/plan.json``."""
    return finish_plan_dir(plan, stage_artifacts(plan, model, out, options), out)


@dataclass(frozen=True)
class Staged:
    """What `stage_artifacts` wrote: the pools and transfers with their execution details (None where the plan
    cannot run here), and whether the directory runs (and why not)."""

    pools: list[Pool] | None
    transfers: list | None
    runnable: bool
    reason: str | None

    def to_json(self) -> dict:
        dump = lambda items: None if items is None else [i.model_dump(mode="json") for i in items]  # noqa: E731
        return {"pools": dump(self.pools), "transfers": dump(self.transfers), "runnable": self.runnable,
                "reason": self.reason}

    @staticmethod
    def from_json(data: dict) -> "Staged":
        from compiler.plan.schema import Transfer

        pools = None if data["pools"] is None else [Pool.model_validate(p) for p in data["pools"]]
        transfers = None if data["transfers"] is None else [Transfer.model_validate(t) for t in data["transfers"]]
        return Staged(pools, transfers, data["runnable"], data["reason"])


def stage_artifacts(plan: Plan, model: str, out: str | Path, options: Options = Options()) -> Staged:
    """Write `plan`'s stage programs, weight shards, ``model/`` and ONNX under `out` (not plan.json nor the
    manifest: `finish_plan_dir`); return the pools and transfers with their execution details. Depends only on
    the plan's pools and transfers, so it can run while the baselines are solved
    (`compiler.emit.background`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models = _models(plan, model)
    try:
        configs = {key: _config(key[1], options.draft_weights_dir if key[0] else options.weights_dir)
                   for key in sorted(set(models.values()) | {("", model)})}
        shapes = {key: shape_of(configs[key][0]) for key in configs}
        for pool in plan.pools:
            check_pool(shapes[models[pool.name]], pool.tp, [_block_names(s) for s in pool.stages])
    except UnsupportedModel as e:  # the plan stands; it just cannot run here
        log.warning("the plan cannot run on the reference runtime: %s", e)
        return Staged(None, None, False, str(e))
    config, shape = configs[("", model)][0], shapes[("", model)]
    _check_vocab(configs, config)
    with_weights = (options.weights_dir is not None
                    or _param_count(shape, int(config["vocab_size"])) * DTYPE_BYTES[options.run_dtype]
                    <= options.max_weight_bytes)
    built = {key: _weights(key[1], out / (f"drafts/{key[0]}" if key[0] else "model"), configs[key][1],
                           options.draft_weights_dir if key[0] else options.weights_dir, options.seed, with_weights)
             for key in configs}
    exported: dict[tuple, Path] = {}  # [Note: one ONNX export per stage program]
    pools = [_pool(pool, configs[models[pool.name]][0], shapes[models[pool.name]], out, *built[models[pool.name]],
                   options, exported, models[pool.name]) for pool in plan.pools]
    staged = plan.model_copy(update={"pools": pools})
    transfers = [t.model_copy(update={"detail": detail(staged, t, layers=shape.layers, kv_heads=shape.kv_heads,
                                                       head_dim=shape.head_dim, hidden=shape.hidden,
                                                       allow_conversion=options.allow_kv_conversion)})
                 for t in plan.transfers]
    validate_transfers(staged.model_copy(update={"transfers": transfers}))
    reason = None if with_weights else (f"weights not written: {shape.layers}-layer model over the "
                                        f"{options.max_weight_bytes / 1e9:.0f} GB limit; pass --weights DIR")
    return Staged(pools, transfers, with_weights, reason)


def finish_plan_dir(plan: Plan, staged: Staged, out: str | Path) -> Plan:
    """`plan` with `staged`'s execution details, written to ``out/plan.json``, and ``out/manifest.json`` over it and
    the artifacts; returns the plan as written."""
    out = Path(out)
    final = plan if staged.pools is None else \
        plan.model_copy(update={"pools": staged.pools, "transfers": staged.transfers})
    atomic_write_text(out / "plan.json", final.dumps())
    write_manifest(out, runnable=staged.runnable, reason=staged.reason)
    return final


def _drafters(plan: Plan) -> set[str]:
    return {p.name for p in plan.pools if p.role == "drafter"}


def _models(plan: Plan, model: str) -> dict[str, tuple[str, str]]:
    """Pool name -> (drafter pool name or "", the model it runs): a drafter runs the draft model its targets name."""
    named: dict[str, str] = {}
    for pool in plan.pools:
        if pool.draft is None:
            continue
        if pool.draft.pool not in _drafters(plan):
            raise BadInput(f"plan: pool {pool.name}: draft.pool {pool.draft.pool!r} is not a pool with role "
                           f"drafter; recompile the plan")
        if named.setdefault(pool.draft.pool, pool.draft.model) != pool.draft.model:
            raise BadInput(f"plan: drafter pool {pool.draft.pool} is named with two draft models "
                           f"({named[pool.draft.pool]}, {pool.draft.model}); give each its own drafter pool")
    out = {}
    for pool in plan.pools:
        if pool.role == "drafter" and pool.name not in named:
            raise BadInput(f"plan: drafter pool {pool.name} drafts for no pool (no pool's draft.pool names it)")
        out[pool.name] = (pool.name, named[pool.name]) if pool.role == "drafter" else ("", model)
    return out


def _check_vocab(configs: dict, target: dict) -> None:
    for (drafter, model), (config, _) in configs.items():
        if drafter and config.get("vocab_size") != target.get("vocab_size"):
            raise BadInput(f"plan: draft model {model} of pool {drafter} has vocab_size {config.get('vocab_size')}, "
                           f"the target {target.get('vocab_size')}; a drafter must share the target's vocabulary")


def _weights(model: str, model_dir: Path, scaling: float, weights_dir: str | None, seed: int, with_weights: bool):
    """The state dict to cut shards from (None without weights) and the RoPE attention scaling; writes `model_dir`."""
    if not with_weights:
        return None, scaling
    from compiler.emit.weights import reference_model, rope_of, write_model_dir
    from compiler.inputs.model_spec import load_hf_config, resolve_model

    reference = reference_model(model, weights_dir=weights_dir, seed=seed)
    write_model_dir(reference, model_dir, weights_dir)
    state = dict(reference.state_dict())
    state["rope.inv_freq"] = rope_of(load_hf_config(resolve_model(model)))[0]
    return state, scaling


def _pool(pool: Pool, config: dict, shape: Shape, out: Path, state, scaling: float, options: Options,
          exported: dict[tuple, Path], model_key: tuple[str, str]) -> Pool:
    stages = []
    for stage in pool.stages:
        blocks = _block_names(stage)
        ranks = [_rank(pool, stage, blocks, t, config, shape, out, state, scaling, options,
                       exported, (model_key, tuple(blocks), pool.tp, t)) for t in range(pool.tp)]
        execution = StageExec(role=pool.role, layers=_layers(blocks), tp=pool.tp, pp=pool.pp,
                              dtype=options.run_dtype, kv_dtype=options.run_dtype, kv_block_size=KV_BLOCK_SIZE,
                              ranks=ranks)
        stages.append(stage.model_copy(update={"execution": execution}))
    return pool.model_copy(update={"stages": stages})


def _rank(pool: Pool, stage: Stage, blocks: list[str], t: int, config: dict, shape: Shape, out: Path, state,
          scaling: float, options: Options, exported: dict[tuple, Path], key: tuple) -> RankExec:
    stem = f"{pool.name}/s{stage.index}_tp{t}"
    program = stage_program(config, blocks, tp=pool.tp, rank=t, rope_scaling=scaling,
                            title=f"{pool.name} stage {stage.index} ({pool.role}, {stage.device})")
    rel_prog = f"stages/{stem}.py"
    (out / rel_prog).parent.mkdir(parents=True, exist_ok=True)
    (out / rel_prog).write_text(program.source)
    rel_w = rel_onnx = None
    if state is not None:
        from compiler.emit.weights import cut_shard, save_shard

        shard = cut_shard(state, program.weights, options.run_dtype)
        rel_w = f"weights/{stem}.safetensors"
        save_shard(out / rel_w, shard)
        if options.onnx and program.blocks and program.onnx:
            rel_onnx = f"onnx/{stem}.onnx"
            if key in exported:  # the same program and weights: the same bytes ([Note: one ONNX export per ...])
                (out / rel_onnx).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(exported[key], out / rel_onnx)
            else:
                from compiler.emit.onnx_export import export_stage

                fp32 = cut_shard(state, program.weights, "fp32")
                export_stage(program.source, fp32, shape.hidden, out / rel_onnx)
                exported[key] = out / rel_onnx
    sl = program.slice
    return RankExec(tp_rank=t, q_heads=list(sl.q_heads), kv_heads=list(sl.kv_heads), ffn_slice=list(sl.ffn),
                    program=rel_prog, weights=rel_w, onnx=rel_onnx)
