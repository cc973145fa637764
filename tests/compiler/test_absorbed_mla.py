"""MLA decode is costed in the absorbed form serving engines run ([Note: absorbed MLA]).

Every expectation is arithmetic on the config's dimensions, written out here: per decode step and layer, B
sequences of L cached tokens (L + 1 keys once the new token is appended).

Absorbed (vLLM's ``_forward_decode``, FlashMLA): the projections q_a (D x Q), q_b (Q x H(P + R)), kv_a
(D x (C + R)), W_UK (per head P x C, applied to the query), W_UV (per head C x V, applied to the output) and
o_proj (HV x D), once per token; then multi-query attention over the latent cache, keys C + R wide and values
its first C columns: 2H(C + R) + 2HC FLOPs and C + R cached elements read per key, with no per-key activation
traffic. transformers' form instead up-projects every cached latent through kv_b (2C x H(P + V) FLOPs per key)
and runs per-head attention over the result.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.conftest import preset_config


def _dims(cfg: dict) -> dict:
    return {"D": cfg["hidden_size"], "H": cfg["num_attention_heads"], "Q": cfg["q_lora_rank"],
            "C": cfg["kv_lora_rank"], "P": cfg["qk_nope_head_dim"], "R": cfg["qk_rope_head_dim"],
            "V": cfg["v_head_dim"]}


def absorbed_per_token(cfg: dict) -> dict:
    """Hand arithmetic of one decode token of one layer, absorbed."""
    d = _dims(cfg)
    D, H, Q, C, P, R, V = (d[k] for k in "DHQCPRV")
    weights = D * Q + Q * H * (P + R) + D * (C + R) + H * P * C + H * C * V + H * V * D
    return {
        "matmul_flops": 2 * weights,  # each weight element meets the token once: one multiply-add
        "weight_elems": weights,
        "attention_flops_per_key": 2 * H * (C + R) + 2 * H * C,  # scores over C + R, values C wide
        "kv_elems_per_key": C + R,  # the latent and the RoPE key, read once for every head
        "kv_elems_written": C + R,
    }


def naive_per_token(cfg: dict) -> dict:
    """transformers' decode (the form before absorption), for the before/after comparison."""
    d = _dims(cfg)
    D, H, Q, C, P, R, V = (d[k] for k in "DHQCPRV")
    return {"matmul_flops_per_key": 2 * C * H * (P + V),  # kv_b up-projects every cached latent
            "attention_flops_per_key": 2 * H * (P + R) + 2 * H * V}


def _attn(graph, phase: str):
    return next(b for b in graph.phase_blocks(phase) if b.role == "attn")


def _total(block, field: str, kinds: tuple[str, ...], **point) -> float:
    return sum(getattr(op, field)(**point) for op in block.ops if op.kind in kinds)


def _check_decode(graph, cfg: dict) -> None:
    want = absorbed_per_token(cfg)
    attn = _attn(graph, "decode")
    assert attn.attention == "mla"
    for b, L in ((1, 100), (3, 1000)):
        point = {"B": b, "L": L}
        # Projections: once per token, whatever the context (no up-projection of the cache).
        assert _total(attn, "flops", ("matmul",), **point) == b * want["matmul_flops"]
        assert _total(attn, "weight_elems", ("matmul",), **point) == want["weight_elems"]
        assert _total(attn, "flops", ("attention",), **point) == b * (L + 1) * want["attention_flops_per_key"]
        # The cache read once (L + 1 keys) and the new entry written once.
        assert _total(attn, "kv_elems", ("attention",), **point) == b * (L + 1) * want["kv_elems_per_key"]
        kv_all = sum(op.kv_elems(**point) for op in attn.ops)
        assert kv_all == b * ((L + 1) * want["kv_elems_per_key"] + want["kv_elems_written"])
    # No activation traffic grows with the context: no per-head K/V is ever materialised.
    short, long = ({"B": 1, "L": L} for L in (10, 10_000))
    assert sum(op.act_bytes(**short) for op in attn.ops) == sum(op.act_bytes(**long) for op in attn.ops)
    assert attn.kv_elems_per_token == want["kv_elems_per_key"]


def _check_prefill_stays_naive(graph, cfg: dict) -> None:
    """Prefill keeps transformers' up-projection (engines' compute-friendly path): per prompt token the kv_b
    up-projection is in its matmuls, and attention is per head over P + R wide keys and V wide values."""
    naive = naive_per_token(cfg)
    absorbed = absorbed_per_token(cfg)
    d = _dims(cfg)
    attn = _attn(graph, "prefill")
    S = 64
    # Per token: the same projections but kv_b (2C x H(P + V)) in place of W_UK and W_UV (2HPC + 2HCV): equal.
    assert _total(attn, "flops", ("matmul",), B=1, S=S) == S * (
        absorbed["matmul_flops"] - 2 * d["H"] * d["C"] * (d["P"] + d["V"]) + naive["matmul_flops_per_key"])
    assert _total(attn, "flops", ("attention",), B=1, S=S) == S * S * naive["attention_flops_per_key"]


