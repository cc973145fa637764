"""Runnable plan directories for the runtime tests, built through the public emit functions, and HF references."""

from __future__ import annotations

import pytest

#: Eight prompts of different lengths (3..17 tokens), ids inside the tiny models' 512-token vocab.
PROMPTS = [[(7 * i + 3 * j) % 500 + 3 for j in range(3 + 2 * i)] for i in range(8)]
NEW_TOKENS = 8


def build_plan_dir(tmp_path_factory, name: str, shapes, *, weights_dir=None, onnx=False):
    from compiler.driver import block_graph
    from compiler.emit.artifacts import Options, write_plan_dir
    from compiler.emit.handmade import handmade_plan

    out = tmp_path_factory.mktemp(f"plan-{name}")
    write_plan_dir(handmade_plan(block_graph(name), shapes), name, out, Options(onnx=onnx, weights_dir=weights_dir))
    return out


def split_shapes(prefill_tp: int, attention_tp: int, ffn_tp: int = 1):
    """Prefill pool, then decode split into attention and FFN pools: both splits, >= 3 stage workers."""
    from compiler.emit.handmade import PoolShape

    return [PoolShape("prefill", "prefill", tp=prefill_tp), PoolShape("attn", "decode-attention", tp=attention_tp),
            PoolShape("ffn", "decode-ffn", tp=ffn_tp)]


def hf_reference(model_dir, prompts, new_tokens: int):
    """Hugging Face greedy `generate` per prompt (batch 1, no padding): tokens and per-step logits."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for p in prompts:
            g = model.generate(torch.tensor([p]), max_new_tokens=new_tokens, do_sample=False, output_logits=True,
                               return_dict_in_generate=True)
            out.append((g.sequences[0, len(p):].tolist(), [s[0] for s in g.logits]))
    return out


@pytest.fixture(scope="session")
def llama_split(tmp_path_factory):
    return build_plan_dir(tmp_path_factory, "llama-tiny", split_shapes(2, 1))


def checkpoints(tmp_path_factory, seed: int, target: str = "llama-tiny", draft: str = "llama-tiny-draft"):
    """Two `save_pretrained` folders: the target initialised under `seed` (other weights than a plan's seeded
    default), and a drafter with the draft config's layers taken from it (its first layers, embeddings, final
    norm and head), so the drafter's guesses often match the target's tokens."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from compiler.inputs.model_spec import load_hf_config, resolve_model

    folders = tmp_path_factory.mktemp("target"), tmp_path_factory.mktemp("drafter")
    models = []
    torch.manual_seed(seed)
    for name, folder in zip((target, draft), folders):
        config = AutoConfig.for_model(**load_hf_config(resolve_model(name)).to_dict())
        models.append(AutoModelForCausalLM.from_config(config, dtype=torch.float32))
    missing, _ = models[1].load_state_dict(models[0].state_dict(), strict=False)
    assert not missing
    for model, folder in zip(models, folders):
        model.save_pretrained(str(folder))
    return folders


def hf_speculative(target_dir, draft_dir, prompts, new_tokens: int, k: int):
    """Reference speculative decoding with Hugging Face models, one prompt at a time: greedy drafts of
    min(k, tokens left - 1) tokens, the target's greedy tokens kept while they equal the drafts. Returns per prompt
    (tokens, accepted drafts per verification)."""
    import torch
    from transformers import AutoModelForCausalLM

    target, drafter = (AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
                       for d in (target_dir, draft_dir))
    eos = target.config.eos_token_id
    out = []
    with torch.no_grad():
        for p in prompts:
            tokens = [int(target(torch.tensor([p])).logits[0, -1].argmax())]
            accepted_counts = []
            while len(tokens) < new_tokens and tokens[-1] != eos:
                kr = min(k, new_tokens - len(tokens) - 1)
                context = list(p) + tokens
                drafts = []
                for _ in range(kr):
                    drafts.append(int(drafter(torch.tensor([context + drafts])).logits[0, -1].argmax()))
                greedy = target(torch.tensor([context + drafts])).logits[0, len(context) - 1:].argmax(-1).tolist()
                accepted = 0
                for i, g in enumerate(greedy):
                    tokens.append(g)
                    if i == kr or drafts[i] != g or g == eos:
                        break
                    accepted += 1
                if kr:
                    accepted_counts.append(accepted)
            out.append((tokens, accepted_counts))
    return out
