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
