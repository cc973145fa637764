"""Decode attention of multi-head latent attention (MLA) in the absorbed form serving engines run.

Before: a Hugging Face model whose MLA layers (DeepSeek-V3's ``DeepseekV3Attention``) decode as transformers
writes them. After (inside `absorbed_mla`): the same modules decoding the way vLLM, SGLang and FlashMLA do, so
the decode graph `compiler.trace.export` records, and every count the partition takes of it, is the engines'.

[Note: absorbed MLA] MLA caches one latent per token and layer: the compressed
KV (``kv_lora_rank`` wide, 512 in DeepSeek-V3) and the shared RoPE key
(``qk_rope_head_dim``, 64). transformers' decode up-projects the whole cached
latent to per-head keys and values (``kv_b_proj`` on every cached token) at
every step, then runs multi-head attention: O(context) matmul FLOPs and
per-head K/V traffic per step. Serving engines do not. The up-projection is
split per head into W_UK (``qk_nope_head_dim`` x ``kv_lora_rank``) and W_UV
(``v_head_dim`` x ``kv_lora_rank``) and absorbed: W_UK into the query
(``ql_nope = q_nope @ W_UK``, per head), W_UV after attention (``o = o_latent @
W_UV^T``), so attention runs in the latent space as multi-query attention
with one shared key/value head: keys are the 576-wide cached latents, values
their first 512 columns, read once per step for every head. vLLM's MLA
backends call this the "data-movement friendly approach" and use it for
decode, keeping the "compute friendly" up-projection for prefill and chunked
prefill (https://github.com/vllm-project/vllm/blob/00a817ada81626793c9e2432903ee4c5b33ab33a/vllm/v1/attention/
backends/mla/common.py, module docstring: ``_forward_decode`` with ``ql_nope = einsum("snh,lnh->snl", q,
W_UK)``, MQA with QK head dim Lkv + R and V head dim Lkv, then ``einsum("snl,lnv->snv", o, W_UV)``); FlashMLA's
decode kernel takes the same 576-wide query and cache with ``head_dim_v`` 512, and DeepSeek-V3's own inference
code (``attn_impl = "absorb"``) does the same. So decode is traced absorbed and prefill as transformers writes it.

The latent attention is one op, ``gimletc::mla_decode_attention`` (`mla_decode_attention`), because no aten op
reads a key cache once as both keys and values: op accounting charges it the latent cache once
(`cost_models.op_accounting`). Per decode token of context and layer this is ``2 x heads x (kv_lora_rank +
qk_rope_head_dim + kv_lora_rank)`` FLOPs and ``kv_lora_rank + qk_rope_head_dim`` KV elements, against
``2 x kv_lora_rank x heads x (qk_nope_head_dim + v_head_dim)`` matmul FLOPs and the per-head K/V written and read
again in transformers' form (tests/compiler/test_absorbed_mla.py derives both from the config). The absorbed
step computes the same function: the split decode reproduces transformers' logits (tests/compiler/
test_faithfulness.py).
"""

from __future__ import annotations

import contextlib
import types

import torch
import torch.nn.functional as F

#: Module classes whose decode `absorbed_mla` replaces (transformers' names; matched by name, so a transformers
#: release without the class only leaves them alone).
MLA_CLASSES = ("DeepseekV3Attention",)


@torch.library.custom_op("gimletc::mla_decode_attention", mutates_args=())
def mla_decode_attention(query: torch.Tensor, latent: torch.Tensor, v_dim: int, scale: float,
                         mask: torch.Tensor | None = None) -> torch.Tensor:
    """Multi-query attention over a latent cache: `query` (B, heads, Sq, D), `latent` (B, 1, T, D) the keys, its
    first `v_dim` columns the values; returns (B, heads, Sq, v_dim). `mask` as `scaled_dot_product_attention`'s."""
    heads = query.shape[1]
    keys = latent.expand(-1, heads, -1, -1)
    return F.scaled_dot_product_attention(query, keys, keys[..., :v_dim], attn_mask=mask, scale=scale).contiguous()


@mla_decode_attention.register_fake
def _(query, latent, v_dim, scale, mask=None):
    return query.new_empty(*query.shape[:-1], v_dim)


def _absorbed_forward(self, hidden_states, position_embeddings, attention_mask, cache=None, **kwargs):
    """`DeepseekV3Attention.forward` for decode, absorbed; see [Note: absorbed MLA]. Projections, norms, RoPE and the
    cache update are transformers' own, in its order."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf

    batch, seq = hidden_states.shape[:-1]
    if seq > 1 and not isinstance(attention_mask, torch.Tensor):
        # Several new tokens without a mask tensor: transformers attends causally (is_causal) and the latent op
        # takes no such flag, so run transformers' own form (engines, too, up-project for prompts).
        return type(self).forward(self, hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs)
    heads, nope, rope, rank, v_dim = (self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim,
                                      self.kv_lora_rank, self.v_head_dim)
    if self.q_lora_rank is None:
        q = self.q_proj(hidden_states)
    else:
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))
    q = q.view(batch, seq, heads, nope + rope).transpose(1, 2)
    q_nope, q_rot = torch.split(q, [nope, rope], dim=-1)

    compressed = self.kv_a_proj_with_mqa(hidden_states)
    kv_nope, k_rot = torch.split(compressed, [rank, rope], dim=-1)
    kv_nope = self.kv_a_layernorm(kv_nope).view(batch, 1, seq, rank)
    k_rot = k_rot.view(batch, 1, seq, rope)
    cos, sin = position_embeddings
    rotate = hf.apply_rotary_pos_emb_interleave if self.config.rope_interleave else hf.apply_rotary_pos_emb
    q_rot, k_rot = rotate(q_rot, k_rot, cos, sin)
    if cache is not None:
        kv_nope, k_rot = cache.update(kv_nope, k_rot, self.layer_idx, kwargs=kwargs)

    w_kv = self.kv_b_proj.weight.view(heads, nope + v_dim, rank)
    w_uk, w_uv = w_kv[:, :nope, :], w_kv[:, nope:, :]
    q_latent = torch.cat((torch.matmul(q_nope, w_uk), q_rot), dim=-1)  # (B, heads, S, rank + rope)
    latent = torch.cat((kv_nope, k_rot), dim=-1)  # the cache as engines keep it: one 576-wide entry per token
    mask = attention_mask[:, :, :, : latent.shape[-2]] if isinstance(attention_mask, torch.Tensor) else None
    out = mla_decode_attention(q_latent, latent, rank, float(self.scaling), mask)  # (B, heads, S, rank)
    out = torch.matmul(out, w_uv.transpose(1, 2))  # (B, heads, S, v_dim)
    out = out.transpose(1, 2).reshape(batch, seq, heads * v_dim)
    return self.o_proj(out), None


@contextlib.contextmanager
def absorbed_mla(model):
    """Within the block, `model`'s MLA attention modules (`MLA_CLASSES`) run the absorbed decode; see
    [Note: absorbed MLA]. Other models are left as they are."""
    patched = [m for m in model.modules() if type(m).__name__ in MLA_CLASSES]
    for module in patched:
        module.forward = types.MethodType(_absorbed_forward, module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward  # the class's forward again
