"""Write a runnable plan with a drafter pool (speculative decoding) for llama-tiny, through the public emit functions.

    python examples/tiny_split/draft_plan.py plan-draft/
    gimletc run plan-draft/ --prompt-ids 24,27,30,33,36,39,42,45,48 --max-new-tokens 16

Pools: prefill -> KV pages -> decode (drafting k=3 per verification) <- draft tokens <- drafter. The drafter
runs `llama-tiny-draft` (llama-tiny with one layer) with the target's own first layer, embeddings and head
(written to plan-draft-drafter/ as a Hugging Face checkpoint and passed as the draft weights), so it guesses
right some of the time (a quarter of its drafts for the prompt above; on random weights the second layer
still matters a lot); `run` prints the acceptance rate and tokens per verification. Greedy tokens equal the
target's own greedy decoding whatever the drafter guesses.
"""

from __future__ import annotations

import sys
from pathlib import Path


def self_drafter(folder: Path, target: str = "llama-tiny", draft: str = "llama-tiny-draft") -> Path:
    """The target's seeded weights (seed 0, as the plan's) cut to the draft config's layers, saved as a checkpoint."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from compiler.emit.weights import reference_model
    from compiler.inputs.model_spec import load_hf_config, resolve_model

    config = AutoConfig.for_model(**load_hf_config(resolve_model(draft)).to_dict())
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(reference_model(target, seed=0).state_dict(), strict=False)
    model.save_pretrained(str(folder))
    return folder


def main(out: str) -> None:
    from compiler.driver import block_graph
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.emit.handmade import PoolShape, handmade_plan

    drafter = self_drafter(Path(f"{out.rstrip('/')}-drafter"))
    shapes = [PoolShape("prefill", "prefill"), PoolShape("decode", "decode", draft="drafter", draft_k=3),
              PoolShape("drafter", "drafter")]
    plan = handmade_plan(block_graph("llama-tiny"), shapes, draft_graph=block_graph("llama-tiny-draft"))
    write_plan_dir(plan, "llama-tiny", out, Options(onnx=False, draft_weights_dir=str(drafter)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "plan-draft")
