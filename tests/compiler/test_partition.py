"""Structure of the BlockGraph on the tiny zoo: blocks, edges, weights, KV, folding."""

import json
from dataclasses import replace

import pytest

from compiler.ir.block_graph import BlockGraph
from compiler.ir.precision import Precision

BF16 = Precision.of("bf16")
from tests.conftest import TINY_MODELS, preset_config


@pytest.mark.parametrize("name", TINY_MODELS)
def test_blocks_cover_every_layer_in_both_phases(tiny_graph, name):
    g = tiny_graph(name)
    cfg = preset_config(name)
    n = cfg["num_hidden_layers"]
    for phase in ("prefill", "decode"):
        names = [b.name for b in g.phase_blocks(phase)]
        assert names[0] == "embed" and names[-1] == "head"
        assert [b for b in names if b.endswith(".attn")] == [f"L{i}.attn" for i in range(n)]
        ffn = [b for b in names if b.endswith((".ffn", ".moe"))]
        assert [b.split(".")[0] for b in ffn] == [f"L{i}" for i in range(n)]
    assert not g.unaccounted, g.unaccounted


@pytest.mark.parametrize("name", TINY_MODELS)
def test_block_weights_add_up_to_the_model(tiny_graph, name):
    g = tiny_graph(name)
    for phase in ("prefill", "decode"):
        assert sum(b.weight_params for b in g.phase_blocks(phase)) == g.params_total


@pytest.mark.parametrize("name", TINY_MODELS)
def test_activation_edges_chain_the_blocks_with_the_residual_stream(tiny_graph, name):
    g = tiny_graph(name)
    hidden = preset_config(name)["hidden_size"]
    for phase, point, tokens in (("prefill", {"B": 3, "S": 5}, 15), ("decode", {"B": 3, "L": 9}, 3)):
        blocks = [b.name for b in g.phase_blocks(phase)]
        edges = [e for e in g.edges if e.phase == phase and e.kind == "activation"]
        assert [(e.src, e.dst) for e in edges] == list(zip(blocks, blocks[1:]))
        for e in edges:  # one bf16 hidden state per token crosses each seam
            assert e.act_bytes(**point) == tokens * hidden * 2, (e.src, e.dst)


def test_kv_edges_link_prefill_attention_to_its_decode_twin(tiny_graph):
    g = tiny_graph("llama-tiny")
    cfg = preset_config("llama-tiny")
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    per_layer = 2 * cfg["num_key_value_heads"] * head_dim
    kv = [e for e in g.edges if e.kind == "kv"]
    assert [(e.src, e.dst) for e in kv] == [(f"L{i}.attn", f"L{i}.attn") for i in range(cfg["num_hidden_layers"])]
    assert all(e.kv_elems_per_token == per_layer for e in kv)
    assert g.kv_elems_per_token() == per_layer * cfg["num_hidden_layers"]


def test_attention_variants_are_kept(tiny_graph):
    cfg = preset_config("gpt-oss-tiny")
    g = tiny_graph("gpt-oss-tiny")
    kinds = [b.attention for b in g.phase_blocks("decode") if b.role == "attn"]
    assert kinds == ["sliding" if t == "sliding_attention" else "full" for t in cfg["layer_types"]]
    sliding = next(b for b in g.phase_blocks("decode") if b.attention == "sliding")
    assert sliding.window_tokens == cfg["sliding_window"]
    # A sliding layer's decode work does not grow with the context; a full layer's does.
    full = next(b for b in g.phase_blocks("decode") if b.attention == "full")
    assert sliding.work(BF16, B=1, L=100).kv_bytes == sliding.work(BF16, B=1, L=1000).kv_bytes
    assert full.work(BF16, B=1, L=1000).kv_bytes > full.work(BF16, B=1, L=100).kv_bytes

    ds_cfg = preset_config("deepseek-v3-tiny")
    ds = tiny_graph("deepseek-v3-tiny")
    roles = [b.role for b in ds.phase_blocks("decode") if b.layer is not None and b.role != "attn"]
    k = ds_cfg["first_k_dense_replace"]
    assert roles == ["ffn"] * k + ["moe"] * (ds_cfg["num_hidden_layers"] - k)
    mla = [b for b in ds.phase_blocks("decode") if b.role == "attn"]
    assert {b.attention for b in mla} == {"mla"}
    # MLA caches the compressed latent and the shared RoPE key, not per-head K and V.
    assert {b.kv_elems_per_token for b in mla} == {ds_cfg["kv_lora_rank"] + ds_cfg["qk_rope_head_dim"]}


@pytest.mark.parametrize("name", [
    # alternating sliding and full layers fold as the gemma2 case below shows, routed experts as deepseek-v3's do:
    # a full-depth trace of 8-11 s on 2 cores (CI runs -m slow)
    pytest.param("gpt-oss-tiny", marks=pytest.mark.slow),
    "deepseek-v3-tiny"])
def test_depth_folding_gives_the_same_graph_as_a_full_trace(tiny_graph, name):
    from compiler.inputs.model_spec import resolve_model
    from compiler.trace.partition import partition
    from compiler.trace.export import trace

    full = partition(trace(resolve_model(name), fold=False))
    folded = tiny_graph(name)
    assert replace(full, trace=()) == replace(folded, trace=())


def test_block_graph_json_round_trip(tiny_graph):
    g = tiny_graph("mixtral-tiny")
    assert BlockGraph.loads(g.dumps()) == g