def test_tiny_decode_is_absorbed(tiny_graph):
    cfg = preset_config("deepseek-v3-tiny")
    graph = tiny_graph("deepseek-v3-tiny")
    _check_decode(graph, cfg)
    _check_prefill_stays_naive(graph, cfg)


@pytest.mark.slow
def test_deepseek_v3_decode_is_absorbed():
    from compiler.driver import block_graph

    cfg = preset_config("deepseek-v3")
    graph = block_graph("deepseek-v3")
    _check_decode(graph, cfg)
    _check_prefill_stays_naive(graph, cfg)


def test_deepseek_v3_arithmetic_by_hand():
    """The numbers the report quotes, per decode token of context and layer (DeepSeek-V3: D 7168, H 128, Q 1536,
    C 512, P 128, R 64, V 128)."""
    cfg = preset_config("deepseek-v3")
    a, n = absorbed_per_token(cfg), naive_per_token(cfg)
    assert a["matmul_flops"] == 374_210_560
    assert a["attention_flops_per_key"] == 278_528  # 2 x 128 x 576 + 2 x 128 x 512
    assert a["kv_elems_per_key"] == 576
    assert n["matmul_flops_per_key"] + n["attention_flops_per_key"] == 33_554_432 + 81_920
    # About 120x less work per key of context, and the latent read once instead of per-head K/V.
    assert (n["matmul_flops_per_key"] + n["attention_flops_per_key"]) / a["attention_flops_per_key"] == \
        pytest.approx(120.8, abs=0.1)


def test_the_split_decode_runs_the_absorbed_op():
    """The program the runtime checks against transformers (tests/compiler/test_faithfulness.py) is the absorbed
    one: its attention is the latent op, not per-head SDPA."""
    from compiler.inputs.model_spec import resolve_model
    from compiler.trace.export import quiet_export_logs, trace

    with quiet_export_logs():
        traced = trace(resolve_model("deepseek-v3-tiny"), ("decode",))
    names = {str(n.target) for n in traced.phases["decode"].program.graph.nodes if n.op == "call_function"}
    assert "gimletc.mla_decode_attention.default" in names
    assert not any("scaled_dot_product" in n for n in names)


def test_absorbed_attention_equals_per_head_attention():
    """The latent op computes what transformers' decode computes, on random numbers (fp64)."""
    import torch
    import torch.nn.functional as F

    from compiler.trace.absorbed_mla import mla_decode_attention

    torch.manual_seed(0)
    H, C, P, R, V, T = 4, 16, 8, 4, 6, 9
    q_nope, q_rot = torch.randn(2, H, 1, P, dtype=torch.float64), torch.randn(2, H, 1, R, dtype=torch.float64)
    latent, k_rot = torch.randn(2, 1, T, C, dtype=torch.float64), torch.randn(2, 1, T, R, dtype=torch.float64)
    w_uk, w_uv = torch.randn(H, P, C, dtype=torch.float64), torch.randn(H, V, C, dtype=torch.float64)
    # transformers: per-head keys and values up-projected from every cached latent.
    k = torch.cat((torch.einsum("btc,hpc->bhtp", latent[:, 0], w_uk), k_rot.expand(-1, H, -1, -1)), dim=-1)
    v = torch.einsum("btc,hvc->bhtv", latent[:, 0], w_uv)
    want = F.scaled_dot_product_attention(torch.cat((q_nope, q_rot), -1), k, v, scale=0.3)
    q_latent = torch.cat((q_nope @ w_uk, q_rot), dim=-1)
    got = mla_decode_attention(q_latent, torch.cat((latent, k_rot), -1), C, 0.3) @ w_uv.transpose(1, 2)
    torch.testing.assert_close(got, want)


def test_absorbed_module_matches_transformers_module():
    """transformers' own DeepSeek-V3 module, run eagerly (fp32, random weights) with and without `absorbed_mla`:
    one-token decode steps over a left-padded batch (a mask tensor), then a three-token step (transformers' form)."""
    import torch
    from transformers import DynamicCache

    from compiler.inputs.model_spec import resolve_model
    from compiler.trace.absorbed_mla import absorbed_mla
    from compiler.trace.export import build_model

    model, _ = build_model(resolve_model("deepseek-v3-tiny"), device="cpu", dtype="fp32", seed=3)
    torch.manual_seed(4)
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :3] = 0  # the second sequence is left-padded

    def run(absorbed: bool) -> list[torch.Tensor]:
        cache, seen, logits = DynamicCache(), mask, []
        with torch.no_grad(), (absorbed_mla(model) if absorbed else contextlib.nullcontext()):
            out = model(input_ids=ids, attention_mask=seen, cache=cache, use_cache=True)
            for step in (1, 1, 3):
                nxt = torch.randint(0, model.config.vocab_size, (2, step), generator=torch.Generator().manual_seed(step))
                seen = torch.cat((seen, torch.ones(2, step, dtype=torch.long)), dim=1)
                out = model(input_ids=nxt, attention_mask=seen, cache=cache, use_cache=True)
                logits.append(out.logits)
        return logits

    want, got = run(False), run(True)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-5)
    patched = [m for m in model.modules() if type(m).__name__ == "DeepseekV3Attention"]
    assert patched and all("forward" not in vars(m) for m in patched)  # the class's forward is back