def test_moe_charges_only_touched_experts(tiny_graph):
    cfg = preset_config("mixtral-tiny")
    g = tiny_graph("mixtral-tiny")
    experts, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    moe = next(b for b in g.phase_blocks("decode") if b.role == "moe")
    assert (moe.experts, moe.experts_per_token) == (experts, k)
    dense_bytes, expert_bytes = (moe.weight_params - moe.expert_params) * 2, moe.expert_params * 2
    # One token reads k of E experts' weights; thousands of tokens read all of them.
    assert moe.work(BF16, B=1, L=8).weight_bytes == pytest.approx(dense_bytes + expert_bytes * k / experts)
    assert moe.work(BF16, B=4096, L=8).weight_bytes == pytest.approx(dense_bytes + expert_bytes)


def _max_power(poly, var: str) -> int:
    from compiler.ir.poly import VARIABLES

    i = VARIABLES.index(var)
    return max((exps[i] for exps, _c in poly.terms), default=0)


@pytest.mark.parametrize("name", ["gpt-oss-tiny", "llama-tiny"])
def test_attention_scores_move_no_bytes_fused_or_not(tiny_graph, name):
    """GPT-OSS traces its attention unfused (eager, with sinks), Llama as one SDPA call; either way the S x S
    scores stay on chip, as in the fused kernels engines run: no op's bytes grow with S^2, while the attention
    FLOPs still do."""
    g = tiny_graph(name)
    attn = next(b for b in g.phase_blocks("prefill") if b.role == "attn")
    assert max(_max_power(op.flops, "S") for op in attn.ops) == 2
    quadratic = {op.kind for op in attn.ops if _max_power(op.flops, "S") == 2}
    assert "attention" in quadratic and "matmul" not in quadratic  # Q K^T and P V are attention, as fused
    assert max(_max_power(op.act_bytes, "S") for op in attn.ops) == 1
    decode = next(b for b in g.phase_blocks("decode") if b.role == "attn")  # scores over L: B x heads x L each
    assert all(_max_power(op.act_bytes, "L") == 0 for op in decode.ops)


ODD_CONFIGS = {
    # Mistral / Phi-3 style: a sliding window on every layer, no per-layer types
    "mistral": {"model_type": "mistral", "sliding_window": 32},
    # Gemma-2: alternating sliding and full layers, norms around attention and FFN ("sandwich")
    "gemma2": {"model_type": "gemma2", "sliding_window": 32, "num_hidden_layers": 4, "head_dim": 16},
    # GPT-NeoX: attention and MLP read the same layer input (parallel residual)
    "gpt_neox": {"model_type": "gpt_neox", "use_parallel_residual": True},
}


def _odd_config(tmp_path, name: str):
    config = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512, **ODD_CONFIGS[name]}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("name", sorted(ODD_CONFIGS))
def test_odd_architectures_fold_and_equal_a_full_depth_trace(tmp_path, name):
    from compiler.inputs.model_spec import resolve_model
    from compiler.trace.export import quiet_export_logs, trace
    from compiler.trace.partition import partition

    spec = resolve_model(_odd_config(tmp_path, name))
    with quiet_export_logs():
        folded, full = partition(trace(spec)), partition(trace(spec, fold=False))
    assert replace(full, trace=()) == replace(folded, trace=())


def test_sliding_window_decode_and_kv_follow_the_window(tmp_path):
    """Mistral-style: every layer attends to at most 32 tokens, so decode reads and keeps at most 32 per layer."""
    from compiler.driver import block_graph

    g = block_graph(_odd_config(tmp_path, "mistral"))
    attn = [b for b in g.phase_blocks("decode") if b.role == "attn"]
    assert {b.attention for b in attn} == {"sliding"} and {b.window_tokens for b in attn} == {32}
    per_token = attn[0].kv_elems_per_token * 2  # bytes of one token's K and V in one layer, bf16
    read = lambda L: attn[0].work(BF16, B=1, L=L).kv_bytes  # noqa: E731
    assert read(16) < read(32) == read(100) == read(1000)  # grows up to the window, then stays
    assert read(1000) >= 32 * per_token
    assert g.kv_bytes_per_sequence(1000, BF16) == g.kv_bytes_per_sequence(32, BF16) == 32 * per_token * len(attn)


def test_sliding_window_prefill_work_grows_linearly_past_the_window(tmp_path):
    """A Mistral-style query sees at most 32 keys: past the window each query adds 32 keys of attention, so a
    layer's prefill work grows by the same amount for each further 256 tokens, where full causal attention's
    grows faster with every step ([Note: causal prefill] in cost_models/roofline.py)."""
    from backends.registry import device
    from compiler.driver import block_graph
    from cost_models.derates import Derate
    from cost_models.roofline import block_time

    g = block_graph(_odd_config(tmp_path, "mistral"))
    attn = next(b for b in g.phase_blocks("prefill") if b.role == "attn")
    h100, ideal = device("nvidia-h100-sxm"), Derate.ideal()
    work = lambda b, s: block_time(b, {"B": 1, "S": s}, h100, precision=BF16, derate=ideal).compute_s  # noqa: E731
    assert work(attn, 768) - work(attn, 512) == pytest.approx(work(attn, 512) - work(attn, 256), rel=1e-9)
    full = replace(attn, window_tokens=None)
    assert work(full, 768) - work(full, 512) > 1.5 * (work(full, 512) - work(full, 256))
